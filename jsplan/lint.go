package jsplan

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/linkperm"
)

// ErrWrongDomain means a server's JetStream domain is not its site's.
var ErrWrongDomain = errors.New("the server's JetStream domain is not the site's")

// checkDomain reports a server behind js whose JetStream domain is not the
// site's: every link addresses a site's JetStream as $JS.<domain>.API, so
// the sources to and from it would never be set up, and events would stay
// pending with no error anywhere else.
func checkDomain(ctx context.Context, js jetstream.JetStream, site *topology.Site) error {
	info, err := js.AccountInfo(ctx)
	if err != nil {
		return fmt.Errorf("account info: %w", err)
	}
	if info.Domain != site.Domain {
		have := fmt.Sprintf("%q", info.Domain)
		if info.Domain == "" {
			have = "not set"
		}
		return fmt.Errorf("%w: it is %s, site %q has %q, and the links address it as %s; set jetstream { domain: %q } (`leafline topology render` writes it)",
			ErrWrongDomain, have, site.Name, site.Domain, topology.APIPrefix(site.Domain), site.Domain)
	}
	return nil
}

// ServerConfigWarnings lints a stock nats-server configuration file for
// the config's site (one `leafline topology render` wrote, and an operator
// may since have changed): a sync interval other than always (a power cut
// loses acknowledged events and receipts), a JetStream domain other than
// the site's, a downstream site without its own leafnode user, and a
// user's permissions wider than its link needs. The file is read with
// nats-server's own parser, so the files it references must be there, as
// where the server runs. An environment variable it references that is
// not set here is linted as if it were set (see readConfig): unset names
// those variables, so that the caller can say so.
func ServerConfigWarnings(cfg *topology.Config, path string) (ws []topology.Warning, unset []string, err error) {
	t := cfg.Topology
	site, ok := t.Site(cfg.Site)
	if !ok {
		return nil, nil, fmt.Errorf("jsplan: site %q is not in the topology", cfg.Site)
	}
	opts, unset, err := readConfig(path)
	if err != nil {
		return nil, nil, err
	}
	var out []topology.Warning
	if !opts.JetStream {
		out = append(out, topology.Warning{Path: path + ": jetstream", Msg: "JetStream is off: the site's streams cannot exist"})
	}
	if !opts.SyncAlways {
		out = append(out, topology.Warning{Path: path + ": jetstream.sync_interval", Msg: fmt.Sprintf(
			"is %s, not always: a PubAck then only means the page cache, and a power cut can lose acknowledged events and receipts; set sync_interval: always",
			syncInterval(opts))})
	}
	if opts.JetStreamDomain != site.Domain {
		out = append(out, topology.Warning{Path: path + ": jetstream.domain", Msg: fmt.Sprintf(
			"is %q, site %q has %q: the links address its JetStream as %s, so sourcing never starts and events stay pending",
			opts.JetStreamDomain, site.Name, site.Domain, topology.APIPrefix(site.Domain))})
	}
	for _, d := range t.Downstream(site.Name) {
		name := d.LeafUser()
		if name == "" {
			continue // no credentials: Topology.Lint reports it
		}
		perms, found := leafUserPermissions(opts, name)
		upath := fmt.Sprintf("%s: authorization user %s (site %s)", path, name, d.Name)
		if !found {
			out = append(out, topology.Warning{Path: upath, Msg: fmt.Sprintf(
				"missing: site %q cannot authenticate, or shares another user", d.Name)})
			continue
		}
		var pub, sub []string
		if perms != nil && perms.Publish != nil {
			pub = perms.Publish.Allow
		}
		if perms != nil && perms.Subscribe != nil {
			sub = perms.Subscribe.Allow
		}
		out = append(out, linkperm.Lint(t, d.Name, upath, pub, sub)...)
	}
	return out, unset, nil
}

func syncInterval(o *server.Options) string {
	if o.SyncInterval == 0 {
		return "the default (2m)"
	}
	return o.SyncInterval.String()
}

// leafUserPermissions finds the user (nkey or name) a leafnode may
// authenticate as, and its permissions (nil: none, which is full access).
func leafUserPermissions(o *server.Options, name string) (*server.Permissions, bool) {
	leafOK := func(types map[string]struct{}) bool {
		_, ok := types[jwt.ConnectionTypeLeafnode]
		return len(types) == 0 || ok
	}
	for _, u := range o.Nkeys {
		if u.Nkey == name && leafOK(u.AllowedConnectionTypes) {
			return u.Permissions, true
		}
	}
	for _, u := range o.Users {
		if u.Username == name && leafOK(u.AllowedConnectionTypes) {
			return u.Permissions, true
		}
	}
	return nil, false
}

// bindingWarnings reports the sources of a live stream that lack the
// subject binding the plan gives them (ReceiptBinding): the hub's
// receipts stream then stores whatever site an edge's receipts name, and
// L1 can only refuse them by their signature.
func bindingWarnings(want, have jetstream.StreamConfig) []topology.Warning {
	var out []topology.Warning
	for _, w := range want.Sources {
		if len(w.SubjectTransforms) == 0 {
			continue
		}
		bound := false
		for _, h := range have.Sources {
			if h.Name == w.Name && h.Consumer != nil && w.Consumer != nil && h.Consumer.Name == w.Consumer.Name &&
				len(h.SubjectTransforms) == len(w.SubjectTransforms) && h.SubjectTransforms[0] == w.SubjectTransforms[0] {
				bound = true
			}
		}
		if !bound {
			out = append(out, topology.Warning{Path: "stream " + want.Name, Msg: fmt.Sprintf(
				"its source %s (deliver subject %s) is not bound to that link's site: an edge could store receipts in another site's name here (leafline provision binds it: %s → %s)",
				w.Name, w.Consumer.DeliverSubject, w.SubjectTransforms[0].Source, w.SubjectTransforms[0].Destination)})
		}
	}
	return out
}
