//go:build linux

package bench

import (
	"fmt"
	"runtime"
	"strings"
)

// report prints the table, the runner's batch breakdown, the fill rates of
// f and e, the ratios and bounds, and the final line; it returns the
// line's figures.
func (r *run) report() []Figure {
	out := r.out
	fmt.Fprintf(out, "\nbench: loadavg at end %s; %d CPUs\n", loadavg(), runtime.NumCPU())
	benchPrintRows(out, r.rows)
	if len(r.breakdowns) > 0 {
		fmt.Fprintln(out, "\n  runner batch breakdown (mean per batch; see benchTrace):")
		for _, l := range r.breakdowns {
			fmt.Fprintln(out, l)
		}
	}
	for _, fe := range r.fe {
		if fe.tl != nil {
			fe.tl.report(out, "f (drain) ["+fe.transport+"]")
		}
		if fe.tl2 != nil {
			fe.tl2.report(out, "e (end to end) ["+fe.transport+"]")
		}
	}
	figs := r.ratios()
	figs = append(figs, r.l1Figures()...)
	figs = append(figs, r.transportFigures()...)
	figs = append(figs, r.restoreFigures()...)
	figs = append(figs, r.fleetFigures()...)
	figs = append(figs, r.wireFigures()...)
	figs = append(figs, r.capFigures()...)
	figs = append(figs, r.expiryFigures()...)
	figs = append(figs, r.priorityFigures()...)
	figs = append(figs, r.parkFigures()...)
	figs = append(figs, r.replaceFigures()...)
	figs = append(figs, r.sitesFigures()...)
	figs = append(figs, r.memoryFigures()...)
	figs = append(figs, r.originFigures()...)
	if r.rss != nil {
		fmt.Fprintf(out, "edge process peak RSS draining %d events: %.0f MiB\n", r.rss.n, float64(r.rss.rssKB)/1024)
		figs = append(figs, Figure{"edge_rss_mib", float64(r.rss.rssKB) / 1024})
	}
	fmt.Fprintln(out, Line(figs))
	return figs
}

// best is the highest events/s of the rows whose key has prefix, and
// that row.
func (r *run) best(match func(key string) bool) (float64, benchRow) {
	var v float64
	var row benchRow
	for _, x := range r.rows {
		if match(x.key) && x.eps() > v {
			v, row = x.eps(), x
		}
	}
	return v, row
}

// ratios prints and returns the figures of z, a-d.
func (r *run) ratios() []Figure {
	out := r.out
	var figs []Figure
	if fs, _ := r.best(func(k string) bool { return k == "z1" }); fs > 0 {
		figs = append(figs, Figure{"fsync_eps", fs})
	}
	a, aRow := r.best(func(k string) bool { return strings.HasPrefix(k, "a") })
	ceil, bRow := r.best(func(k string) bool { return k == "b" || k == "b2" })
	c, _ := r.best(func(k string) bool { return k == "c" })
	d := r.dStore.eps()
	if d == 0 || c == 0 || a == 0 || ceil == 0 {
		if d > 0 {
			figs = append(figs, Figure{"leafline_eps", d})
		}
		return figs
	}
	fmt.Fprintf(out, "\nratios: d/c=%.1f d/min(a,b)=%.2f (a=%.0f b=%.0f) d_file/c=%.1f\n", d/c, d/min(a, ceil), a, ceil, r.dFile.eps()/c)
	if perEv := r.dStore.cpu.Seconds() / float64(r.dStore.n); perEv > 0 && r.dStore.dur > 0 {
		// The process (every server and the runner) shares GOMAXPROCS
		// cores: d can go no faster than its CPU per event allows.
		cores := runtime.GOMAXPROCS(0)
		fmt.Fprintf(out, "bounds: d kept %.2f of %d cores busy at %.3f CPU-s per 1k events, so its CPU caps it at %.0f/s here (%.2f x min(a,b)); a and b alone cost %.3f + %.3f CPU-s per 1k\n",
			r.dStore.cpu.Seconds()/r.dStore.dur.Seconds(), cores, perEv*1000, float64(cores)/perEv, float64(cores)/perEv/min(a, ceil),
			aRow.cpu.Seconds()/float64(max(aRow.n, 1))*1000, bRow.cpu.Seconds()/float64(max(bRow.n, 1))*1000)
	}
	return append(figs, Figure{"leafline_eps", d}, Figure{"naive_eps", c}, Figure{"ceiling_eps", min(a, ceil)},
		Figure{"d_over_c", d / c}, Figure{"d_over_ceiling", d / min(a, ceil)})
}

// transportFigures prints the disk bound of e and returns the figures of
// f and e per transport: plain names with one transport, suffixed with
// _<transport> with several.
func (r *run) transportFigures() []Figure {
	var figs []Figure
	var disk float64 // the most flushes a second the disk made in z
	for _, x := range r.rows {
		if strings.HasPrefix(x.key, "z") && x.flushes > 0 {
			disk = max(disk, float64(x.flushes)/x.dur.Seconds())
		}
	}
	for _, fe := range r.fe {
		suffix := ""
		if len(r.fe) > 1 {
			suffix = "_" + fe.transport
		}
		if fe.e.n > 0 {
			figs = append(figs, Figure{"e2e_eps" + suffix, fe.e.eps()})
			if fe.e.flushes >= 0 {
				perEv := float64(fe.e.flushes) / float64(fe.e.n)
				figs = append(figs, Figure{"flushes_per_event" + suffix, perEv})
				ceiling := "z not run"
				if disk > 0 {
					ceiling = fmt.Sprintf("z: this disk flushed at most %.0f/s", disk)
				}
				// Every hop stores and fsyncs each message on its own:
				// what the disk can flush per second bounds e.
				fmt.Fprintf(r.out, "bounds [%s]: e made %.2f disk flushes per event at %.0f flushes/s (%s)\n",
					fe.transport, perEv, float64(fe.e.flushes)/fe.e.dur.Seconds(), ceiling)
			}
		}
		if fe.f.n > 0 {
			figs = append(figs, Figure{"drain_eps" + suffix, fe.f.eps()})
		}
	}
	return figs
}
