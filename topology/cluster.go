package topology

import (
	"fmt"
	"strings"

	"github.com/leafline/leafline/topology/internal/syntax"
)

// ClusterConfig points an l1 or hub box at an existing NATS deployment
// (a JetStream cluster of stock nats-server processes) instead of an
// embedded server. The box then connects as an ordinary client: it creates
// or reconciles its streams, buckets and consumers there with Replicas,
// and runs its services (the completion service, the origin tracker, the
// status API, trimming) against them. Several boxes of one site may run
// at once against one cluster. Zero value (no URLs): the box embeds its
// own server.
type ClusterConfig struct {
	// URLs are client URLs of the deployment's servers (nats:// or
	// tls://): the client fails over between them. Setting them turns
	// cluster mode on. A URL never carries a password.
	URLs []string `json:"urls,omitempty"`
	// CredentialsFile is a NATS .creds file (user JWT and nkey seed) for
	// a deployment in operator mode. Zero value: no credentials (the
	// rendered configurations let local clients in as LocalUser).
	CredentialsFile string `json:"credentials_file,omitempty"`
	// TLS verifies the servers (CAFile; zero value means the system
	// roots) and holds a client certificate (CertFile, KeyFile) where
	// the servers ask for one. Used when a URL's scheme is tls.
	TLS TLSFiles `json:"tls,omitempty"`
	// JetStreamDomain is the deployment's JetStream domain. It must be the
	// site's domain in the topology, which the other sites' links use;
	// zero value means that. The box checks it against the servers at start.
	JetStreamDomain string `json:"jetstream_domain,omitempty"`
	// Replicas of every stream and bucket the box creates, 1..5. An
	// existing one is scaled to it. Zero value means 3.
	Replicas int `json:"replicas,omitempty"`
	// Name is the cluster's name in rendered configurations. Zero value
	// means the site name.
	Name string `json:"name,omitempty"`
	// Nodes describe the servers for `leafline topology render`, which
	// writes one stock nats-server configuration per node (routes between
	// all of them, the site's JetStream domain, a leafnode listener on
	// every node). The running box reads only URLs.
	Nodes []ClusterNode `json:"nodes,omitempty"`
}

// ClusterNode is one server of a rendered cluster.
type ClusterNode struct {
	// Name is the server name, unique in the cluster. Required.
	Name string `json:"name"`
	// Listen is the client listener host:port. Required.
	Listen string `json:"listen"`
	// ClusterListen is the route listener host:port. Required.
	ClusterListen string `json:"cluster_listen"`
	// LeafnodeListen is where downstream sites dial this node (host:port).
	// Required when the site has downstream sites.
	LeafnodeListen string `json:"leafnode_listen,omitempty"`
	// DataDir holds the node's JetStream store. Required.
	DataDir string `json:"data_dir"`
}

// Enabled reports whether the box runs against an existing cluster.
func (c ClusterConfig) Enabled() bool { return len(c.URLs) > 0 }

// maxReplicas is JetStream's largest replica count.
const maxReplicas = 5

func (c *ClusterConfig) setDefaults(site string) {
	if !c.Enabled() && len(c.Nodes) == 0 {
		return
	}
	setInt(&c.Replicas, 3)
	setString(&c.Name, site)
}

// clusterURLSchemes are the client URL schemes of ClusterConfig.URLs.
var clusterURLSchemes = map[string]bool{"nats": true, "tls": true}

func (c *ClusterConfig) validate(p *problems) {
	if !c.Enabled() && len(c.Nodes) == 0 {
		if c.CredentialsFile != "" || c.JetStreamDomain != "" || c.Replicas != 0 || c.TLS != (TLSFiles{}) {
			p.add("cluster.urls", "required when any other cluster setting is given")
		}
		return
	}
	for i, raw := range c.URLs {
		if err := checkClusterURL(raw); err != nil {
			p.add(fmt.Sprintf("cluster.urls[%d]", i), "%v", err)
		}
	}
	if c.JetStreamDomain != "" {
		p.name("cluster.jetstream_domain", c.JetStreamDomain, maxSiteName)
	}
	p.inRange("cluster.replicas", c.Replicas, 1, maxReplicas)
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		p.add("cluster.tls", "cert_file and key_file go together")
	}
	if c.Name != "" {
		p.name("cluster.name", c.Name, maxSiteName)
	}
	c.validateNodes(p)
}

func (c *ClusterConfig) validateNodes(p *problems) {
	if len(c.Nodes) == 0 {
		return
	}
	if len(c.Nodes) < c.Replicas {
		p.add("cluster.nodes", "%d nodes cannot hold %d replicas", len(c.Nodes), c.Replicas)
	}
	names := map[string]bool{}
	addrs := map[string]string{}
	for i, n := range c.Nodes {
		at := fmt.Sprintf("cluster.nodes[%d]", i)
		if p.name(at+".name", n.Name, maxSiteName) {
			if names[n.Name] {
				p.add(at+".name", "duplicate node name %q", n.Name)
			}
			names[n.Name] = true
		}
		if n.DataDir == "" {
			p.add(at+".data_dir", "required")
		}
		for _, l := range []struct{ key, v string }{
			{"listen", n.Listen}, {"cluster_listen", n.ClusterListen}, {"leafnode_listen", n.LeafnodeListen},
		} {
			if l.v == "" && l.key == "leafnode_listen" {
				continue
			}
			if err := syntax.HostPort(l.v, 1, false); err != nil {
				p.add(at+"."+l.key, "%v", err)
				continue
			}
			if prev, dup := addrs[l.v]; dup {
				p.add(at+"."+l.key, "%s is also %s", l.v, prev)
			}
			addrs[l.v] = at + "." + l.key
		}
	}
}

// validateClusterAgainst checks the cluster settings against the site.
func (c *Config) validateClusterAgainst(p *problems, t *Topology, s *Site) {
	cl := c.Cluster
	if !cl.Enabled() && len(cl.Nodes) == 0 {
		return
	}
	if s.Role == RoleEdge {
		p.add("cluster", "site %q is an edge; only an l1 or hub site runs on an existing cluster", s.Name)
		return
	}
	if cl.JetStreamDomain != "" && cl.JetStreamDomain != s.Domain {
		p.add("cluster.jetstream_domain", "%q is not site %q's domain %q in the topology, which the links use", cl.JetStreamDomain, s.Name, s.Domain)
	}
	if cl.Enabled() && s.Server != ServerNATS {
		// Its links must use sourcing, which the servers run: the relay
		// needs a leafline box's embedded server at both ends.
		p.add("cluster.urls", "site %q runs on a cluster of nats-server processes: set \"server\": %q on it in the topology (sites[].server), so that its links use sourcing", s.Name, ServerNATS)
	}
	if len(t.Downstream(s.Name)) == 0 {
		return
	}
	for i, n := range cl.Nodes {
		if n.LeafnodeListen == "" {
			p.add(fmt.Sprintf("cluster.nodes[%d].leafnode_listen", i), "required: site %q has downstream sites, which may dial any node", s.Name)
		}
	}
}

func checkClusterURL(s string) error {
	return syntax.ServerURL(s, clusterURLSchemes, "nats, tls", "cluster.credentials_file")
}

// ClusterURL joins the URLs as nats.Connect takes them.
func (c ClusterConfig) ClusterURL() string { return strings.Join(c.URLs, ",") }

// UpstreamURLs is the box's list of upstream URLs: leafnode.upstream_urls,
// else leafnode.upstream_url, else the topology's, for the site s.
func (c *Config) UpstreamURLs(s *Site) []string {
	switch {
	case len(c.Leafnode.UpstreamURLs) > 0:
		return c.Leafnode.UpstreamURLs
	case c.Leafnode.UpstreamURL != "":
		return []string{c.Leafnode.UpstreamURL}
	case s.Leafnode.UpstreamURL != "":
		return []string{s.Leafnode.UpstreamURL}
	}
	return nil
}

func (c *Config) validateUpstreamURLs(p *problems) {
	l := c.Leafnode
	if len(l.UpstreamURLs) == 0 {
		return
	}
	if l.UpstreamURL != "" {
		p.add("leafnode.upstream_urls", "set upstream_url or upstream_urls, not both")
	}
	seen := map[string]bool{}
	for i, u := range l.UpstreamURLs {
		at := fmt.Sprintf("leafnode.upstream_urls[%d]", i)
		if err := checkUpstreamURL(u); err != nil {
			p.add(at, "%v", err)
		} else if seen[u] {
			p.add(at, "duplicate URL")
		}
		seen[u] = true
	}
}
