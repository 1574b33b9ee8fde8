//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// scrape reads a box's /metrics and returns every leafline_ sample, summed
// over label sets, by metric name.
func scrape(opsAddr string) (map[string]float64, error) {
	code, body, err := httpGet("http://" + opsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("/metrics: HTTP %d", code)
	}
	return parseMetrics(body), nil
}

func parseMetrics(body []byte) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "leafline_") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := f[0]
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		out[name] += v
	}
	return out
}

// metricLines returns the raw sample lines whose name contains any of the
// words (for the disk fault's report).
func metricLines(opsAddr string, words ...string) []string {
	_, body, err := httpGet("http://" + opsAddr + "/metrics")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		lower := strings.ToLower(line)
		for _, w := range words {
			if strings.Contains(lower, w) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

// counterAcc accumulates counters of one box across its restarts: a new
// process starts its counters at zero, so the last value scraped from the
// previous process is banked when the process changes. Counts between the
// last scrape and an unplanned death are lost, so the sums are lower
// bounds.
type counterAcc struct {
	b     *box
	names []string

	mu     sync.Mutex
	proc   *proc
	last   map[string]float64
	banked map[string]float64
}

func newCounterAcc(b *box, names ...string) *counterAcc {
	return &counterAcc{b: b, names: names, last: map[string]float64{}, banked: map[string]float64{}}
}

// scrapeNow reads the current process's counters.
func (a *counterAcc) scrapeNow() {
	p := a.b.running()
	if p == nil || !p.ready.Load() {
		return
	}
	m, err := scrape(a.b.opsAddr)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if p != a.proc {
		for _, n := range a.names {
			a.banked[n] += a.last[n]
		}
		a.proc = p
		a.last = map[string]float64{}
	}
	for _, n := range a.names {
		a.last[n] = max(a.last[n], m[n])
	}
}

func (a *counterAcc) total(name string) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.banked[name] + a.last[name]
}

func (a *counterAcc) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		a.scrapeNow()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
