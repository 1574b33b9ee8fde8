package topology

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// LocalUser is the user that clients of a site's own client listener (the
// leafline process, its CLI, local applications) are mapped to, without
// credentials, when the site defines leafnode users. Only a non-leafnode
// connection may use it, so a leafnode that dials without credentials is
// refused. leafline's embedded servers and rendered configurations both
// define it.
const LocalUser = "leafline-local"

// LocalUserConnectionTypes are the connection types LocalUser may use.
var LocalUserConnectionTypes = []string{"STANDARD", "WEBSOCKET", "IN_PROCESS", "MQTT"}

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

// Render returns a nats-server configuration file for the named site, so
// that an operator can run a stock nats-server in place of leafline's
// embedded one, for the hub or L1; leafline edges work against it
// unchanged. It needs 2.15.3 or later (2.14.10 in the 2.14 line): the
// durable sourcing of earlier releases can skip messages (see
// edge.ServerVersionWarning).
//
// It holds the server name, the client listener, JetStream (the site's
// domain, store_dir and sync_interval: always), the feature flags the link
// permissions rely on (ServerFeatureFlags), one leafnode user per
// downstream site restricted to LinkPermissions, the local clients' user,
// and the leafnode listener and remote with their TLS and credentials.
//
// local supplies the box-local settings (client listen address, data_dir,
// certificate files, credential files) when it is the config of that site;
// otherwise (nil, or another site's config) Render uses placeholders that
// match the layout `leafline topology certs` writes: certs/ca.pem,
// certs/<site>.pem, certs/<site>-key.pem, and data/<site>/jetstream.
//
// No secret is ever in the output: certificate keys and .creds files are
// referenced by path, an nkey seed is read from the environment variable
// SeedEnv(site), and a password-authenticated upstream URL from
// UpstreamURLEnv(site). Users authenticated by password carry the
// topology's bcrypt hash. A downstream site that authenticates with a
// .creds file needs an upstream in operator mode, which Render does not
// produce: it writes the permissions that site's user JWT must carry as a
// comment instead.
//
// The streams and consumers are not part of a server configuration;
// leafline creates them through the client listener (edge.Provision).
func Render(t *Topology, site string, local *Config) (string, error) {
	s, ok := t.Site(site)
	if !ok {
		return "", fmt.Errorf("topology: unknown site %q", site)
	}
	if local != nil && local.Site != site {
		local = nil
	}
	return render(t, s, local, nil)
}

// render writes the configuration of site s, or of one node of its
// cluster when node is set (see RenderCluster).
func render(t *Topology, s *Site, local *Config, node *ClusterNode) (string, error) {
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
	w.kv("listen", q(renderListen(clientListen)))
	w.blank()
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
	w.blank()
	w.comment("Domain-, stream- and consumer-scoped JetStream ACK, flow-control and API reply")
	w.comment("subjects: the leafnode permissions below rely on them.")
	w.open("feature_flags")
	flags := ServerFeatureFlags()
	names := make([]string, 0, len(flags))
	for k := range flags {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		w.kv(k, strconv.FormatBool(flags[k]))
	}
	w.close()
	if node != nil {
		renderRoutes(w, local.Cluster, node)
	}
	if err := renderUsers(w, t, s); err != nil {
		return "", err
	}
	if err := renderLeafnodes(w, t, s, local, node); err != nil {
		return "", err
	}
	return w.String(), nil
}

func renderUsers(w *confWriter, t *Topology, s *Site) error {
	type user struct {
		site  *Site
		perms LinkPermissions
	}
	var users []user
	var creds []user
	for _, d := range t.Downstream(s.Name) {
		lp, err := t.LinkPermissions(d.Name)
		if err != nil {
			return err
		}
		switch d.Leafnode.Auth.Method {
		case AuthNkey, AuthPassword:
			users = append(users, user{d, lp})
		case AuthCreds:
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
	w.comment("Local clients connect without credentials as %q, which no leafnode may use;", LocalUser)
	w.comment("each downstream site may use only its own leafnode user, restricted to the subjects")
	w.comment("of its link (publish: what it may send here; subscribe: what it may receive).")
	w.kv("no_auth_user", q(LocalUser))
	w.open("authorization")
	w.openList("users")
	w.line("{user: %s, allowed_connection_types: %s}", q(LocalUser), qlist(LocalUserConnectionTypes))
	for _, u := range users {
		w.comment("site %q (%s) dials this site", u.site.Name, u.site.Role)
		w.openAnon()
		a := u.site.Leafnode.Auth
		if a.Method == AuthNkey {
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

func renderLeafnodes(w *confWriter, t *Topology, s *Site, local *Config, node *ClusterNode) error {
	up, hasUp := t.Site(s.Upstream)
	listen := s.Leafnode.Listen
	if node != nil {
		listen = node.LeafnodeListen
	}
	if listen == "" && !hasUp {
		return nil
	}
	placeholder := TLSFiles{
		CertFile: filepath.Join("certs", s.Name+".pem"),
		KeyFile:  filepath.Join("certs", s.Name+"-key.pem"),
		CAFile:   filepath.Join("certs", "ca.pem"),
	}
	w.blank()
	w.open("leafnodes")
	if listen != "" {
		w.kv("listen", q(listen))
		w.comment("Downstream sites dial exactly the address they were given.")
		w.kv("no_advertise", "true")
		if mode := s.Leafnode.TLS; mode == TLSOn || mode == TLSMutual {
			f := placeholder
			if local != nil {
				f = local.Leafnode.ListenTLS
			}
			w.open("tls")
			w.kv("cert_file", q(f.CertFile))
			w.kv("key_file", q(f.KeyFile))
			if mode == TLSMutual {
				w.kv("ca_file", q(f.CAFile))
				w.kv("verify", "true")
			}
			w.kv("timeout", "5")
			w.close()
		}
	}
	if local != nil {
		w.kv("reconnect", q(local.Leafnode.ReconnectInterval.String()))
	}
	if hasUp {
		raws := []string{s.Leafnode.UpstreamURL}
		if local != nil {
			raws = local.UpstreamURLs(s)
		}
		var us []*url.URL
		for _, raw := range raws {
			u, err := url.Parse(raw)
			if raw == "" || err != nil {
				return fmt.Errorf("topology: site %q has no valid upstream URL", s.Name)
			}
			us = append(us, u)
		}
		if len(us) == 0 {
			return fmt.Errorf("topology: site %q has no valid upstream URL", s.Name)
		}
		u := us[0]
		w.openList("remotes")
		w.openAnon()
		auth := s.Leafnode.Auth
		if auth.Method == AuthPassword {
			w.comment("The upstream URL carries the password: set %s to", UpstreamURLEnv(s.Name))
			withUser := *u
			withUser.User = url.UserPassword(auth.User, "PASSWORD")
			w.comment("%s", withUser.String())
			w.kv("urls", "[$"+UpstreamURLEnv(s.Name)+"]")
		} else {
			var rs []string
			for _, u := range us {
				rs = append(rs, u.Redacted())
			}
			w.kv("urls", qlist(rs))
		}
		w.comment("Never reconnect around the given address to servers discovered through it.")
		w.kv("ignore_discovered_servers", "true")
		switch auth.Method {
		case AuthNkey:
			w.comment("export %s=$(cat <this site's nkey seed file>)", SeedEnv(s.Name))
			w.kv("nkey", "$"+SeedEnv(s.Name))
		case AuthCreds:
			path := filepath.Join("certs", s.Name+".creds")
			if local != nil {
				path = local.Leafnode.UpstreamAuth.CredsFile
			}
			w.kv("credentials", q(path))
		}
		if tlsUp := up.Leafnode.TLS == TLSOn || up.Leafnode.TLS == TLSMutual || tlsScheme(u.Scheme); tlsUp {
			f := TLSFiles{CAFile: placeholder.CAFile}
			if up.Leafnode.TLS == TLSMutual {
				f.CertFile, f.KeyFile = placeholder.CertFile, placeholder.KeyFile
			}
			if local != nil {
				f = local.Leafnode.UpstreamTLS
			}
			w.open("tls")
			if f.CertFile != "" {
				w.kv("cert_file", q(f.CertFile))
				w.kv("key_file", q(f.KeyFile))
			}
			if f.CAFile != "" {
				w.kv("ca_file", q(f.CAFile))
			}
			w.kv("timeout", "5")
			w.close()
		}
		w.close()
		w.closeList()
	}
	w.close()
	return nil
}

// renderListen turns a leafline listen address into nats-server's: port 0
// (pick a free port) is -1 there, where 0 means the default 4222.
func renderListen(hp string) string {
	h, p, err := net.SplitHostPort(hp)
	if err == nil && p == "0" {
		return net.JoinHostPort(h, "-1")
	}
	return hp
}

// q quotes a string for a nats-server configuration file. A quoted string
// is literal there: "$" in it is not a variable reference.
func q(s string) string { return strconv.Quote(s) }

func qlist(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = q(s)
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// confWriter writes an indented nats-server configuration.
type confWriter struct {
	b     strings.Builder
	depth int
}

func (w *confWriter) line(format string, a ...any) {
	w.b.WriteString(strings.Repeat("  ", w.depth))
	fmt.Fprintf(&w.b, format, a...)
	w.b.WriteByte('\n')
}
func (w *confWriter) blank()                          { w.b.WriteByte('\n') }
func (w *confWriter) comment(format string, a ...any) { w.line("# "+format, a...) }
func (w *confWriter) kv(k, v string)                  { w.line("%s: %s", k, v) }
func (w *confWriter) open(k string)                   { w.line("%s {", k); w.depth++ }
func (w *confWriter) openAnon()                       { w.line("{"); w.depth++ }
func (w *confWriter) close()                          { w.depth--; w.line("}") }
func (w *confWriter) openList(k string)               { w.line("%s: [", k); w.depth++ }
func (w *confWriter) closeList()                      { w.depth--; w.line("]") }
func (w *confWriter) String() string                  { return w.b.String() }
