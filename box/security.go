package box

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/linkperm"
)

// localUser is topology.LocalUser: the user that clients of the box's own
// client listener (the embedded App, the CLI, local tools) are mapped to
// when the box defines leafnode users. No leafnode connection may use it,
// so a leafnode that dials without credentials is refused.
const localUser = topology.LocalUser

// LeafTLSTimeout bounds a leafnode TLS handshake, in seconds.
const LeafTLSTimeout = 5

// listenSecurity sets the leafnode listener's TLS and, per downstream site,
// the user it authenticates as, restricted to the subjects of its link
// (linkperm.Permissions).
//
// nats-server's leafnode-only authorization block cannot carry permissions,
// so the users are server-wide users that only a leafnode connection may
// use (allowed connection type LEAFNODE); the box's own clients are mapped
// to localUser, which only a non-leafnode connection may use. linkAuth
// checks them, and binds each link's certificate to its site.
func listenSecurity(opts *server.Options, cfg *topology.Config, site *topology.Site) error {
	t := cfg.Topology
	switch site.Leafnode.TLS {
	case topology.TLSOn, topology.TLSMutual:
		tc, err := ListenTLSConfig(cfg.Leafnode.ListenTLS, site.Leafnode.TLS == topology.TLSMutual)
		if err != nil {
			return fmt.Errorf("leafnode.listen_tls: %w", err)
		}
		opts.LeafNode.TLSConfig = tc
		opts.LeafNode.TLSTimeout = LeafTLSTimeout
	}
	sites := map[string]string{} // link user (nkey or name) → its site
	for _, d := range t.Downstream(site.Name) {
		lp, err := linkperm.Of(t, d.Name)
		if err != nil {
			return err
		}
		perms := &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: lp.Publish},
			Subscribe: &server.SubjectPermission{Allow: lp.Subscribe},
		}
		types := map[string]struct{}{jwt.ConnectionTypeLeafnode: {}}
		switch a := d.Leafnode.Auth; a.Method {
		case topology.AuthNkey:
			opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: a.Nkey, Permissions: perms, AllowedConnectionTypes: types})
			sites[a.Nkey] = d.Name
		case topology.AuthPassword:
			opts.Users = append(opts.Users, &server.User{Username: a.User, Password: a.PasswordBcrypt, Permissions: perms, AllowedConnectionTypes: types})
			sites[a.User] = d.Name
		case topology.AuthCreds:
			return fmt.Errorf("site %q authenticates with a .creds file (operator/JWT mode), which only a stock nats-server in operator mode can verify; run %q as one (see `leafline topology render`) or give %q an nkey", d.Name, site.Name, d.Name)
		}
	}
	if len(opts.Nkeys) > 0 || len(opts.Users) > 0 {
		types := map[string]struct{}{}
		for _, ct := range topology.LocalUserConnectionTypes {
			types[ct] = struct{}{}
		}
		opts.Users = append(opts.Users, &server.User{Username: localUser, AllowedConnectionTypes: types})
		opts.NoAuthUser = localUser
		// The same users, with each link's certificate bound to its site.
		bindLinkAuth(opts, sites)
	}
	return nil
}

// upstreamSecurity sets the remote's TLS and credentials.
func upstreamSecurity(remote *server.RemoteLeafOpts, cfg *topology.Config, site *topology.Site) error {
	t := cfg.Topology
	up, ok := t.Site(site.Upstream)
	if !ok {
		return fmt.Errorf("site %q: unknown upstream %q", site.Name, site.Upstream)
	}
	u := remote.URLs[0]
	useTLS := up.Leafnode.TLS == topology.TLSOn || up.Leafnode.TLS == topology.TLSMutual ||
		u.Scheme == "tls" || u.Scheme == "wss"
	if useTLS {
		tc, err := UpstreamTLSConfig(cfg.Leafnode.UpstreamTLS, u)
		if err != nil {
			return fmt.Errorf("leafnode.upstream_tls: %w", err)
		}
		remote.TLS = true
		remote.TLSConfig = tc
		remote.TLSTimeout = LeafTLSTimeout
	}
	a := cfg.Leafnode.UpstreamAuth
	switch site.Leafnode.Auth.Method {
	case topology.AuthNkey:
		seed, err := readNkeySeed(a.NkeySeedFile, site.Leafnode.Auth.Nkey)
		if err != nil {
			return fmt.Errorf("leafnode.upstream_auth.nkey_seed_file: %w", err)
		}
		remote.Nkey = seed
	case topology.AuthPassword:
		pw, err := readPassword(a)
		if err != nil {
			return err
		}
		for i, u := range remote.URLs {
			withPw := *u
			withPw.User = url.UserPassword(site.Leafnode.Auth.User, pw)
			remote.URLs[i] = &withPw
		}
	case topology.AuthCreds:
		if _, err := os.Stat(a.CredsFile); err != nil {
			return fmt.Errorf("leafnode.upstream_auth.creds_file: %w", err)
		}
		remote.Credentials = a.CredsFile
	}
	return nil
}

func ListenTLSConfig(f topology.TLSFiles, mutual bool) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("certificate %s / key %s: %w", f.CertFile, f.KeyFile, err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if mutual {
		pool, err := loadCAs(f.CAFile)
		if err != nil {
			return nil, err
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

func UpstreamTLSConfig(f topology.TLSFiles, u *url.URL) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if tc.ServerName == "" {
		tc.ServerName = u.Hostname()
	}
	if f.CAFile != "" {
		pool, err := loadCAs(f.CAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("certificate %s / key %s: %w", f.CertFile, f.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func loadCAs(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ca_file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// readNkeySeed reads a user nkey seed and checks that it belongs to the
// public key the topology declares for the site. Error messages never
// contain the seed.
func readNkeySeed(path, wantPublic string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	seed := ""
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "SU") {
			seed = line
			break
		}
	}
	if seed == "" {
		return "", fmt.Errorf("%s holds no user nkey seed (a line starting with \"SU\")", path)
	}
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		return "", fmt.Errorf("%s: malformed user nkey seed", path)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if pub != wantPublic {
		return "", fmt.Errorf("the seed in %s is for public key %s, but the topology's leafnode.auth.nkey for this site is %s", path, pub, wantPublic)
	}
	return seed, nil
}

// readPassword reads the password from its file or environment variable.
func readPassword(a topology.UpstreamAuth) (string, error) {
	switch {
	case a.PasswordFile != "":
		data, err := os.ReadFile(a.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("leafnode.upstream_auth.password_file: %w", err)
		}
		pw := strings.TrimSpace(string(data))
		if pw == "" {
			return "", fmt.Errorf("leafnode.upstream_auth.password_file: %s is empty", a.PasswordFile)
		}
		return pw, nil
	case a.PasswordEnv != "":
		pw := strings.TrimSpace(os.Getenv(a.PasswordEnv))
		if pw == "" {
			return "", fmt.Errorf("leafnode.upstream_auth.password_env: environment variable %s is unset or empty", a.PasswordEnv)
		}
		return pw, nil
	}
	return "", errors.New("leafnode.upstream_auth: password_file or password_env is required")
}
