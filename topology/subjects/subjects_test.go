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

// TestIntersect checks Intersect against Matches: over a set of literal
// subjects, the intersection matches exactly those both filters match.
func TestIntersect(t *testing.T) {
	filters := []string{">", "a.>", "a.*", "a.b", "*.b", "a.*.c", "*.*.>", "a.b.>", "x.>", "*", "a.b.c.d"}
	literals := []string{"a", "b", "a.b", "a.c", "x.b", "a.b.c", "a.x.c", "a.b.d", "x.y.z", "a.b.c.d", "q.b"}
	for _, a := range filters {
		for _, b := range filters {
			got, ok := Intersect(a, b)
			if ok != Overlap(a, b) {
				t.Errorf("Intersect(%q, %q) ok = %v, Overlap says %v", a, b, ok, !ok)
			}
			if !ok {
				continue
			}
			if err := Check(got, true); err != nil {
				t.Fatalf("Intersect(%q, %q) = %q: %v", a, b, got, err)
			}
			for _, s := range literals {
				if want := Matches(a, s) && Matches(b, s); Matches(got, s) != want {
					t.Errorf("Intersect(%q, %q) = %q matches %q: %v, want %v", a, b, got, s, !want, want)
				}
			}
		}
	}
}
