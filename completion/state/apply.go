package state

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/leafline/leafline/completion/record"
	bolt "go.etcd.io/bbolt"
)

// maxConflictRounds bounds how often one group is decided again after
// other boxes appended first.
const maxConflictRounds = 32

// request is one call of ApplyBatch, ApplyOriginBatch or DropHeld, handed
// to the applier. The applier fills the results and closes done.
type request struct {
	ctx      context.Context
	receipts []record.BatchItem
	origins  []record.Origin
	retire   []record.Retirement
	now      time.Time
	drop     *record.Completion

	rres    []record.BatchResult
	ores    []record.OriginResult
	retired int   // of retire, how many changed a record
	err     error // why the group failed (retire's result)
	dropped bool
	done    chan struct{}
}

func (r *request) size() int { return len(r.receipts) + len(r.origins) + len(r.retire) + 1 }

// fail sets err on every result of r.
func (r *request) fail(err error) {
	for i := range r.rres {
		r.rres[i] = record.BatchResult{Err: err}
	}
	for i := range r.ores {
		r.ores[i] = record.OriginResult{Err: err}
	}
	r.dropped, r.retired, r.err = false, 0, err
}

// submit hands r to the applier and waits for it. If ctx ends first the
// work may still be done; the caller reports an error, so nothing is
// ACKed for it, and its redelivery is absorbed.
func (s *State) submit(ctx context.Context, r *request) error {
	if err := s.notReady(); err != nil {
		return err
	}
	r.ctx, r.done = context.WithoutCancel(ctx), make(chan struct{})
	select {
	case s.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return fmt.Errorf("completion: %w", ErrClosed)
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		// The applier may have stopped before it took r: r's results are
		// then never written, and nothing is ACKed for it.
		return fmt.Errorf("completion: %w", ErrClosed)
	}
}

// ApplyBatch records receipts as Store.ApplyBatch does: the
// outcome of every item is FoldReceipt's against the record as the whole
// log before it left it. The records of the batch (and of every batch
// decided with it) are one log entry and one local transaction; a result
// with an Outcome and no error is durable in the log.
func (s *State) ApplyBatch(ctx context.Context, items []record.BatchItem) []record.BatchResult {
	r := &request{receipts: items, rres: make([]record.BatchResult, len(items))}
	if err := s.submit(ctx, r); err != nil {
		// r may still be in the applier's hands: answer with a copy.
		out := make([]record.BatchResult, len(items))
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	return r.rres
}

// ApplyOriginBatch records origins as Store.ApplyOriginBatch
// does, with FoldOrigin; see ApplyBatch.
func (s *State) ApplyOriginBatch(ctx context.Context, origins []record.Origin, now time.Time) []record.OriginResult {
	r := &request{origins: origins, now: now.UTC(), ores: make([]record.OriginResult, len(origins))}
	if err := s.submit(ctx, r); err != nil {
		out := make([]record.OriginResult, len(origins))
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	return r.ores
}

// Retire closes, for site, every event pending for it whose origin is
// known (record.FoldRetirement), as of at and with reason, in log entries
// of up to MaxListLimit events, and returns how many it closed. An event
// whose origin arrives later, routed to site by a topology that still
// had it, is closed by a later call.
func (s *State) Retire(ctx context.Context, site string, at time.Time, reason string) (int, error) {
	total := 0
	for {
		page, _, err := s.List(ctx, record.ListQuery{Status: record.ListPending, Site: site, Limit: record.MaxListLimit})
		if err != nil {
			return total, err
		}
		var rts []record.Retirement
		for _, c := range page {
			rts = append(rts, record.Retirement{EventID: c.EventID, Site: site, At: at, Reason: reason})
		}
		if len(rts) == 0 {
			return total, nil
		}
		r := &request{retire: rts}
		if err := s.submit(ctx, r); err != nil {
			return total, err
		}
		if r.err != nil {
			return total, r.err
		}
		if r.retired == 0 {
			return total, nil
		}
		total += r.retired
	}
}

// DropHeld removes c's record if it is still origin_unknown and unchanged
// since c was read (same UpdatedAt).
func (s *State) DropHeld(ctx context.Context, c *record.Completion) (bool, error) {
	r := &request{drop: c}
	if err := s.submit(ctx, r); err != nil {
		return false, err
	}
	return r.dropped, nil
}

// applier takes requests one group at a time: whatever is waiting, up to
// MaxInputs inputs, is decided together, appended as one entry and
// folded in one transaction (group commit).
func (s *State) applier() {
	defer s.done.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		var first *request
		select {
		case <-s.stop:
			s.drainRequests()
			return
		case <-tick.C:
			s.advanceMark()
			continue
		case first = <-s.reqs:
		}
		group, n := []*request{first}, first.size()
	more:
		for n < s.cfg.MaxInputs {
			select {
			case r := <-s.reqs:
				group, n = append(group, r), n+r.size()
			default:
				break more
			}
		}
		s.run(group)
		for _, r := range group {
			close(r.done)
		}
	}
}

func (s *State) drainRequests() {
	for {
		select {
		case r := <-s.reqs:
			r.fail(fmt.Errorf("completion: %w", ErrClosed))
			close(r.done)
		default:
			return
		}
	}
}

// run decides group against the state, appends the resulting entry to the
// log and folds it; after another box appended first it folds that entry
// and decides again.
func (s *State) run(group []*request) {
	ctx := group[0].ctx
	s.mu.Lock()
	defer s.mu.Unlock()
	for round := 0; ; round++ {
		changes, err := s.decide(group)
		if err != nil {
			failAll(group, err)
			return
		}
		if len(changes) == 0 {
			return
		}
		err = s.appendAndFold(ctx, changes, s.inputCount(group))
		if err == nil {
			return
		}
		if !errors.Is(err, errConflict) || round >= maxConflictRounds {
			failAll(group, err)
			return
		}
		s.conflicts.Add(1)
		if err := s.catchUpLocked(ctx); err != nil {
			failAll(group, err)
			return
		}
	}
}

func (s *State) inputCount(group []*request) int {
	n := 0
	for _, r := range group {
		n += r.size() - 1
		if r.drop != nil {
			n++
		}
	}
	return n
}

func failAll(group []*request, err error) {
	for _, r := range group {
		r.fail(err)
	}
}

// slot is one event's record while a group is decided.
type slot struct {
	old     *record.Completion // as in the file; nil: absent
	cur     record.Completion
	live    bool // cur is a record (not absent or removed)
	changed bool
	err     error // the stored record cannot be read
}

// decide folds every input of group, in order, into the records as the
// file holds them, and fills in the results. It returns the changes.
func (s *State) decide(group []*request) ([]change, error) {
	tx, err := s.db.Begin(false)
	if err != nil {
		return nil, fmt.Errorf("completion: %w", err)
	}
	defer tx.Rollback()
	d := &decision{s: s, tx: tx, slots: map[string]*slot{}}
	for _, r := range group {
		d.fold(r)
	}
	return d.changes()
}

// decision is the records one group touches, in the order it first
// touched them.
type decision struct {
	s     *State
	tx    *bolt.Tx
	slots map[string]*slot
	order []string
}

// load returns the slot of event id: the record as cached or in the file.
func (d *decision) load(id string) *slot {
	if sl, ok := d.slots[id]; ok {
		return sl
	}
	sl := &slot{cur: record.NewCompletion(id)}
	if c := d.s.cached(id); c != nil {
		sl.old, sl.cur, sl.live = c, cloneRecord(*c), true
	} else {
		c, ok, err := getRecord(d.tx, id)
		switch {
		case err != nil:
			sl.err = fmt.Errorf("%w: %w", record.ErrCorruptRecord, err)
		case ok:
			old := c
			sl.old, sl.cur, sl.live = &old, cloneRecord(c), true
		}
	}
	d.slots[id] = sl
	d.order = append(d.order, id)
	return sl
}

// fold folds r's receipts, origins and drop, and fills in r's results.
func (d *decision) fold(r *request) {
	for i, it := range r.receipts {
		if err := it.Receipt.Validate(); err != nil {
			r.rres[i] = record.BatchResult{Err: err}
			continue
		}
		sl := d.load(it.Receipt.EventID)
		if sl.err != nil {
			r.rres[i] = record.BatchResult{Err: sl.err}
			continue
		}
		out, err := sl.cur.FoldReceipt(it.Receipt, it.ReceivedAt, d.s.cfg.HoldUntilOrigin)
		if err != nil {
			r.rres[i] = record.BatchResult{Err: err}
			continue
		}
		r.rres[i] = record.BatchResult{Outcome: out, OriginSeq: sl.cur.OriginSeq}
		sl.changed, sl.live = true, true
	}
	for i, o := range r.origins {
		if err := o.Validate(); err != nil {
			r.ores[i] = record.OriginResult{Err: err}
			continue
		}
		sl := d.load(o.EventID)
		if sl.err != nil {
			r.ores[i] = record.OriginResult{Err: sl.err}
			continue
		}
		out, hr := sl.cur.FoldOrigin(o, r.now)
		r.ores[i] = record.OriginResult{Outcome: out, Held: hr}
		if out != record.OriginKnown {
			sl.changed, sl.live = true, true
		}
	}
	for _, rt := range r.retire {
		sl := d.load(rt.EventID)
		if sl.err == nil && sl.live && sl.cur.FoldRetirement(rt) {
			sl.changed = true
			r.retired++
		}
	}
	if c := r.drop; c != nil {
		sl := d.load(c.EventID)
		sl.cur.Derive()
		if sl.err == nil && sl.live && sl.cur.Status == record.EventOriginUnknown && sl.cur.UpdatedAt.Equal(c.UpdatedAt) {
			sl.cur, sl.live, sl.changed = record.NewCompletion(c.EventID), false, true
			r.dropped = true
		}
	}
}

// changes are the records the group changed, encoded, in order.
func (d *decision) changes() ([]change, error) {
	var changes []change
	for _, id := range d.order {
		sl := d.slots[id]
		if !sl.changed {
			continue
		}
		ch := change{id: id, old: sl.old}
		if sl.live {
			raw, err := record.EncodeCompletion(&sl.cur)
			if err != nil {
				return nil, fmt.Errorf("completion: encode the record of %q: %w", short(id), err)
			}
			c := sl.cur
			ch.new, ch.raw = &c, raw
		} else if sl.old == nil {
			continue // created and removed within the group
		}
		changes = append(changes, ch)
	}
	return changes, nil
}

// cloneRecord copies c's maps and slices, so that folding into the copy
// leaves c as it was read.
func cloneRecord(c record.Completion) record.Completion {
	c.Processors = maps.Clone(c.Processors)
	if c.Processors == nil {
		c.Processors = map[string]record.ProcessorRecord{}
	}
	c.Held, c.Unexpected = maps.Clone(c.Held), maps.Clone(c.Unexpected)
	c.Expected, c.Reused, c.Missing = slices.Clone(c.Expected), slices.Clone(c.Reused), slices.Clone(c.Missing)
	return c
}

// appendAndFold appends changes to the log (in as many entries as
// MaxEntryBytes needs, each expecting the one before) and folds them in
// one transaction. errConflict: nothing of it was appended.
func (s *State) appendAndFold(ctx context.Context, changes []change, inputs int) error {
	payloads, err := s.encodeEntries(changes)
	if err != nil {
		return err
	}
	last := s.applied.Load()
	for i, p := range payloads {
		seq, err := s.lg.append(ctx, p, last)
		if err != nil {
			if i > 0 && errors.Is(err, errConflict) {
				// Entries of this group are in the log: fold them with
				// everything else, and report the group as failed.
				err = fmt.Errorf("completion: append: another box appended within a group: %w", record.ErrTooManyConflicts)
			}
			return err
		}
		last = seq
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return fold(tx, last, changes, overdueAt(s.cfg.Now(), s.cfg.OverdueAfter))
	}); err != nil {
		// The log holds the entries; the follower folds them again.
		return fmt.Errorf("completion: fold: %w", err)
	}
	s.applied.Store(last)
	s.remember(changes)
	s.entries.Add(uint64(len(payloads)))
	s.inputs.Add(uint64(inputs))
	return nil
}

// encodeEntries splits changes into entries of at most MaxEntryBytes.
// The records are already encoded: an entry is written around them.
func (s *State) encodeEntries(changes []change) ([][]byte, error) {
	var out [][]byte
	var recs, drops [][]byte
	size := 0
	flush := func() {
		if len(recs) == 0 && len(drops) == 0 {
			return
		}
		out = append(out, entryBytes(recs, drops))
		recs, drops, size = nil, nil, 0
	}
	limit := s.cfg.MaxEntryBytes - 256
	for _, ch := range changes {
		var item []byte
		if ch.new == nil {
			b, err := json.Marshal(ch.id)
			if err != nil {
				return nil, fmt.Errorf("completion: encode entry: %w", err)
			}
			item = b
		} else {
			item = ch.raw
		}
		if len(item)+1 > limit {
			return nil, fmt.Errorf("completion: the record of %q is %d bytes, more than an entry holds (%d)", short(ch.id), len(item), s.cfg.MaxEntryBytes)
		}
		if size+len(item)+1 > limit {
			flush()
		}
		if ch.new == nil {
			drops = append(drops, item)
		} else {
			recs = append(recs, item)
		}
		size += len(item) + 1
	}
	flush()
	return out, nil
}

// entryBytes writes an entry of records and drops (each already JSON) as
// json.Marshal(entry) would.
func entryBytes(recs, drops [][]byte) []byte {
	n := 32
	for _, r := range recs {
		n += len(r) + 1
	}
	for _, d := range drops {
		n += len(d) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, entryVersion, 10)
	list := func(name string, items [][]byte) {
		if len(items) == 0 {
			return
		}
		b = append(b, `,"`+name+`":[`...)
		b = append(b, bytes.Join(items, []byte{','})...)
		b = append(b, ']')
	}
	list("records", recs)
	list("drops", drops)
	return append(b, '}')
}

// advanceMark moves the overdue watermark to now when pending entries
// became overdue since the last fold moved it, so that a Summary of an
// idle state counts few entries. It changes no record and no checkpoint.
func (s *State) advanceMark() {
	if !s.Ready() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	mark := overdueAt(s.cfg.Now(), s.cfg.OverdueAfter)
	passed := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		cnt, idx := tx.Bucket(bucketCounts), tx.Bucket(bucketIndex)
		w := getU64(cnt, []byte{kindMark})
		for _, site := range pendingSites(cnt) {
			passed = passed || (mark > w && countBetween(idx, fact{kindPending, site}, w, mark) > 0)
		}
		return nil
	})
	if !passed {
		return
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		cnt, idx := tx.Bucket(bucketCounts), tx.Bucket(bucketIndex)
		deltas := map[fact]int64{}
		if err := moveMark(idx, cnt, getU64(cnt, []byte{kindMark}), mark, deltas); err != nil {
			return err
		}
		return applyDeltas(cnt, deltas)
	})
	if err != nil {
		s.log.Warn("completion: moving the overdue watermark", "err", err)
	}
}
