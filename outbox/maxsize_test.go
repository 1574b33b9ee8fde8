package outbox

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOptions_MaxSize(t *testing.T) {
	def := 0
	if is32Bit {
		def = MaxSize32
	}
	for _, tt := range []struct {
		in   int64
		want int
	}{
		{0, def},
		{-1, 0},
		{8 << 20, 8 << 20},
		{math.MaxInt64, math.MaxInt},
	} {
		if got := (Options{MaxSize: tt.in}).maxSize(); got != tt.want {
			t.Errorf("Options{MaxSize: %d}.maxSize() = %d, want %d", tt.in, got, tt.want)
		}
	}
}

// TestOutbox_MaxSize fills an outbox bounded to 1 MiB: the write that
// would grow the file past it fails with ErrFull and stores nothing, the
// file stays within the bound, and the file reopens with every record that
// was committed before.
func TestOutbox_MaxSize(t *testing.T) {
	const limit = 1 << 20
	path := filepath.Join(t.TempDir(), "outbox.db")
	o, err := Open(path, Options{MaxSize: limit})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(strings.Repeat("r", 512))
	committed := 0
	for i := 0; ; i++ {
		batch := make([]Record, 16)
		for j := range batch {
			batch[j] = Record{Key: fmt.Sprintf("k-%06d-%02d", i, j), Subject: "receipts.edge1", Data: data}
		}
		_, err = o.Commit(batch, nil)
		if err != nil {
			break
		}
		committed += len(batch)
		if committed > 100000 {
			t.Fatal("1 MiB outbox took 100000 records without ErrFull")
		}
	}
	if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Commit at the limit: %v, want ErrFull naming the file", err)
	}
	if _, err := o.Commit([]Record{rec("after")}, nil); err == nil {
		t.Fatal("a write after ErrFull succeeded; want the outbox to refuse writes")
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() > limit {
		t.Fatalf("file size %v (%v), want at most %d", fi.Size(), err, limit)
	}
	o, err = Open(path, Options{MaxSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if err := o.Check(); err != nil {
		t.Fatal(err)
	}
	st, err := o.Stats()
	if err != nil || st.Pending != committed {
		t.Fatalf("after reopen: %+v, %v; want %d pending", st, err, committed)
	}
}
