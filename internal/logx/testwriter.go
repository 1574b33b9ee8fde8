package logx

import (
	"io"
	"testing"
)

// TestWriter writes each log line to t's log, so that it shows with the
// test that wrote it (go test -v, or on failure).
func TestWriter(t testing.TB) io.Writer { return testWriter{t} }

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
