// Package systest runs whole leafline systems in one process: L1, a hub
// and edges as real boxes (package leafline) on loopback, each with its
// own data dir, embedded server and ops endpoint, linked through fault
// proxies that a test can cut (System); and the cases of the sink
// conformance suite that need such a system (RunSink). The demo and the
// bench run on it too.
package systest

import (
	"log/slog"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/edge"
	"github.com/leafline/leafline/internal/localsys"
	"github.com/leafline/leafline/topology"
)

// System is a local system of boxes (see localsys.System).
type System = localsys.System[*box.App]

// Options shape a System (see localsys.Options).
type Options = localsys.Options

// New lays out a System whose boxes leafline.New makes, each edge with
// opts(site) (nil: no options). It starts nothing: see System.StartAll.
func New(dir string, o Options, opts func(site string) []edge.Option) (*System, error) {
	return NewWith(dir, o, func(site string) leafline.Options {
		if opts == nil {
			return leafline.Options{}
		}
		return leafline.Options{Edge: opts(site)}
	})
}

// NewWith is New with every option of each site's box: opts(site).
func NewWith(dir string, o Options, opts func(site string) leafline.Options) (*System, error) {
	return localsys.New(dir, o, func(cfg *topology.Config, log *slog.Logger) (*box.App, error) {
		return leafline.NewWith(cfg, log, opts(cfg.Site))
	})
}
