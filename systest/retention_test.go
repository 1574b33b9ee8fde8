package systest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
)

// The streams after L1A keep only what is in flight: each box trims from
// its streams what their takers have taken, so several times
// max_stream_bytes pass through the hub's and the edges' streams without
// filling them, nothing is lost on the way, and once everything is
// completed those streams hold no more than the newest message of each
// link into them.
//
// The events are published before the hub exists, so HA receives them all
// while its edges are not connected yet: its trimming must wait for them.
func TestSystem_StreamsKeepOnlyWhatIsInFlight(t *testing.T) {
	const (
		events   = 4000
		payload  = 1024
		maxBytes = 1 << 20 // per stream at the hub and the edges
	)
	ls, err := newLocal(t.TempDir(), Options{Edges: 2, Logger: testLogger(t),
		Configure: func(c *topology.Config) {
			if c.Site != "l1" {
				c.JetStream.MaxStreamBytes = maxBytes
			}
			// Batches well below a stream's size: a receipt batch that
			// does not fit waits for the runner's retry.
			c.Delivery.BatchSize, c.Delivery.BacklogBatchSize = 64, 128
			// A slow edge may pass its backlog budget at the hub while
			// HA fills; L1 sends what the hub released once the origin
			// stream takes a copy (past its duplicate window).
			c.Topology.Events.DuplicateWindow = topology.Duration(5 * time.Second)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := ls.Start(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	ids := publishData(t, js, "flow", events, []byte(strings.Repeat("x", payload)))
	for _, name := range []string{"hub", "edge1", "edge2"} {
		if _, err := ls.Start(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	waitLinks(t, ls)
	started := time.Now()
	if in := uint64(events * payload); in < 3*maxBytes {
		t.Fatalf("only %d bytes of events: not several times a stream's %d", in, maxBytes)
	}
	// Streams this small flow in bursts: a source consumer sends its
	// flow control, whose replies are its ACKs, once 1 to 16 MiB are in
	// flight (its window grows from 2 to 32 MiB) or after a second idle,
	// so a full 1 MiB stream waits for the idle heartbeat at every hop.
	// (At the 1 GiB default the window comes first.) 35-45s here; allow
	// for a slow machine.
	check.For(t, 4*time.Minute, 50*time.Millisecond, func() error {
		if got := leafline.Completions(ls.App("l1")).Stats().Applied; got < 2*events {
			return fmt.Errorf("applied %d of %d", got, 2*events)
		}
		return nil
	})
	waitCompleted(t, ls, ids, "edge1", "edge2")
	t.Logf("%d events completed at 2 edges in %.1fs", events, time.Since(started).Seconds())

	// Once everything is completed, every stream but L1A drains to its
	// links' newest messages, which hold their marks (the trim keeps them
	// for a switch of transport). The trim purges by sequence, so it keeps
	// everything from the oldest of those on: a stream holds nothing below
	// it, and a stream no link fills holds nothing.
	jss := map[string]jetstream.JetStream{}
	for _, site := range []string{"l1", "hub", "edge1", "edge2"} {
		jss[site] = jstest.ConnectURL(t, ls.App(site).ClientURL())
	}
	type at struct{ site, stream string }
	empty := []at{{"hub", "HA"}, {"hub", "RH"}, {"edge1", "L2A"}, {"edge1", "RE"}, {"edge2", "L2A"}, {"edge2", "RE"}, {"l1", "R1"}}
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		for _, s := range empty {
			st := mustStreamState(t, jss[s.site], s.site, s.stream)
			if oldest := oldestMark(ctx, t, ls, jss[s.site], s.site, s.stream); st.Msgs > 0 && st.FirstSeq < oldest {
				return fmt.Errorf("%s@%s holds %d messages from seq %d, below its links' oldest newest message %d", s.stream, s.site, st.Msgs, st.FirstSeq, oldest)
			}
		}
		return nil
	})
	// Everything went through them: each event stream held far more than
	// fits at once; receipts travel in bundles, so a receipts stream
	// holds fewer messages, every one of them trimmed.
	receiptStreams := map[string]bool{"RE": true, "RH": true, "R1": true}
	for _, s := range empty {
		st := mustStreamState(t, jss[s.site], s.site, s.stream)
		want := uint64(events)
		if receiptStreams[s.stream] {
			want = 1
		}
		if st.LastSeq < want {
			t.Fatalf("%s@%s stored %d messages, want at least %d", s.stream, s.site, st.LastSeq, want)
		}
		// The boxes count what they trimmed: everything but what they
		// keep, on each stream.
		if n := metricOf(t, ls.App(s.site), "leafline_stream_trimmed_messages_total", map[string]string{"stream": s.stream}); n < float64(st.LastSeq-st.Msgs) {
			t.Fatalf("%s@%s: leafline_stream_trimmed_messages_total %v, want %d (every message stored but the %d kept)", s.stream, s.site, n, st.LastSeq-st.Msgs, st.Msgs)
		}
	}
	if st := mustStreamState(t, jss["l1"], "l1", "L1A"); st.Msgs != events {
		t.Fatalf("L1A holds %d events, want all %d (the origin keeps everything)", st.Msgs, events)
	}
}

// oldestMark is the oldest of the newest messages of the links that fill
// stream at site (one past the last sequence when no link fills it).
func oldestMark(ctx context.Context, t *testing.T, ls *System, js jetstream.JetStream, site, stream string) uint64 {
	t.Helper()
	cfg := ls.Configs[site]
	me, _ := cfg.Topology.Site(site)
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	oldest := s.CachedInfo().State.LastSeq + 1
	for _, l := range jsplan.TakenLinks(cfg, me) {
		if l.LocalStream != stream {
			continue
		}
		for _, subj := range l.Marks {
			if m, err := s.GetLastMsgForSubject(ctx, subj); err == nil {
				oldest = min(oldest, m.Sequence)
			}
		}
	}
	return oldest
}

func mustStreamState(t *testing.T, js jetstream.JetStream, site, stream string) jetstream.StreamState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("%s@%s: %v", stream, site, err)
	}
	return s.CachedInfo().State
}
