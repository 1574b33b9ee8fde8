package completion

import (
	"sync"
	"time"
)

// siteClock remembers, per name, the latest time noted.
type siteClock struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func (c *siteClock) note(name string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]time.Time{}
	}
	if at.After(c.m[name]) {
		c.m[name] = at
	}
}

func (c *siteClock) snapshot() map[string]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]time.Time, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// LastReceipts returns, per processor, when this service instance last
// recorded one of its receipts (applied, duplicate, conflict or held). It
// starts empty at each start of the process: it is what this instance has
// seen, not a durable record.
func (s *Service) LastReceipts() map[string]time.Time { return s.lastReceipt.snapshot() }
