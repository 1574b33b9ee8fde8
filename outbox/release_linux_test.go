//go:build linux

package outbox

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// mappedKB returns the resident kB of this process's mappings of path,
// from /proc/self/smaps.
func mappedKB(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	kb, in := 0, false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			in = len(f) >= 6 && f[len(f)-1] == path
			continue
		}
		if in && len(f) >= 2 && f[0] == "Rss:" {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("smaps: %q", sc.Text())
			}
			kb += n
		}
	}
	return kb
}

// TestReleaseMapped: reading every record maps the file's pages into the
// process; ReleaseMapped drops them, and every record still reads back.
func TestReleaseMapped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	o, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	const n = 4096
	key := func(i int) string { return fmt.Sprintf("%08x", uint32(i)*2654435761) }
	for i := 0; i < n; i += 256 {
		recs := make([]Record, 256)
		for j := range recs {
			recs[j] = Record{Key: key(i + j), Subject: "s", Data: bytes.Repeat([]byte{byte(j)}, 300)}
		}
		if _, err := o.Commit(recs, nil); err != nil {
			t.Fatal(err)
		}
	}
	readAll := func() {
		t.Helper()
		for i := 0; i < n; i++ {
			r, ok, err := o.Get(key(i))
			if err != nil || !ok || len(r.Data) != 300 || r.Data[0] != byte(i%256) {
				t.Fatalf("record %d: ok=%v err=%v", i, ok, err)
			}
		}
	}
	readAll()
	before := mappedKB(t, path)
	if before < 1024 {
		t.Fatalf("reading %d records left only %d kB of the file resident; the test proves nothing", n, before)
	}
	if err := o.ReleaseMapped(); err != nil {
		t.Fatal(err)
	}
	after := mappedKB(t, path)
	t.Logf("resident kB of the outbox map: %d after reading every record, %d after ReleaseMapped", before, after)
	if after > before/10 {
		t.Fatalf("ReleaseMapped left %d of %d kB resident", after, before)
	}
	readAll()
	if err := o.Check(); err != nil {
		t.Fatal(err)
	}
	if kb := mappedKB(t, path); kb > before/10 {
		t.Fatalf("Check left %d kB resident", kb)
	}
	o.Close()
	if err := o.ReleaseMapped(); err == nil {
		t.Fatal("ReleaseMapped after Close: no error")
	}
}
