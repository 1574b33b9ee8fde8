// Package leafline makes the box of a site: New reads the site's role from
// the topology and gives package box the role's package (edge, hub or l1).
// Programs that run a box (the leafline command, its demo and bench) start
// here; see package box for what every role shares.
package leafline

import (
	"fmt"
	"log/slog"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/edge"
	"github.com/leafline/leafline/hub"
	"github.com/leafline/leafline/l1"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/topology"
)

// Options are a box's options besides its config: its role's (Edge for
// an edge site, L1 for an l1 site; the others are not used) and the box's.
type Options struct {
	Edge []edge.Option
	L1   []l1.Option
	Box  []box.Option
}

// Role is the role of cfg's site, with its options from o.
func Role(cfg *topology.Config, o Options) (box.Role, error) {
	if cfg == nil || cfg.Topology == nil {
		return nil, fmt.Errorf("leafline: configuration has no topology")
	}
	site, ok := cfg.Topology.Site(cfg.Site)
	if !ok {
		return nil, fmt.Errorf("leafline: site %q is not in the topology", cfg.Site)
	}
	switch site.Role {
	case topology.RoleEdge:
		return edge.New(o.Edge...), nil
	case topology.RoleHub:
		return hub.New(), nil
	case topology.RoleL1:
		return l1.New(o.L1...), nil
	}
	return nil, fmt.Errorf("leafline: site %q has role %q, not edge, hub or l1", site.Name, site.Role)
}

// New makes the box of cfg's site with its role; edgeOpts apply to an
// edge's. It starts nothing: call Run.
func New(cfg *topology.Config, log *slog.Logger, edgeOpts ...edge.Option) (*box.App, error) {
	return NewWith(cfg, log, Options{Edge: edgeOpts})
}

// NewWith is New with every option of the box and its role.
func NewWith(cfg *topology.Config, log *slog.Logger, o Options) (*box.App, error) {
	r, err := Role(cfg, o)
	if err != nil {
		return nil, err
	}
	return box.New(cfg, log, r, o.Box...)
}

// Completions is the completion service of an l1 box while it runs, nil
// otherwise (another role, or stopped).
func Completions(b *box.App) *completion.Service {
	if r, ok := b.Role().(*l1.Role); ok {
		return r.Completions()
	}
	return nil
}

// Outbox is the outbox of an edge box while it runs, nil otherwise.
func Outbox(b *box.App) *outbox.Outbox {
	if r, ok := b.Role().(*edge.Role); ok {
		return r.Outbox()
	}
	return nil
}
