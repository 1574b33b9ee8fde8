package outbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestOutbox_Reopen(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "outbox.db")
	o, err := Open(path, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	committed := mustCommit(t, o, recs("a", "b", "c")...)
	if err := o.MarkPublished([]string{"a"}); err != nil {
		t.Fatal(err)
	}
	// "Crash": close without marking b and c.
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}

	o, err = Open(path, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if err := o.Check(); err != nil {
		t.Fatal(err)
	}
	pending, err := o.Pending(0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pending, committed[1:]) {
		t.Errorf("pending after reopen = %+v, want %+v", pending, committed[1:])
	}
	if r := mustGet(t, o, "a"); r.State != StatePublished {
		t.Errorf("a = %+v", r)
	}
	if out := mustCommit(t, o, rec("d")); out[0].Seq != 4 {
		t.Errorf("Seq after reopen = %d, want 4", out[0].Seq)
	}
}

func TestOutbox_Closed(t *testing.T) {
	o, _ := openTest(t)
	mustCommit(t, o, rec("a"))
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"Close":         o.Close,
		"Commit":        func() error { _, err := o.Commit(recs("b"), nil); return err },
		"Commit empty":  func() error { _, err := o.Commit(nil, nil); return err },
		"MarkPublished": func() error { return o.MarkPublished([]string{"a"}) },
		"Get":           func() error { _, _, err := o.Get("a"); return err },
		"Pending":       func() error { _, err := o.Pending(1, time.Time{}); return err },
		"Stats":         func() error { _, err := o.Stats(); return err },
		"Prune":         func() error { _, err := o.Prune(time.Now(), 0); return err },
		"Check":         o.Check,
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			if err := call(); !errors.Is(err, ErrClosed) {
				t.Errorf("err = %v, want ErrClosed", err)
			}
		})
	}
}

func TestOpen_Locked(t *testing.T) {
	o, _ := openTest(t)
	start := time.Now()
	_, err := Open(o.Path(), Options{OpenTimeout: 100 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second Open: %v, want a lock timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("waited %v", d)
	}
	mustCommit(t, o, rec("a")) // the first one still works
}

func TestOpen_CreatesParentDirAndNoTempFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	o, err := Open(filepath.Join(dir, "outbox.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	want := os.FileMode(0o750)
	if runtime.GOOS == "windows" {
		want = 0o777 // no permission bits on Windows: Go reports 0o777 for a directory
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != want {
		t.Errorf("parent dir: %v, %v; want %v", st.Mode(), err, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("dir holds %d entries, want only the outbox file", len(entries))
	}
}

func TestOutbox_Concurrent(t *testing.T) {
	o, _ := openTest(t)
	const writers, perWriter = 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				k := fmt.Sprintf("w%d-%03d", w, i)
				if _, err := o.Commit(recs(k, "shared"), nil); err != nil {
					errs <- err
					return
				}
				if i%2 == 0 {
					if err := o.MarkPublished([]string{k}); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() { // a relay-like reader
		for {
			select {
			case <-stop:
				return
			default:
			}
			p, err := o.Pending(64, time.Time{})
			if err == nil {
				err = o.MarkPublished(keysOf(p[:len(p)/2]))
			}
			if err == nil {
				_, err = o.Stats()
			}
			if err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := mustStats(t, o)
	if s.Pending+s.Published != writers*perWriter+1 {
		t.Errorf("Stats = %+v, want %d records", s, writers*perWriter+1)
	}
	if err := o.Check(); err != nil {
		t.Fatal(err)
	}
}
