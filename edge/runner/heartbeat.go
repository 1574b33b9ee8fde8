package runner

import (
	"sync"
	"time"
)

// heartbeat sends InProgress for the batch's messages every r.progress
// until the returned stop is called (idempotent).
func (r *Runner) heartbeat(items []item) (stop func()) {
	if r.progress <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.progress)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for i := range items {
					_ = items[i].msg.InProgress()
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}
