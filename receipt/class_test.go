package receipt

import "testing"

func TestSplitClass(t *testing.T) {
	for _, c := range []struct{ subject, base, class string }{
		{"r.edge1.processed", "r.edge1.processed", ""},
		{"r.edge1.processed.urgent", "r.edge1.processed", "urgent"},
		{"r.edge1.bundle.urgent", "r.edge1.bundle", "urgent"},
		{"r.edge1.bundle", "r.edge1.bundle", ""},
		{"r.edge1.processed.Urgent", "r.edge1.processed.Urgent", ""}, // not a class token
		{"r.edge1.processed.bundle", "r.edge1.processed.bundle", ""},
		{"r.edge1.processed.urgent.x", "r.edge1.processed.urgent.x", ""},
		{"other.edge1.processed.urgent", "other.edge1.processed.urgent", ""},
		{"r.a.b.edge1.processed.urgent", "r.a.b.edge1.processed.urgent", ""},
	} {
		base, class := SplitClass("r", c.subject)
		if base != c.base || class != c.class {
			t.Errorf("SplitClass(r, %s) = %q, %q; want %q, %q", c.subject, base, class, c.base, c.class)
		}
		if class != "" && ClassSubject(base, class) != c.subject {
			t.Errorf("ClassSubject(%s, %s) = %s", base, class, ClassSubject(base, class))
		}
	}
}

func TestIsBundleSubject_InALane(t *testing.T) {
	for s, want := range map[string]bool{
		"r.e.bundle": true, "r.e.bundle.urgent": true, "r.e.processed.urgent": false,
		"r.e.processed": false, "r.e.bundle.URGENT": false,
	} {
		if IsBundleSubject(s) != want {
			t.Errorf("IsBundleSubject(%s) = %v", s, !want)
		}
	}
}

func TestValidClass(t *testing.T) {
	for c, want := range map[string]bool{
		"urgent": true, "p1": true, "a_b": true, "": false, "bundle": false,
		"Urgent": false, "a-b": false, "a.b": false, "abcdefghijklmnopq": false, "abcdefghijklmnop": true,
	} {
		if ValidClass(c) != want {
			t.Errorf("ValidClass(%q) = %v", c, !want)
		}
	}
}

func TestLaneOf(t *testing.T) {
	for name, want := range map[string]string{
		"taker-urgent": "urgent", "taker-p_1": "p_1", "taker": "", "taker-": "", "taker-Urgent": "",
		"taker-bundle": "", "other-urgent": "", "taker-a-b": "",
	} {
		if class, ok := LaneOf("taker", name); ok != (want != "") || ok && class != want {
			t.Errorf("LaneOf(taker, %s) = %q, %v; want %q", name, class, ok, want)
		}
	}
}
