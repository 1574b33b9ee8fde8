//go:build unix

package sink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leafline/leafline/internal/pgtest"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/sink/sinktest"
	"github.com/leafline/leafline/systest"
	"github.com/leafline/leafline/topology"
)

// TestPostgresConformance runs the conformance suite for the default
// table (bytea and jsonb) and for a user statement, each on its own tables
// of one real server.
func TestPostgresConformance(t *testing.T) {
	srv := pgtest.Start(t)
	for _, dt := range []string{"bytea", "jsonb"} {
		t.Run(dt, func(t *testing.T) {
			sinktest.Run(t, newPGTarget(t, srv, pgTable{dataType: dt}))
		})
	}
	t.Run("statement", func(t *testing.T) {
		sinktest.Run(t, newPGTarget(t, srv, pgTable{statement: true}))
	})
}

// TestPostgres runs the postgres sink's own cases on one real server
// (initdb takes seconds); each case uses its own tables.
func TestPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	t.Run("JSONBRefusesNonJSON", func(t *testing.T) { testPGNonJSON(t, srv) })
	t.Run("Statement", func(t *testing.T) { testPGStatement(t, srv) })
	t.Run("StatementErrorsAreTemporary", func(t *testing.T) { testPGMisconfigured(t, srv) })
	t.Run("DuplicateInBatch", func(t *testing.T) { testPGDuplicates(t, srv) })
	t.Run("CreatesTable", func(t *testing.T) { testPGCreatesTable(t, srv) })
	t.Run("CommitRefusal", func(t *testing.T) { testPGCommitRefusal(t, srv) })
	t.Run("ConnectionDropped", func(t *testing.T) { testPGDropped(t, srv) })
	t.Run("DSNFromEnv", func(t *testing.T) { testPGDSNEnv(t, srv) })
	t.Run("PasswordNeverShown", func(t *testing.T) { testPGPassword(t, srv) })
}

// TestPostgresBox runs the whole-system cases with the postgres sink at the
// edge, on a server of its own.
func TestPostgresBox(t *testing.T) {
	t.Parallel() // a system of its own, mostly waiting out an outage
	if testing.Short() {
		t.Skip("the box conformance cases run a whole system; skipped with -short")
	}
	srv := pgtest.Start(t)
	systest.RunSink(t, newPGTarget(t, srv, pgTable{dataType: "jsonb"}), systest.SinkOptions{})
}

// pgTable says what a pgTarget writes to: the sink's default table (of
// dataType), or a user table through a statement.
type pgTable struct {
	dataType  string
	statement bool
}

// pgTarget is a table on a real server. A trigger on it refuses events
// listed in <table>_refusals, permanently (SQLSTATE 23514, a check
// violation) or for the next `remaining` attempts (40001, a serialization
// failure; counted by a sequence, which a rollback does not undo), and
// sleeps <table>_delay seconds per row.
type pgTarget struct {
	srv   *pgtest.Server
	table string
	idCol string
	cfg   topology.PostgresSinkConfig
	seqs  atomic.Int64
}

var pgTables atomic.Int64

func newPGTarget(t *testing.T, srv *pgtest.Server, kind pgTable) *pgTarget {
	tg := &pgTarget{srv: srv, table: fmt.Sprintf("t%d", pgTables.Add(1)), idCol: "event_id"}
	tg.cfg = topology.PostgresSinkConfig{
		Table:    tg.table,
		DataType: kind.dataType,
		Timeout:  topology.Duration(2 * time.Second),
	}
	if kind.statement {
		// A table of the user's own shape: the statement absorbs a
		// redelivery, and ignores origin_stream.
		tg.idCol = "id"
		pgExec(t, srv, fmt.Sprintf(`CREATE TABLE %s (id text PRIMARY KEY, subj text NOT NULL, body bytea)`, tg.table))
		tg.cfg.Statement = fmt.Sprintf(`INSERT INTO %s (id, subj, body) VALUES (@event_id, @subject, @data)
			ON CONFLICT (id) DO NOTHING`, tg.table)
	} else {
		// The sink's own table, made before the sink so that the trigger
		// can be attached: the sink's CREATE TABLE IF NOT EXISTS leaves it.
		pgExec(t, srv, fmt.Sprintf(`CREATE TABLE %s (event_id text PRIMARY KEY, subject text NOT NULL,
			origin_stream text NOT NULL, data %s, received_at timestamptz NOT NULL DEFAULT now())`, tg.table, kind.dataType))
	}
	pgExec(t, srv, fmt.Sprintf(`
CREATE TABLE %[1]s_refusals (event_id text PRIMARY KEY, permanent bool NOT NULL, remaining int NOT NULL, counter text NOT NULL);
CREATE TABLE %[1]s_delay (seconds float8 NOT NULL);
INSERT INTO %[1]s_delay VALUES (0);
CREATE FUNCTION %[1]s_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	id text := to_jsonb(NEW) ->> TG_ARGV[0];
	r record;
	d float8;
BEGIN
	SELECT * INTO r FROM %[1]s_refusals WHERE event_id = id;
	IF FOUND THEN
		IF r.permanent THEN
			RAISE EXCEPTION 'event refused by the test' USING ERRCODE = '23514';
		ELSIF nextval(r.counter::regclass) <= r.remaining THEN
			RAISE EXCEPTION 'event refused for now by the test' USING ERRCODE = '40001';
		END IF;
	END IF;
	SELECT seconds INTO d FROM %[1]s_delay;
	IF d > 0 THEN
		PERFORM pg_sleep(d);
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER guard BEFORE INSERT ON %[1]s FOR EACH ROW EXECUTE FUNCTION %[1]s_guard('%[2]s');
`, tg.table, tg.idCol))
	return tg
}

func (tg *pgTarget) NewSink(t *testing.T) sink.Sink {
	cfg := tg.cfg
	cfg.DSNFile = pgWriteDSN(t, tg.srv.DSN())
	s, err := sink.NewPostgres(cfg, pgLogger(t))
	if err != nil {
		t.Fatalf("NewPostgres: %v", err)
	}
	return s
}

func (tg *pgTarget) Stored(t *testing.T, eventID string) int {
	return pgCount(t, tg.srv, tg.table, tg.idCol, eventID)
}

func (tg *pgTarget) Refuse(t *testing.T, eventID string, permanent bool, times int) {
	seq := fmt.Sprintf("%s_seq%d", tg.table, tg.seqs.Add(1))
	pgExec(t, tg.srv, "CREATE SEQUENCE "+seq)
	pgExec(t, tg.srv, fmt.Sprintf(`INSERT INTO %s_refusals VALUES ($1, $2, $3, $4)`, tg.table), eventID, permanent, times, seq)
}

func (tg *pgTarget) SetDown(t *testing.T, down bool) {
	if down {
		tg.srv.Stop(t)
	} else {
		tg.srv.Start(t)
	}
}

func (tg *pgTarget) SetDelay(t *testing.T, d time.Duration) {
	pgExec(t, tg.srv, fmt.Sprintf(`UPDATE %s_delay SET seconds = $1`, tg.table), d.Seconds())
}

func testPGNonJSON(t *testing.T, srv *pgtest.Server) {
	tg := newPGTarget(t, srv, pgTable{dataType: "jsonb"})
	s := newPGSink(t, tg.cfg, srv.DSN(), nil)
	evs := sinktest.Events(5)
	evs[1].Data = []byte("not json")
	evs[3].Data = nil
	errs := s.Write(context.Background(), evs)
	for i, err := range errs {
		switch i {
		case 1, 3:
			if !sink.IsPermanent(err) || !strings.Contains(err.Error(), "22P02") {
				t.Errorf("event %d, not JSON: want a permanent failure with SQLSTATE 22P02, got %v", i, err)
			}
			if err != nil && strings.Contains(err.Error(), "not json") {
				t.Errorf("event %d: the error quotes the payload: %v", i, err)
			}
		default:
			if err != nil {
				t.Errorf("event %d: want success beside the refused ones, got %v", i, err)
			}
		}
	}
	for i, ev := range evs {
		want := 1
		if i == 1 || i == 3 {
			want = 0
		}
		if got := tg.Stored(t, ev.ID); got != want {
			t.Errorf("event %d: %d rows, want %d", i, got, want)
		}
	}
	// The stored payload is the JSON itself, queryable as such.
	var n int
	pgQueryRow(t, srv, fmt.Sprintf(`SELECT (data->>'n')::int FROM %s WHERE event_id = $1`, tg.table), []any{evs[2].ID}, &n)
	if n != 2 {
		t.Errorf("data->>'n' = %d, want 2", n)
	}
}

// testPGStatement: the user's statement gets every named parameter, any
// number of times, and a CHECK of the user's table refuses an event
// permanently.
func testPGStatement(t *testing.T, srv *pgtest.Server) {
	pgExec(t, srv, `CREATE TABLE app_orders (id text PRIMARY KEY, stream text NOT NULL, subject text NOT NULL,
		kind text NOT NULL CHECK (kind <> 'bad'), doc jsonb NOT NULL)`)
	cfg := topology.PostgresSinkConfig{
		DataType: "jsonb",
		Statement: `INSERT INTO app_orders (id, stream, subject, kind, doc)
			VALUES (@event_id, @origin_stream, @subject, @data::jsonb->>'kind', @data)
			ON CONFLICT (id) DO NOTHING`,
		Timeout: topology.Duration(5 * time.Second),
	}
	s := newPGSink(t, cfg, srv.DSN(), nil)
	evs := sinktest.Events(4)
	kinds := []string{"a", "bad", "b", ""}
	for i := range evs {
		evs[i].OriginStream = fmt.Sprintf("L1%c", 'A'+i)
		evs[i].Data = []byte(fmt.Sprintf(`{"kind":%q}`, kinds[i]))
	}
	evs[3].Data = []byte(`{}`) // kind is NULL: NOT NULL refuses it
	errs := s.Write(context.Background(), evs)
	for i, err := range errs {
		switch i {
		case 1:
			if !sink.IsPermanent(err) || !strings.Contains(err.Error(), "23514") {
				t.Errorf("event %d: want a permanent check violation (23514), got %v", i, err)
			}
		case 3:
			if !sink.IsPermanent(err) || !strings.Contains(err.Error(), "23502") {
				t.Errorf("event %d: want a permanent not-null violation (23502), got %v", i, err)
			}
		default:
			if err != nil {
				t.Errorf("event %d: %v", i, err)
			}
		}
	}
	for _, i := range []int{0, 2} {
		var stream, subject, kind string
		pgQueryRow(t, srv, `SELECT stream, subject, kind FROM app_orders WHERE id = $1`, []any{evs[i].ID}, &stream, &subject, &kind)
		if stream != evs[i].OriginStream || subject != evs[i].Subject || kind != kinds[i] {
			t.Errorf("event %d stored as (%q, %q, %q), want (%q, %q, %q)", i, stream, subject, kind, evs[i].OriginStream, evs[i].Subject, kinds[i])
		}
	}
	if n := pgCountAll(t, srv, "app_orders"); n != 2 {
		t.Errorf("app_orders holds %d rows, want 2", n)
	}

	// A parameter the sink does not provide, or no @event_id, is refused
	// at construction.
	for _, stmt := range []string{
		`INSERT INTO app_orders (id) VALUES (@event_id || @tenant)`,
		`INSERT INTO app_orders (id) VALUES (@subject)`,
	} {
		cfg.Statement = stmt
		if _, err := sink.NewPostgres(pgWithDSNFile(t, cfg, srv.DSN()), nil); err == nil || !strings.HasPrefix(err.Error(), "sink.postgres.statement: ") {
			t.Errorf("%s: want a sink.postgres.statement error, got %v", stmt, err)
		}
	}
}

// testPGMisconfigured: a statement the server cannot run (a missing table,
// bad SQL) fails every event temporarily, and is logged at error with its
// SQLSTATE.
func testPGMisconfigured(t *testing.T, srv *pgtest.Server) {
	// A trigger that refuses with a plain RAISE (P0001) rather than a
	// class-23 code: taken as a misconfiguration too.
	pgExec(t, srv, `
CREATE TABLE raising (id text PRIMARY KEY);
CREATE FUNCTION raising_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'no'; END $$;
CREATE TRIGGER guard BEFORE INSERT ON raising FOR EACH ROW EXECUTE FUNCTION raising_guard()`)
	for _, tc := range []struct{ name, stmt, code string }{
		{"undefined table", `INSERT INTO no_such_table (id) VALUES (@event_id)`, "42P01"},
		{"syntax", `INSERT INTO raising (id) VALUE (@event_id)`, "42601"},
		{"plain RAISE", `INSERT INTO raising (id) VALUES (@event_id)`, "P0001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			s := newPGSink(t, topology.PostgresSinkConfig{Statement: tc.stmt, Timeout: topology.Duration(5 * time.Second)}, srv.DSN(), &logs)
			evs := sinktest.Events(3)
			for i, err := range s.Write(context.Background(), evs) {
				if err == nil || sink.IsPermanent(err) {
					t.Errorf("event %d: want a temporary failure, got %v", i, err)
				}
			}
			if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), tc.code) {
				t.Errorf("want an error log with SQLSTATE %q, got:\n%s", tc.code, logs.String())
			}
		})
	}
}

// testPGDuplicates: the same event twice in one batch, beside a refused
// one: every position gets its own result.
func testPGDuplicates(t *testing.T, srv *pgtest.Server) {
	tg := newPGTarget(t, srv, pgTable{dataType: "bytea"})
	s := newPGSink(t, tg.cfg, srv.DSN(), nil)
	evs := sinktest.Events(3)
	tg.Refuse(t, evs[1].ID, true, 0)
	batch := []sink.Event{evs[0], evs[1], evs[0], evs[2], evs[1], evs[2]}
	errs := s.Write(context.Background(), batch)
	for i, err := range errs {
		refused := batch[i].ID == evs[1].ID
		if refused != sink.IsPermanent(err) || (!refused && err != nil) {
			t.Errorf("position %d (%s, refused %v): got %v", i, batch[i].ID, refused, err)
		}
	}
	for i, want := range []int{1, 0, 1} {
		if got := tg.Stored(t, evs[i].ID); got != want {
			t.Errorf("event %d: %d rows, want %d", i, got, want)
		}
	}
}

// testPGCreatesTable: the default table, schema-qualified, is created on
// the first write, with the documented columns.
func testPGCreatesTable(t *testing.T, srv *pgtest.Server) {
	pgExec(t, srv, `CREATE SCHEMA app`)
	cfg := topology.PostgresSinkConfig{Table: "app.Events", DataType: "jsonb"}
	s := newPGSink(t, cfg, srv.DSN(), nil)
	evs := sinktest.Events(2)
	for i, err := range s.Write(context.Background(), evs) {
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	var cols string
	pgQueryRow(t, srv, `SELECT string_agg(column_name || ' ' || data_type, ', ' ORDER BY ordinal_position)
		FROM information_schema.columns WHERE table_schema = 'app' AND table_name = 'Events'`, nil, &cols)
	want := "event_id text, subject text, origin_stream text, data jsonb, received_at timestamp with time zone"
	if cols != want {
		t.Errorf("columns: %s\nwant:    %s", cols, want)
	}
	if n := pgCount(t, srv, `app."Events"`, "origin_stream", "L1A"); n != 2 {
		t.Errorf("table holds %d rows, want 2", n)
	}

	// Dropped behind the sink's back: the batch fails temporarily once,
	// and the table is created again.
	pgExec(t, srv, `DROP TABLE app."Events"`)
	more := sinktest.Events(1)
	if err := s.Write(context.Background(), more)[0]; err == nil || sink.IsPermanent(err) {
		t.Errorf("write to a dropped table: want a temporary failure, got %v", err)
	}
	if err := s.Write(context.Background(), more)[0]; err != nil {
		t.Errorf("write after the table was dropped: %v", err)
	}
}

// testPGCommitRefusal: a deferred constraint refuses the batch at COMMIT,
// where no statement names the culprit: the events are then written one by
// one, and only the culprit fails.
func testPGCommitRefusal(t *testing.T, srv *pgtest.Server) {
	pgExec(t, srv, `
CREATE TABLE parents (id text PRIMARY KEY);
INSERT INTO parents VALUES ('p');
CREATE TABLE children (id text PRIMARY KEY,
	parent text REFERENCES parents DEFERRABLE INITIALLY DEFERRED)`)
	cfg := topology.PostgresSinkConfig{
		DataType:  "jsonb",
		Statement: `INSERT INTO children VALUES (@event_id, @data::jsonb->>'parent') ON CONFLICT DO NOTHING`,
	}
	var logs bytes.Buffer
	s := newPGSink(t, cfg, srv.DSN(), &logs)
	evs := sinktest.Events(4)
	for i := range evs {
		evs[i].Data = []byte(`{"parent":"p"}`)
	}
	evs[2].Data = []byte(`{"parent":"nobody"}`)
	for i, err := range s.Write(context.Background(), evs) {
		if i == 2 {
			if !sink.IsPermanent(err) || !strings.Contains(err.Error(), "23503") {
				t.Errorf("orphan: want a permanent foreign key violation (23503), got %v", err)
			}
		} else if err != nil {
			t.Errorf("event %d: %v", i, err)
		}
	}
	if n := pgCount(t, srv, "children", "parent", "p"); n != 3 {
		t.Errorf("children holds %d rows, want 3", n)
	}
	if !strings.Contains(logs.String(), "one by one") {
		t.Errorf("want a log of the one-by-one fallback, got:\n%s", logs.String())
	}
}

// testPGDropped: the server drops the sink's pooled connection between two
// writes (as a restart does): the next write succeeds on a fresh one.
func testPGDropped(t *testing.T, srv *pgtest.Server) {
	var logs bytes.Buffer
	s := newPGSink(t, topology.PostgresSinkConfig{Table: "dropped"}, srv.DSN(), &logs)
	for round := range 3 {
		evs := sinktest.Events(3)
		for i, err := range s.Write(context.Background(), evs) {
			if err != nil {
				t.Errorf("round %d, event %d: %v", round, i, err)
			}
		}
		var n int
		pgQueryRow(t, srv, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = 'leafline' AND pid <> pg_backend_pid()`, nil, &n)
		if n == 0 {
			t.Fatalf("round %d: no connection of the sink to drop", round)
		}
	}
	if n := pgCountAll(t, srv, "dropped"); n != 9 {
		t.Errorf("dropped holds %d rows, want 9", n)
	}
	if !strings.Contains(logs.String(), "connection lost") {
		t.Errorf("want the retry on a fresh connection logged, got:\n%s", logs.String())
	}
}

// testPGDSNEnv: the connection string from an environment variable, and
// construction errors that name the config path.
func testPGDSNEnv(t *testing.T, srv *pgtest.Server) {
	t.Setenv("LEAFLINE_TEST_PG_DSN", "  "+srv.DSN()+"\n")
	s, err := sink.NewPostgres(topology.PostgresSinkConfig{DSNEnv: "LEAFLINE_TEST_PG_DSN", Table: "from_env"}, nil)
	if err != nil {
		t.Fatalf("NewPostgres: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	evs := sinktest.Events(2)
	for i, err := range s.Write(context.Background(), evs) {
		if err != nil {
			t.Errorf("event %d: %v", i, err)
		}
	}
	if n := pgCountAll(t, srv, "from_env"); n != 2 {
		t.Errorf("from_env holds %d rows, want 2", n)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	t.Setenv("LEAFLINE_TEST_PG_EMPTY", "")
	for _, tc := range []struct {
		name string
		cfg  topology.PostgresSinkConfig
		want string
	}{
		{"unset env", topology.PostgresSinkConfig{DSNEnv: "LEAFLINE_TEST_PG_UNSET"}, "sink.postgres.dsn_env"},
		{"empty env", topology.PostgresSinkConfig{DSNEnv: "LEAFLINE_TEST_PG_EMPTY"}, "sink.postgres.dsn_env"},
		{"missing file", topology.PostgresSinkConfig{DSNFile: "/nonexistent/dsn"}, "sink.postgres.dsn_file"},
		{"empty file", topology.PostgresSinkConfig{DSNFile: empty}, "sink.postgres.dsn_file"},
		{"neither", topology.PostgresSinkConfig{}, "sink.postgres"},
		{"both", topology.PostgresSinkConfig{DSNFile: empty, DSNEnv: "X"}, "sink.postgres"},
		{"data type", topology.PostgresSinkConfig{DSNFile: empty, DataType: "json"}, "sink.postgres.data_type"},
	} {
		_, err := sink.NewPostgres(tc.cfg, nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want+":") {
			t.Errorf("%s: want an error naming %s, got %v", tc.name, tc.want, err)
		}
	}
}

// testPGPassword: a password in the connection string appears in no error
// and no log: not when the string cannot be parsed, not when the server is
// unreachable, not when the password is wrong.
func testPGPassword(t *testing.T, srv *pgtest.Server) {
	const pw = "Sup3r-s3cret-pw"
	pgExec(t, srv, `CREATE ROLE writer LOGIN PASSWORD '`+pw+`'`)
	pgExec(t, srv, `GRANT CREATE ON SCHEMA public TO writer`)
	wantHidden := func(what, text string) {
		t.Helper()
		if strings.Contains(text, pw) {
			t.Errorf("%s shows the password: %s", what, text)
		}
	}

	// Cannot be parsed, in both forms.
	for _, dsn := range []string{
		"postgres://writer:" + pw + "@host:notaport/db",
		"host=h port=notaport user=writer password=" + pw,
		"postgres://writer:" + pw + "@ho%zzst/db",
	} {
		_, err := sink.NewPostgres(pgWithDSNFile(t, topology.PostgresSinkConfig{}, dsn), nil)
		if err == nil || !strings.HasPrefix(err.Error(), "sink.postgres.dsn_file: ") {
			t.Errorf("unparseable DSN: want a sink.postgres.dsn_file error, got %v", err)
		}
		if err != nil {
			wantHidden("parse error", err.Error())
			t.Logf("parse error: %v", err)
		}
	}

	base := fmt.Sprintf("host=%s port=%d user=writer dbname=postgres sslmode=disable", srv.SocketDir(), pgtest.Port)
	for _, tc := range []struct{ name, dsn string }{
		{"unreachable", fmt.Sprintf("host=%s port=%d user=writer password=%s", t.TempDir(), pgtest.Port, pw)},
		{"wrong password", base + " password=" + pw + "x"},
		{"right password", base + " password=" + pw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			s := newPGSink(t, topology.PostgresSinkConfig{Table: "pw_events", Timeout: topology.Duration(5 * time.Second)}, tc.dsn, &logs)
			evs := sinktest.Events(2)
			for i, err := range s.Write(context.Background(), evs) {
				if tc.name == "right password" {
					if err != nil {
						t.Errorf("event %d: %v", i, err)
					}
					continue
				}
				if err == nil || sink.IsPermanent(err) {
					t.Errorf("event %d: want a temporary failure, got %v", i, err)
				}
				if tc.name == "unreachable" && !errors.Is(err, sink.ErrUnavailable) {
					t.Errorf("event %d: want ErrUnavailable, got %v", i, err)
				}
				if err != nil {
					wantHidden("write error", err.Error())
				}
			}
			wantHidden("log", logs.String())
			if tc.name == "wrong password" && !strings.Contains(logs.String(), "28P01") {
				t.Errorf("wrong password: want an error log with SQLSTATE 28P01, got:\n%s", logs.String())
			}
		})
	}
}

// BenchmarkPostgres measures events per second through the default table
// on a unix socket, fsync on, one transaction per batch.
func BenchmarkPostgres(b *testing.B) {
	srv := pgtest.Start(b)
	for _, bc := range []struct {
		dataType string
		batch    int
	}{{"bytea", 256}, {"bytea", 1000}, {"jsonb", 1000}} {
		b.Run(fmt.Sprintf("%s/batch=%d", bc.dataType, bc.batch), func(b *testing.B) {
			table := fmt.Sprintf("bench_%s_%d", bc.dataType, bc.batch)
			s, err := sink.NewPostgres(topology.PostgresSinkConfig{DSNFile: pgWriteDSN(b, srv.DSN()), Table: table, DataType: bc.dataType}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			// The first write creates the table and prepares the statement.
			s.Write(context.Background(), sinktest.Events(1))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				evs := sinktest.Events(bc.batch) // new rows, as in production
				b.StartTimer()
				for j, err := range s.Write(context.Background(), evs) {
					if err != nil {
						b.Fatalf("event %d: %v", j, err)
					}
				}
			}
			b.ReportMetric(float64(b.N*bc.batch)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

func newPGSink(t *testing.T, cfg topology.PostgresSinkConfig, dsn string, logs *bytes.Buffer) *sink.PostgresSink {
	t.Helper()
	var log *slog.Logger
	if logs != nil {
		log = slog.New(slog.NewTextHandler(&pgLockedWriter{w: logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	} else {
		log = pgLogger(t)
	}
	s, err := sink.NewPostgres(pgWithDSNFile(t, cfg, dsn), log)
	if err != nil {
		t.Fatalf("NewPostgres: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func pgWithDSNFile(t *testing.T, cfg topology.PostgresSinkConfig, dsn string) topology.PostgresSinkConfig {
	cfg.DSNFile = pgWriteDSN(t, dsn)
	return cfg
}

func pgWriteDSN(t testing.TB, dsn string) string {
	p := filepath.Join(t.TempDir(), "dsn")
	if err := os.WriteFile(p, []byte(dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func pgLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(pgTWriter{t}, nil))
}

// pgTWriter sends log lines to t.Log.
type pgTWriter struct{ t *testing.T }

func (w pgTWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

type pgLockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (w *pgLockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// pgExec runs sql as the superuser on a connection of its own (the server
// may have restarted since the last call).
func pgExec(t *testing.T, srv *pgtest.Server, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func pgQueryRow(t *testing.T, srv *pgtest.Server, sql string, args []any, dest ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// pgCount counts the rows of table whose column equals value.
func pgCount(t *testing.T, srv *pgtest.Server, table, column string, value any) int {
	t.Helper()
	var n int
	pgQueryRow(t, srv, fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s = $1`, table, column), []any{value}, &n)
	return n
}

func pgCountAll(t *testing.T, srv *pgtest.Server, table string) int {
	t.Helper()
	var n int
	pgQueryRow(t, srv, `SELECT count(*) FROM `+table, nil, &n)
	return n
}
