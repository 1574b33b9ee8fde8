package topology

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestConfig_ClientListener (attack 6): the NATS client listener gives
// every client full access to the box's streams, so it listens beyond the
// machine only with nats.allow_remote, and then only with nats.auth.
func TestConfig_ClientListener(t *testing.T) {
	topo := mustMarshal(t, exampleTopology(t))
	bad := []struct {
		name   string
		mutate func(*Config)
		path   string
		msg    string
	}{
		{"remote", func(c *Config) { c.NATS.Listen = "0.0.0.0:14224" }, "nats.listen", `host "0.0.0.0" is not a loopback address; every client of this listener has full access`},
		{"every interface", func(c *Config) { c.NATS.Listen = ":14224" }, "nats.listen", "an empty host (every interface)"},
		{"remote without auth", func(c *Config) { c.NATS.Listen, c.NATS.AllowRemote = "0.0.0.0:14224", true }, "nats.auth", "required with nats.allow_remote"},
		{"both password sources", func(c *Config) {
			c.NATS.Auth = ClientAuth{PasswordFile: "pw", PasswordEnv: "PW"}
		}, "nats.auth", "not both"},
		{"user without password", func(c *Config) { c.NATS.Auth = ClientAuth{User: "ops"} }, "nats.auth", "password_file or password_env is required"},
		{"bad env name", func(c *Config) { c.NATS.Auth = ClientAuth{PasswordEnv: "A B"} }, "nats.auth.password_env", "not an environment variable name"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			c := exampleConfig(t, "edge1")
			tt.mutate(c)
			path := writeBox(t, topo, mustMarshal(t, c))
			_, err := LoadConfig(path)
			wantProblem(t, err, path, tt.path, tt.msg)
		})
	}
	t.Run("remote with auth", func(t *testing.T) {
		c := exampleConfig(t, "edge1")
		pw := filepath.Join(t.TempDir(), "pw")
		writeFile(t, pw, []byte("  s3cret\n"))
		c.NATS.Listen, c.NATS.AllowRemote, c.NATS.Auth = "0.0.0.0:14224", true, ClientAuth{PasswordFile: pw}
		got, err := LoadConfig(writeBox(t, topo, mustMarshal(t, c)))
		if err != nil {
			t.Fatal(err)
		}
		user, password, ok, err := got.ClientCredentials()
		if err != nil || !ok || user != DefaultClientUser || password != "s3cret" {
			t.Fatalf("ClientCredentials = %q, ok %v, %v", user, ok, err)
		}
	})
	t.Run("password never in errors", func(t *testing.T) {
		c := exampleConfig(t, "edge1")
		c.NATS.Auth = ClientAuth{PasswordEnv: "LEAFLINE_TEST_CLIENT_PW"}
		t.Setenv("LEAFLINE_TEST_CLIENT_PW", "")
		_, _, _, err := c.ClientCredentials()
		if err == nil || !strings.Contains(err.Error(), "unset or empty") {
			t.Fatalf("err = %v", err)
		}
	})
}
