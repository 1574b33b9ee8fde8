package kvstore

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/jstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

var (
	removalMode = flag.String("receipts.removal", "purge", "BenchmarkIndexRemoval: none, purge, marker, marker-ttl or marker-ttl-sdm")
	removalN    = flag.Int("receipts.removal-n", 2000, "BenchmarkIndexRemoval: events")
)

// BenchmarkIndexRemoval measures, under SyncAlways, what removing the two
// pending entries (p.=.<tok>, p.<site>.<tok>) of n completed events costs
// in an index bucket, one mechanism per run (-receipts.removal):
//
//	none        write the entries only (the baseline of the others)
//	purge       one stream purge of "p.*.<tok>" per event (today's removal)
//	marker      one atomic batch per MaxApplyBatch events of KV purge
//	            markers on the exact keys (the per-subject limit drops the
//	            entry); the markers stay
//	marker-ttl  as marker, each marker with Nats-TTL 1s; the run waits
//	            until the markers have expired
//	marker-ttl-sdm  as marker-ttl on a stream with SubjectDeleteMarkerTTL
//	            (a KV's LimitMarkerTTL), whose expiry of a purge marker goes
//	            the server's subject-delete-marker way
//
// A process's fsyncs are counted from outside, e.g.
//
//	go test -c -o /tmp/rx.test ./completion/kvstore/
//	strace -f -c -e trace=fsync,fdatasync /tmp/rx.test -test.run '^$' \
//	    -test.bench IndexRemoval -test.benchtime 1x -receipts.removal purge
//
// and the "none" run's count subtracted.
func BenchmarkIndexRemoval(b *testing.B) {
	_, js := jstest.StartJS(b, jstest.Options{SyncAlways: true})
	ctx := jstest.Ctx(b)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "rmcost", History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	st, err := js.Stream(ctx, "KV_rmcost")
	if err != nil {
		b.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowAtomicPublish, cfg.AllowMsgTTL = true, true
	if *removalMode == "marker-ttl-sdm" {
		cfg.SubjectDeleteMarkerTTL = time.Second
	}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		b.Fatal(err)
	}
	ix, err := newIndex(ctx, js, kv)
	if err != nil {
		b.Fatal(err)
	}
	n := *removalN
	toks := make([]string, n)
	keys := func(tok string) []string { return []string{"p.=." + tok, "p.edge-1." + tok} }
	var entries []*nats.Msg
	for i := range toks {
		toks[i] = idToken(fmt.Sprintf("ev-%07d", i))
		for _, k := range keys(toks[i]) {
			entries = append(entries, &nats.Msg{Subject: ix.subject + k, Data: []byte("2026-12-02T00:00:00Z"), Header: nats.Header{}})
		}
	}
	publishBatches(b, js, entries)
	b.ResetTimer()
	start := time.Now()
	switch *removalMode {
	case "none":
	case "purge":
		for _, tok := range toks {
			if err := ix.remove(ctx, "p.*."+tok); err != nil {
				b.Fatal(err)
			}
		}
	case "marker", "marker-ttl", "marker-ttl-sdm":
		var ms []*nats.Msg
		for _, tok := range toks {
			for _, k := range keys(tok) {
				m := &nats.Msg{Subject: ix.subject + k, Header: nats.Header{}}
				m.Header.Set("KV-Operation", "PURGE")
				m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
				if *removalMode != "marker" {
					m.Header.Set(jetstream.MsgTTLHeader, "1s")
				}
				ms = append(ms, m)
			}
		}
		publishBatches(b, js, ms)
		if *removalMode != "marker" {
			for deadline := time.Now().Add(time.Minute); streamMsgs(b, js, "KV_rmcost") > 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					b.Fatal("markers did not expire")
				}
			}
		}
	default:
		b.Fatalf("-receipts.removal %q: want none, purge, marker, marker-ttl or marker-ttl-sdm", *removalMode)
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "events/s")
	b.ReportMetric(float64(streamMsgs(b, js, "KV_rmcost")), "msgs-left")
	b.ReportMetric(0, "ns/op")
}

// publishBatches publishes ms in atomic batches of 2·MaxApplyBatch.
func publishBatches(b *testing.B, js jetstream.JetStream, ms []*nats.Msg) {
	b.Helper()
	for start := 0; start < len(ms); start += 2 * MaxApplyBatch {
		if _, err := jetstreamext.PublishMsgBatch(jstest.Ctx(b), js, ms[start:min(start+2*MaxApplyBatch, len(ms))]); err != nil {
			b.Fatal(err)
		}
	}
}

func streamMsgs(b *testing.B, js jetstream.JetStream, name string) uint64 {
	b.Helper()
	st, err := js.Stream(jstest.Ctx(b), name)
	if err != nil {
		b.Fatal(err)
	}
	return st.CachedInfo().State.Msgs
}
