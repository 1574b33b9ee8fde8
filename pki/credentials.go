package pki

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/leafline/leafline/topology"
)

// SiteCredentials are the files one site's box needs for secure links.
type SiteCredentials struct {
	// CertFile and KeyFile: the site's certificate. It is only what the
	// site's role needs (see certUsage): an edge's authenticates it as a
	// client and can serve no TLS connection; L1's serves its listener;
	// a hub's does both.
	CertFile, KeyFile string
	// CAFile is the private CA that signs every site's certificate.
	CAFile string
	// NkeySeedFile holds the site's user nkey seed (sites with an upstream).
	NkeySeedFile string
	// Nkey is the public key of that seed.
	Nkey string
	// ReceiptKeyFile holds an edge's receipt-signing nkey seed; its public
	// key is the site's receipt_key. Empty for other sites, and with
	// CredentialOptions.NoReceiptKeys.
	ReceiptKeyFile string
}

// Credentials is a private CA plus one certificate and nkey per site,
// written by WriteCredentials.
type Credentials struct {
	Dir   string
	Sites map[string]SiteCredentials
}

// CredentialOptions shape WriteCredentials. Zero values mean the defaults.
type CredentialOptions struct {
	// Validity of the CA and the certificates. Zero means one year.
	Validity time.Duration
	// Hosts are extra DNS names or IP addresses put in the certificate of
	// every site that listens (l1, hub), besides the host of its leafnode
	// listen address.
	Hosts []string
	// Loopback adds "localhost", 127.0.0.1 and ::1 to the certificates of
	// the sites that listen: for a system on one machine. Zero value: a
	// certificate names only its site's own addresses, so that it cannot
	// pass for a server on any other machine's loopback.
	Loopback bool
	// NoReceiptKeys writes no receipt-signing keys: the edges' receipts
	// stay unsigned (which `leafline check` reports), or the caller signs
	// them with keys of its own. Zero value: every edge gets a key.
	NoReceiptKeys bool
}

// WriteCredentials creates, under dir, a private CA (ca.pem; its key
// ca-key.pem), and for each site of t a certificate (<site>.pem,
// <site>-key.pem), for sites that dial an upstream a user nkey seed
// (<site>.nk), and for edges a receipt-signing nkey seed
// (<site>.receipt.nk). Private keys and seeds are written with mode 0600,
// and an existing file is never overwritten.
//
// It then secures t in memory: every listening site gets TLS "mutual",
// every dialling site the nkey method with its public key, and every edge
// its receipt_key. Apply writes the matching file names into a box config.
func WriteCredentials(dir string, t *topology.Topology, o CredentialOptions) (*Credentials, error) {
	if o.Validity <= 0 {
		o.Validity = 365 * 24 * time.Hour
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	notBefore := time.Now().Add(-time.Hour)
	ca, err := NewCA("leafline private CA", notBefore, notBefore.Add(o.Validity))
	if err != nil {
		return nil, err
	}
	creds := &Credentials{Dir: dir, Sites: map[string]SiteCredentials{}}
	caFile := filepath.Join(dir, "ca.pem")
	if err := writeNew(caFile, ca.CertPEM, 0o644); err != nil {
		return nil, err
	}
	if err := writeNew(filepath.Join(dir, "ca-key.pem"), ca.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	for i := range t.Sites {
		s := &t.Sites[i]
		leaf, err := ca.IssueFor(s.Name, siteHosts(s, o), certUsage(s.Role), notBefore, notBefore.Add(o.Validity))
		if err != nil {
			return nil, err
		}
		sc := SiteCredentials{
			CertFile: filepath.Join(dir, s.Name+".pem"),
			KeyFile:  filepath.Join(dir, s.Name+"-key.pem"),
			CAFile:   caFile,
		}
		if err := writeNew(sc.CertFile, leaf.CertPEM, 0o644); err != nil {
			return nil, err
		}
		if err := writeNew(sc.KeyFile, leaf.KeyPEM, 0o600); err != nil {
			return nil, err
		}
		if s.Leafnode.Listen != "" {
			s.Leafnode.TLS = topology.TLSMutual
		}
		if s.Upstream != "" {
			kp, err := nkeys.CreateUser()
			if err != nil {
				return nil, err
			}
			seed, _ := kp.Seed()
			pub, _ := kp.PublicKey()
			sc.Nkey = pub
			sc.NkeySeedFile = filepath.Join(dir, s.Name+".nk")
			if err := writeNew(sc.NkeySeedFile, append(seed, '\n'), 0o600); err != nil {
				return nil, err
			}
			s.Leafnode.Auth = topology.LeafAuth{Method: topology.AuthNkey, Nkey: pub}
		}
		if s.Role == topology.RoleEdge && !o.NoReceiptKeys {
			if sc.ReceiptKeyFile, s.ReceiptKey, err = writeReceiptKey(filepath.Join(dir, s.Name+".receipt.nk")); err != nil {
				return nil, err
			}
		}
		creds.Sites[s.Name] = sc
	}
	return creds, nil
}

// Apply writes the site's file names into its box config: the listener's
// TLS (mutual, so with the CA), the upstream's TLS (CA and client
// certificate), the nkey seed and an edge's receipt-signing key.
func (c *Credentials) Apply(cfg *topology.Config, site *topology.Site) {
	sc, ok := c.Sites[site.Name]
	if !ok {
		return
	}
	if site.Leafnode.Listen != "" {
		cfg.Leafnode.ListenTLS = topology.TLSFiles{CertFile: sc.CertFile, KeyFile: sc.KeyFile, CAFile: sc.CAFile}
	}
	if site.Upstream != "" {
		cfg.Leafnode.UpstreamTLS = topology.TLSFiles{CertFile: sc.CertFile, KeyFile: sc.KeyFile, CAFile: sc.CAFile}
		cfg.Leafnode.UpstreamAuth = topology.UpstreamAuth{NkeySeedFile: sc.NkeySeedFile}
	}
	if sc.ReceiptKeyFile != "" {
		cfg.Signing.KeyFile = sc.ReceiptKeyFile
	}
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s already exists; credentials are never overwritten", path)
		}
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
