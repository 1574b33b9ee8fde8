//go:build linux

package forgetfs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/internal/jstest"
)

// jetStreamCut runs an embedded JetStream server with its store on the
// mount, publishes from one goroutine until at least 200 messages are
// PubAck'ed, cuts the power while it goes on publishing, and starts a
// server on the store of a new mount. It returns how many PubAcks arrived
// before the cut and how many of those messages the new server lacks.
// With syncedDirs, every directory of the store is made durable once the
// stream exists, before the first publish.
func jetStreamCut(t *testing.T, o Options, syncAlways, syncedDirs bool) (acked, lost int) {
	t.Helper()
	f := mountWith(t, t.TempDir(), t.TempDir(), o)
	store := filepath.Join(f.Mountpoint(), "jetstream")
	s := jstest.Start(t, jstest.Options{SyncAlways: syncAlways, StoreDir: store})
	js := jstest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Skipf("nats-server cannot create a file stream on forgetfs: %v", err)
	}
	if syncedDirs {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}

	payload := func(seq uint64) []byte { return fmt.Appendf(nil, "message %d %0200d", seq, seq) }
	var cut atomic.Bool
	var before []uint64 // sequences PubAck'ed before the cut
	var nAcked atomic.Int64
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for i := uint64(1); ; i++ {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			ack, err := js.Publish(pctx, "s.x", payload(i), jetstream.WithMsgID(fmt.Sprint(i)))
			pcancel()
			// Only a PubAck seen before the cut counts: the server here
			// outlives the power of its disk, which a real one does not.
			if err != nil || cut.Load() {
				return
			}
			if ack.Sequence != i {
				t.Errorf("message %d stored as sequence %d", i, ack.Sequence)
				return
			}
			before = append(before, ack.Sequence)
			nAcked.Store(int64(len(before)))
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for nAcked.Load() < 200 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d PubAcks in 30s", nAcked.Load())
		}
		time.Sleep(time.Millisecond)
	}
	cut.Store(true)
	rep, err := f.PowerCut(Cut{})
	if err != nil {
		t.Fatal(err)
	}
	<-stopped
	t.Logf("cut report: %+v", rep)
	s.Shutdown()
	s.WaitForShutdown()

	mountAt(t, f.Mountpoint(), f.Backing())
	s2 := jstest.Start(t, jstest.Options{SyncAlways: syncAlways, StoreDir: store})
	js2 := jstest.Connect(t, s2)
	st, err := js2.Stream(ctx, "S")
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return len(before), len(before)
	}
	if err != nil {
		t.Fatalf("stream after the cut: %v", err)
	}
	for _, seq := range before {
		m, err := st.GetMsg(ctx, seq)
		if err != nil || string(m.Data) != string(payload(seq)) {
			lost++
		}
	}
	return len(before), lost
}

// TestJetStream_SyncAlwaysKeepsEveryPubAck: with SyncAlways a PubAck
// means the message was fsynced, so a cut loses none of them: on a
// journaling filesystem (JournaledNames) from the stream's creation on,
// and under POSIX to the letter once the store's directories are durable.
// (nats-server fsyncs a new stream's own directories, not their parents:
// under POSIX to the letter a stream that was never followed by a sync of
// its parents can vanish whole.)
func TestJetStream_SyncAlwaysKeepsEveryPubAck(t *testing.T) {
	for _, tc := range []struct {
		name       string
		o          Options
		syncedDirs bool
	}{
		{"journaled names", Options{JournaledNames: true}, false},
		{"posix, directories synced", Options{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acked, lost := jetStreamCut(t, tc.o, true, tc.syncedDirs)
			if lost > 0 {
				t.Errorf("SyncAlways: %d of %d PubAck'ed messages lost by a power cut", lost, acked)
			}
		})
	}
}

// TestJetStream_DefaultSyncLosesPubAcks is the negative control: with the
// default 2-minute sync interval a PubAck means the page cache, and a cut
// right after loses messages.
func TestJetStream_DefaultSyncLosesPubAcks(t *testing.T) {
	acked, lost := jetStreamCut(t, Options{JournaledNames: true}, false, true)
	t.Logf("default sync interval: %d of %d PubAck'ed messages lost", lost, acked)
	if lost == 0 {
		t.Errorf("none of %d PubAck'ed messages was lost with the 2-minute sync interval: the filesystem kept unsynced data", acked)
	}
}
