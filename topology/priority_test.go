package topology

import (
	"slices"
	"strings"
	"testing"
)

func TestEvents_ClassOf(t *testing.T) {
	e := Events{Priorities: []Priority{
		{Name: "urgent", Subjects: []string{"events.urgent.>", "events.*.alarm"}},
		{Name: "high", Subjects: []string{"events.high"}},
	}}
	for subj, want := range map[string]string{
		"events.urgent.a": "urgent", "events.x.alarm": "urgent", "events.high": "high",
		"events.x": NormalClass, "events.high.x": NormalClass,
	} {
		if got := e.ClassOf(subj); got != want {
			t.Errorf("ClassOf(%q) = %q, want %q", subj, got, want)
		}
	}
}

// Each edge takes the classes within its filter, narrowed to it; a
// direct-mode edge takes none.
func TestTopology_Classes(t *testing.T) {
	top := &Topology{Events: Events{Subjects: []string{"events.>"}, EdgeStream: "L2A", Priorities: []Priority{
		{Name: "urgent", Subjects: []string{"events.*.urgent"}},
		{Name: "high", Subjects: []string{"events.b.high"}},
	}}}
	for _, tc := range []struct {
		site Site
		want []Class
	}{
		{Site{Role: RoleEdge, Filter: "events.a.>"}, []Class{{"urgent", "L2A_URGENT", []string{"events.a.urgent"}}}},
		{Site{Role: RoleEdge}, []Class{{"urgent", "L2A_URGENT", []string{"events.*.urgent"}}, {"high", "L2A_HIGH", []string{"events.b.high"}}}},
		{Site{Role: RoleEdge, Filter: "events.c"}, nil},
		{Site{Role: RoleEdge, DeliveryMode: DeliveryDirect}, nil},
		{Site{Role: RoleHub}, nil},
	} {
		got := top.Classes(&tc.site)
		if !slices.EqualFunc(got, tc.want, func(a, b Class) bool {
			return a.Name == b.Name && a.Stream == b.Stream && slices.Equal(a.Filters, b.Filters)
		}) {
			t.Errorf("site %+v: classes %+v, want %+v", tc.site, got, tc.want)
		}
	}
}

// The receipts of a class go in its lane from each edge that takes it,
// through its hub, to L1.
func TestTopology_ReceiptClasses(t *testing.T) {
	top := &Topology{Events: Events{Subjects: []string{"events.>"}, EdgeStream: "L2A", Priorities: []Priority{
		{Name: "urgent", Subjects: []string{"events.*.urgent"}},
		{Name: "high", Subjects: []string{"events.b.high"}},
	}}, Sites: []Site{
		{Name: "l1", Role: RoleL1},
		{Name: "h1", Role: RoleHub, Upstream: "l1"}, {Name: "h2", Role: RoleHub, Upstream: "l1"},
		{Name: "a", Role: RoleEdge, Upstream: "h1", Filter: "events.a.>"},
		{Name: "b", Role: RoleEdge, Upstream: "h2", Filter: "events.b.>"},
		{Name: "c", Role: RoleEdge, Upstream: "h2", Filter: "events.c"},
	}}
	for site, want := range map[string][]string{
		"a": {"urgent"}, "c": nil, "h1": {"urgent"}, "h2": {"urgent", "high"}, "l1": {"urgent", "high"},
	} {
		s, _ := top.Site(site)
		if got := top.ReceiptClasses(s); !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", site, got, want)
		}
	}
}

func TestTopology_ValidatePriorities(t *testing.T) {
	for _, tc := range []struct {
		classes   []Priority
		transport string
		want      string
	}{
		{[]Priority{{Name: "urgent", Subjects: []string{"events.urgent.>"}}}, "", ""},
		{[]Priority{{Name: "normal", Subjects: []string{"events.a"}}}, "", `events.priorities[0].name: "normal" is the class of every event`},
		{[]Priority{{Name: "Urgent!", Subjects: []string{"events.a"}}}, "", `events.priorities[0].name: "Urgent!": use 1 to 16 lowercase`},
		{[]Priority{{Name: "bundle", Subjects: []string{"events.a"}}}, "", `events.priorities[0].name: "bundle" is the token of a receipt bundle`},
		{[]Priority{{Name: "a", Subjects: []string{"events.a"}}, {Name: "a", Subjects: []string{"events.b"}}}, "", `events.priorities[1].name: "a" names two classes`},
		{[]Priority{{Name: "a"}}, "", "events.priorities[0].subjects: required"},
		{[]Priority{{Name: "a", Subjects: []string{"other.a"}}}, "", `events.priorities[0].subjects[0]: "other.a" is not within the event subjects`},
		{[]Priority{{Name: "a", Subjects: []string{"events.>"}}, {Name: "b", Subjects: []string{"events.b"}}}, "",
			`events.priorities[1].subjects[0]: "events.b" overlaps "events.>" (events.priorities[0].subjects[0])`},
		{[]Priority{{Name: "a", Subjects: []string{"events.a"}}}, TransportSourcing,
			`sites[2]: takes priority classes (events.priorities) over transport "sourcing"`},
		{[]Priority{{Name: "a", Subjects: []string{"events.a"}}}, "hub:" + TransportSourcing,
			`sites[1]: carries the receipts of priority classes (events.priorities) to L1 over transport "sourcing"`},
	} {
		p := &problems{}
		hubTransport, _ := strings.CutPrefix(tc.transport, "hub:")
		if hubTransport == tc.transport {
			hubTransport = ""
		} else {
			tc.transport = ""
		}
		top := &Topology{Transport: tc.transport, Events: Events{Subjects: []string{"events.>"}, Priorities: tc.classes}, Sites: []Site{
			{Name: "l1", Role: RoleL1}, {Name: "hub", Role: RoleHub, Upstream: "l1", Transport: hubTransport}, {Name: "edge", Role: RoleEdge, Upstream: "hub"},
		}}
		top.validatePriorities(p)
		got := ""
		for _, e := range *p {
			got += e.String() + "\n"
		}
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("classes %+v over %q: problems %q, want %q", tc.classes, tc.transport, got, tc.want)
		}
	}
}
