package topology

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/leafline/leafline/topology/internal/syntax"
)

const defaultExpectedOutage = time.Hour

// Leafnode listener TLS policies (SiteLeafnode.TLS).
const (
	// TLSOff is plain TCP.
	TLSOff = "off"
	// TLSOn is TLS with a server certificate; the dialling site verifies it.
	TLSOn = "on"
	// TLSMutual is TLS in which the dialling site also presents a
	// certificate, verified against the listener's CA.
	TLSMutual = "mutual"
)

// Leafnode authentication methods (LeafAuth.Method).
const (
	// AuthNone: the site dials without credentials. Its upstream then
	// accepts any leafnode with full access to the account.
	AuthNone = "none"
	// AuthNkey: the site signs the server's nonce with an nkey seed (box
	// config leafnode.upstream_auth.nkey_seed_file); the topology holds the
	// public key.
	AuthNkey = "nkey"
	// AuthPassword: the site sends a user name and password (box config
	// password_file or password_env); the topology holds a bcrypt hash.
	AuthPassword = "password"
	// AuthCreds: the site presents a .creds file (user JWT and seed) to an
	// upstream that runs in operator mode, which only a stock nats-server
	// does: a leafline box cannot be the upstream of such a site. The
	// user's permissions are then the JWT's; `leafline topology render`
	// prints the ones the topology needs.
	AuthCreds = "creds"
)

// LeafAuth is the public half of how a site authenticates to its upstream.
// The upstream builds a leafnode user from it, restricted to exactly the
// subjects the link needs (see package linkperm).
type LeafAuth struct {
	// Method is "none" (zero value, which the lint reports), "nkey",
	// "password" or "creds".
	Method string `json:"method,omitempty"`
	// Nkey is the site's public user nkey ("U…"). Required for "nkey",
	// refused otherwise.
	Nkey string `json:"nkey,omitempty"`
	// User is the user name for "password". Zero value means the site name.
	User string `json:"user,omitempty"`
	// PasswordBcrypt is the bcrypt hash of the site's password, required
	// for "password". A plain password is refused: the topology is shared
	// by every box and printed by the tools.
	PasswordBcrypt string `json:"password_bcrypt,omitempty"`
}

// TLSFiles names a box's certificate files. Relative paths are relative to
// the process's working directory (like data_dir).
type TLSFiles struct {
	// CertFile is a PEM certificate (chain): the listener's server
	// certificate, or the box's client certificate for a "mutual" upstream.
	CertFile string `json:"cert_file,omitempty"`
	// KeyFile is CertFile's PEM private key; set exactly when CertFile is.
	KeyFile string `json:"key_file,omitempty"`
	// CAFile is a PEM bundle: on the listener, the CA that signs client
	// certificates ("mutual"); toward the upstream, the CA that signs the
	// upstream's certificate (zero value: the system roots).
	CAFile string `json:"ca_file,omitempty"`
	// ServerName is the name the upstream's certificate must carry (upstream
	// only). Zero value means the host of the upstream URL.
	ServerName string `json:"server_name,omitempty"`
}

// IsZero reports whether no field is set.
func (f TLSFiles) IsZero() bool { return f == TLSFiles{} }

// UpstreamAuth is the secret half of a site's leafnode credentials, read
// when the box starts. Secrets live only in files or the environment, so a
// config can be printed as it is.
type UpstreamAuth struct {
	// NkeySeedFile holds the site's nkey seed ("SU…") for method "nkey".
	NkeySeedFile string `json:"nkey_seed_file,omitempty"`
	// PasswordFile holds the password for method "password" (surrounding
	// whitespace is ignored). Set this or PasswordEnv.
	PasswordFile string `json:"password_file,omitempty"`
	// PasswordEnv names the environment variable that holds the password
	// for method "password".
	PasswordEnv string `json:"password_env,omitempty"`
	// CredsFile is the .creds file for method "creds".
	CredsFile string `json:"creds_file,omitempty"`
}

// IsZero reports whether no field is set.
func (a UpstreamAuth) IsZero() bool { return a == UpstreamAuth{} }

func (l *SiteLeafnode) setDefaults(s *Site) {
	switch s.Role {
	case RoleL1, RoleHub:
		setString(&l.TLS, TLSOff)
	}
	if s.Role != RoleL1 {
		setString(&l.Auth.Method, AuthNone)
	}
	if l.Auth.Method == AuthPassword {
		setString(&l.Auth.User, s.Name)
	}
}

// LeafUser is the name that identifies a site's leafnode connection at its
// upstream: the user name for "password", the public nkey for "nkey".
func (s *Site) LeafUser() string {
	switch s.Leafnode.Auth.Method {
	case AuthPassword:
		return s.Leafnode.Auth.User
	case AuthNkey:
		return s.Leafnode.Auth.Nkey
	}
	return ""
}

var bcryptHash = regexp.MustCompile(`^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$`)

// validateLinkSecurity checks sites[i].leafnode.tls and .auth.
func (t *Topology) validateLinkSecurity(p *problems, i int) {
	s := &t.Sites[i]
	ln := fieldPath(elemPath("sites", i), "leafnode")
	tlsPath := fieldPath(ln, "tls")
	if p.oneOf(tlsPath, s.Leafnode.TLS, "", TLSOff, TLSOn, TLSMutual) &&
		s.Role == RoleEdge && s.Leafnode.TLS != "" && s.Leafnode.TLS != TLSOff {
		p.add(tlsPath, "an edge site accepts no leafnode connections; only l1 and hub sites listen")
	}
	a := s.Leafnode.Auth
	ap := fieldPath(ln, "auth")
	if s.Role == RoleL1 {
		if a != (LeafAuth{}) && a.Method != AuthNone {
			p.add(ap, "an l1 site dials no upstream")
		}
		return
	}
	if !p.oneOf(fieldPath(ap, "method"), a.Method, "", AuthNone, AuthNkey, AuthPassword, AuthCreds) {
		return
	}
	only := func(field, value, method string) {
		if value != "" && a.Method != method {
			p.add(fieldPath(ap, field), "only method %q uses %s", method, field)
		}
	}
	only("nkey", a.Nkey, AuthNkey)
	only("user", a.User, AuthPassword)
	only("password_bcrypt", a.PasswordBcrypt, AuthPassword)
	switch a.Method {
	case AuthNkey:
		switch {
		case a.Nkey == "":
			p.add(fieldPath(ap, "nkey"), `required: the site's public user nkey ("U…")`)
		case !nkeys.IsValidPublicUserKey(a.Nkey):
			if strings.HasPrefix(a.Nkey, "S") {
				p.add(fieldPath(ap, "nkey"), "this is a seed, which is secret: put the public key (\"U…\") here and the seed in the box's leafnode.upstream_auth.nkey_seed_file")
			} else {
				p.add(fieldPath(ap, "nkey"), "not a public user nkey (\"U…\", 56 characters)")
			}
		}
	case AuthPassword:
		if a.User != "" {
			p.name(fieldPath(ap, "user"), a.User, maxSiteName)
		}
		switch {
		case a.PasswordBcrypt == "":
			p.add(fieldPath(ap, "password_bcrypt"), "required: the bcrypt hash of the site's password")
		case !bcryptHash.MatchString(a.PasswordBcrypt):
			// Never echo the value: it may be a plain password.
			p.add(fieldPath(ap, "password_bcrypt"), "not a bcrypt hash ($2a$, $2b$ or $2y$); the topology is shared and printed, so it never holds a plain password")
		}
	}
	up, ok := t.Site(s.Upstream)
	if !ok || s.Leafnode.UpstreamURL == "" || t.derivedFromBadListen(s) {
		return
	}
	if u, err := url.Parse(s.Leafnode.UpstreamURL); err == nil && TLSScheme(u.Scheme) && up.Leafnode.TLS == TLSOff {
		p.add(fieldPath(ln, "upstream_url"), "scheme %q needs TLS, but site %q listens without it (its leafnode.tls is %q)", u.Scheme, up.Name, TLSOff)
	}
}

// TLSScheme reports whether a leafnode URL with this scheme dials with TLS
// whatever the upstream's leafnode.tls says: "tls" and "wss" do.
func TLSScheme(scheme string) bool { return scheme == "tls" || scheme == "wss" }

// validateLinkCredentials checks, per upstream, that every dialling site
// has its own identity and that authenticated and unauthenticated sites do
// not share an upstream: the upstream would let any leafnode without
// credentials in with full access, which makes the others' credentials moot.
func (t *Topology) validateLinkCredentials(p *problems) {
	nkeysSeen := map[string]int{}
	for i := range t.Sites {
		s := &t.Sites[i]
		if s.Leafnode.Auth.Method == AuthNkey && s.Leafnode.Auth.Nkey != "" {
			if j, ok := nkeysSeen[s.Leafnode.Auth.Nkey]; ok {
				p.add(sitePath(i, "leafnode", "auth", "nkey"), "the same nkey as sites[%d]; every site needs its own key", j)
			} else {
				nkeysSeen[s.Leafnode.Auth.Nkey] = i
			}
		}
	}
	for _, up := range t.Sites {
		users := map[string]int{}
		var open, closed []int
		for i := range t.Sites {
			s := &t.Sites[i]
			if s.Upstream != up.Name || s.Name == up.Name {
				continue
			}
			switch s.Leafnode.Auth.Method {
			case AuthNone, "":
				open = append(open, i)
			default:
				closed = append(closed, i)
			}
			if s.Leafnode.Auth.Method == AuthPassword && s.Leafnode.Auth.User != "" {
				if j, ok := users[s.Leafnode.Auth.User]; ok {
					p.add(sitePath(i, "leafnode", "auth", "user"), "user %q also authenticates sites[%d] at %q; every site needs its own user", s.Leafnode.Auth.User, j, up.Name)
				} else {
					users[s.Leafnode.Auth.User] = i
				}
			}
		}
		if len(open) > 0 && len(closed) > 0 {
			for _, i := range open {
				p.add(sitePath(i, "leafnode", "auth", "method"), "%q: site %q also accepts authenticated sites (%s), and would let any leafnode without credentials in with full access; authenticate every site that dials it",
					AuthNone, up.Name, t.Sites[closed[0]].Name)
			}
		}
	}
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validateLeafnodeSecurity checks what can be checked without the topology.
func (c *Config) validateLeafnodeSecurity(p *problems) {
	l := c.Leafnode
	checkFiles := func(path string, f TLSFiles, upstream bool) {
		for _, fp := range []struct{ key, v string }{
			{"cert_file", f.CertFile}, {"key_file", f.KeyFile}, {"ca_file", f.CAFile},
		} {
			if fp.v != "" && strings.TrimSpace(fp.v) != fp.v {
				p.add(fieldPath(path, fp.key), "leading or trailing whitespace in a file path")
			}
		}
		switch {
		case f.CertFile != "" && f.KeyFile == "":
			p.add(fieldPath(path, "key_file"), "required with cert_file")
		case f.CertFile == "" && f.KeyFile != "":
			p.add(fieldPath(path, "cert_file"), "required with key_file")
		}
		if f.ServerName != "" {
			if !upstream {
				p.add(fieldPath(path, "server_name"), "only upstream_tls has a server name")
			} else if err := syntax.Host(f.ServerName); err != nil {
				p.add(fieldPath(path, "server_name"), "%v", err)
			}
		}
	}
	checkFiles("leafnode.listen_tls", l.ListenTLS, false)
	checkFiles("leafnode.upstream_tls", l.UpstreamTLS, true)
	a := l.UpstreamAuth
	var set []string
	for _, f := range []struct{ key, v string }{
		{"nkey_seed_file", a.NkeySeedFile}, {"password_file", a.PasswordFile},
		{"password_env", a.PasswordEnv}, {"creds_file", a.CredsFile},
	} {
		if f.v != "" {
			set = append(set, f.key)
		}
	}
	if len(set) > 1 {
		p.add("leafnode.upstream_auth", "set one of nkey_seed_file, password_file, password_env, creds_file; got %s", strings.Join(set, " and "))
	}
	if a.PasswordEnv != "" && !envName.MatchString(a.PasswordEnv) {
		p.add("leafnode.upstream_auth.password_env", "%q is not an environment variable name", a.PasswordEnv)
	}
}

// validateSecurityAgainst checks the box's TLS files and credentials
// against what its site and its upstream declare in the topology.
func (c *Config) validateSecurityAgainst(p *problems, t *Topology, s *Site) {
	l := c.Leafnode
	listens := s.Leafnode.Listen != ""
	mode := s.Leafnode.TLS
	switch {
	case !listens || mode == TLSOff || mode == "":
		if !l.ListenTLS.IsZero() {
			why := fmt.Sprintf("site %q listens without TLS (its leafnode.tls is %q in the topology)", s.Name, TLSOff)
			if !listens {
				why = fmt.Sprintf("site %q has no leafnode listener", s.Name)
			}
			p.add("leafnode.listen_tls", "%s", why)
		}
	default:
		if l.ListenTLS.CertFile == "" {
			p.add("leafnode.listen_tls.cert_file", "required: site %q listens with TLS %q", s.Name, mode)
		}
		if mode == TLSMutual && l.ListenTLS.CAFile == "" {
			p.add("leafnode.listen_tls.ca_file", "required: site %q verifies dialling sites' certificates (TLS %q)", s.Name, mode)
		}
		if mode == TLSOn && l.ListenTLS.CAFile != "" {
			p.add("leafnode.listen_tls.ca_file", "site %q does not verify client certificates (TLS %q); set its leafnode.tls to %q to use a CA", s.Name, mode, TLSMutual)
		}
	}
	up, hasUp := t.Site(s.Upstream)
	if !hasUp {
		if !l.UpstreamTLS.IsZero() {
			p.add("leafnode.upstream_tls", "site %q has no upstream", s.Name)
		}
		if !l.UpstreamAuth.IsZero() {
			p.add("leafnode.upstream_auth", "site %q has no upstream", s.Name)
		}
		return
	}
	// A box-local upstream URL may reach the upstream through a proxy that
	// terminates TLS: its scheme alone then says that the box dials with TLS.
	overrideTLS := false
	if u, err := url.Parse(l.UpstreamURL); l.UpstreamURL != "" && err == nil {
		overrideTLS = TLSScheme(u.Scheme)
	}
	switch {
	case up.Leafnode.TLS == TLSMutual && l.UpstreamTLS.CertFile == "":
		p.add("leafnode.upstream_tls.cert_file", "required: upstream %q requires a client certificate (TLS %q)", up.Name, TLSMutual)
	case (up.Leafnode.TLS == TLSOff || up.Leafnode.TLS == "") && !overrideTLS && !l.UpstreamTLS.IsZero():
		p.add("leafnode.upstream_tls", "upstream %q listens without TLS (its leafnode.tls is %q in the topology) and leafnode.upstream_url is not a tls:// or wss:// URL", up.Name, TLSOff)
	}
	a := l.UpstreamAuth
	method := s.Leafnode.Auth.Method
	want := map[string]string{AuthNkey: "nkey_seed_file", AuthCreds: "creds_file", AuthPassword: "password_file or password_env"}
	have := map[string]string{}
	if a.NkeySeedFile != "" {
		have["nkey_seed_file"] = AuthNkey
	}
	if a.CredsFile != "" {
		have["creds_file"] = AuthCreds
	}
	if a.PasswordFile != "" {
		have["password_file"] = AuthPassword
	}
	if a.PasswordEnv != "" {
		have["password_env"] = AuthPassword
	}
	for key, m := range have {
		if m != method {
			p.add("leafnode.upstream_auth."+key, "site %q authenticates with method %q in the topology, not %q", s.Name, method, m)
		}
	}
	satisfied := false
	for _, m := range have {
		satisfied = satisfied || m == method
	}
	if w, ok := want[method]; ok && !satisfied {
		p.add("leafnode.upstream_auth", "required: %s (site %q authenticates with method %q in the topology)", w, s.Name, method)
	}
}

// CheckFiles reports every TLS and credential file the box names that
// cannot be read, and a password environment variable that is unset, as a
// *ValidationError (nil when all are readable). LoadConfig does not do this:
// a config is checked where it runs (`leafline check`), and the box reads
// the files again when it starts.
func (c *Config) CheckFiles() error {
	var p problems
	l := c.Leafnode
	for _, f := range []struct{ path, name string }{
		{"leafnode.listen_tls.cert_file", l.ListenTLS.CertFile},
		{"leafnode.listen_tls.key_file", l.ListenTLS.KeyFile},
		{"leafnode.listen_tls.ca_file", l.ListenTLS.CAFile},
		{"leafnode.upstream_tls.cert_file", l.UpstreamTLS.CertFile},
		{"leafnode.upstream_tls.key_file", l.UpstreamTLS.KeyFile},
		{"leafnode.upstream_tls.ca_file", l.UpstreamTLS.CAFile},
		{"leafnode.upstream_auth.nkey_seed_file", l.UpstreamAuth.NkeySeedFile},
		{"leafnode.upstream_auth.password_file", l.UpstreamAuth.PasswordFile},
		{"leafnode.upstream_auth.creds_file", l.UpstreamAuth.CredsFile},
		{"nats.auth.password_file", c.NATS.Auth.PasswordFile},
	} {
		if f.name == "" {
			continue
		}
		fh, err := os.Open(f.name)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			p.add(f.path, "cannot read %s: %v", f.name, err)
			continue
		}
		fh.Close()
	}
	for _, f := range []struct{ path, env string }{
		{"leafnode.upstream_auth.password_env", l.UpstreamAuth.PasswordEnv},
		{"nats.auth.password_env", c.NATS.Auth.PasswordEnv},
	} {
		if v, ok := os.LookupEnv(f.env); f.env != "" && (!ok || strings.TrimSpace(v) == "") {
			p.add(f.path, "environment variable %s is unset or empty", f.env)
		}
	}
	c.checkSinkFiles(&p)
	return p.err(c.Source)
}

// RedactURL returns s with any password in its user information replaced
// by "xxxxx", for logs and printed configs. A string that is not a URL is
// returned as "<invalid URL>": it might hold a secret in a form url.Parse
// does not recognise.
func RedactURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return "<invalid URL>"
	}
	return u.Redacted()
}

// sitePath is the path of a (nested) field of sites[i].
func sitePath(i int, keys ...string) string {
	p := elemPath("sites", i)
	for _, k := range keys {
		p = fieldPath(p, k)
	}
	return p
}

// LinkBeatSubject is the subject on which a hub tells L1, every second,
// which of its downstream sites' leafnode links are up. It carries no
// event or receipt; L1's console shows it.
func LinkBeatSubject(hub string) string { return "leafline.links." + hub }
