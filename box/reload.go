package box

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
)

// A running box takes a new config, its topology changed (a site added,
// retired, removed or moved, a budget or filter changed), without a
// restart of its process (Reload; `leafline run` on SIGHUP):
//
//   - When what its embedded server runs with is the same (its own site,
//     its upstream's address, its listener and every local setting), the
//     server and every leafnode connection stay up. The box stops its
//     loops (links, trim, role), takes the new config, updates in place
//     who may connect over its leafnode listener (linkAuth: a site added
//     can dial in, a retired or removed one no longer can), creates what
//     the new plan adds (jsplan.Reconcile), deletes the consumers of
//     edges that are no longer its own (jsplan.Prune), and starts its
//     role and loops again.
//   - Otherwise (its own link changed, such as an edge moved to another
//     hub, or a local setting) it stops and starts again inside the
//     process, as after a full disk, on the same data dir.
//
// Nothing is ACKed by the switch itself: each loop stops as on a
// shutdown (work in flight is abandoned unACKed and comes again).
//
// The data dir, the ops listener and the site cannot change: Reload
// refuses such a config, and the box runs on as it was.

// reload is one Reload, handed to the running life.
type reload struct {
	cfg  *topology.Config
	site *topology.Site
	done chan error
}

// errRestart ends a life that must start again on a new config.
var errRestart = errors.New("box: restart on a new config")

// ErrNotRunning is Reload's answer when the box is not running.
var ErrNotRunning = errors.New("box: not running")

// Reload makes the running box take cfg, a new version of its config
// (loaded and validated), as described above, and returns once it runs
// on it. An error says why it did not: the box then runs on as it was,
// unless the error says it stopped.
func (a *App) Reload(ctx context.Context, cfg *topology.Config) error {
	if cfg == nil || cfg.Topology == nil {
		return errors.New("box: reload: the configuration has no topology")
	}
	site, ok := cfg.Topology.Site(cfg.Site)
	switch {
	case cfg.Site != a.cfg.Site || !ok:
		return fmt.Errorf("box: reload: the configuration is for site %q, this box runs %q: start a box for it instead", cfg.Site, a.cfg.Site)
	case site.Role != a.site.Role:
		return fmt.Errorf("box: reload: site %s's role changes from %s to %s: restart the box", site.Name, a.site.Role, site.Role)
	case cfg.DataDir != a.cfg.DataDir:
		return fmt.Errorf("box: reload: data_dir changes from %s to %s: restart the box", a.cfg.DataDir, cfg.DataDir)
	case cfg.Ops.Listen != a.cfg.Ops.Listen:
		return fmt.Errorf("box: reload: ops.listen changes from %s to %s: restart the box", a.cfg.Ops.Listen, cfg.Ops.Listen)
	}
	r := reload{cfg: cfg, site: site, done: make(chan error, 1)}
	select {
	case a.reloads <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sameServer reports whether the embedded server of the site of cfg runs
// with what it runs with under old: a reload then keeps it (see above).
func sameServer(old, cfg *topology.Config) bool {
	a, errA := serverKey(old)
	b, errB := serverKey(cfg)
	return errA == nil && errB == nil && a == b
}

// serverKey is what of cfg the site's embedded server starts with, but
// the downstream sites' credentials, which linkAuth takes in place.
func serverKey(cfg *topology.Config) (string, error) {
	t := cfg.Topology
	site, _ := t.Site(cfg.Site)
	up, _ := t.Site(site.Upstream)
	b, err := json.Marshal(struct {
		Local  *topology.Config
		Site   *topology.Site
		Up     *topology.Site
		Listen string // the listener's compression
	}{cfg, site, up, t.ListenerCompression(site)})
	return string(b), err
}

// takeReload stops the loops (cancel ends their context; ended gives
// their errgroup's end), then applies r: in place when the server stays
// (softReload), else it returns errRestart for Run to start the box again
// on r's config.
func (a *App) takeReload(ctx context.Context, r reload, cancel context.CancelFunc, ended <-chan error) error {
	cancel()
	if err := <-ended; err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		r.done <- fmt.Errorf("box: reload: the box stopped: %w", err)
		return err
	}
	if !sameServer(a.cfg, r.cfg) {
		a.log.Info("reload: the box's own server changes: starting again in this process on the new configuration")
		a.next = &r
		return errRestart
	}
	err := a.softReload(ctx, r)
	r.done <- err
	if err != nil {
		return fmt.Errorf("box: reload: %w", err)
	}
	a.log.Info("reload: running on the new configuration; the server and its links stayed up")
	return nil
}

// softReload applies r to the running box: the role stops, the box takes
// r's config and who may connect, reconciles, prunes and starts its role
// again. An error after the role stopped leaves the box stopped.
func (a *App) softReload(ctx context.Context, r reload) error {
	a.role.Stop()
	a.cfg, a.site = r.cfg, r.site
	if err := a.updateLinkAuth(); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	var p jsplan.Plan
	if a.cfg.Cluster.Enabled() {
		p = a.clusterPlan()
	} else {
		p = jsplan.SitePlan(a.cfg, a.site)
		held, err := holdSwitchedSources(rctx, a.js, a.cfg, a.site, &p)
		if err != nil {
			return err
		}
		a.held = held
	}
	if err := jsplan.Reconcile(rctx, a.js, p); err != nil {
		return err
	}
	if err := a.prune(rctx); err != nil {
		return err
	}
	var err error
	if a.plans, err = a.trimPlans(rctx); err != nil {
		return err
	}
	return a.role.Start(rctx)
}

// updateLinkAuth gives the running server's link authentication the link
// users of the current config: sites added can connect from now on,
// retired and removed ones no longer can (their connections that are up
// keep going until they drop; a retired site's consumers are gone).
func (a *App) updateLinkAuth() error {
	la := a.auth
	if la == nil {
		return nil
	}
	opts, err := ServerOptions(a.cfg, a.site)
	if err != nil {
		return err
	}
	if nla, ok := opts.CustomClientAuthentication.(*linkAuth); ok {
		la.take(nla)
	}
	return nil
}
