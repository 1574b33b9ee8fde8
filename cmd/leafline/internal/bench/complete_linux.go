//go:build linux

package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/receipt"
)

// completeWatch follows n events, id(0) to id(n-1), until each is
// complete at L1 for every one of sites: a processed receipt of each
// recorded. It reads the records from the first event not yet seen
// complete and stops at the next one that is not, so a poll costs a read
// per event completed since the last poll, plus one.
type completeWatch struct {
	env   *benchEnv
	id    func(int) string
	n     int
	sites []string
	next  atomic.Int64
}

func (env *benchEnv) watchComplete(id func(int) string, n int, sites ...string) *completeWatch {
	return &completeWatch{env: env, id: id, n: n, sites: sites}
}

// done reports whether every event is complete.
func (w *completeWatch) done() bool {
	for i := int(w.next.Load()); i < w.n; i++ {
		if !w.env.complete(w.id(i), w.sites) {
			return false
		}
		w.next.Store(int64(i + 1))
	}
	return true
}

// count is how many events, from the first, are complete in a row.
func (w *completeWatch) count() int64 { return w.next.Load() }

// complete reports whether L1 has recorded a processed receipt of event
// id from every one of sites.
func (env *benchEnv) complete(id string, sites []string) bool {
	st := leafline.Completions(env.ls.App("l1")).State()
	if st == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(env.b.ctx, 5*time.Second)
	defer cancel()
	c, err := st.Get(ctx, id)
	if err != nil {
		return false
	}
	for _, s := range sites {
		if pr, ok := c.Processors[s]; !ok || pr.Status != receipt.StatusProcessed {
			return false
		}
	}
	return true
}

// incomplete counts the events id(0) to id(n-1) that are not complete at
// L1 for every one of sites.
func (env *benchEnv) incomplete(id func(int) string, n int, sites ...string) int {
	k := 0
	for i := range n {
		if !env.complete(id(i), sites) {
			k++
		}
	}
	return k
}

// publishUntil publishes n events at L1 on events.<prefix>.*, ids id, as
// `leafline publish --batch` does (benchPublishBatched), while it waits
// at most within for done. It returns when done held, or false once
// within has passed, after the publish has ended.
func (r *run) publishUntil(env *benchEnv, n int, payload []byte, prefix string, id func(int) string, within time.Duration, done func() bool) (at time.Time, ok bool) {
	var pubErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		pubErr = benchPublishBatched(r.ctx, env.js["l1"], n, payload, func(i int) string { return fmt.Sprintf("events.%s.%d", prefix, i%8) }, id, nil)
	})
	ok = env.waitFor(within, done)
	at = time.Now()
	wg.Wait()
	if pubErr != nil {
		r.Fatal(pubErr)
	}
	return at, ok
}

// restartBox stops site's box, runs change (if set) on its data dir while
// it is stopped, and starts it again; it returns when the box is ready.
func (r *run) restartBox(env *benchEnv, site string, change func(dir string)) time.Time {
	if err := env.ls.Stop(site); err != nil {
		r.Fatalf("bench: stopping %s: %v", site, err)
	}
	if change != nil {
		change(env.ls.Configs[site].DataDir)
	}
	return r.startBox(env, site)
}

// startBox starts site's box and returns when it is ready.
func (r *run) startBox(env *benchEnv, site string) time.Time {
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
	defer cancel()
	if _, err := env.ls.Start(ctx, site); err != nil {
		r.Fatalf("bench: starting %s: %v", site, err)
	}
	return time.Now()
}

// wipeDir deletes a stopped box's data dir: the box replaced by one with
// a blank disk under its name.
func (r *run) wipeDir(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		r.Fatal(err)
	}
}

// copyDir copies a stopped box's data dir to dst, which must not exist.
func (r *run) copyDir(dir, dst string) {
	if err := os.CopyFS(dst, os.DirFS(dir)); err != nil {
		r.Fatalf("bench: copying %s: %v", dir, err)
	}
}

// restoreDir replaces a stopped box's data dir with the copy src: the box
// rolled back to an older copy of its disk.
func (r *run) restoreDir(dir, src string) {
	r.wipeDir(dir)
	r.copyDir(src, dir)
}

// benchMetricSum is the sum of every series of box's counter or gauge
// name, whatever their labels.
func benchMetricSum(box *box.App, name string) float64 {
	mfs, err := box.Metrics().Registry().Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			} else {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
