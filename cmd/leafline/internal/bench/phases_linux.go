//go:build linux

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"go.etcd.io/bbolt"

	"github.com/leafline/leafline/sink"
)

// benchDiskFlush: (z) what the disk under the bench's files gives fsyncs:
// writers goroutines, each appending 256 bytes to a file of its own and
// fsyncing it, for two seconds. Its flush/ev column says how many of
// those fsyncs the file system's journal could share.
func benchDiskFlush(b *tb, writers int) benchRow {
	dir := b.TempDir()
	files := make([]*os.File, writers)
	for i := range files {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("w%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	var n atomic.Int64
	stop := time.Now().Add(2 * time.Second)
	rec := make([]byte, 256)
	ph := b.begin(fmt.Sprintf("z_fsync_%d", writers))
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for _, f := range files {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if _, err := f.Write(rec); err != nil {
					errs <- err
					return
				}
				if err := f.Sync(); err != nil {
					errs <- err
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return ph.end(fmt.Sprintf("z%d", writers), fmt.Sprintf("disk: 256 B append + fsync, %d writer(s)", writers), int(n.Load()), nil, "events = fsyncs")
}

// benchRawConsume: (a) a durable pull consumer on edge1's L2A that fetches
// and ACKs, nothing else; Fetch batches like the runner's, and a long-lived
// Messages iterator.
func benchRawConsume(b *tb, env *benchEnv, n int) []benchRow {
	ctx := context.Background()
	js := env.js["edge1"]
	cfg := env.ls.Configs["edge1"].Delivery
	mk := func(name string) jetstream.Consumer {
		c, err := js.CreateOrUpdateConsumer(ctx, "L2A", jetstream.ConsumerConfig{
			Durable: name, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: cfg.MaxAckPending,
			AckWait: 30 * time.Second, MaxRequestBatch: 1000,
		})
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	var rows []benchRow
	cons := mk("bench-raw-fetch")
	lat := make([]time.Duration, 0, n)
	ph := b.begin("a_fetch")
	for got := 0; got < n; {
		start := time.Now()
		batch, err := cons.Fetch(cfg.BatchSize, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		for m := range batch.Messages() {
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
			got++
		}
	}
	rows = append(rows, ph.end("a", fmt.Sprintf("raw consume: Fetch(%d)+Ack, durable pull", cfg.BatchSize), n, lat, ""))

	cons = mk("bench-raw-iter")
	ph = b.begin("a_iter")
	iter, err := cons.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		m, err := iter.Next()
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Ack(); err != nil {
			b.Fatal(err)
		}
	}
	iter.Stop()
	rows = append(rows, ph.end("a2", "raw consume: Messages iterator (1000)+Ack", n, nil, ""))
	return rows
}

func benchReceipt(b *tb, id string) outbox.Record {
	rc := receipt.New(id, "L1A", "edge1", "edge1", receipt.StatusProcessed, time.Now().UTC())
	data, err := rc.Encode()
	if err != nil {
		b.Fatal(err)
	}
	return outbox.Record{Key: rc.MsgID(), Data: data}
}

// benchCeiling: (b) durably storing receipts in a receipts stream on edge1's
// server: atomic batch publish (one fsync per batch), two batch sizes, and
// per-message async publish for reference.
func benchCeiling(b *tb, env *benchEnv, n int) []benchRow {
	ctx := context.Background()
	js := env.js["edge1"]
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "BENCH_RC", Subjects: []string{"bench.rc.>"}, Storage: jetstream.FileStorage,
		Discard: jetstream.DiscardNew, MaxBytes: 1 << 30, AllowAtomicPublish: true, Duplicates: 2 * time.Minute,
	})
	if err != nil {
		b.Fatal(err)
	}
	msgs := func(prefix string, count int) []*nats.Msg {
		out := make([]*nats.Msg, count)
		for i := range out {
			rec := benchReceipt(b, fmt.Sprintf("%s-%08d", prefix, i))
			m := nats.NewMsg("bench.rc.edge1.processed")
			m.Data = rec.Data
			m.Header.Set(jetstream.MsgIDHeader, rec.Key)
			out[i] = m
		}
		return out
	}
	var rows []benchRow
	for _, size := range []int{256, 1000} {
		all := msgs(fmt.Sprintf("rc%d", size), n)
		lat := make([]time.Duration, 0, n)
		ph := b.begin(fmt.Sprintf("b_atomic%d", size))
		for i := 0; i < n; i += size {
			chunk := all[i:min(i+size, n)]
			start := time.Now()
			if _, err := jetstreamext.PublishMsgBatch(ctx, js, chunk); err != nil {
				b.Fatal(err)
			}
			d := time.Since(start)
			for range chunk {
				lat = append(lat, d)
			}
		}
		key := "b"
		if size == 1000 {
			key = "b2"
		}
		rows = append(rows, ph.end(key, fmt.Sprintf("receipt ceiling: atomic batch %d (AllowAtomicPublish)", size), n, lat, "1 fsync per batch"))
	}
	k := min(n, 20_000)
	all := msgs("rcasync", k)
	ph := b.begin("b_async")
	futs := make([]jetstream.PubAckFuture, 0, 2048)
	for _, m := range all {
		if len(futs) == 2048 {
			<-futs[0].Ok()
			futs = futs[1:]
		}
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			b.Fatal(err)
		}
		futs = append(futs, f)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("async publish did not complete")
	}
	rows = append(rows, ph.end("b3", "receipts: per-message async publish (window 2048)", k, nil, "reference: 1 fsync per msg"))
	return rows
}

// benchNaiveLoop: (c) the seed's pseudo-code taken literally, per message:
// sink write and outbox record in one bbolt transaction (store sink), publish
// the receipt and wait for its PubAck, mark it published, ACK.
func benchNaiveLoop(b *tb, env *benchEnv, n int) benchRow {
	ctx := context.Background()
	js := env.js["edge1"]
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "BENCH_NAIVE", Subjects: []string{"bench.naive.>"}, Storage: jetstream.FileStorage,
		Discard: jetstream.DiscardNew, MaxBytes: 1 << 30, Duplicates: 2 * time.Minute,
	}); err != nil {
		b.Fatal(err)
	}
	ob, err := outbox.Open(filepath.Join(b.TempDir(), "naive.db"), outbox.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer ob.Close()
	cons, err := js.CreateOrUpdateConsumer(ctx, "L2A", jetstream.ConsumerConfig{
		Durable: "bench-naive", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 4096, AckWait: 30 * time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	iter, err := cons.Messages()
	if err != nil {
		b.Fatal(err)
	}
	defer iter.Stop()
	// The naive loop signs each receipt as d does (unless
	// Options.Unsigned), with the same derived-once key.
	var signer *receipt.Signer
	if !b.o.Unsigned {
		kp, err := nkeys.CreateUser()
		if err != nil {
			b.Fatal(err)
		}
		if signer, err = receipt.NewSigner(kp); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, n)
	ph := b.begin("c_naive")
	for i := 0; i < n; i++ {
		m, err := iter.Next()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		id := m.Headers().Get(jetstream.MsgIDHeader)
		rec := benchReceipt(b, id)
		rec.Subject = "bench.naive.edge1.processed"
		ev := []sink.Event{{ID: id, Subject: m.Subject(), Data: m.Data()}}
		if _, err := ob.Commit([]outbox.Record{rec}, func(tx *bbolt.Tx) error { return sink.StoreSink{}.WriteTx(tx, ev) }); err != nil {
			b.Fatal(err)
		}
		rm := nats.NewMsg(rec.Subject)
		rm.Data = rec.Data
		rm.Header.Set(jetstream.MsgIDHeader, rec.Key)
		if signer != nil {
			rm.Header.Set(receipt.SignatureHeader, signer.Sign(rec.Data))
		}
		if _, err := js.PublishMsg(ctx, rm); err != nil {
			b.Fatal(err)
		}
		if err := ob.MarkPublished([]string{rec.Key}); err != nil {
			b.Fatal(err)
		}
		if err := m.Ack(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	note := "store sink + outbox + signed receipt, like d"
	if signer == nil {
		note = "store sink + outbox, like d (unsigned)"
	}
	return ph.end("c", "naive: per msg bbolt tx + sync publish + mark + ACK", n, lat, note)
}

// benchE2ELatency reads the completion records of every 10th event and
// returns received_at(L1) - publish time.
func benchE2ELatency(b *tb, env *benchEnv, at []time.Time, processor string) []time.Duration {
	store := leafline.Completions(env.ls.App("l1")).State()
	var lat []time.Duration
	for i := 0; i < len(at); i += 10 {
		c, err := store.Get(context.Background(), b.id("e")(i))
		if err != nil {
			b.Fatalf("completion of %s: %v", b.id("e")(i), err)
		}
		if p, ok := c.Processors[processor]; ok {
			lat = append(lat, p.ReceivedAt.Sub(at[i]))
		}
	}
	return lat
}

// benchSigning: (k) the CPU cost of signing receipts at the edge
// (receipt.Sign with an nkey, as the runner's publisher does) and of
// verifying them at L1, one goroutine each.
func benchSigning(b *tb, n int) []benchRow {
	n = min(n, 20_000)
	kp, err := nkeys.CreateUser()
	if err != nil {
		b.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	data := make([][]byte, n)
	for i := range data {
		data[i] = benchReceipt(b, fmt.Sprintf("k-%08d", i)).Data
	}
	sigs := make([]string, n)
	ph := b.begin("k_sign")
	for i := range data {
		if sigs[i], err = receipt.Sign(kp, data[i]); err != nil {
			b.Fatal(err)
		}
	}
	r1 := ph.end("k", "receipt.Sign (nkeys ed25519), 1 goroutine", n, nil, "edge CPU per receipt")
	signer, err := receipt.NewSigner(kp)
	if err != nil {
		b.Fatal(err)
	}
	ph = b.begin("k_signer")
	for i := range data {
		if sig := signer.Sign(data[i]); sig != sigs[i] {
			b.Fatalf("receipt.Signer: signature %d differs from receipt.Sign", i)
		}
	}
	r3 := ph.end("k3", "receipt.Signer.Sign (key derived once), 1 goroutine", n, nil, "a receipt signed on its own; same signatures as k")
	const batch = 256
	bsigs, proofs := make([]string, n), make([]string, n)
	ph = b.begin("k_batch")
	for lo := 0; lo < n; lo += batch {
		hi := min(lo+batch, n)
		ss, ps := signer.SignBatch(data[lo:hi])
		copy(bsigs[lo:hi], ss)
		copy(proofs[lo:hi], ps)
	}
	r4 := ph.end("k4", "receipt.Signer.SignBatch, batches of 256, 1 goroutine", n, nil, "what the runner uses: one signature per 16 receipts")
	v := receipt.NewVerifier()
	ph = b.begin("k_batch_verify")
	for i := range data {
		if err := v.Verify(pub, data[i], bsigs[i], proofs[i]); err != nil {
			b.Fatal(err)
		}
	}
	r5 := ph.end("k5", "receipt.Verifier.Verify, batches of 256, 1 goroutine", n, nil, "L1 CPU per batch-signed receipt")
	ph = b.begin("k_verify")
	for i := range data {
		if err := receipt.VerifySignature(pub, data[i], sigs[i]); err != nil {
			b.Fatal(err)
		}
	}
	r2 := ph.end("k2", "receipt.VerifySignature, 1 goroutine", n, nil, "L1 CPU per receipt")
	return []benchRow{r1, r3, r2, r4, r5}
}
