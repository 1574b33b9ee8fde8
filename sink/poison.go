package sink

import (
	"fmt"
	"slices"
	"sync"
)

const (
	// DefaultPoisonAfter is the PoisonAfter of a config that leaves it
	// zero; MinPoisonAfter and MaxPoisonAfter bound it (the same as
	// topology's).
	DefaultPoisonAfter = 3
	MinPoisonAfter     = 3
	MaxPoisonAfter     = 100

	// crashMaxTracked bounds the events a crashTracker holds counts for;
	// past it, arbitrary counts are forgotten (an event then needs more
	// crashes to be found poison, never fewer).
	crashMaxTracked = 1 << 16
)

// poisonAfter returns a config's PoisonAfter with its default, or an error
// naming path when it is out of bounds.
func poisonAfter(path string, v int) (int, error) {
	if v == 0 {
		return DefaultPoisonAfter, nil
	}
	if v < MinPoisonAfter || v > MaxPoisonAfter {
		return 0, fmt.Errorf("%s: %d is outside %d..%d", path, v, MinPoisonAfter, MaxPoisonAfter)
	}
	return v, nil
}

// crashTracker finds poison events: it counts, for each event_id, the
// crashes of the target (an exec worker that exited, an http connection
// reset) the event was in flight at since the target last answered it,
// and orders each round of sends so that a crash points at one event.
//
// A crash counts against the events in flight only when the target
// answered some event between the previous crash and this one (it is
// working, and something in flight made it crash), or answers one after
// it before it crashes again; a target that crashes whatever it is given
// (it is down, or broken) gives no count to any event. A crash that
// comes when nothing was answered since the previous one is held,
// unconfirmed, until the next answer (it then counts) or the next crash
// (it is dropped).
//
// A crash that stays unconfirmed because nothing else is sent (a poison
// event redelivered alone) would never count: so the sink keeps the last
// event the target answered ok (keep), and sends it once more, as a probe,
// before the events of a Write while a crash is unconfirmed (probe). The
// target absorbs the repeat by event_id; its answer confirms the crash,
// and a crash on the probe drops it.
//
// Each round sends (see plan): first, alone, the events one crash short of
// poison whose last crash counted (an exec worker restarted after a crash
// answers its first event unless that event is what crashes it); then the
// events never in flight at a crash, together; then the other suspects,
// alone, those with most crashes first and, among equals, the last sent
// first (a sequential worker dies on the first event it did not answer,
// and never read the later ones).
type crashTracker struct {
	after   int    // crashes in a row that make an event poison
	onCrash func() // counts every crash; may be nil

	mu          sync.Mutex
	events      map[string]*crashCount
	unconfirmed []string // the events of the unconfirmed crash, if any
	answered    bool     // some event was answered since the last crash (or lapse)
	probeID     string   // the last event answered ok, and its request
	probeReq    []byte
}

// crashCount is what a crashTracker holds for one suspect event.
type crashCount struct {
	crashes int
	// unconfirmed: it was in flight at the last crash, which came with no
	// answer since the one before; it counts once the target answers.
	unconfirmed bool
}

func newCrashTracker(after int, onCrash func()) *crashTracker {
	return &crashTracker{after: after, onCrash: onCrash, events: make(map[string]*crashCount)}
}

// answer records that the target answered ids (whatever the answer): they
// did not crash it, and the target is working, which confirms the last
// crash.
func (c *crashTracker) answer(ids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.confirmLocked()
	for _, id := range ids {
		delete(c.events, id)
	}
	c.answered = true
}

// crashed records a crash of the target with ids in flight.
func (c *crashTracker) crashed(ids []string) {
	if c.onCrash != nil {
		c.onCrash()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answered {
		for _, id := range ids {
			c.countLocked(id).crashes++
		}
	} else {
		c.dropUnconfirmedLocked()
		for _, id := range ids {
			c.countLocked(id).unconfirmed = true
		}
		c.unconfirmed = slices.Clone(ids)
	}
	c.answered = false
}

// lapse records an end of the target that is no crash (the sink killed
// the worker): an unconfirmed crash is dropped, and the next crash needs
// an answer after this.
func (c *crashTracker) lapse() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropUnconfirmedLocked()
	c.answered = false
}

// keep records that the target answered id ok, with req the request
// that carried it alone (see probe).
func (c *crashTracker) keep(id string, req []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probeID, c.probeReq = id, req
}

// probe returns the event to send first, alone, to confirm an unconfirmed
// crash: ok is false when no crash waits for confirmation, no event was
// kept, or the kept one is among ids (it would be sent anyway).
func (c *crashTracker) probe(ids []string) (id string, req []byte, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.unconfirmed) == 0 || c.probeID == "" || slices.Contains(ids, c.probeID) {
		return "", nil, false
	}
	return c.probeID, c.probeReq, true
}

// poisoned reports whether id is a poison event. If it is, its count is
// forgotten: the verdict is given once, and a later delivery of the event
// (a DLQ publish that failed, a redrive once the target is fixed) is sent
// to the target again.
func (c *crashTracker) poisoned(id string) (bool, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.events[id]
	if e == nil || e.crashes < c.after {
		return false, 0
	}
	delete(c.events, id)
	return true, e.crashes
}

// plan splits the events ids[k] for k in left into a round of sends (see
// crashTracker): the ones to send alone first, the ones to send together,
// and the ones to send alone last, in order. Poison events are among the
// alone ones: the caller asks poisoned before it sends one.
func (c *crashTracker) plan(ids []string, left []int) (first, group, last []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	crashes := make(map[int]int)
	for _, k := range left {
		switch e := c.events[ids[k]]; {
		case e == nil:
			group = append(group, k)
		case e.crashes >= c.after-1 && !e.unconfirmed:
			first = append(first, k)
		default:
			last = append(last, k)
			crashes[k] = e.crashes
		}
	}
	slices.Reverse(last)
	slices.SortStableFunc(last, func(a, b int) int { return crashes[b] - crashes[a] })
	return first, group, last
}

func (c *crashTracker) countLocked(id string) *crashCount {
	e := c.events[id]
	if e == nil {
		if len(c.events) >= crashMaxTracked {
			for k := range c.events {
				delete(c.events, k)
				if len(c.events) < crashMaxTracked/2 {
					break
				}
			}
		}
		e = &crashCount{}
		c.events[id] = e
	}
	return e
}

func (c *crashTracker) confirmLocked() {
	for _, id := range c.unconfirmed {
		if e := c.events[id]; e != nil && e.unconfirmed {
			e.unconfirmed = false
			e.crashes++
		}
	}
	c.unconfirmed = nil
}

func (c *crashTracker) dropUnconfirmedLocked() {
	for _, id := range c.unconfirmed {
		if e := c.events[id]; e != nil && e.unconfirmed {
			e.unconfirmed = false
			if e.crashes == 0 {
				delete(c.events, id)
			}
		}
	}
	c.unconfirmed = nil
}
