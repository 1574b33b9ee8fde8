package kvstore

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/receipttest"
)

func TestKVKey_Form(t *testing.T) {
	keyRe := regexp.MustCompile(`^e\.[A-Za-z0-9_-]+$`)
	seen := map[string]string{}
	for _, id := range kvTestIDs() {
		k := KVKey(id)
		if !keyRe.MatchString(k) {
			t.Errorf("KVKey(%q) = %q: not a two-token key", id, k)
		}
		if prev, dup := seen[k]; dup {
			t.Errorf("ids %q and %q share key %q", prev, id, k)
		}
		seen[k] = id
	}
}

// TestKVKey_RealKV stores every awkward id through a real bucket and reads
// it back by id.
func TestKVKey_RealKV(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	st := NewStore(jstest.NewKV(t, js, "kvkey_test"))
	for _, id := range kvTestIDs() {
		r := receipttest.Receipt(id)
		if err := r.Validate(); err != nil {
			t.Fatalf("test id %q invalid: %v", id, err)
		}
		applied, err := st.Apply(ctx, r, time.Now())
		if err != nil || !applied {
			t.Fatalf("Apply(%q) = %v, %v", id, applied, err)
		}
		c, err := st.Get(ctx, id)
		if err != nil {
			t.Fatalf("Get(%q): %v", id, err)
		}
		if c.EventID != id || c.Processors["edge-1"].ReceiptID != r.ReceiptID {
			t.Fatalf("Get(%q) returned %+v", id, c)
		}
	}
	all, err := st.All(ctx)
	if err != nil || len(all) != len(kvTestIDs()) {
		t.Fatalf("All: %d records, %v; want %d", len(all), err, len(kvTestIDs()))
	}
}

func kvTestIDs() []string {
	return []string{
		"evt-1", "a.b.c", ".", "..", "a..b", ".leading", "trailing.", "*", ">", "a.*.>", "with space", " ",
		"tab\there", "emoji-😀-🚀", "ünïcödé", "日本語", "slash/and=eq", "$KV.x", "\x01ctl",
		strings.Repeat("x", receipt.MaxEventIDLen), strings.Repeat("é", receipt.MaxEventIDLen/2), strings.Repeat(".", receipt.MaxEventIDLen),
	}
}
