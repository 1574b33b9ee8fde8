package outbox

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// TestMarkPublished_DoesNotRewriteRecords: marking adds a Seq-keyed mark;
// the record's bytes stay as Commit wrote them.
func TestMarkPublished_DoesNotRewriteRecords(t *testing.T) {
	o, clk := openTest(t)
	mustCommit(t, o, recs("a", "b")...)
	raw := func(key string) []byte {
		var v []byte
		if err := o.DB().View(func(tx *bbolt.Tx) error {
			v = bytes.Clone(tx.Bucket(bucketRecords).Get([]byte(key)))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := raw("a")
	at := clk.Advance(time.Minute)
	if err := o.MarkPublished([]string{"a"}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw("a"), before) {
		t.Fatal("MarkPublished rewrote the record")
	}
	r, ok, err := o.Get("a")
	if err != nil || !ok || r.State != StatePublished || !r.PublishedAt.Equal(at) {
		t.Fatalf("Get(a) = %+v, %v, %v; want published at %v", r, ok, err, at)
	}
	if r, _, _ := o.Get("b"); r.State != StatePending {
		t.Fatalf("Get(b) state %s, want pending", r.State)
	}
	if err := o.Check(); err != nil {
		t.Fatal(err)
	}
}

// writeSchema1 turns a fresh outbox file into what a schema 1 build left:
// no marks bucket, and record "a" marked published by rewriting it.
func writeSchema1(t *testing.T, path string, publishedAt time.Time) {
	t.Helper()
	o, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(t, o, recs("a", "b", "c")...)
	err = o.DB().Update(func(tx *bbolt.Tx) error {
		b, err := getBuckets(tx)
		if err != nil {
			return err
		}
		r, err := decodeRecord([]byte("a"), b.records.Get([]byte("a")))
		if err != nil {
			return err
		}
		r.State, r.PublishedAt = StatePublished, normalTime(publishedAt)
		if err := b.pending.Delete(u64(r.Seq)); err != nil {
			return err
		}
		if err := b.records.Put([]byte("a"), encodeRecord(&r)); err != nil {
			return err
		}
		if err := b.published.Put(publishedKey(&r), []byte("a")); err != nil {
			return err
		}
		if err := b.addCounters(-1, 1); err != nil {
			return err
		}
		if err := tx.DeleteBucket(bucketMarks); err != nil {
			return err
		}
		return b.meta.Put(metaSchema, u64(1))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpen_UpgradesSchema1: a file written by a schema 1 build opens, keeps
// every record in its state, and works on: marking, pruning, checking.
func TestOpen_UpgradesSchema1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	old := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	writeSchema1(t, path, old)

	o, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open of a schema 1 file: %v", err)
	}
	defer o.Close()
	if err := o.Check(); err != nil {
		t.Fatalf("Check after the upgrade: %v", err)
	}
	if err := o.DB().View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(metaSchema); !bytes.Equal(v, u64(SchemaVersion)) {
			return errors.New("schema version not upgraded")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	a, _, err := o.Get("a")
	if err != nil || a.State != StatePublished || !a.PublishedAt.Equal(old) {
		t.Fatalf("Get(a) = %+v, %v; want published at %v", a, err, old)
	}
	p, err := o.Pending(0, time.Time{})
	if err != nil || strings.Join(keysOf(p), ",") != "b,c" {
		t.Fatalf("Pending = %v, %v; want b,c", keysOf(p), err)
	}
	if err := o.MarkPublished([]string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if s, err := o.Stats(); err != nil || s.Pending != 1 || s.Published != 2 {
		t.Fatalf("Stats = %+v, %v; want 1 pending, 2 published", s, err)
	}
	n, err := o.Prune(time.Now().Add(time.Hour), 0)
	if err != nil || n != 2 {
		t.Fatalf("Prune = %d, %v; want 2", n, err)
	}
	if err := o.Check(); err != nil {
		t.Fatalf("Check after marking and pruning: %v", err)
	}
	if _, ok, _ := o.Get("a"); ok {
		t.Fatal("the schema 1 record survived Prune")
	}
}
