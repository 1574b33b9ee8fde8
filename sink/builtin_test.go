package sink_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/sink/sinktest"
	"github.com/leafline/leafline/systest"
)

// storeTarget runs the built-in store sink in a bbolt transaction of its
// own per Write, as the outbox does.
type storeTarget struct{ db *bbolt.DB }

type txWriter struct{ db *bbolt.DB }

func (w txWriter) Write(ctx context.Context, evs []sink.Event) []error {
	err := ctx.Err()
	if err == nil {
		err = w.db.Update(func(tx *bbolt.Tx) error { return sink.StoreSink{}.WriteTx(tx, evs) })
	}
	errs := make([]error, len(evs))
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func (s storeTarget) NewSink(*testing.T) sink.Sink { return txWriter{s.db} }

func (s storeTarget) Stored(t *testing.T, id string) int {
	n := 0
	if err := s.db.View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket([]byte("events")); b != nil && b.Get([]byte(id)) != nil {
			n = 1
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestStoreSink_Conformance(t *testing.T) {
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "box.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sinktest.Run(t, storeTarget{db})
}

type fileTarget struct{ dir string }

func (f fileTarget) NewSink(t *testing.T) sink.Sink {
	s, err := sink.NewFileSink(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f fileTarget) Stored(t *testing.T, id string) int {
	_, err := os.Stat(filepath.Join(f.dir, sink.FileName(id)))
	switch {
	case err == nil:
		return 1
	case os.IsNotExist(err):
		return 0
	default:
		t.Fatal(err)
		return 0
	}
}

func TestFileSink_Conformance(t *testing.T) {
	sinktest.Run(t, fileTarget{filepath.Join(t.TempDir(), "sink")})
}

func TestFileSink_Box(t *testing.T) {
	systest.RunSink(t, fileTarget{filepath.Join(t.TempDir(), "sink")}, systest.SinkOptions{})
}
