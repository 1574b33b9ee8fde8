package render

import (
	"net/url"
	"path/filepath"

	"github.com/leafline/leafline/topology"
)

// writeLeafnodes writes the leafnodes block of site s (or of one node of
// its cluster): the listener its downstream sites dial, when it has one,
// and the remote to its upstream, when it has one.
func writeLeafnodes(w *confWriter, t *topology.Topology, s *topology.Site, local *topology.Config, node *topology.ClusterNode) error {
	up, hasUp := t.Site(s.Upstream)
	listen := s.Leafnode.Listen
	if node != nil {
		listen = node.LeafnodeListen
	}
	if listen == "" && !hasUp {
		return nil
	}
	files := placeholderFiles(s.Name)
	w.blank()
	w.open("leafnodes")
	if listen != "" {
		writeLeafnodeListener(w, s, local, listen, files)
		writeCompression(w, t.ListenerCompression(s))
	}
	if local != nil {
		w.kv("reconnect", q(local.Leafnode.ReconnectInterval.String()))
	}
	if hasUp {
		if err := writeRemote(w, s, up, local, files, t.LinkCompression(s)); err != nil {
			return err
		}
	}
	w.close()
	return nil
}

// writeCompression writes a leafnode compression mode (topology
// LinkCompression, ListenerCompression); nats-server spells it as the
// topology does.
func writeCompression(w *confWriter, mode string) {
	if mode != "" {
		w.kv("compression", mode)
	}
}

// placeholderFiles are the certificate files of site in the layout
// `leafline topology certs` writes, for a site whose box config is not
// given.
func placeholderFiles(site string) topology.TLSFiles {
	return topology.TLSFiles{
		CertFile: filepath.Join("certs", site+".pem"),
		KeyFile:  filepath.Join("certs", site+"-key.pem"),
		CAFile:   filepath.Join("certs", "ca.pem"),
	}
}

// writeLeafnodeListener writes the leafnode listener of site s at listen,
// with its TLS when s's leafnode.tls asks for it.
func writeLeafnodeListener(w *confWriter, s *topology.Site, local *topology.Config, listen string, placeholder topology.TLSFiles) {
	w.kv("listen", q(listen))
	w.comment("Downstream sites dial exactly the address they were given.")
	w.kv("no_advertise", "true")
	mode := s.Leafnode.TLS
	if mode != topology.TLSOn && mode != topology.TLSMutual {
		return
	}
	f := placeholder
	if local != nil {
		f = local.Leafnode.ListenTLS
	}
	w.open("tls")
	w.kv("cert_file", q(f.CertFile))
	w.kv("key_file", q(f.KeyFile))
	if mode == topology.TLSMutual {
		w.kv("ca_file", q(f.CAFile))
		w.kv("verify", "true")
	}
	w.kv("timeout", "5")
	w.close()
}

// writeRemote writes the remote through which site s dials its upstream
// up: its URLs, its credentials, its TLS and its compression.
func writeRemote(w *confWriter, s, up *topology.Site, local *topology.Config, placeholder topology.TLSFiles, compression string) error {
	us, err := upstreamURLs(s, local)
	if err != nil {
		return err
	}
	w.openList("remotes")
	w.openAnon()
	writeRemoteURLs(w, s, us)
	w.comment("Never reconnect around the given address to servers discovered through it.")
	w.kv("ignore_discovered_servers", "true")
	writeRemoteAuth(w, s, local)
	if up.Leafnode.TLS == topology.TLSOn || up.Leafnode.TLS == topology.TLSMutual || topology.TLSScheme(us[0].Scheme) {
		writeRemoteTLS(w, up, local, placeholder)
	}
	writeCompression(w, compression)
	w.close()
	w.closeList()
	return nil
}

// writeRemoteURLs writes the upstream URLs of site s. A site that
// authenticates with a password reads its first URL, password included,
// from the environment (UpstreamURLEnv); the others are written redacted.
func writeRemoteURLs(w *confWriter, s *topology.Site, us []*url.URL) {
	auth := s.Leafnode.Auth
	if auth.Method != topology.AuthPassword {
		var rs []string
		for _, u := range us {
			rs = append(rs, u.Redacted())
		}
		w.kv("urls", qlist(rs))
		return
	}
	w.comment("The upstream URL carries the password: set %s to", UpstreamURLEnv(s.Name))
	withUser := *us[0]
	withUser.User = url.UserPassword(auth.User, "PASSWORD")
	w.comment("%s", withUser.String())
	w.kv("urls", "[$"+UpstreamURLEnv(s.Name)+"]")
}

// writeRemoteAuth writes the credentials site s dials with: an nkey seed
// read from the environment (SeedEnv) or a .creds file.
func writeRemoteAuth(w *confWriter, s *topology.Site, local *topology.Config) {
	switch s.Leafnode.Auth.Method {
	case topology.AuthNkey:
		w.comment("export %s=$(cat <this site's nkey seed file>)", SeedEnv(s.Name))
		w.kv("nkey", "$"+SeedEnv(s.Name))
	case topology.AuthCreds:
		path := filepath.Join("certs", s.Name+".creds")
		if local != nil {
			path = local.Leafnode.UpstreamAuth.CredsFile
		}
		w.kv("credentials", q(path))
	}
}

// writeRemoteTLS writes the TLS of the remote to upstream up: the CA, and
// the site's own certificate when up verifies it (leafnode.tls "mutual").
func writeRemoteTLS(w *confWriter, up *topology.Site, local *topology.Config, placeholder topology.TLSFiles) {
	f := topology.TLSFiles{CAFile: placeholder.CAFile}
	if up.Leafnode.TLS == topology.TLSMutual {
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
