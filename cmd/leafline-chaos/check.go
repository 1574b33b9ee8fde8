//go:build linux

package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/completion/state"
	"github.com/leafline/leafline/receipt"
)

const maxEdges = 2

// observer folds every revision of every completion record it sees — from
// a live watch during the run and a full read of the bucket's history at
// the end — into per-event facts:
//
//   - the first terminal record of each (event_id, processor), as a
//     fingerprint of (status, receipt_id, received_at). A receipt is
//     applied once; if any revision shows a different fingerprint for the
//     same (event_id, processor), a receipt was applied twice.
//   - the processors present in the latest revision (lost/complete).
//   - records for event_ids the driver never published (phantoms).
//
// Each revision is seen at most twice (live and final) and folding is
// idempotent, so the two sources merge without double counting.
type observer struct {
	edges []string // processor names; bit i of a mask is edges[i]
	all   uint8

	mu        sync.Mutex
	ev        map[int]*evObs
	phantoms  map[string]string // KV key → why
	dups      []string          // first examples
	dupCount  int
	revisions int
	lastRev   uint64
	lastSeq   uint64 // the last completion log entry folded in
	decodeErr []string
}

type evObs struct {
	lastRev  uint64
	mask     uint8 // processors in the latest revision seen
	everMask uint8 // processors in any revision seen
	fp       [maxEdges]uint64
	dupFlag  uint8
	// expConflict: processors whose record is expired and that also sent
	// a receipt of another status (an expired event must never be
	// processed).
	expConflict uint8
	duplicates  int // sum of Duplicates in the latest revision
	deleted     bool
}

func newObserver(edges []string) *observer {
	return &observer{edges: edges, all: uint8(1)<<len(edges) - 1, ev: map[int]*evObs{}, phantoms: map[string]string{}}
}

const kvKeyPrefix = "e."

// observe folds one KV entry in.
func (o *observer) observe(e jetstream.KeyValueEntry) {
	key := e.Key()
	if !strings.HasPrefix(key, kvKeyPrefix) {
		return
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(key, kvKeyPrefix))
	o.mu.Lock()
	defer o.mu.Unlock()
	o.revisions++
	o.lastRev = max(o.lastRev, e.Revision())
	if err != nil {
		o.phantoms[key] = "key is not a base64 event_id"
		return
	}
	id := string(raw)
	n, ok := eventNum(id)
	if !ok {
		o.phantoms[key] = fmt.Sprintf("event_id %q was never published by the driver", id)
		return
	}
	ob := o.ev[n]
	if ob == nil {
		ob = &evObs{}
		o.ev[n] = ob
	}
	if e.Operation() != jetstream.KeyValuePut {
		if e.Revision() > ob.lastRev {
			ob.lastRev, ob.mask, ob.duplicates, ob.deleted = e.Revision(), 0, 0, true
		}
		return
	}
	var c record.Completion
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		if len(o.decodeErr) < 10 {
			o.decodeErr = append(o.decodeErr, fmt.Sprintf("%s rev %d: %v", key, e.Revision(), err))
		}
		return
	}
	if c.EventID != id {
		o.phantoms[key] = fmt.Sprintf("record under the key of %q holds event_id %q", id, c.EventID)
	}
	var mask uint8
	dups := 0
	for proc, pr := range c.Processors {
		i := o.edgeIndex(proc)
		if i < 0 {
			o.phantoms[key+"/"+proc] = fmt.Sprintf("event %s has a record from unknown processor %q", id, proc)
			continue
		}
		if pr.Status != receipt.StatusProcessed && pr.Status != receipt.StatusDeadLettered && pr.Status != receipt.StatusExpired {
			continue
		}
		if pr.Status == receipt.StatusExpired && pr.Conflicts > 0 {
			ob.expConflict |= 1 << i
		}
		mask |= 1 << i
		dups += pr.Duplicates
		fp := fingerprint(pr)
		switch {
		case ob.fp[i] == 0:
			ob.fp[i] = fp
		case ob.fp[i] != fp && ob.dupFlag&(1<<i) == 0:
			ob.dupFlag |= 1 << i
			o.dupCount++
			if len(o.dups) < 10 {
				o.dups = append(o.dups, fmt.Sprintf("%s/%s: first terminal record changed at revision %d (now status=%s receipt_id=%s received_at=%s)",
					id, proc, e.Revision(), pr.Status, pr.ReceiptID, pr.ReceivedAt.Format(time.RFC3339Nano)))
			}
		}
	}
	ob.everMask |= mask
	if e.Revision() > ob.lastRev {
		ob.lastRev, ob.mask, ob.duplicates, ob.deleted = e.Revision(), mask, dups, false
	}
}

func fingerprint(pr record.ProcessorRecord) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%d", pr.Status, pr.ReceiptID, pr.ReceivedAt.UnixNano())
	return h.Sum64() | 1 // never zero: zero means "not seen"
}

func (o *observer) edgeIndex(proc string) int {
	for i, e := range o.edges {
		if e == proc {
			return i
		}
	}
	return -1
}

// remaining counts the acked events that are not complete yet, and all
// events that are complete.
func (o *observer) remaining(states []byte) (missing, complete int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for n, st := range states {
		ob := o.ev[n]
		done := ob != nil && ob.mask == o.all
		if done {
			complete++
		} else if st == stAcked {
			missing++
		}
	}
	return missing, complete
}

// logRecord presents one record of a completion log entry as a KV entry
// of the previous layout, for observe: its revision orders it by the
// entry's sequence and its place in the entry.
type logRecord struct {
	key string
	val []byte
	rev uint64
	op  jetstream.KeyValueOp
}

func (e logRecord) Bucket() string                  { return state.DefaultLogStream }
func (e logRecord) Key() string                     { return e.key }
func (e logRecord) Value() []byte                   { return e.val }
func (e logRecord) Revision() uint64                { return e.rev }
func (e logRecord) Created() time.Time              { return time.Time{} }
func (e logRecord) Delta() uint64                   { return 0 }
func (e logRecord) Operation() jetstream.KeyValueOp { return e.op }

// observeEntry folds in every record an entry of the completion log wrote
// or removed.
func (o *observer) observeEntry(seq uint64, data []byte) error {
	e, err := state.DecodeEntry(seq, data)
	if err != nil {
		return err
	}
	rev := func(i int) uint64 { return seq<<20 | uint64(i) }
	for i, raw := range e.Records {
		var c struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return fmt.Errorf("log entry %d record %d: %w", seq, i, err)
		}
		o.observe(logRecord{key: kvstore.KVKey(c.EventID), val: raw, rev: rev(i), op: jetstream.KeyValuePut})
	}
	for i, id := range e.Drops {
		o.observe(logRecord{key: kvstore.KVKey(id), rev: rev(len(e.Records) + i), op: jetstream.KeyValuePurge})
	}
	o.mu.Lock()
	o.lastSeq = max(o.lastSeq, seq)
	o.mu.Unlock()
	return nil
}

// watch follows L1's completion log live (every entry, as appended) until
// ctx is done, starting again after interruptions.
func (o *observer) watch(ctx context.Context, js jetstream.JetStream, rec *recorder) {
	for ctx.Err() == nil {
		o.mu.Lock()
		from := o.lastSeq + 1
		o.mu.Unlock()
		cons, err := js.OrderedConsumer(ctx, state.DefaultLogStream, jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
		})
		if err != nil {
			rec.debug("completion log watch: %v (retrying)", err)
			sleepCtx(ctx, time.Second)
			continue
		}
		it, err := cons.Messages()
		if err != nil {
			rec.debug("completion log watch: %v (retrying)", err)
			sleepCtx(ctx, time.Second)
			continue
		}
		for {
			m, err := it.Next(jetstream.NextContext(ctx))
			if err != nil {
				break
			}
			if meta, err := m.Metadata(); err == nil {
				if err := o.observeEntry(meta.Sequence.Stream, m.Data()); err != nil {
					o.noteDecodeErr(err)
				}
			}
		}
		it.Stop()
		sleepCtx(ctx, 500*time.Millisecond)
	}
}

func (o *observer) noteDecodeErr(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.decodeErr) < 10 {
		o.decodeErr = append(o.decodeErr, err.Error())
	}
}

// readAll reads every entry of the completion log, once, and returns how
// many it read.
func (o *observer) readAll(ctx context.Context, js jetstream.JetStream) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	n := 0
	_, err := readAll(ctx, js, state.DefaultLogStream, false, func(m jetstream.Msg, seq uint64) error {
		n++
		return o.observeEntry(seq, m.Data())
	})
	return n, err
}

// verdict is what the checker concludes.
type verdict struct {
	published, acked, unknown int
	completeAcked             int
	completeUnknown           int
	lost                      int
	lostExamples              []string
	dupKV                     int
	dupExamples               []string
	phantoms                  int
	phantomExamples           []string
	regressions               int
	regressionExamples        []string
	expiredConflicts          int
	expiredConflictExamples   []string
	duplicatesAbsorbed        int
	records                   int // events with a record
	terminalRecords           int // (event, processor) terminal records
	decodeErrors              []string
	pastHistory               int // records past the end of a truncated history
}

func (o *observer) verdict(states []byte) verdict { return o.verdictOf(states, false) }

// verdictOf is verdict; with truncated, the history is known to end early
// (its driver died) and records past its end are counted apart, not as
// phantoms.
func (o *observer) verdictOf(states []byte, truncated bool) verdict {
	o.mu.Lock()
	defer o.mu.Unlock()
	var v verdict
	v.published = len(states)
	for n, st := range states {
		ob := o.ev[n]
		var mask uint8
		if ob != nil {
			mask = ob.mask
		}
		switch st {
		case stAcked:
			v.acked++
			if mask == o.all {
				v.completeAcked++
			} else {
				v.lost++
				if len(v.lostExamples) < 10 {
					v.lostExamples = append(v.lostExamples, fmt.Sprintf("%s: PubAck'ed at L1; terminal records from %s, missing %s",
						eventID(n), o.names(mask), o.names(o.all&^mask)))
				}
			}
		case stUnknown, stPublished:
			v.unknown++
			switch {
			case mask == o.all:
				v.completeUnknown++
			case ob != nil && ob.everMask != 0:
				// An edge's receipt reached L1: L1 stored the event and
				// that edge PubAck'ed its receipt, whatever the publisher
				// heard. It must complete like a PubAck'ed one.
				v.lost++
				if len(v.lostExamples) < 10 {
					v.lostExamples = append(v.lostExamples, fmt.Sprintf("%s: publish outcome unknown, but reported by %s; terminal records from %s, missing %s",
						eventID(n), o.names(ob.everMask), o.names(mask), o.names(o.all&^mask)))
				}
			}
		}
	}
	for n, ob := range o.ev {
		if n >= len(states) && truncated {
			v.pastHistory++
			continue
		}
		if n >= len(states) {
			v.phantoms++
			if len(v.phantomExamples) < 10 {
				v.phantomExamples = append(v.phantomExamples, fmt.Sprintf("%s: completion record, never published", eventID(n)))
			}
			continue
		}
		v.records++
		for i := range o.edges {
			if ob.mask&(1<<i) != 0 {
				v.terminalRecords++
			}
		}
		v.duplicatesAbsorbed += ob.duplicates
		if ob.expConflict != 0 {
			v.expiredConflicts++
			if len(v.expiredConflictExamples) < 10 {
				v.expiredConflictExamples = append(v.expiredConflictExamples, fmt.Sprintf("%s: %s reported expired and another terminal status",
					eventID(n), o.names(ob.expConflict)))
			}
		}
		if lostProcs := ob.everMask &^ ob.mask; lostProcs != 0 {
			v.regressions++
			if len(v.regressionExamples) < 10 {
				v.regressionExamples = append(v.regressionExamples, fmt.Sprintf("%s: terminal record of %s disappeared in a later revision (deleted=%t)",
					eventID(n), o.names(lostProcs), ob.deleted))
			}
		}
	}
	for _, why := range o.phantoms {
		v.phantoms++
		if len(v.phantomExamples) < 10 {
			v.phantomExamples = append(v.phantomExamples, why)
		}
	}
	v.dupKV = o.dupCount
	v.dupExamples = append(v.dupExamples, o.dups...)
	v.decodeErrors = append(v.decodeErrors, o.decodeErr...)
	return v
}

func (o *observer) names(mask uint8) string {
	var out []string
	for i, e := range o.edges {
		if mask&(1<<i) != 0 {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// reportedBy returns the events that processor reported in any revision
// seen.
func (o *observer) reportedBy(processor string) []int {
	i := o.edgeIndex(processor)
	if i < 0 {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []int
	for n, e := range o.ev {
		if e.everMask&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}
