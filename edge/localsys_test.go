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

// NewLocalSystem lays out a system of Apps; prepare, if given, is called
// with each App after New and before Run (to give it test hooks).
func NewLocalSystem(dir string, o LocalOptions, prepare ...func(site string, a *App)) (*LocalSystem, error) {
	return localsys.New(dir, o, func(cfg *topology.Config, log *slog.Logger) (*App, error) {
		a, err := New(cfg, log)
		if err == nil {
			for _, p := range prepare {
				if p != nil {
					p(cfg.Site, a)
				}
			}
		}
		return a, err
	})
}
