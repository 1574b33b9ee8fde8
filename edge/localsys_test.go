package edge

import (
	"log/slog"

	"github.com/leafline/leafline/internal/localsys"
	"github.com/leafline/leafline/topology"
)

// The system tests run whole topologies of this package's boxes.
type (
	LocalSystem  = localsys.System[*App]
	LocalOptions = localsys.Options
)

// NewLocalSystem lays out a system of Apps; opts, if given, gives each
// site's options (a Go sink, test hooks).
func NewLocalSystem(dir string, o LocalOptions, opts ...func(site string) []Option) (*LocalSystem, error) {
	return localsys.New(dir, o, func(cfg *topology.Config, log *slog.Logger) (*App, error) {
		var bo []Option
		for _, f := range opts {
			if f != nil {
				bo = append(bo, f(cfg.Site)...)
			}
		}
		return New(cfg, log, bo...)
	})
}

// edge1Options gives edge1 the options o.
func edge1Options(o ...Option) func(site string) []Option {
	return func(site string) []Option {
		if site == "edge1" {
			return o
		}
		return nil
	}
}
