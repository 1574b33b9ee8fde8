package subjects

import "testing"

func TestSubjectMatches(t *testing.T) {
	for _, tt := range []struct {
		filter, subj string
		want         bool
	}{
		{"a.b", "a.b", true}, {"a.*", "a.b", true}, {"a.>", "a.b.c", true}, {">", "a", true},
		{"a.*", "a.b.c", false}, {"a.b.c", "a.b", false}, {"a.>", "a", false}, {"x.b", "a.b", false},
	} {
		if got := Matches(tt.filter, tt.subj); got != tt.want {
			t.Errorf("Matches(%q, %q) = %v", tt.filter, tt.subj, got)
		}
	}
}
