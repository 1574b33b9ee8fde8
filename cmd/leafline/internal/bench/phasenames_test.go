package bench

import (
	"slices"
	"testing"
)

// A phase's name says the same as its letter; every name is of a phase.
func TestPhaseNames(t *testing.T) {
	o := Options{Phases: []string{"runner", "e2e", "l1", "F", "restore"}}
	o.setDefaults()
	if want := []string{"d", "e", "l1", "F", "l"}; !slices.Equal(o.Phases, want) {
		t.Fatalf("phases %v, want %v", o.Phases, want)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, letter := range PhaseNames {
		if !slices.Contains(Phases, letter) || slices.Contains(Phases, name) {
			t.Errorf("%s names %q, which is not a phase's letter (or the name is a letter)", name, letter)
		}
	}
}
