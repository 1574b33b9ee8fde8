package outbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// buildFile writes a populated outbox file with a business bucket (nested
// and inline sub-buckets) and returns its path and the outbox's view of it.
func buildFile(t testing.TB, dir string, n int) (path string, snapshot string) {
	t.Helper()
	clk := newClock()
	path = filepath.Join(dir, "outbox.db")
	o, err := Open(path, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 10 {
		var batch []Record
		for j := i; j < min(i+10, n); j++ {
			r := rec(fmt.Sprintf("event-%04d", j))
			r.Data = bytes.Repeat([]byte{byte(j)}, 40)
			batch = append(batch, r)
		}
		_, err := o.Commit(batch, func(tx *bbolt.Tx) error {
			biz, err := tx.CreateBucketIfNotExists([]byte("biz"))
			if err != nil {
				return err
			}
			sub, err := biz.CreateBucketIfNotExists([]byte("inline"))
			if err != nil {
				return err
			}
			return sub.Put([]byte(batch[0].Key), []byte("v"))
		})
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		if i%20 == 0 {
			if err := o.MarkPublished([]string{batch[0].Key, batch[1].Key}); err != nil {
				t.Fatal(err)
			}
		}
	}
	snapshot = snapshotOf(t, o)
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	return path, snapshot
}

// snapshotOf renders everything the outbox holds, via its public API.
func snapshotOf(t testing.TB, o *Outbox) string {
	t.Helper()
	var keys []string
	err := o.DB().View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketRecords).ForEach(func(k, _ []byte) error {
			keys = append(keys, string(k))
			return nil
		})
	})
	if err != nil {
		return "error: " + err.Error()
	}
	var sb strings.Builder
	for _, k := range keys {
		r, ok, err := o.Get(k)
		fmt.Fprintf(&sb, "%s %v %v %x\n", k, ok, err, encodeRecord(&r)) // the encoding covers every field
	}
	p, err := o.Pending(0, time.Time{})
	fmt.Fprintf(&sb, "pending %v %v\n", keysOf(p), err)
	s, err := o.Stats()
	fmt.Fprintf(&sb, "stats %+v %v\n", s, err)
	return sb.String()
}

// pageSizeOf reads the page size from meta page 0.
func pageSizeOf(t testing.TB, b []byte) int {
	t.Helper()
	m := parseMeta(b)
	if m.err != nil {
		t.Fatal(m.err)
	}
	return int(m.pageSize)
}

// walkBytes runs the structural walk over an undamaged file image.
func walkBytes(t testing.TB, b []byte) (*fileChecker, bboltMeta) {
	t.Helper()
	c := &fileChecker{r: bytes.NewReader(b), size: int64(len(b)), reachable: map[uint64]bool{}}
	m, err := c.metas()
	if err == nil {
		err = c.freelistAndTree(m)
	}
	if err != nil || len(c.problems) > 0 {
		t.Fatalf("walk: %v %v", err, c.problems)
	}
	return c, m
}

// findPage returns the id of the first live page with the given flags.
func findPage(t testing.TB, b []byte, flags uint16) int {
	t.Helper()
	c, m := walkBytes(t, b)
	if flags == freelistPageFlag {
		return int(m.freelist)
	}
	for id := uint64(2); id < c.hwm; id++ {
		if c.reachable[id] && ne.Uint16(b[id*c.ps+8:]) == flags {
			return int(id)
		}
	}
	t.Fatalf("no live page with flags %#x", flags)
	return 0
}

func TestOpen_DamagedFile(t *testing.T) {
	type mutation func(t *testing.T, b []byte) []byte
	flip := func(off int) mutation {
		return func(t *testing.T, b []byte) []byte { b[off] ^= 0x10; return b }
	}
	tests := []struct {
		name   string
		mutate mutation
		want   error  // ErrCorrupt or ErrSchema
		where  string // "open" or "check": the first call that must fail
		detail string
	}{
		{"empty file", func(t *testing.T, b []byte) []byte { return nil }, ErrCorrupt, "open", "file is empty"},
		{"truncated to 100 bytes", func(t *testing.T, b []byte) []byte { return b[:100] }, ErrCorrupt, "open", "meta"},
		{"truncated to two pages", func(t *testing.T, b []byte) []byte { return b[:2*pageSizeOf(t, b)] }, ErrCorrupt, "open", "truncated"},
		{"truncated by half", func(t *testing.T, b []byte) []byte { return b[:len(b)/2] }, ErrCorrupt, "open", "truncated"},
		{"last live page cut", func(t *testing.T, b []byte) []byte {
			c, _ := walkBytes(t, b)
			return b[:(c.hwm-1)*c.ps]
		}, ErrCorrupt, "open", "truncated"},
		{"garbage", func(t *testing.T, b []byte) []byte {
			for i := range b {
				b[i] = byte(i*7 + 3)
			}
			return b
		}, ErrCorrupt, "open", "both bbolt meta pages are invalid"},
		{"meta page 0 bit flip", flip(16 + 40), ErrCorrupt, "open", "meta page 0 is invalid"},
		{"meta page 1 bit flip", func(t *testing.T, b []byte) []byte {
			b[pageSizeOf(t, b)+16+48] ^= 0x01
			return b
		}, ErrCorrupt, "open", "meta page 1 is invalid"},
		{"both meta pages bit flip", func(t *testing.T, b []byte) []byte {
			ps := pageSizeOf(t, b)
			b[16+20] ^= 0x01
			b[ps+16+20] ^= 0x01
			return b
		}, ErrCorrupt, "open", "both bbolt meta pages are invalid"},
		{"leaf page id flip", func(t *testing.T, b []byte) []byte {
			b[findPage(t, b, leafPageFlag)*pageSizeOf(t, b)] ^= 0x04
			return b
		}, ErrCorrupt, "open", "identifies itself as"},
		{"leaf page type flip", func(t *testing.T, b []byte) []byte {
			b[findPage(t, b, leafPageFlag)*pageSizeOf(t, b)+8] ^= 0x08
			return b
		}, ErrCorrupt, "open", "unexpected type"},
		{"leaf page element count flip", func(t *testing.T, b []byte) []byte {
			b[findPage(t, b, leafPageFlag)*pageSizeOf(t, b)+11] ^= 0x40
			return b
		}, ErrCorrupt, "open", "do not fit"},
		{"branch points at itself", func(t *testing.T, b []byte) []byte {
			ps := pageSizeOf(t, b)
			id := findPage(t, b, branchPageFlag)
			ne.PutUint64(b[id*ps+16+8:], uint64(id)) // element 0's child
			return b
		}, ErrCorrupt, "open", "referenced more than once"},
		{"branch points past the end", func(t *testing.T, b []byte) []byte {
			ps := pageSizeOf(t, b)
			id := findPage(t, b, branchPageFlag)
			b[id*ps+16+8+5] ^= 0x01 // a high bit of element 0's child
			return b
		}, ErrCorrupt, "open", "out of range"},
		{"live page listed free", func(t *testing.T, b []byte) []byte {
			ps := pageSizeOf(t, b)
			fl := findPage(t, b, freelistPageFlag)
			ne.PutUint16(b[fl*ps+10:], 1)
			ne.PutUint64(b[fl*ps+16:], uint64(findPage(t, b, leafPageFlag)))
			return b
		}, ErrCorrupt, "open", "listed free"},
		{"record payload bit flip", func(t *testing.T, b []byte) []byte {
			i := bytes.Index(b, bytes.Repeat([]byte{33}, 40)) // Data of event-0033
			if i < 0 {
				t.Fatal("payload not found")
			}
			b[i+3] ^= 0x01
			return b
		}, ErrCorrupt, "check", `record "event-0033": checksum mismatch`},
		{"schema from the future", func(t *testing.T, b []byte) []byte {
			// Every copy: freed pages may hold stale copies of the meta bucket.
			old := []byte("schema\x00\x00\x00\x00\x00\x00\x00\x02")
			if !bytes.Contains(b, old) {
				t.Fatal("schema value not found")
			}
			return bytes.ReplaceAll(b, old, []byte("schema\x00\x00\x00\x00\x00\x00\x00\x03"))
		}, ErrSchema, "open", "schema version 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, _ := buildFile(t, t.TempDir(), 300)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			damaged := tt.mutate(t, b)
			if err := os.WriteFile(path, damaged, 0o600); err != nil {
				t.Fatal(err)
			}
			o, err := Open(path, Options{})
			if tt.where == "check" {
				if err != nil {
					t.Fatalf("Open: %v (the damage is only visible to Check)", err)
				}
				err = o.Check()
			} else if err == nil {
				o.Close()
				t.Fatalf("Open succeeded on a damaged file")
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.detail) {
				t.Fatalf("err = %v\nwant %v naming %s and containing %q", err, tt.want, path, tt.detail)
			}
			if tt.want == ErrCorrupt && !strings.Contains(err.Error(), "restore it from backup") {
				t.Errorf("err does not tell the operator what to do: %v", err)
			}
			if o != nil {
				o.Close()
			}
			if !bytes.Equal(mustRead(t, path), damaged) {
				t.Error("the damaged file was modified")
			}
		})
	}
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOpen_NotAnOutbox(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { _, err := tx.CreateBucket([]byte("x")); return err }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before := mustRead(t, path)
	_, err = Open(path, Options{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "not a leafline outbox") {
		t.Fatalf("err = %v", err)
	}
	if !bytes.Equal(before, mustRead(t, path)) {
		t.Error("Open modified a file it refused")
	}
}

// TestOpen_BitFlipSweep flips one bit at offsets spread over a whole file
// and checks that Open or Check reports the damage, or else that the
// outbox reads back exactly as before (the bit was in unused space). A
// panic or fault would kill the test binary.
func TestOpen_BitFlipSweep(t *testing.T) {
	path, want := buildFile(t, t.TempDir(), 300)
	orig := mustRead(t, path)
	c, _ := walkBytes(t, orig)
	live := int(c.hwm * c.ps) // bytes past the high-water mark are never read
	stride := 97
	if raceEnabled {
		stride = 397
	}
	if testing.Short() {
		stride = 997
	}
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_SWEEP_STRIDE")); err == nil && v > 0 {
		stride = v // OUTBOX_SWEEP_STRIDE=1 flips every byte of the live pages (minutes)
	}
	outcomes := map[string]int{}
	for off := 0; off < live; off += stride {
		b := bytes.Clone(orig)
		b[off] ^= 1 << (off % 8)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		o, err := Open(path, Options{})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), path) {
				t.Fatalf("offset %d: Open: %v", off, err)
			}
			outcomes["open refused"]++
			continue
		}
		if err := o.Check(); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("offset %d: Check: %v", off, err)
			}
			outcomes["check refused"]++
		} else if got := snapshotOf(t, o); got != want {
			t.Fatalf("offset %d (page %d): Open and Check passed but the outbox reads differently:\n%s\nwant\n%s",
				off, off/pageSizeOf(t, orig), got, want)
		} else {
			outcomes["harmless"]++
		}
		if err := o.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d bytes, %d live pages, one flip every %d bytes: %v", len(orig), c.hwm, stride, outcomes)
}
