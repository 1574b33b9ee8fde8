package box

import (
	"crypto/subtle"
	"encoding/base64"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/leafline/leafline/pki"
	"github.com/leafline/leafline/topology"
)

// linkAuth authenticates the connections of a box whose listener has link
// users (listenSecurity). It accepts exactly what the server would accept
// from opts.Nkeys, opts.Users and opts.NoAuthUser — a leafnode only as a
// link user, with that user's permissions; a client only as the local
// user, without credentials — and binds the two layers of a link's
// identity: a leafnode whose TLS certificate names a leafline site
// (pki.SiteURI, as `leafline topology certs` issues) must authenticate as that
// site. Without it, one edge's certificate with another edge's seed would
// pass for the other edge. A certificate that names no site (an
// operator's own PKI) binds nothing; the nkey alone then says who it is.
//
// NOTE: a stock nats-server cannot bind the two (its certificate mapping
// replaces the nkey instead of checking it); there, each link's identity
// is its nkey, and the certificate proves only membership of the CA.
type linkAuth struct {
	srv atomic.Pointer[server.Server] // for the global account
	log atomic.Pointer[slog.Logger]
	// link are the link users; a reload swaps them (take).
	link atomic.Pointer[linkUsers]
	// clientUser and clientPass, when set (nats.auth), are what every
	// client presents, except the box's own connections inside the
	// process (clientSecurity).
	clientUser, clientPass string
}

// linkUsers are the downstream sites' leafnode users.
type linkUsers struct {
	nkeys map[string]linkUser // by public nkey
	users map[string]linkUser // by user name (bcrypt password)
}

// take makes a authenticate the link users of n from now on (a reload).
func (a *linkAuth) take(n *linkAuth) { a.link.Store(n.link.Load()) }

// linkUser is one downstream site's leafnode user.
type linkUser struct {
	site string
	nkey *server.NkeyUser
	user *server.User
}

// bindLinkAuth makes linkAuth authenticate opts' connections, from the
// link users listenSecurity put in opts and their sites.
func bindLinkAuth(opts *server.Options, sites map[string]string) {
	lu := &linkUsers{nkeys: map[string]linkUser{}, users: map[string]linkUser{}}
	for _, u := range opts.Nkeys {
		lu.nkeys[u.Nkey] = linkUser{site: sites[u.Nkey], nkey: u}
	}
	for _, u := range opts.Users {
		if u.Username != localUser {
			lu.users[u.Username] = linkUser{site: sites[u.Username], user: u}
		}
	}
	a, _ := opts.CustomClientAuthentication.(*linkAuth)
	if a == nil {
		a = &linkAuth{}
		opts.CustomClientAuthentication = a
	}
	a.link.Store(lu)
}

// started gives linkAuth the running server and the box's logger.
func (a *linkAuth) started(s *server.Server, log *slog.Logger) {
	a.srv.Store(s)
	a.log.Store(log)
}

// Check implements server.Authentication.
func (a *linkAuth) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	switch c.Kind() {
	case server.CLIENT:
		if !a.clientAllowed(c, o) {
			return false
		}
		c.RegisterUser(&server.User{Username: localUser, Account: a.account()})
		return true
	case server.LEAF:
		if lu := a.link.Load(); lu == nil || len(lu.nkeys) == 0 && len(lu.users) == 0 {
			// A listener without link users accepts leafnodes as they
			// come (the topology's auth method "none", which the lint
			// reports); only its clients authenticate.
			c.RegisterUser(&server.User{Account: a.account()})
			return true
		}
		u, ok := a.leafUser(c, o)
		if !ok {
			return false
		}
		if !a.bound(c, u) {
			return false
		}
		if u.nkey != nil {
			nu := *u.nkey
			nu.Account = a.account()
			r, ok := c.(interface{ RegisterNkeyUser(*server.NkeyUser) error })
			return ok && r.RegisterNkeyUser(&nu) == nil
		}
		uu := *u.user
		uu.Account = a.account()
		c.RegisterUser(&uu)
		return true
	}
	return false
}

// clientAllowed reports whether a client may use the listener: with
// nats.auth, one that presents its user and password, or one of the box's
// own connections inside the process; without, one that presents no
// credentials (the no_auth_user, as the server's own users would have it).
// Every allowed client is the local user, with full access.
func (a *linkAuth) clientAllowed(c server.ClientAuthentication, o *server.ClientOpts) bool {
	if a.clientPass == "" {
		return o.Nkey == "" && o.JWT == "" && o.Token == "" && o.Password == "" && (o.Username == "" || o.Username == localUser)
	}
	if addr := c.RemoteAddress(); addr != nil && addr.Network() == "pipe" {
		return true // nats.InProcessServer: the box itself
	}
	return o.Nkey == "" && o.JWT == "" && o.Token == "" &&
		subtle.ConstantTimeCompare([]byte(o.Username), []byte(a.clientUser)) == 1 &&
		subtle.ConstantTimeCompare([]byte(o.Password), []byte(a.clientPass)) == 1
}

// clientSecurity makes every client of the listener present nats.auth's
// user and password, when the config sets it.
func clientSecurity(opts *server.Options, cfg *topology.Config) error {
	user, pw, ok, err := cfg.ClientCredentials()
	if err != nil || !ok {
		return err
	}
	a, _ := opts.CustomClientAuthentication.(*linkAuth)
	if a == nil {
		a = &linkAuth{}
		opts.CustomClientAuthentication = a
	}
	a.clientUser, a.clientPass = user, pw
	return nil
}

// leafUser finds the link user a leafnode authenticates as: an nkey that
// signed the connection's nonce, or a user name and password.
func (a *linkAuth) leafUser(c server.ClientAuthentication, o *server.ClientOpts) (linkUser, bool) {
	lu := a.link.Load()
	if lu == nil {
		return linkUser{}, false
	}
	if o.Nkey != "" {
		u, ok := lu.nkeys[o.Nkey]
		if !ok || o.Sig == "" {
			return linkUser{}, false
		}
		sig, err := base64.RawURLEncoding.DecodeString(o.Sig)
		if err != nil {
			if sig, err = base64.StdEncoding.DecodeString(o.Sig); err != nil {
				return linkUser{}, false
			}
		}
		pub, err := nkeys.FromPublicKey(o.Nkey)
		if err != nil || pub.Verify(c.GetNonce(), sig) != nil {
			return linkUser{}, false
		}
		return u, true
	}
	u, ok := lu.users[o.Username]
	if !ok || o.Username == "" {
		return linkUser{}, false
	}
	return u, checkPassword(u.user.Password, o.Password)
}

// checkPassword compares a password with a bcrypt hash (the topology holds
// only hashes), or, for any other stored value, in constant time.
func checkPassword(stored, given string) bool {
	if strings.HasPrefix(stored, "$2") {
		return bcrypt.CompareHashAndPassword([]byte(stored), []byte(given)) == nil
	}
	return stored != "" && subtle.ConstantTimeCompare([]byte(stored), []byte(given)) == 1
}

// bound reports whether the leafnode's certificate, if it names a site,
// names the site u belongs to; it logs a refusal.
func (a *linkAuth) bound(c server.ClientAuthentication, u linkUser) bool {
	cs := c.GetTLSConnectionState()
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return true
	}
	site, ok := pki.CertSite(cs.PeerCertificates[0])
	if !ok || site == u.site {
		return true
	}
	if log := a.log.Load(); log != nil {
		log.Warn("leafnode refused: its certificate names another site than its credentials",
			"certificate_site", site, "credentials_site", u.site, "remote", c.RemoteAddress().String())
	}
	return false
}

func (a *linkAuth) account() *server.Account {
	if s := a.srv.Load(); s != nil {
		return s.GlobalAccount()
	}
	return nil
}
