package check

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
	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/receipt"
)

// maxEdges is how many edges an Observer can tell apart.
const maxEdges = 2

// Observer folds every revision of every completion record it sees — from
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
type Observer struct {
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

func NewObserver(edges []string) *Observer {
	return &Observer{edges: edges, all: uint8(1)<<len(edges) - 1, ev: map[int]*evObs{}, phantoms: map[string]string{}}
}

const kvKeyPrefix = "e."

// observe folds one KV entry in.
func (o *Observer) Observe(e jetstream.KeyValueEntry) {
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
	n, ok := EventNum(id)
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

func (o *Observer) edgeIndex(proc string) int {
	for i, e := range o.edges {
		if e == proc {
			return i
		}
	}
	return -1
}

// remaining counts the acked events that are not complete yet, and all
// events that are complete.
func (o *Observer) Remaining(states []byte) (missing, complete int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for n, st := range states {
		ob := o.ev[n]
		done := ob != nil && ob.mask == o.all
		if done {
			complete++
		} else if st == Acked {
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
func (o *Observer) observeEntry(seq uint64, data []byte) error {
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
		o.Observe(logRecord{key: kvstore.KVKey(c.EventID), val: raw, rev: rev(i), op: jetstream.KeyValuePut})
	}
	for i, id := range e.Drops {
		o.Observe(logRecord{key: kvstore.KVKey(id), rev: rev(len(e.Records) + i), op: jetstream.KeyValuePurge})
	}
	o.mu.Lock()
	o.lastSeq = max(o.lastSeq, seq)
	o.mu.Unlock()
	return nil
}

// watch follows L1's completion log live (every entry, as appended) until
// ctx is done, starting again after interruptions.
func (o *Observer) Watch(ctx context.Context, js jetstream.JetStream, debug func(format string, args ...any)) {
	for ctx.Err() == nil {
		o.mu.Lock()
		from := o.lastSeq + 1
		o.mu.Unlock()
		cons, err := js.OrderedConsumer(ctx, state.DefaultLogStream, jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
		})
		if err != nil {
			debug("completion log watch: %v (retrying)", err)
			ctxsleep.For(ctx, time.Second)
			continue
		}
		it, err := cons.Messages()
		if err != nil {
			debug("completion log watch: %v (retrying)", err)
			ctxsleep.For(ctx, time.Second)
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
		ctxsleep.For(ctx, 500*time.Millisecond)
	}
}

func (o *Observer) noteDecodeErr(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.decodeErr) < 10 {
		o.decodeErr = append(o.decodeErr, err.Error())
	}
}

// readAll reads every entry of the completion log, once, and returns how
// many it read.
func (o *Observer) ReadAll(ctx context.Context, js jetstream.JetStream) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	n := 0
	_, err := ReadStream(ctx, js, state.DefaultLogStream, false, func(m jetstream.Msg, seq uint64) error {
		n++
		return o.observeEntry(seq, m.Data())
	})
	return n, err
}

// Verdict is what the checker concludes.
type Verdict struct {
	Published, Acked, Unknown int
	CompleteAcked             int
	CompleteUnknown           int
	Lost                      int
	LostExamples              []string
	DupKV                     int
	DupExamples               []string
	Phantoms                  int
	PhantomExamples           []string
	Regressions               int
	RegressionExamples        []string
	ExpiredConflicts          int
	ExpiredConflictExamples   []string
	DuplicatesAbsorbed        int
	Records                   int // events with a record
	TerminalRecords           int // (event, processor) terminal records
	DecodeErrors              []string
	PastHistory               int // records past the end of a truncated history
}

// Verdict is what the history shows, given each event's publish outcome.
func (o *Observer) Verdict(states []byte) Verdict { return o.VerdictOf(states, false) }

// verdictOf is verdict; with truncated, the history is known to end early
// (its driver died) and records past its end are counted apart, not as
// phantoms.
func (o *Observer) VerdictOf(states []byte, truncated bool) Verdict {
	o.mu.Lock()
	defer o.mu.Unlock()
	var v Verdict
	v.Published = len(states)
	o.foldOutcomes(&v, states)
	o.foldRecords(&v, len(states), truncated)
	for _, why := range o.phantoms {
		v.Phantoms++
		if len(v.PhantomExamples) < 10 {
			v.PhantomExamples = append(v.PhantomExamples, why)
		}
	}
	v.DupKV = o.dupCount
	v.DupExamples = append(v.DupExamples, o.dups...)
	v.DecodeErrors = append(v.DecodeErrors, o.decodeErr...)
	return v
}

// foldOutcomes counts, by each event's publish outcome, the events
// complete and the events lost. The caller holds o.mu.
func (o *Observer) foldOutcomes(v *Verdict, states []byte) {
	for n, st := range states {
		ob := o.ev[n]
		var mask uint8
		if ob != nil {
			mask = ob.mask
		}
		switch st {
		case Acked:
			v.Acked++
			if mask == o.all {
				v.CompleteAcked++
			} else {
				v.Lost++
				if len(v.LostExamples) < 10 {
					v.LostExamples = append(v.LostExamples, fmt.Sprintf("%s: PubAck'ed at L1; terminal records from %s, missing %s",
						EventID(n), o.names(mask), o.names(o.all&^mask)))
				}
			}
		case Unknown, Published:
			v.Unknown++
			switch {
			case mask == o.all:
				v.CompleteUnknown++
			case ob != nil && ob.everMask != 0:
				// An edge's receipt reached L1: L1 stored the event and
				// that edge PubAck'ed its receipt, whatever the publisher
				// heard. It must complete like a PubAck'ed one.
				v.Lost++
				if len(v.LostExamples) < 10 {
					v.LostExamples = append(v.LostExamples, fmt.Sprintf("%s: publish outcome unknown, but reported by %s; terminal records from %s, missing %s",
						EventID(n), o.names(ob.everMask), o.names(mask), o.names(o.all&^mask)))
				}
			}
		}
	}
}

// foldRecords counts the records of the events published (phantoms
// past the published, unless truncated says the history ends early),
// their processors, duplicates absorbed, expired conflicts and
// regressions. The caller holds o.mu.
func (o *Observer) foldRecords(v *Verdict, published int, truncated bool) {
	for n, ob := range o.ev {
		if n >= published && truncated {
			v.PastHistory++
			continue
		}
		if n >= published {
			v.Phantoms++
			if len(v.PhantomExamples) < 10 {
				v.PhantomExamples = append(v.PhantomExamples, fmt.Sprintf("%s: completion record, never published", EventID(n)))
			}
			continue
		}
		v.Records++
		for i := range o.edges {
			if ob.mask&(1<<i) != 0 {
				v.TerminalRecords++
			}
		}
		v.DuplicatesAbsorbed += ob.duplicates
		if ob.expConflict != 0 {
			v.ExpiredConflicts++
			if len(v.ExpiredConflictExamples) < 10 {
				v.ExpiredConflictExamples = append(v.ExpiredConflictExamples, fmt.Sprintf("%s: %s reported expired and another terminal status",
					EventID(n), o.names(ob.expConflict)))
			}
		}
		if lostProcs := ob.everMask &^ ob.mask; lostProcs != 0 {
			v.Regressions++
			if len(v.RegressionExamples) < 10 {
				v.RegressionExamples = append(v.RegressionExamples, fmt.Sprintf("%s: terminal record of %s disappeared in a later revision (deleted=%t)",
					EventID(n), o.names(lostProcs), ob.deleted))
			}
		}
	}
}

func (o *Observer) names(mask uint8) string {
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

// reportedBy returns the events that processor reported in any revision
// seen.
func (o *Observer) ReportedBy(processor string) []int {
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

// Complete reports whether every edge reported event n.
func (o *Observer) Complete(n int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob := o.ev[n]
	return ob != nil && ob.mask == o.all
}

// Revisions is how many record revisions the Observer has folded in,
// counting each time it saw one.
func (o *Observer) Revisions() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.revisions
}
