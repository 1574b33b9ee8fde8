package topology

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	testNkeyHub   = "UC5BGPKNQV5ZB35PDWG75ERFQHLHRJS7VS742OQ6YJTXW34X3YTCHFNA"
	testNkeyEdge1 = "UCH2DAUH6FCBTYKYZ64KHDVETDL274KYV2SNTW6HFICQBOHACH5HEN6R"
	testNkeyEdge2 = "UCPPDTB55PS3NCMALHOFFW4OJPYZINQO7BELIHJJWOSTQV33H62F3XOM"
	testSeed      = "SUAGVBPCKWKZANHUSVQRPC6LUC72ANHDNP3EQQTSIUOZQOXQE737CT6EAQ"
	testBcrypt    = "$2a$11$SUZdBnakyKUqiTjMp0ILGuq4O8rTJO86DysWEbyTohQcOhn0rBHK."
)

// secureTopology is the example topology with mutual TLS on every listener
// and an nkey per dialling site.
func secureTopology(t *testing.T) *Topology {
	t.Helper()
	tp := exampleTopology(t)
	for i := range tp.Sites {
		s := &tp.Sites[i]
		if s.Leafnode.Listen != "" {
			s.Leafnode.TLS = TLSMutual
		}
		switch s.Name {
		case "hub":
			s.Leafnode.Auth = LeafAuth{Method: AuthNkey, Nkey: testNkeyHub}
		case "edge1":
			s.Leafnode.Auth = LeafAuth{Method: AuthNkey, Nkey: testNkeyEdge1}
		case "edge2":
			s.Leafnode.Auth = LeafAuth{Method: AuthNkey, Nkey: testNkeyEdge2}
		}
	}
	return tp
}

// secureConfig is the example box config with the files its site needs.
func secureConfig(t *testing.T, site string) *Config {
	t.Helper()
	c := exampleConfig(t, site)
	files := TLSFiles{CertFile: "certs/" + site + ".pem", KeyFile: "certs/" + site + "-key.pem", CAFile: "certs/ca.pem"}
	switch site {
	case "l1":
		c.Leafnode.ListenTLS = files
	case "hub":
		c.Leafnode.ListenTLS = files
		c.Leafnode.UpstreamTLS = files
		c.Leafnode.UpstreamAuth = UpstreamAuth{NkeySeedFile: "certs/hub.nk"}
	default:
		c.Leafnode.UpstreamTLS = files
		c.Leafnode.UpstreamAuth = UpstreamAuth{NkeySeedFile: "certs/" + site + ".nk"}
	}
	return c
}

func TestTopology_Validate_Security(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Topology)
		path   string
		msg    string
	}{
		{"tls on edge", func(tp *Topology) { tp.Sites[2].Leafnode.TLS = TLSOn }, "sites[2].leafnode.tls", "accepts no leafnode"},
		{"tls unknown", func(tp *Topology) { tp.Sites[1].Leafnode.TLS = "yes" }, "sites[1].leafnode.tls", `"yes" is not one of`},
		{"auth on l1", func(tp *Topology) { tp.Sites[0].Leafnode.Auth = LeafAuth{Method: AuthNkey, Nkey: testNkeyEdge2} }, "sites[0].leafnode.auth", "an l1 site dials no upstream"},
		{"method unknown", func(tp *Topology) { tp.Sites[2].Leafnode.Auth.Method = "token" }, "sites[2].leafnode.auth.method", `"token" is not one of`},
		{"nkey missing", func(tp *Topology) { tp.Sites[2].Leafnode.Auth.Nkey = "" }, "sites[2].leafnode.auth.nkey", "required"},
		{"seed as nkey", func(tp *Topology) { tp.Sites[2].Leafnode.Auth.Nkey = testSeed }, "sites[2].leafnode.auth.nkey", "this is a seed"},
		{"nkey malformed", func(tp *Topology) { tp.Sites[2].Leafnode.Auth.Nkey = "UABC" }, "sites[2].leafnode.auth.nkey", "not a public user nkey"},
		{"nkey on password", func(tp *Topology) {
			tp.Sites[2].Leafnode.Auth = LeafAuth{Method: AuthPassword, Nkey: testNkeyEdge1, PasswordBcrypt: testBcrypt}
		}, "sites[2].leafnode.auth.nkey", `only method "nkey"`},
		{"password missing", func(tp *Topology) { tp.Sites[2].Leafnode.Auth = LeafAuth{Method: AuthPassword} }, "sites[2].leafnode.auth.password_bcrypt", "required"},
		{"plain password", func(tp *Topology) {
			tp.Sites[2].Leafnode.Auth = LeafAuth{Method: AuthPassword, PasswordBcrypt: "hunter2"}
		}, "sites[2].leafnode.auth.password_bcrypt", "never holds a plain password"},
		{"bad user", func(tp *Topology) {
			tp.Sites[2].Leafnode.Auth = LeafAuth{Method: AuthPassword, User: "a b", PasswordBcrypt: testBcrypt}
		}, "sites[2].leafnode.auth.user", "only letters"},
		{"same nkey", func(tp *Topology) { tp.Sites[3].Leafnode.Auth.Nkey = testNkeyEdge1 }, "sites[3].leafnode.auth.nkey", "same nkey as sites[2]"},
		{"same user", func(tp *Topology) {
			tp.Sites[2].Leafnode.Auth = LeafAuth{Method: AuthPassword, User: "e", PasswordBcrypt: testBcrypt}
			tp.Sites[3].Leafnode.Auth = LeafAuth{Method: AuthPassword, User: "e", PasswordBcrypt: testBcrypt}
		}, "sites[3].leafnode.auth.user", `user "e" also authenticates sites[2]`},
		{"open among closed", func(tp *Topology) { tp.Sites[3].Leafnode.Auth = LeafAuth{} }, "sites[3].leafnode.auth.method", "any leafnode without credentials"},
		{"password in url", func(tp *Topology) { tp.Sites[2].Leafnode.UpstreamURL = "nats-leaf://edge1:hunter2@127.0.0.1:17423" }, "sites[2].leafnode.upstream_url", "carries a password"},
		{"tls scheme to plain", func(tp *Topology) {
			tp.Sites[1].Leafnode.TLS = TLSOff
			tp.Sites[2].Leafnode.UpstreamURL = "tls://127.0.0.1:17423"
		}, "sites[2].leafnode.upstream_url", `scheme "tls" needs TLS`},
		{"expected outage", func(tp *Topology) { tp.ExpectedOutage = Duration(time.Millisecond) }, "expected_outage", "below 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := secureTopology(t)
			tt.mutate(tp)
			_, err := ParseTopology(mustMarshal(t, tp), "topology.json")
			wantProblem(t, err, "topology.json", tt.path, tt.msg)
			for _, secret := range []string{"hunter2", testSeed} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error quotes a secret: %v", err)
				}
			}
		})
	}
}

func TestConfig_Validate_Security(t *testing.T) {
	tests := []struct {
		name, site string
		mutate     func(*Config)
		path, msg  string
	}{
		{"edge listen tls", "edge1", func(c *Config) { c.Leafnode.ListenTLS = TLSFiles{CertFile: "a", KeyFile: "b"} }, "leafnode.listen_tls", "has no leafnode listener"},
		{"cert without key", "hub", func(c *Config) { c.Leafnode.ListenTLS.KeyFile = "" }, "leafnode.listen_tls.key_file", "required with cert_file"},
		{"listen cert missing", "hub", func(c *Config) { c.Leafnode.ListenTLS = TLSFiles{CAFile: "ca.pem"} }, "leafnode.listen_tls.cert_file", `listens with TLS "mutual"`},
		{"mutual without ca", "l1", func(c *Config) { c.Leafnode.ListenTLS.CAFile = "" }, "leafnode.listen_tls.ca_file", "verifies dialling sites"},
		{"client cert missing", "edge1", func(c *Config) { c.Leafnode.UpstreamTLS = TLSFiles{CAFile: "ca.pem"} }, "leafnode.upstream_tls.cert_file", "requires a client certificate"},
		{"server name on listener", "hub", func(c *Config) { c.Leafnode.ListenTLS.ServerName = "hub" }, "leafnode.listen_tls.server_name", "only upstream_tls"},
		{"seed missing", "edge1", func(c *Config) { c.Leafnode.UpstreamAuth = UpstreamAuth{} }, "leafnode.upstream_auth", "required: nkey_seed_file"},
		{"wrong method", "edge1", func(c *Config) { c.Leafnode.UpstreamAuth = UpstreamAuth{PasswordFile: "pw"} }, "leafnode.upstream_auth.password_file", `method "nkey" in the topology, not "password"`},
		{"two secrets", "edge1", func(c *Config) { c.Leafnode.UpstreamAuth.CredsFile = "x.creds" }, "leafnode.upstream_auth", "set one of"},
		{"env name", "edge1", func(c *Config) { c.Leafnode.UpstreamAuth = UpstreamAuth{PasswordEnv: "1PW"} }, "leafnode.upstream_auth.password_env", "not an environment variable name"},
		{"auth on l1", "l1", func(c *Config) { c.Leafnode.UpstreamAuth = UpstreamAuth{NkeySeedFile: "x"} }, "leafnode.upstream_auth", "has no upstream"},
		{"password in override", "edge1", func(c *Config) { c.Leafnode.UpstreamURL = "tls://u:hunter2@proxy:7422" }, "leafnode.upstream_url", "carries a password"},
	}
	topo := mustMarshal(t, secureTopology(t))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := secureConfig(t, tt.site)
			tt.mutate(c)
			path := writeBox(t, topo, mustMarshal(t, c))
			_, err := LoadConfig(path)
			wantProblem(t, err, path, tt.path, tt.msg)
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error quotes a password: %v", err)
			}
		})
	}
	// Plain links: TLS files are refused where nothing listens with TLS.
	c := exampleConfig(t, "edge1")
	c.Leafnode.UpstreamTLS = TLSFiles{CAFile: "ca.pem"}
	path := writeBox(t, mustMarshal(t, exampleTopology(t)), mustMarshal(t, c))
	_, err := LoadConfig(path)
	wantProblem(t, err, path, "leafnode.upstream_tls", "listens without TLS")
}

func TestConfig_Validate_SecurityGood(t *testing.T) {
	topo := mustMarshal(t, secureTopology(t))
	for _, site := range exampleBoxes {
		t.Run(site, func(t *testing.T) {
			if _, err := LoadConfig(writeBox(t, topo, mustMarshal(t, secureConfig(t, site)))); err != nil {
				t.Fatal(err)
			}
		})
	}
	// A TLS-terminating proxy in front of a plain upstream.
	c := exampleConfig(t, "edge1")
	c.Leafnode.UpstreamURL = "tls://proxy.local:7422"
	c.Leafnode.UpstreamTLS = TLSFiles{CAFile: "proxy-ca.pem"}
	if _, err := LoadConfig(writeBox(t, mustMarshal(t, exampleTopology(t)), mustMarshal(t, c))); err != nil {
		t.Fatal(err)
	}
}

func TestConfig_CheckFiles(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.pem")
	writeFile(t, ok, []byte("x"))
	c := &Config{Source: "box.json"}
	c.Leafnode.ListenTLS = TLSFiles{CertFile: ok, KeyFile: filepath.Join(dir, "missing-key.pem")}
	c.Leafnode.UpstreamAuth.PasswordEnv = "LEAFLINE_TEST_UNSET_PW"
	err := c.CheckFiles()
	wantProblem(t, err, "box.json", "leafnode.listen_tls.key_file", "no such file")
	wantProblem(t, err, "box.json", "leafnode.upstream_auth.password_env", "unset or empty")
	if n := len(problemsOf(t, err)); n != 2 {
		t.Fatalf("%d problems: %v", n, err)
	}
	t.Setenv("LEAFLINE_TEST_UNSET_PW", "pw")
	c.Leafnode.ListenTLS.KeyFile = ok
	if err := c.CheckFiles(); err != nil {
		t.Fatal(err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats-leaf://u:hunter2@hub:7422": "nats-leaf://u:xxxxx@hub:7422",
		"tls://hub:7422":                 "tls://hub:7422",
		"":                               "",
		"://\x7f":                        "<invalid URL>",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLint(t *testing.T) {
	has := func(ws []Warning, path, msg string) bool {
		for _, w := range ws {
			if w.Path == path && strings.Contains(w.Msg, msg) {
				return true
			}
		}
		return false
	}
	tp := exampleTopology(t)
	tp.SetDefaults()
	ws := tp.Lint()
	for _, w := range []struct{ path, msg string }{
		{"sites[1].leafnode", "the link hub → l1 is not encrypted"},
		{"sites[2].leafnode", "the link edge1 → hub is not encrypted"},
		{"sites[2].leafnode.auth.method", "without credentials"},
		{"events.duplicate_window", "shorter than expected_outage (1h0m0s)"},
	} {
		if !has(ws, w.path, w.msg) {
			t.Errorf("no warning %s: %s in\n%v", w.path, w.msg, ws)
		}
	}
	sec := secureTopology(t)
	sec.Events.DuplicateWindow = Duration(time.Hour)
	if !has(sec.Lint(), "sites[2].receipt_key", "UNSIGNED RECEIPTS") {
		t.Errorf("no warning about edge1's unsigned receipts")
	}
	sec.Sites[2].ReceiptKey, sec.Sites[3].ReceiptKey = testNkeyEdge2, testNkeyEdge1 // signing keys of their own
	sec.SetDefaults()
	if ws := sec.Lint(); len(ws) != 0 {
		t.Fatalf("secure topology: %v", ws)
	}

	c := secureConfig(t, "edge1")
	c.Topology = sec
	c.SetDefaults()
	c.Sink.WorstWrite = Duration(200 * time.Millisecond)
	c.JetStream.SyncInterval = "1s"
	ws = Lint(c)
	if !has(ws, "delivery.ack_wait", "backlog_batch_size × sink.worst_write (1000 × 200ms = 3m20s)") || !has(ws, "jetstream.sync_interval", "power cut") {
		t.Fatalf("config lint: %v", ws)
	}
	c.Delivery.InProgress.Enabled = true
	c.JetStream.SyncInterval = "always"
	if ws := Lint(c); len(ws) != 0 {
		t.Fatalf("with in_progress heartbeats: %v", ws)
	}
	c.JetStream.MaxStreamBytes = 16 << 20
	if ws := Lint(c); len(ws) != 1 || !has(ws, "jetstream.max_stream_bytes", "16777216 is below 67108864 (64 MiB)") {
		t.Fatalf("16 MiB streams: %v", ws)
	}
	c.JetStream.MaxStreamBytes = 0
	c.Outbox.PublishTimeout = Duration(9 * time.Second)
	if ws := Lint(c); len(ws) != 1 || !has(ws, "receipts.duplicate_window", "10s is shorter than outbox.publish_timeout + 2s (11s)") {
		t.Fatalf("a receipts window shorter than the relay's retry: %v", ws)
	}
}
