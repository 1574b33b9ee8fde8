package render_test

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leafline/leafline/pki"
	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/linkperm"
	"github.com/leafline/leafline/topology/render"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Fixed keys, so that the rendered configs are stable. The seeds are test
// values, never used anywhere else.
const (
	hubNkey    = "UC5BGPKNQV5ZB35PDWG75ERFQHLHRJS7VS742OQ6YJTXW34X3YTCHFNA"
	hubSeed    = "SUAGVBPCKWKZANHUSVQRPC6LUC72ANHDNP3EQQTSIUOZQOXQE737CT6EAQ"
	edge1Nkey  = "UCH2DAUH6FCBTYKYZ64KHDVETDL274KYV2SNTW6HFICQBOHACH5HEN6R"
	edge1Seed  = "SUAA2UOBONQYQV3BWR75HNCMQNJDWBEGPCJK4JJ6UJ2AKANR2SSOEWUNMM"
	edge2Bcrpt = "$2a$11$SUZdBnakyKUqiTjMp0ILGuq4O8rTJO86DysWEbyTohQcOhn0rBHK."
)

func renderTopology(t *testing.T) *topology.Topology {
	t.Helper()
	tp := &topology.Topology{Sites: []topology.Site{
		// Rendered for stock servers: their links use sourcing.
		{Name: "l1", Role: topology.RoleL1, Server: topology.ServerNATS, Leafnode: topology.SiteLeafnode{Listen: "127.0.0.1:17422", TLS: topology.TLSMutual}},
		{Name: "hub", Role: topology.RoleHub, Server: topology.ServerNATS, Upstream: "l1", Leafnode: topology.SiteLeafnode{
			Listen: "127.0.0.1:17423", TLS: topology.TLSMutual,
			Auth: topology.LeafAuth{Method: topology.AuthNkey, Nkey: hubNkey}}},
		{Name: "edge1", Role: topology.RoleEdge, Upstream: "hub", Leafnode: topology.SiteLeafnode{
			Auth: topology.LeafAuth{Method: topology.AuthNkey, Nkey: edge1Nkey}}},
		{Name: "edge2", Role: topology.RoleEdge, Upstream: "hub", Leafnode: topology.SiteLeafnode{
			Auth: topology.LeafAuth{Method: topology.AuthPassword, PasswordBcrypt: edge2Bcrpt}}},
	}}
	tp.SetDefaults()
	if err := tp.Validate(); err != nil {
		t.Fatal(err)
	}
	return tp
}

// localConfig is a box config for site with relative file paths under
// certs/, as `leafline topology certs --dir certs` lays them out.
func localConfig(t *testing.T, tp *topology.Topology, site string) *topology.Config {
	t.Helper()
	s, _ := tp.Site(site)
	c := &topology.Config{Site: site, DataDir: filepath.Join("data", site), Topology: tp}
	c.NATS.Listen = "127.0.0.1:0"
	files := topology.TLSFiles{CertFile: "certs/" + site + ".pem", KeyFile: "certs/" + site + "-key.pem", CAFile: "certs/ca.pem"}
	if s.Leafnode.Listen != "" {
		c.Leafnode.ListenTLS = files
	}
	if s.Upstream != "" {
		c.Leafnode.UpstreamTLS = files
		switch s.Leafnode.Auth.Method {
		case topology.AuthNkey:
			c.Leafnode.UpstreamAuth.NkeySeedFile = "certs/" + site + ".nk"
		case topology.AuthPassword:
			c.Leafnode.UpstreamAuth.PasswordFile = "certs/" + site + ".password"
		}
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestServerConfig_Golden renders every site (with and without its box config),
// compares with testdata/render_*.conf, and loads each file with
// nats-server's own parser: every option leafline derives must come back.
func TestServerConfig_Golden(t *testing.T) {
	tp := renderTopology(t)
	// Real certificate files where the configs point (certs/...), for the
	// parser, which loads them.
	work := t.TempDir()
	scratch := renderTopology(t)
	if _, err := pki.WriteCredentials(filepath.Join(work, "certs"), scratch, pki.CredentialOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)
	t.Setenv(render.SeedEnv("hub"), hubSeed)
	t.Setenv(render.SeedEnv("edge1"), edge1Seed)
	t.Setenv(render.UpstreamURLEnv("edge2"), "nats-leaf://edge2:pw-3f9c7e@127.0.0.1:17423")

	for _, tc := range []struct {
		site  string
		local bool
		file  string
	}{
		{"l1", true, "render_l1.conf"},
		{"hub", true, "render_hub.conf"},
		{"hub", false, "render_hub_placeholders.conf"},
		{"edge1", true, "render_edge1.conf"},
		{"edge2", true, "render_edge2.conf"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var local *topology.Config
			if tc.local {
				local = localConfig(t, tp, tc.site)
			}
			got, err := render.ServerConfig(tp, tc.site, local)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join(goldenDir, tc.file)
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Fatalf("rendered config differs from %s (run with -update after checking):\n%s", golden, got)
			}
			for _, secret := range []string{hubSeed, edge1Seed, "pw-3f9c7e"} {
				if strings.Contains(got, secret) {
					t.Fatal("the rendered config holds a secret")
				}
			}
			path := filepath.Join(work, tc.file)
			if err := os.WriteFile(path, []byte(got), 0o600); err != nil {
				t.Fatal(err)
			}
			opts, err := server.ProcessConfigFile(path)
			if err != nil {
				t.Fatalf("nats-server cannot load it: %v", err)
			}
			checkOptions(t, tp, tc.site, opts)
		})
	}
}

// goldenDir is testdata/ next to this file (the tests chdir away).
var goldenDir = func() string {
	d, err := filepath.Abs("testdata")
	if err != nil {
		panic(err)
	}
	return d
}()

func checkOptions(t *testing.T, tp *topology.Topology, site string, o *server.Options) {
	t.Helper()
	s, _ := tp.Site(site)
	if o.ServerName != s.Name || o.JetStreamDomain != s.Domain || !o.SyncAlways || !o.JetStream {
		t.Fatalf("server %q domain %q sync_always %v jetstream %v", o.ServerName, o.JetStreamDomain, o.SyncAlways, o.JetStream)
	}
	for k, v := range linkperm.ServerFeatureFlags() {
		if o.FeatureFlags[k] != v {
			t.Fatalf("feature flag %s = %v", k, o.FeatureFlags[k])
		}
	}
	down := tp.Downstream(site)
	if got, want := o.LeafNode.Compression.Mode, tp.ListenerCompression(s); got != want {
		t.Fatalf("leafnode listener compression %q, want %q", got, want)
	}
	down = tp.Downstream(site)
	if len(down) > 0 {
		if o.NoAuthUser != topology.LocalUser || o.LeafNode.TLSConfig == nil || o.LeafNode.TLSConfig.ClientCAs == nil {
			t.Fatalf("no_auth_user %q, leafnode tls %v", o.NoAuthUser, o.LeafNode.TLSConfig)
		}
		for _, d := range down {
			want, _ := linkperm.Of(tp, d.Name)
			var perms *server.Permissions
			var types map[string]struct{}
			for _, nk := range o.Nkeys {
				if nk.Nkey == d.Leafnode.Auth.Nkey {
					perms, types = nk.Permissions, nk.AllowedConnectionTypes
				}
			}
			for _, u := range o.Users {
				if u.Username == d.Leafnode.Auth.User && d.Leafnode.Auth.User != "" {
					perms, types = u.Permissions, u.AllowedConnectionTypes
					if u.Password != d.Leafnode.Auth.PasswordBcrypt {
						t.Fatalf("%s: password is not the bcrypt hash", d.Name)
					}
				}
			}
			if perms == nil {
				t.Fatalf("no user for %s", d.Name)
			}
			if !slices.Equal(perms.Publish.Allow, want.Publish) || !slices.Equal(perms.Subscribe.Allow, want.Subscribe) {
				t.Fatalf("%s: permissions %v / %v, want %v / %v", d.Name, perms.Publish.Allow, perms.Subscribe.Allow, want.Publish, want.Subscribe)
			}
			if _, ok := types["LEAFNODE"]; !ok || len(types) != 1 {
				t.Fatalf("%s: connection types %v", d.Name, types)
			}
		}
	}
	if s.Upstream == "" {
		return
	}
	if len(o.LeafNode.Remotes) != 1 {
		t.Fatalf("%d remotes", len(o.LeafNode.Remotes))
	}
	r := o.LeafNode.Remotes[0]
	if got, want := r.Compression.Mode, tp.LinkCompression(s); got != want {
		t.Fatalf("remote compression %q, want %q", got, want)
	}
	if r.TLSConfig == nil || len(r.TLSConfig.Certificates) != 1 || r.TLSConfig.RootCAs == nil || !r.IgnoreDiscoveredServers {
		t.Fatalf("remote tls %v ignore_discovered %v", r.TLSConfig, r.IgnoreDiscoveredServers)
	}
	switch s.Leafnode.Auth.Method {
	case topology.AuthNkey:
		if r.Nkey == "" {
			t.Fatal("remote without nkey")
		}
	case topology.AuthPassword:
		if pw, ok := r.URLs[0].User.Password(); !ok || pw != "pw-3f9c7e" {
			t.Fatal("remote URL without the password from the environment")
		}
	}
}

// TestServerConfig_Creds: an unknown site is an error; a creds site's upstream
// gets the permissions as a comment, not a user.
func TestServerConfig_Creds(t *testing.T) {
	tp := renderTopology(t)
	if _, err := render.ServerConfig(tp, "nowhere", nil); err == nil {
		t.Fatal("rendered an unknown site")
	}
	s, _ := tp.Site("edge2")
	s.Leafnode.Auth = topology.LeafAuth{Method: topology.AuthCreds}
	got, err := render.ServerConfig(tp, "hub", nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := linkperm.Of(tp, "edge2")
	if !strings.Contains(got, "operator mode") || !strings.Contains(got, strings.Join(want.Publish, " ")) {
		t.Fatalf("no creds comment:\n%s", got)
	}
	e2, err := render.ServerConfig(tp, "edge2", nil)
	if err != nil || !strings.Contains(e2, `credentials: "certs/edge2.creds"`) {
		t.Fatalf("%v\n%s", err, e2)
	}
}

// TestServerConfig_Direct: the hub's and L1's configs let a direct-mode
// edge consume on L1 (its consumer and its inbox), and only that edge.
func TestServerConfig_Direct(t *testing.T) {
	tp := renderTopology(t)
	tp.Sites[2].DeliveryMode = topology.DeliveryDirect
	tp.Sites[2].Filter = "events.edge1.>"
	tp.SetDefaults()
	if err := tp.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, site := range []string{"hub", "l1"} {
		conf, err := render.ServerConfig(tp, site, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"$JS.l1.API.CONSUMER.MSG.NEXT.L1A.leafline-sink-edge1", "leafline.direct.edge1.>"} {
			if !strings.Contains(conf, s) {
				t.Fatalf("%s's rendered config lacks %q", site, s)
			}
		}
		if strings.Contains(conf, "leafline-sink-edge2") {
			t.Fatalf("%s's rendered config lets edge2 (sourced) consume directly", site)
		}
	}
}

// A link's compression reaches the dialling site's remote, and the
// listener follows its links: their common mode, or accept when they differ.
func TestServerConfig_Compression(t *testing.T) {
	tests := []struct {
		name        string
		def, edge1  string
		hubListener string
	}{
		{"one mode", topology.CompressionS2Best, "", topology.CompressionS2Best},
		{"links differ", topology.CompressionOff, topology.CompressionS2Fast, topology.CompressionAccept},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := renderTopology(t)
			tp.Compression = tt.def
			tp.Sites[2].Compression = tt.edge1
			// Without TLS: no certificate files to make.
			tp.Sites[0].Leafnode.TLS, tp.Sites[1].Leafnode.TLS = topology.TLSOff, topology.TLSOff
			t.Setenv(render.SeedEnv("hub"), hubSeed)
			t.Setenv(render.SeedEnv("edge1"), edge1Seed)
			t.Setenv(render.UpstreamURLEnv("edge2"), "nats-leaf://edge2:pw-3f9c7e@127.0.0.1:17423")
			if err := tp.Validate(); err != nil {
				t.Fatal(err)
			}
			work := t.TempDir()
			load := func(site string) *server.Options {
				conf, err := render.ServerConfig(tp, site, nil)
				if err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(work, site+".conf")
				if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
					t.Fatal(err)
				}
				opts, err := server.ProcessConfigFile(path)
				if err != nil {
					t.Fatalf("nats-server cannot load %s: %v", site, err)
				}
				return opts
			}
			if g := load("hub").LeafNode.Compression.Mode; g != tt.hubListener {
				t.Errorf("hub listener compression %q, want %q", g, tt.hubListener)
			}
			for _, site := range []string{"edge1", "edge2"} {
				s, _ := tp.Site(site)
				if g, w := load(site).LeafNode.Remotes[0].Compression.Mode, tp.LinkCompression(s); g != w {
					t.Errorf("%s remote compression %q, want %q", site, g, w)
				}
			}
		})
	}
}
