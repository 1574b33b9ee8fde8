package kvstore

import (
	"testing"

	"github.com/leafline/leafline/receipt"
)

// FuzzParseIndexKey: index keys round-trip for every valid event_id, and
// the parser never panics on junk.
func FuzzParseIndexKey(f *testing.F) {
	f.Add("p.=."+idToken("evt-1"), "evt-1")
	f.Add("p.edge-1."+idToken("a.*.>"), "a.*.>")
	f.Add("x.a.b", "")
	f.Add("d..", "")
	f.Add("pe."+idToken("old-format"), "")
	f.Add("c.e.A0", "") // non-canonical base64 of "\x03"
	f.Fuzz(func(t *testing.T, key, id string) {
		if k, got, err := parseIndexKey(key); err == nil {
			if k.key(idToken(got)) != key {
				t.Fatalf("%q parsed as %v %q, which is not canonical", key, k, got)
			}
		}
		if receipt.CheckEventID(id) != nil {
			return
		}
		for _, k := range []idxKey{eventKey(kindPending), siteKey(kindConflict, "edge-1")} {
			k2, got, err := parseIndexKey(k.key(idToken(id)))
			if err != nil || k2 != k || got != id {
				t.Fatalf("round trip of %q: %v %q %v", id, k2, got, err)
			}
		}
	})
}
