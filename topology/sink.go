package topology

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/leafline/leafline/topology/internal/syntax"
)

// SinkTypes are the accepted sink.type values.
var SinkTypes = []string{"store", "file", "http", "exec", "postgres", "nats"}

// Bounds of sink.exec.poison_after and sink.http.poison_after. The first
// crash puts every event in flight under suspicion, and a target that
// crashes now and then for its own reasons may crash once more with any
// one of them alone: a third crash with the same event alone is the
// event's own doing.
const (
	defaultPoisonAfter = 3
	minPoisonAfter     = 3
	maxPoisonAfter     = 100
)

// SinkConfig chooses the edge's sink: where each event is handed to the
// software that does the work. Exactly the section of the chosen type may be
// set (sink.http for "http", and so on).
type SinkConfig struct {
	// Type is one of SinkTypes. Zero value means "store": the event is
	// stored in the box's bbolt file in the same transaction as its
	// receipt. Only edge sites have a sink: an l1 or hub config with a type
	// other than "store" is refused.
	Type string `json:"type,omitempty"`
	// Dir is the file sink's directory. Zero value means <data_dir>/sink.
	Dir string `json:"dir,omitempty"`
	// WorstWrite is the slowest single sink write the operator expects.
	// Only the lint uses it: an AckWait shorter than batch_size ×
	// worst_write (without in_progress heartbeats) is reported. Zero value
	// means unknown, and the lint skips that check.
	WorstWrite Duration `json:"worst_write,omitempty"`

	HTTP     *HTTPSinkConfig     `json:"http,omitempty"`
	Exec     *ExecSinkConfig     `json:"exec,omitempty"`
	Postgres *PostgresSinkConfig `json:"postgres,omitempty"`
	NATS     *NATSSinkConfig     `json:"nats,omitempty"`
}

// HTTPSinkConfig posts events to a URL (sink.type "http").
type HTTPSinkConfig struct {
	// URL is the http or https URL events are POSTed to. It may not carry
	// a password: credentials go in HeadersFile or HeadersEnv.
	URL string `json:"url"`
	// Mode is "batch" (zero value: one request per fetched batch) or
	// "single" (one request per event).
	Mode string `json:"mode,omitempty"`
	// Timeout bounds one request. Zero value means 10s.
	Timeout Duration `json:"timeout,omitempty"`
	// MaxConcurrency bounds the requests in flight at once. Zero value
	// means 4.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// CAFile verifies an https server (zero value: the system roots);
	// CertFile and KeyFile are this box's client certificate.
	CAFile   string `json:"ca_file,omitempty"`
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
	// HeadersFile holds extra request headers, one "Name: value" a line
	// (blank lines and lines starting with # are skipped).
	HeadersFile string `json:"headers_file,omitempty"`
	// HeadersEnv maps a header name to the environment variable that holds
	// its value.
	HeadersEnv map[string]string `json:"headers_env,omitempty"`
	// PoisonAfter is how many times in a row the target may reset (or
	// close) the connection while an event's request is on it before the
	// event is a poison event, dead-lettered as worker_crash (see package
	// sink). Zero value means 3; at least 3, at most 100.
	PoisonAfter int `json:"poison_after,omitempty"`
}

// ExecSinkConfig runs a worker process that speaks JSON lines on its stdin
// and stdout (sink.type "exec").
type ExecSinkConfig struct {
	// Command is the worker's argv; Command[0] is looked up in PATH.
	Command []string `json:"command"`
	// Dir is the worker's working directory. Zero value means the box's.
	Dir string `json:"dir,omitempty"`
	// Timeout bounds the wait for one event's result. Zero value means 30s.
	// An event not answered in time is a temporary failure, and the worker
	// is restarted (its answers can no longer be matched).
	Timeout Duration `json:"timeout,omitempty"`
	// RestartBackoff is the first delay before a worker that exited
	// without answering any event is started again; it doubles up to 30s
	// while workers keep exiting so. A worker that answered an event since
	// it started is started again at once, and the delay starts again from
	// RestartBackoff. Zero value means 1s.
	RestartBackoff Duration `json:"restart_backoff,omitempty"`
	// PoisonAfter is how many worker crashes in a row an event may be in
	// flight at before it is a poison event, dead-lettered as worker_crash
	// (see package sink). Zero value means 3; at least 3, at most 100.
	PoisonAfter int `json:"poison_after,omitempty"`
}

// PostgresSinkConfig writes each batch in one PostgreSQL transaction
// (sink.type "postgres").
type PostgresSinkConfig struct {
	// DSNFile or DSNEnv (exactly one) holds the connection string, which
	// may carry a password; the config itself never does.
	DSNFile string `json:"dsn_file,omitempty"`
	DSNEnv  string `json:"dsn_env,omitempty"`
	// Table receives the events when Statement is empty: (event_id text
	// primary key, subject text, origin_stream text, data, received_at
	// timestamptz), created if missing. Zero value means
	// "leafline_events". A schema-qualified name ("app.events") is allowed.
	Table string `json:"table,omitempty"`
	// DataType is the data column's type: "bytea" (zero value: any
	// payload) or "jsonb" (a payload that is not JSON is refused, a
	// permanent failure).
	DataType string `json:"data_type,omitempty"`
	// Statement replaces the insert into Table with the user's own SQL,
	// with the named parameters @event_id, @subject, @origin_stream and
	// @data. It must absorb a repeated event_id (ON CONFLICT … DO
	// NOTHING, say): a redelivered event runs it again.
	Statement string `json:"statement,omitempty"`
	// Timeout bounds one batch's transaction. Zero value means 30s.
	Timeout Duration `json:"timeout,omitempty"`
}

// NATSSinkConfig sends each event as a request to a service on the box's
// own NATS server (sink.type "nats").
type NATSSinkConfig struct {
	// Subject is the service's request subject.
	Subject string `json:"subject"`
	// Timeout bounds one request. Zero value means 5s.
	Timeout Duration `json:"timeout,omitempty"`
	// MaxConcurrency bounds the requests in flight at once. Zero value
	// means 64.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
}

func (s *SinkConfig) setDefaults(dataDir string) {
	setString(&s.Type, "store")
	if dataDir != "" {
		setString(&s.Dir, filepath.Join(dataDir, "sink"))
	}
	if h := s.HTTP; h != nil {
		setString(&h.Mode, "batch")
		setDuration(&h.Timeout, 10*time.Second)
		setInt(&h.MaxConcurrency, 4)
		setInt(&h.PoisonAfter, defaultPoisonAfter)
	}
	if e := s.Exec; e != nil {
		setDuration(&e.Timeout, 30*time.Second)
		setDuration(&e.RestartBackoff, time.Second)
		setInt(&e.PoisonAfter, defaultPoisonAfter)
	}
	if pg := s.Postgres; pg != nil {
		setString(&pg.Table, "leafline_events")
		setString(&pg.DataType, "bytea")
		setDuration(&pg.Timeout, 30*time.Second)
	}
	if n := s.NATS; n != nil {
		setDuration(&n.Timeout, 5*time.Second)
		setInt(&n.MaxConcurrency, 64)
	}
}

func (c *Config) validateSink(p *problems) {
	s := &c.Sink
	if !p.oneOf("sink.type", s.Type, SinkTypes...) {
		return
	}
	for _, sec := range []struct {
		name string
		set  bool
	}{{"http", s.HTTP != nil}, {"exec", s.Exec != nil}, {"postgres", s.Postgres != nil}, {"nats", s.NATS != nil}} {
		if sec.set && sec.name != s.Type {
			p.add("sink."+sec.name, "set, but sink.type is %q", s.Type)
		}
	}
	switch s.Type {
	case "file":
		if s.Dir == "" {
			p.add("sink.dir", "required for the file sink")
		}
	case "http":
		if s.HTTP == nil {
			p.add("sink.http", "required for the http sink (at least its url)")
			return
		}
		s.HTTP.validate(p)
	case "exec":
		if s.Exec == nil || len(s.Exec.Command) == 0 || s.Exec.Command[0] == "" {
			p.add("sink.exec.command", "required for the exec sink: the worker's argv, such as [\"python3\", \"worker.py\"]")
			return
		}
		if s.Exec.Timeout < Duration(10*time.Millisecond) {
			p.add("sink.exec.timeout", "must be at least 10ms, got %s", s.Exec.Timeout)
		}
		p.inRange("sink.exec.poison_after", s.Exec.PoisonAfter, minPoisonAfter, maxPoisonAfter)
	case "postgres":
		if s.Postgres == nil {
			p.add("sink.postgres", "required for the postgres sink (at least dsn_file or dsn_env)")
			return
		}
		s.Postgres.validate(p)
	case "nats":
		if s.NATS == nil || s.NATS.Subject == "" {
			p.add("sink.nats.subject", "required for the nats sink: the service's request subject")
			return
		}
		if p.subject("sink.nats.subject", s.NATS.Subject, false) {
			p.notReserved("sink.nats.subject", s.NATS.Subject)
		}
		p.inRange("sink.nats.max_concurrency", s.NATS.MaxConcurrency, 1, 4096)
	}
}

func (h *HTTPSinkConfig) validate(p *problems) {
	switch u, err := url.Parse(h.URL); {
	case h.URL == "":
		p.add("sink.http.url", "required: the URL events are POSTed to")
	case err != nil:
		p.add("sink.http.url", "not a URL: %v", errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		p.add("sink.http.url", "scheme must be http or https, got %q", u.Scheme)
	case u.Host == "":
		p.add("sink.http.url", "has no host")
	case hasPassword(u):
		p.add("sink.http.url", "carries a password; put credentials in headers_file or headers_env")
	}
	p.oneOf("sink.http.mode", h.Mode, "batch", "single")
	p.inRange("sink.http.max_concurrency", h.MaxConcurrency, 1, 1024)
	p.inRange("sink.http.poison_after", h.PoisonAfter, minPoisonAfter, maxPoisonAfter)
	if (h.CertFile == "") != (h.KeyFile == "") {
		p.add("sink.http.cert_file", "cert_file and key_file go together")
	}
	for name, env := range h.HeadersEnv {
		path := fieldPath("sink.http.headers_env", name)
		if syntax.HeaderName(name) != nil {
			p.add(path, "%q is not a valid header name", name)
		}
		if env == "" {
			p.add(path, "names no environment variable")
		}
	}
}

func (pg *PostgresSinkConfig) validate(p *problems) {
	switch {
	case pg.DSNFile == "" && pg.DSNEnv == "":
		p.add("sink.postgres", "one of dsn_file or dsn_env is required (the connection string is never written in the config)")
	case pg.DSNFile != "" && pg.DSNEnv != "":
		p.add("sink.postgres", "set dsn_file or dsn_env, not both")
	}
	p.oneOf("sink.postgres.data_type", pg.DataType, "bytea", "jsonb")
	if pg.Statement == "" {
		if !syntax.TableName(pg.Table) {
			p.add("sink.postgres.table", "%q is not a table name: letters, digits and _ (not first a digit), optionally schema-qualified", pg.Table)
		}
	} else if !strings.Contains(pg.Statement, "@event_id") {
		p.add("sink.postgres.statement", "must use @event_id, so that a redelivered event is absorbed by its id")
	}
}

// checkSinkFiles reports the sink's files that cannot be read, environment
// variables that are unset, and an exec command that cannot be found.
func (c *Config) checkSinkFiles(p *problems) {
	s := c.Sink
	switch {
	case s.Type == "http" && s.HTTP != nil:
		for _, f := range []struct{ path, name string }{
			{"sink.http.ca_file", s.HTTP.CAFile},
			{"sink.http.cert_file", s.HTTP.CertFile},
			{"sink.http.key_file", s.HTTP.KeyFile},
			{"sink.http.headers_file", s.HTTP.HeadersFile},
		} {
			checkReadable(p, f.path, f.name)
		}
		for name, env := range s.HTTP.HeadersEnv {
			if _, ok := os.LookupEnv(env); !ok {
				p.add(fieldPath("sink.http.headers_env", name), "environment variable %s is unset", env)
			}
		}
	case s.Type == "exec" && s.Exec != nil && len(s.Exec.Command) > 0:
		cmd := s.Exec.Command[0]
		if s.Exec.Dir != "" && !filepath.IsAbs(cmd) && strings.ContainsRune(cmd, filepath.Separator) {
			cmd = filepath.Join(s.Exec.Dir, cmd)
		}
		if _, err := exec.LookPath(cmd); err != nil {
			p.add("sink.exec.command[0]", "%v", unwrapExec(err))
		}
		if d := s.Exec.Dir; d != "" {
			if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
				p.add("sink.exec.dir", "%s is not a directory", d)
			}
		}
	case s.Type == "postgres" && s.Postgres != nil:
		checkReadable(p, "sink.postgres.dsn_file", s.Postgres.DSNFile)
		if e := s.Postgres.DSNEnv; e != "" {
			if v, ok := os.LookupEnv(e); !ok || strings.TrimSpace(v) == "" {
				p.add("sink.postgres.dsn_env", "environment variable %s is unset or empty", e)
			}
		}
	}
}

func checkReadable(p *problems, path, name string) {
	if name == "" {
		return
	}
	fh, err := os.Open(name)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		p.add(path, "cannot read %s: %v", name, err)
		return
	}
	fh.Close()
}

func unwrapExec(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return fmt.Errorf("%s: %w", ee.Name, ee.Err)
	}
	return err
}

func hasPassword(u *url.URL) bool {
	_, ok := u.User.Password()
	return ok
}
