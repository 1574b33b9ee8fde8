package render

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/linkperm"
)

// SeedEnv is the environment variable from which a rendered configuration
// reads the site's nkey seed for its upstream: LEAFLINE_<SITE>_NKEY_SEED,
// the site name upper-cased with '-' as '_'. nats-server's configuration
// cannot read a seed from a file, and a rendered file never holds one.
func SeedEnv(site string) string {
	return "LEAFLINE_" + envToken(site) + "_NKEY_SEED"
}

// UpstreamURLEnv is the environment variable from which a rendered
// configuration reads the upstream URL of a site that authenticates with a
// password (nats-server takes a remote's password only inside its URL):
// LEAFLINE_<SITE>_UPSTREAM_URL.
func UpstreamURLEnv(site string) string {
	return "LEAFLINE_" + envToken(site) + "_UPSTREAM_URL"
}

func envToken(s string) string {
	return strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
}

// ServerConfig returns a nats-server configuration file for the named
// site of t, so that an operator can run a stock nats-server in place of
// leafline's embedded one, for the hub or L1; leafline edges work against
// it unchanged. It needs 2.15.3 or later (2.14.10 in the 2.14 line): the
// durable sourcing of earlier releases can skip messages (see
// jsplan.ServerVersionWarning).
//
// It holds the server name, the client listener, JetStream (the site's
// domain, store_dir and sync_interval: always), the feature flags the link
// permissions rely on (linkperm.ServerFeatureFlags), one leafnode user per
// downstream site restricted to its linkperm.Permissions, the local
// clients' user (topology.LocalUser), and the leafnode listener and remote
// with their TLS and credentials.
//
// local supplies the box-local settings (client listen address, data_dir,
// certificate files, credential files) when it is the config of that site;
// otherwise (nil, or another site's config) ServerConfig uses placeholders
// that match the layout `leafline topology certs` writes: certs/ca.pem,
// certs/<site>.pem, certs/<site>-key.pem, and data/<site>/jetstream.
//
// No secret is ever in the output: certificate keys and .creds files are
// referenced by path, an nkey seed is read from the environment variable
// SeedEnv(site), and a password-authenticated upstream URL from
// UpstreamURLEnv(site). Users authenticated by password carry the
// topology's bcrypt hash. A downstream site that authenticates with a
// .creds file needs an upstream in operator mode, which ServerConfig does
// not produce: it writes the permissions that site's user JWT must carry
// as a comment instead.
//
// The streams and consumers are not part of a server configuration;
// leafline creates them through the client listener (jsplan.Provision).
func ServerConfig(t *topology.Topology, site string, local *topology.Config) (string, error) {
	s, ok := t.Site(site)
	if !ok {
		return "", fmt.Errorf("topology: unknown site %q", site)
	}
	if local != nil && local.Site != site {
		local = nil
	}
	return server(t, s, local, nil)
}

// server writes the configuration of site s, or of one node of its
// cluster when node is set (see ClusterConfigs).
func server(t *topology.Topology, s *topology.Site, local *topology.Config, node *topology.ClusterNode) (string, error) {
	w := &confWriter{}
	w.comment("nats-server configuration for leafline site %q (role %s, JetStream domain %q),", s.Name, s.Role, s.Domain)
	w.comment("rendered by `leafline topology render`. It holds no secret: keys and credentials")
	w.comment("are referenced by path or read from the environment.")
	if local == nil {
		w.comment("Box-local settings are placeholders (no config of this site was given).")
	}
	w.blank()
	serverName, clientListen := s.Name, "127.0.0.1:4222"
	storeDir := filepath.Join("data", s.Name, "jetstream")
	if local != nil {
		clientListen = local.NATS.Listen
		storeDir = filepath.Join(local.DataDir, "jetstream")
	}
	if node != nil {
		serverName, clientListen = node.Name, node.Listen
		storeDir = filepath.Join(node.DataDir, "jetstream")
	}
	w.kv("server_name", q(serverName))
	w.kv("listen", q(natsListen(clientListen)))
	w.blank()
	writeJetStream(w, s, local, storeDir)
	w.blank()
	writeFeatureFlags(w)
	if node != nil {
		writeRoutes(w, local.Cluster, node)
	}
	if err := writeUsers(w, t, s); err != nil {
		return "", err
	}
	if err := writeLeafnodes(w, t, s, local, node); err != nil {
		return "", err
	}
	return w.String(), nil
}

// writeJetStream writes the jetstream block: the site's domain, the store
// and its sync interval (always, unless the box config says otherwise).
func writeJetStream(w *confWriter, s *topology.Site, local *topology.Config, storeDir string) {
	w.open("jetstream")
	w.kv("domain", q(s.Domain))
	w.kv("store_dir", q(storeDir))
	sync := "always"
	if local != nil && local.JetStream.SyncInterval != "" && local.JetStream.SyncInterval != "always" {
		sync = q(local.JetStream.SyncInterval)
	}
	w.kv("sync_interval", sync)
	if local != nil && local.JetStream.MaxStoreBytes > 0 {
		w.kv("max_file_store", strconv.FormatInt(local.JetStream.MaxStoreBytes, 10))
	}
	w.close()
}

// writeFeatureFlags writes linkperm.ServerFeatureFlags, sorted by name.
func writeFeatureFlags(w *confWriter) {
	w.comment("Domain-, stream- and consumer-scoped JetStream ACK, flow-control and API reply")
	w.comment("subjects: the leafnode permissions below rely on them.")
	w.open("feature_flags")
	flags := linkperm.ServerFeatureFlags()
	names := make([]string, 0, len(flags))
	for k := range flags {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		w.kv(k, strconv.FormatBool(flags[k]))
	}
	w.close()
}

// writeUsers writes one leafnode user per downstream site that
// authenticates with an nkey or a password, with its link's permissions,
// beside the local clients' user; for a site that authenticates with a
// .creds file it writes the permissions its user JWT must carry as a
// comment.
func writeUsers(w *confWriter, t *topology.Topology, s *topology.Site) error {
	type user struct {
		site  *topology.Site
		perms linkperm.Permissions
	}
	var users []user
	var creds []user
	for _, d := range t.Downstream(s.Name) {
		lp, err := linkperm.Of(t, d.Name)
		if err != nil {
			return err
		}
		switch d.Leafnode.Auth.Method {
		case topology.AuthNkey, topology.AuthPassword:
			users = append(users, user{d, lp})
		case topology.AuthCreds:
			creds = append(creds, user{d, lp})
		}
	}
	for _, c := range creds {
		w.blank()
		w.comment("Site %q authenticates with a .creds file: run this server in operator mode and", c.site.Name)
		w.comment("issue its user JWT with exactly these permissions (nsc add user --allow-pub/--allow-sub):")
		w.comment("  publish:   %s", strings.Join(c.perms.Publish, " "))
		w.comment("  subscribe: %s", strings.Join(c.perms.Subscribe, " "))
	}
	if len(users) == 0 {
		return nil
	}
	w.blank()
	w.comment("Local clients connect without credentials as %q, which no leafnode may use;", topology.LocalUser)
	w.comment("each downstream site may use only its own leafnode user, restricted to the subjects")
	w.comment("of its link (publish: what it may send here; subscribe: what it may receive).")
	w.kv("no_auth_user", q(topology.LocalUser))
	w.open("authorization")
	w.openList("users")
	w.line("{user: %s, allowed_connection_types: %s}", q(topology.LocalUser), qlist(topology.LocalUserConnectionTypes))
	for _, u := range users {
		w.comment("site %q (%s) dials this site", u.site.Name, u.site.Role)
		w.openAnon()
		a := u.site.Leafnode.Auth
		if a.Method == topology.AuthNkey {
			w.kv("nkey", q(a.Nkey))
		} else {
			w.kv("user", q(a.User))
			w.kv("password", q(a.PasswordBcrypt))
		}
		w.kv("allowed_connection_types", qlist([]string{"LEAFNODE"}))
		w.open("permissions")
		w.kv("publish", "{allow: "+qlist(u.perms.Publish)+"}")
		w.kv("subscribe", "{allow: "+qlist(u.perms.Subscribe)+"}")
		w.close()
		w.close()
	}
	w.closeList()
	w.close()
	return nil
}

// natsListen turns a leafline listen address into nats-server's: port 0
// (pick a free port) is -1 there, where 0 means the default 4222.
func natsListen(hp string) string {
	h, p, err := net.SplitHostPort(hp)
	if err == nil && p == "0" {
		return net.JoinHostPort(h, "-1")
	}
	return hp
}

// upstreamURLs parses the URLs site s dials its upstream at: the
// topology's, or those of the box config local when it is given
// (topology.Config.UpstreamURLs).
func upstreamURLs(s *topology.Site, local *topology.Config) ([]*url.URL, error) {
	raws := []string{s.Leafnode.UpstreamURL}
	if local != nil {
		raws = local.UpstreamURLs(s)
	}
	var us []*url.URL
	for _, raw := range raws {
		u, err := url.Parse(raw)
		if raw == "" || err != nil {
			return nil, fmt.Errorf("topology: site %q has no valid upstream URL", s.Name)
		}
		us = append(us, u)
	}
	if len(us) == 0 {
		return nil, fmt.Errorf("topology: site %q has no valid upstream URL", s.Name)
	}
	return us, nil
}
