package box

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/leafline/leafline/topology"
)

// The figures of each role's streams, and the advice when no value of
// max_stream_bytes fits.
func TestStorageFit_Explain(t *testing.T) {
	for _, c := range []struct {
		site  string
		limit int64
		wants []string
	}{
		{"hub", 100 << 20, []string{"reserve 2.0 GiB up front (HA and RH: jetstream.max_stream_bytes = 1 GiB each; KV_leafline_releases: 1 MiB, fixed)",
			"lower jetstream.max_stream_bytes to at most 51380224 (49 MiB)"}},
		{"edge1", 90 << 20, []string{"reserve 2 GiB up front (L2A and RE: jetstream.max_stream_bytes = 1 GiB each)",
			"at most 47185920 (45 MiB)"}},
		// L1's quarantine stream has a fixed limit: it is left out of the
		// value for the others, and when it alone does not fit only disk
		// space helps.
		{"l1", (1 << 30) + 40<<20, []string{"(L1A and R1: jetstream.max_stream_bytes = 1 GiB each; RQ: 1 GiB, fixed)",
			"reserve 3 GiB", "at most 20971520 (20 MiB)"}},
		{"l1", 100 << 20, []string{"give the data dir a filesystem with at least 4 GiB free"}},
	} {
		cfg, err := topology.LoadConfig(filepath.Join("..", "configs", c.site+".json"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.DeadLetter.Enabled = false
		site, _ := cfg.Topology.Site(c.site)
		f := storageFit{streams: storageReserves(cfg, site), dir: "/data", free: uint64(c.limit / 3 * 4), limit: c.limit}
		got := f.explain()
		for _, w := range c.wants {
			if !strings.Contains(got, w) {
				t.Errorf("%s, limit %d: does not say %q:\n%s", c.site, c.limit, w, got)
			}
		}
	}
}
