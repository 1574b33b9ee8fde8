package topology

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// loadEdgeWithSink loads configs/edge1.json with its sink replaced by the
// JSON sink, through the same strict loader as `leafline check`.
func loadEdgeWithSink(t *testing.T, sink string) (*Config, error) {
	t.Helper()
	dir := t.TempDir()
	topo, err := os.ReadFile("../configs/topology.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "topology.json"), topo, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := `{"topology": "topology.json", "site": "edge1", "data_dir": "` + filepath.Join(dir, "data") + `", "sink": ` + sink + `}`
	path := filepath.Join(dir, "edge1.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return LoadConfig(path)
}

func TestConfig_Sink_Bad(t *testing.T) {
	for _, tc := range []struct {
		name, sink, path, msg string
	}{
		{"unknown type", `{"type": "kafka"}`, "sink.type", `"kafka" is not one of store, file, http, exec, postgres, nats`},
		{"http without section", `{"type": "http"}`, "sink.http", "required for the http sink"},
		{"http missing url", `{"type": "http", "http": {}}`, "sink.http.url", "required"},
		{"http scheme", `{"type": "http", "http": {"url": "ftp://x/"}}`, "sink.http.url", `scheme must be http or https, got "ftp"`},
		{"http password", `{"type": "http", "http": {"url": "http://u:secret@127.0.0.1/"}}`, "sink.http.url", "carries a password"},
		{"http mode", `{"type": "http", "http": {"url": "http://127.0.0.1/", "mode": "stream"}}`, "sink.http.mode", `"stream" is not one of batch, single`},
		{"http concurrency", `{"type": "http", "http": {"url": "http://127.0.0.1/", "max_concurrency": 5000}}`, "sink.http.max_concurrency", "outside 1..1024"},
		{"http header name", `{"type": "http", "http": {"url": "http://127.0.0.1/", "headers_env": {"Bad Header": "X"}}}`, `sink.http.headers_env["Bad Header"]`, "not a valid header name"},
		{"http cert without key", `{"type": "http", "http": {"url": "https://127.0.0.1/", "cert_file": "c.pem"}}`, "sink.http.cert_file", "go together"},
		{"http unknown key", `{"type": "http", "http": {"url": "http://127.0.0.1/", "token": "secret"}}`, "sink.http.token", "unknown"},
		{"exec without command", `{"type": "exec", "exec": {"command": []}}`, "sink.exec.command", "required for the exec sink"},
		{"exec poison_after low", `{"type": "exec", "exec": {"command": ["sh"], "poison_after": 2}}`, "sink.exec.poison_after", "2 is outside 3..100"},
		{"exec poison_after high", `{"type": "exec", "exec": {"command": ["sh"], "poison_after": 101}}`, "sink.exec.poison_after", "101 is outside 3..100"},
		{"http poison_after", `{"type": "http", "http": {"url": "http://127.0.0.1/", "poison_after": -1}}`, "sink.http.poison_after", "-1 is outside 3..100"},
		{"postgres without dsn", `{"type": "postgres", "postgres": {}}`, "sink.postgres", "one of dsn_file or dsn_env is required"},
		{"postgres inline dsn", `{"type": "postgres", "postgres": {"dsn": "postgres://u:secret@db/app"}}`, "sink.postgres.dsn", "unknown"},
		{"postgres both dsn", `{"type": "postgres", "postgres": {"dsn_file": "a", "dsn_env": "B"}}`, "sink.postgres", "not both"},
		{"postgres table", `{"type": "postgres", "postgres": {"dsn_env": "B", "table": "events; drop"}}`, "sink.postgres.table", "is not a table name"},
		{"postgres statement", `{"type": "postgres", "postgres": {"dsn_env": "B", "statement": "INSERT INTO t VALUES (@data)"}}`, "sink.postgres.statement", "must use @event_id"},
		{"nats wildcard", `{"type": "nats", "nats": {"subject": "work.>"}}`, "sink.nats.subject", "must be literal"},
		{"nats reserved", `{"type": "nats", "nats": {"subject": "$JS.API.x"}}`, "sink.nats.subject", "reserved"},
		{"section of another type", `{"type": "exec", "exec": {"command": ["sh"]}, "http": {"url": "http://127.0.0.1/"}}`, "sink.http", `set, but sink.type is "exec"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadEdgeWithSink(t, tc.sink)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a ValidationError, got %v", err)
			}
			for _, p := range ve.Problems {
				if p.Path == tc.path && strings.Contains(p.Msg, tc.msg) {
					if strings.Contains(err.Error(), "secret") {
						t.Errorf("the error repeats a secret: %v", err)
					}
					return
				}
			}
			t.Fatalf("want %s: …%s…, got %v", tc.path, tc.msg, err)
		})
	}
}

func TestConfig_Sink_Files(t *testing.T) {
	for _, tc := range []struct {
		name, sink, path, msg string
	}{
		{"command not found", `{"type": "exec", "exec": {"command": ["leafline-no-such-worker"]}}`, "sink.exec.command[0]", "leafline-no-such-worker"},
		{"dsn env unset", `{"type": "postgres", "postgres": {"dsn_env": "LEAFLINE_TEST_UNSET_DSN"}}`, "sink.postgres.dsn_env", "LEAFLINE_TEST_UNSET_DSN is unset or empty"},
		{"dsn file missing", `{"type": "postgres", "postgres": {"dsn_file": "/nonexistent/dsn"}}`, "sink.postgres.dsn_file", "cannot read /nonexistent/dsn"},
		{"ca file missing", `{"type": "http", "http": {"url": "https://127.0.0.1/", "ca_file": "/nonexistent/ca.pem"}}`, "sink.http.ca_file", "cannot read"},
		{"header env unset", `{"type": "http", "http": {"url": "http://127.0.0.1/", "headers_env": {"Authorization": "LEAFLINE_TEST_UNSET_TOKEN"}}}`, "sink.http.headers_env.Authorization", "LEAFLINE_TEST_UNSET_TOKEN is unset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := loadEdgeWithSink(t, tc.sink)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			err = cfg.CheckFiles()
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a ValidationError, got %v", err)
			}
			for _, p := range ve.Problems {
				if p.Path == tc.path && strings.Contains(p.Msg, tc.msg) {
					return
				}
			}
			t.Fatalf("want %s: …%s…, got %v", tc.path, tc.msg, err)
		})
	}
}

func TestConfig_Sink_Good(t *testing.T) {
	cfg, err := loadEdgeWithSink(t, `{"type": "exec", "exec": {"command": ["sh", "worker.sh"]}}`)
	if err != nil {
		t.Fatal(err)
	}
	if e := cfg.Sink.Exec; e.Timeout.D().String() != "30s" || e.RestartBackoff.D().String() != "1s" {
		t.Errorf("exec defaults: %+v", e)
	}
	if err := cfg.CheckFiles(); err != nil {
		t.Errorf("CheckFiles: %v", err)
	}
	cfg, err = loadEdgeWithSink(t, `{"type": "http", "http": {"url": "http://127.0.0.1:8080/events"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.Sink.HTTP; h.Mode != "batch" || h.MaxConcurrency != 4 || h.Timeout.D().String() != "10s" {
		t.Errorf("http defaults: %+v", h)
	}
}
