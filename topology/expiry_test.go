package topology

import (
	"strings"
	"testing"
	"time"
)

func TestEvents_ExpiryFor(t *testing.T) {
	e := Events{ExpireAfter: []ExpireRule{
		{Subject: "events.telemetry.>", After: Duration(time.Minute)},
		{Subject: "events.*.cmd", After: Duration(2 * time.Second)},
	}}
	for subj, want := range map[string]time.Duration{
		"events.telemetry.a": time.Minute, "events.telemetry.cmd": time.Minute,
		"events.x.cmd": 2 * time.Second, "events.x": 0, "other": 0,
	} {
		if got := e.ExpiryFor(subj); got != want {
			t.Errorf("ExpiryFor(%q) = %s, want %s", subj, got, want)
		}
	}
}

func TestTopology_ValidateExpiry(t *testing.T) {
	for _, tc := range []struct {
		rules []ExpireRule
		want  string
	}{
		{[]ExpireRule{{Subject: "events.a", After: Duration(time.Second)}}, ""},
		{[]ExpireRule{{Subject: "events.a", After: Duration(time.Millisecond)}}, "events.expire_after[0].after: 1ms is below 1s"},
		{[]ExpireRule{{Subject: "other.a", After: Duration(time.Second)}}, `events.expire_after[0].subject: "other.a" is not within the event subjects`},
		{[]ExpireRule{{Subject: "events..a", After: Duration(time.Second)}}, "events.expire_after[0].subject:"},
		{[]ExpireRule{{Subject: "events.a", After: Duration(time.Second)}, {Subject: "events.a", After: Duration(time.Hour)}},
			`events.expire_after[1].subject: "events.a" is also the subject of events.expire_after[0]`},
	} {
		p := &problems{}
		top := &Topology{Events: Events{Subjects: []string{"events.>"}, ExpireAfter: tc.rules}}
		top.validateExpiry(p)
		got := ""
		for _, e := range *p {
			got += e.String() + "\n"
		}
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("rules %+v: problems %q, want %q", tc.rules, got, tc.want)
		}
	}
}
