package systest

import (
	"testing"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/cleanup"
	"github.com/leafline/leafline/edge"
	"github.com/leafline/leafline/l1"
)

// newLocal lays out a System; opts, if given, gives each edge site's
// options (a Go sink, test hooks).
func newLocal(dir string, o Options, opts ...func(site string) []edge.Option) (*System, error) {
	return New(dir, o, func(site string) []edge.Option {
		var eo []edge.Option
		for _, f := range opts {
			if f != nil {
				eo = append(eo, f(site)...)
			}
		}
		return eo
	})
}

// edge1Options gives edge1 the options o.
func edge1Options(o ...edge.Option) func(site string) []edge.Option {
	return func(site string) []edge.Option {
		if site == "edge1" {
			return o
		}
		return nil
	}
}

// directStatus is an edge box's direct-mode consumer status, and false
// for a box that has none.
func directStatus(b *box.App) (box.DirectStatus, bool) {
	if e, ok := b.Role().(*edge.Role); ok {
		return e.DirectStatus()
	}
	return box.DirectStatus{}, false
}

// cleanerOf is the cleaner of an l1 box (nil without completion.cleanup).
func cleanerOf(b *box.App) *cleanup.Cleaner { return b.Role().(*l1.Role).Cleaner() }

// metricOf is the value of a box's counter or gauge in the first series
// whose labels include labels.
func metricOf(t *testing.T, b *box.App, name string, labels map[string]string) float64 {
	t.Helper()
	v, err := b.Metrics().Value(name, labels)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
