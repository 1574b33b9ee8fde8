package sink

import (
	"context"
	"sync"
)

// batchIDs maps the positions of a Write's events to its distinct
// event_ids: an event_id that appears more than once in a batch reaches
// the target once, with the event at its first position, and every
// position gets that one result.
type batchIDs struct {
	ids   []string // the distinct event_ids, in the order they first appear
	first []int    // first[j]: the position of ids[j]'s first event
	at    []int    // at[i]: the index in ids of position i's event_id
}

// distinctIDs indexes evs by event_id.
func distinctIDs(evs []Event) batchIDs {
	b := batchIDs{at: make([]int, len(evs))}
	index := make(map[string]int, len(evs))
	for i, ev := range evs {
		j, dup := index[ev.ID]
		if !dup {
			j = len(b.ids)
			index[ev.ID] = j
			b.ids = append(b.ids, ev.ID)
			b.first = append(b.first, i)
		}
		b.at[i] = j
	}
	return b
}

// spread returns one result per position, res[j] being ids[j]'s result.
func (b batchIDs) spread(res []error) []error {
	errs := make([]error, len(b.at))
	for i, j := range b.at {
		errs[i] = res[j]
	}
	return errs
}

// writeGate lets a sink's Close wait for the Writes in flight, and refuse
// those that come after it.
//
// A Write calls enter, and leave when it returns if enter admitted it (or
// admit, which also ties its context to Close). Close calls shut, stops
// what the sink runs, then wait; or closeAndWait when there is nothing to
// stop in between.
type writeGate struct {
	closed   context.Context // done once shut was called
	shutDown context.CancelFunc
	mu       sync.Mutex // orders inflight.Add before shut's Wait
	inflight sync.WaitGroup
}

func newWriteGate() *writeGate {
	closed, cancel := context.WithCancel(context.Background())
	return &writeGate{closed: closed, shutDown: cancel}
}

// enter admits a Write, and reports false once the gate is shut.
func (g *writeGate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed.Err() != nil {
		return false
	}
	g.inflight.Add(1)
	return true
}

// leave ends a Write that enter admitted.
func (g *writeGate) leave() { g.inflight.Done() }

// admit is enter for a Write whose work Close cancels: it also returns a
// context derived from ctx that is cancelled when the gate shuts, and the
// function the Write calls when it returns (leave included).
func (g *writeGate) admit(ctx context.Context) (context.Context, func(), bool) {
	if !g.enter() {
		return ctx, func() {}, false
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(g.closed, cancel)
	return ctx, func() {
		stop()
		cancel()
		g.leave()
	}, true
}

// isShut reports whether shut was called.
func (g *writeGate) isShut() bool { return g.closed.Err() != nil }

// done is closed once shut was called.
func (g *writeGate) done() <-chan struct{} { return g.closed.Done() }

// shut refuses later Writes and cancels the contexts bind returned. It is
// idempotent.
func (g *writeGate) shut() {
	g.mu.Lock()
	g.shutDown()
	g.mu.Unlock()
}

// wait returns once every admitted Write has left. Call it after shut.
func (g *writeGate) wait() { g.inflight.Wait() }

// closeAndWait is shut, then wait.
func (g *writeGate) closeAndWait() {
	g.shut()
	g.wait()
}

// fill sets every result of errs to err, and returns errs.
func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}
