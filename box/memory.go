package box

import (
	"fmt"
	"runtime/metrics"

	"github.com/leafline/leafline/internal/memlimit"
)

// The box's memory against its Go memory limit (Config.MemoryLimitBytes,
// chosen per role by the command that runs it). Under the limit the
// garbage collector runs as often as it must to stay inside it, which
// also returns the embedded server's pooled buffers and expired caches.
// A box whose live data needs more than the limit allows goes over it
// rather than fail: it stays correct and keeps every message, but its
// collector runs almost all the time. It says so: a WARN in its log, the
// reason in /readyz, leafline_memory_pressure at 1.

// memoryTight is the share of the limit past which the live heap leaves
// the collector too little room: it then runs nearly all the time.
// memoryOver is the share of the limit past which the runtime has not
// stayed inside it (it may overshoot a little between two collections).
const (
	memoryTight = 0.9
	memoryOver  = 1.05
)

// memorySamples are the runtime's figures the box reads.
var memorySamples = []metrics.Sample{
	{Name: "/gc/heap/live:bytes"},
	{Name: "/memory/classes/total:bytes"},
	{Name: "/memory/classes/heap/released:bytes"},
}

// memoryNow reads the live heap (as of the last GC), the memory the
// runtime holds from the OS, and the limit (0: none).
func memoryNow() (live, held, limit int64) {
	s := make([]metrics.Sample, len(memorySamples))
	copy(s, memorySamples)
	metrics.Read(s)
	val := func(i int) int64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(s[i].Value.Uint64())
	}
	return val(0), val(1) - val(2), memlimit.Current()
}

// memoryVerdict is why a box with live heap bytes live and held bytes
// held from the OS is short of memory under limit, "" when it is not.
func memoryVerdict(live, held, limit int64) string {
	if limit <= 0 {
		return ""
	}
	if float64(live) <= memoryTight*float64(limit) && float64(held) <= memoryOver*float64(limit) {
		return ""
	}
	return fmt.Sprintf("memory: the live heap is %s and the process holds %s, against a memory limit of %s: "+
		"the garbage collector runs nearly all the time and the box is slower (it loses nothing); "+
		"raise memory_limit_bytes or the machine's limit", byteSize(live), byteSize(held), byteSize(limit))
}

// checkMemory updates the box's memory gauges and its memory verdict,
// and logs when the verdict changes.
func (a *App) checkMemory() {
	live, held, limit := memoryNow()
	a.metrics.memoryLive.Set(float64(live))
	v := memoryVerdict(live, held, limit)
	pressure := 0.0
	if v != "" {
		pressure = 1
	}
	a.metrics.memoryPressure.Set(pressure)
	was, _ := a.memoryShort.Swap(v).(string)
	switch {
	case v != "" && was == "":
		a.log.Warn(v)
	case v == "" && was != "":
		a.log.Info("memory: back inside the limit", "live_bytes", live, "limit_bytes", limit)
	}
}
