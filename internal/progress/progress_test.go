package progress

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLine(t *testing.T) {
	for _, tc := range []struct {
		n, total int64
		elapsed  time.Duration
		want     string
	}{
		{0, 100, 0, "x  0/100 (0%)  0/s  --"},
		{50, 100, 10 * time.Second, "x  50/100 (50%)  5/s  ETA 10s"},
		{100, 100, 20 * time.Second, "x  100/100 (100%)  5/s  done in 20s"},
		{7, 0, time.Second, "x  7  7/s"},
	} {
		if got := Line("x", tc.n, tc.total, tc.elapsed); got != tc.want {
			t.Errorf("Line(%d, %d, %s) = %q, want %q", tc.n, tc.total, tc.elapsed, got, tc.want)
		}
	}
}

// TestStart_QuietWhenNotATerminal: a pipe, a file or a buffer gets nothing.
func TestStart_QuietWhenNotATerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	for _, w := range []io.Writer{f, &buf} {
		b := Start(w, "x", 10)
		if b != nil {
			t.Fatalf("Start on %T returned a bar", w)
		}
		b.Add(3) // a nil bar does nothing
		b.Stop()
	}
	if fi, _ := f.Stat(); fi.Size() != 0 || buf.Len() != 0 {
		t.Errorf("wrote %d bytes to a file and %d to a buffer", fi.Size(), buf.Len())
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestBar_DrawsAndEnds(t *testing.T) {
	var out syncBuf
	b := start(&out, "publish", 4)
	b.Add(1)
	b.Println(&out, "a line")
	b.Set(4)
	b.Stop()
	b.Stop()
	got := out.String()
	if !strings.HasSuffix(got, "\033[K\n") || !strings.Contains(got, "publish  4/4 (100%)") || strings.Count(got, "\n") != 2 || !strings.Contains(got, "\r\033[Ka line\n") {
		t.Errorf("output %q: want the line above the bar and a final line with 4/4 ended once", got)
	}
}
