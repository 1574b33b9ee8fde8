package edge

import (
	"log/slog"
	"testing"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/cleanup"
	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/hub"
	"github.com/leafline/leafline/internal/localsys"
	"github.com/leafline/leafline/l1"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/topology"
)

// The system tests run whole topologies of boxes.
type (
	LocalSystem  = localsys.System[*box.App]
	LocalOptions = localsys.Options
)

// NewLocalSystem lays out a system of boxes; opts, if given, gives each
// edge site's options (a Go sink, test hooks).
func NewLocalSystem(dir string, o LocalOptions, opts ...func(site string) []Option) (*LocalSystem, error) {
	return newLocalSystemWith(dir, o, func(site string) siteOptions {
		var so siteOptions
		for _, f := range opts {
			if f != nil {
				so.edge = append(so.edge, f(site)...)
			}
		}
		return so
	})
}

// siteOptions are what a test gives one site's box: the options of its
// edge or l1 role, and of the box.
type siteOptions struct {
	edge []Option
	l1   []l1.Option
	box  []box.Option
}

// newLocalSystemWith lays out a system of boxes, each with the options
// opts gives its site.
func newLocalSystemWith(dir string, o LocalOptions, opts func(site string) siteOptions) (*LocalSystem, error) {
	return localsys.New(dir, o, func(cfg *topology.Config, log *slog.Logger) (*box.App, error) {
		return newBoxWith(cfg, log, opts(cfg.Site))
	})
}

// newBox is leafline.New, which this package's tests cannot import: the
// box of cfg's site with its role, opts for an edge's.
func newBox(cfg *topology.Config, log *slog.Logger, opts ...Option) (*box.App, error) {
	return newBoxWith(cfg, log, siteOptions{edge: opts})
}

// newBoxWith is newBox with all of a site's options.
func newBoxWith(cfg *topology.Config, log *slog.Logger, so siteOptions) (*box.App, error) {
	var r box.Role = New(so.edge...)
	if s, ok := cfg.Topology.Site(cfg.Site); ok {
		switch s.Role {
		case topology.RoleHub:
			r = hub.New()
		case topology.RoleL1:
			r = l1.New(so.l1...)
		}
	}
	return box.New(cfg, log, r, so.box...)
}

// edgeOf is the edge role of a box (nil for other roles).
func edgeOf(b *box.App) *Role {
	r, _ := b.Role().(*Role)
	return r
}

// completionsOf is the completion service of an l1 box.
func completionsOf(b *box.App) *completion.Service { return b.Role().(*l1.Role).Completions() }

// outboxOf is the outbox of an edge box.
func outboxOf(b *box.App) *outbox.Outbox { return edgeOf(b).ob }

// edge1Options gives edge1 the options o.
func edge1Options(o ...Option) func(site string) []Option {
	return func(site string) []Option {
		if site == "edge1" {
			return o
		}
		return nil
	}
}

// cleanerOf is the cleaner of an l1 box (nil without completion.cleanup).
func cleanerOf(b *box.App) *cleanup.Cleaner { return b.Role().(*l1.Role).Cleaner() }

// metricOf is the value of a box's counter or gauge in the series with labels.
func metricOf(t *testing.T, b *box.App, name string, labels map[string]string) float64 {
	t.Helper()
	v, err := b.Metrics().Value(name, labels)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
