package bench

import (
	"reflect"
	"strings"
	"testing"
)

func TestLine_RoundTrip(t *testing.T) {
	figs := []Figure{{"leafline_eps", 6739}, {"d_over_c", 18.25}, {"flushes_per_event", 0}}
	line := Line(figs)
	if line != "bench leafline_eps=6739 d_over_c=18.250 flushes_per_event=0" {
		t.Fatalf("line %q", line)
	}
	got, err := ParseLine(line)
	if err != nil || !reflect.DeepEqual(got, figs) {
		t.Fatalf("ParseLine(%q) = %v, %v", line, got, err)
	}
	for _, bad := range []string{"", "nope x=1", "bench x", "bench x=y", "bench =1"} {
		if _, err := ParseLine(bad); err == nil {
			t.Errorf("ParseLine(%q): no error", bad)
		}
	}
}

func TestOptions_ValidateNamesEveryProblem(t *testing.T) {
	o := Options{Phases: []string{"d", "q"}, Transports: []string{"smoke"}, Backlog: -1, IDs: "seq"}
	err := o.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`phase "q"`, `transport "smoke"`, "backlog must be", `ids "seq"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: no %q", err, want)
		}
	}
}
