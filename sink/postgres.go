package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leafline/leafline/topology"
)

// PostgresSink writes each batch of events in one PostgreSQL transaction
// (sink.type "postgres").
//
// # What the database receives
//
// For each batch, one transaction holding one statement per event, sent
// pipelined: BEGIN, the statements and COMMIT travel together, so a batch
// costs one round trip and one commit (one fsync at the server). The
// statement is either the insert into the default table, or the user's
// own (sink.postgres.statement).
//
// The default table (sink.postgres.table, default "leafline_events") is
// created by the first write that reaches the server, if it is missing:
//
//	CREATE TABLE IF NOT EXISTS <table> (
//		event_id      text PRIMARY KEY,
//		subject       text NOT NULL,
//		origin_stream text NOT NULL,
//		data          bytea,  -- or jsonb, with data_type "jsonb"
//		received_at   timestamptz NOT NULL DEFAULT now())
//
//	INSERT INTO <table> (event_id, subject, origin_stream, data)
//	VALUES (…) ON CONFLICT (event_id) DO NOTHING
//
// The table name is quoted as written (so case-sensitive), with an optional
// schema ("app.events"); the schema must exist.
//
// A user statement takes the named parameters @event_id, @subject,
// @origin_stream and @data, each any number of times or not at all (any
// other @name is refused by NewPostgres). It must absorb a repeated
// event_id, as ON CONFLICT … DO NOTHING does: a redelivered event runs it
// again.
//
// @data is the payload: bytes with data_type "bytea", text with data_type
// "jsonb", so that the server parses it as JSON and refuses a payload that
// is not (SQLSTATE 22P02).
//
// # Results
//
// Per event, in the order of the batch:
//
//   - The transaction commits: every event in it succeeded, including those
//     already present (absorbed by the statement).
//   - A statement fails with a data exception (SQLSTATE class 22: invalid
//     JSON, a value out of range) or an integrity constraint violation
//     (class 23: a CHECK, a NOT NULL, a foreign key; a trigger refuses an
//     event by raising one, e.g. ERRCODE '23514'): that event fails
//     permanently, with the SQLSTATE and the server's message (never its
//     detail, which may quote the data). The transaction is rolled back
//     and run again without it, until the rest commit or fail otherwise.
//   - A statement fails with a transaction rollback (class 40: a
//     serialization failure, a deadlock): that event fails temporarily,
//     and the rest run again without it, for up to three such events per
//     batch; past that every event not yet decided fails temporarily.
//   - The commit fails with class 22 or 23 (a deferred constraint): no
//     statement names the culprit, so each event is then written in a
//     transaction of its own, with the results above.
//   - The server cannot be reached, the connection breaks (an I/O error,
//     class 08), the server shuts down (57P01-57P03), the batch's timeout
//     (sink.postgres.timeout) passes or ctx is done: every event not yet
//     decided fails temporarily, wrapping ErrUnavailable. A connection
//     that breaks is retried once on a fresh one first: a restarted
//     server leaves broken connections in the pool.
//   - The server is short of resources (class 53), cancelled the statement
//     (57014), or a serialization failure hit the commit: every event not
//     yet decided fails temporarily.
//   - Any other error (a syntax error or a missing table in the statement,
//     class 42; a wrong password, class 28; a trigger's plain RAISE
//     EXCEPTION, P0001): every event not yet decided fails temporarily,
//     and the failure is logged at error with its SQLSTATE: a
//     misconfiguration must not dead-letter events.
//
// The same event_id twice in one batch is fine: the statement runs for
// both, the second is absorbed, and each position gets its own result.
//
// The connection string may carry libpq settings (sslmode, a
// connect_timeout, which is capped at the timeout) and pgxpool's
// (pool_max_conns, default the greater of 4 and the number of CPUs). The
// pool connects when a write needs a connection, never at construction.
// On a timeout the sink asks the server to cancel the running statement
// (a cancel request), so that an abandoned transaction does not hold its
// locks until the server notices the closed connection; Write returns at
// most half a second after the timeout.
//
// NOTE: a user statement that does not absorb a repeated event_id stores a
// redelivered event twice, or fails it permanently on a unique violation
// (class 23). A trigger that refuses an event must raise a class-23 code
// such as 23514: a plain RAISE EXCEPTION is retried forever.
type PostgresSink struct {
	pool    *pgxpool.Pool
	log     *slog.Logger
	timeout time.Duration

	// insert is the statement with positional parameters, and args says
	// which event field each parameter takes.
	insert string
	args   []pgField
	// jsonData passes the payload as text, for a jsonb parameter.
	jsonData bool
	// create makes the default table; empty with a user statement.
	create string
	// created is set once create has run.
	created atomic.Bool

	closeOnce sync.Once
}

// pgField is one of the named parameters of a statement.
type pgField int

const (
	pgFieldEventID pgField = iota
	pgFieldSubject
	pgFieldOriginStream
	pgFieldData
)

// pgMaxConflicts bounds the class-40 failures one Write sets aside before
// it fails the rest of the batch temporarily: a database in a deadlock
// storm would otherwise be asked again for every event.
const pgMaxConflicts = 3

// NewPostgres reads the connection string and prepares a connection pool.
// It does not connect: the database may be down when the box starts, and
// Write connects when it needs to. The connection string is never logged
// nor put in an error (it may hold a password).
func NewPostgres(cfg topology.PostgresSinkConfig, log *slog.Logger) (*PostgresSink, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Table == "" {
		cfg.Table = "leafline_events"
	}
	if cfg.DataType == "" {
		cfg.DataType = "bytea"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = topology.Duration(30 * time.Second)
	}
	if cfg.DataType != "bytea" && cfg.DataType != "jsonb" {
		return nil, fmt.Errorf("sink.postgres.data_type: must be bytea or jsonb, got %q", cfg.DataType)
	}
	dsn, path, err := readPostgresDSN(cfg)
	if err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: the connection string cannot be parsed%s (it is not shown: it may hold a password)", path, pgParseErrorDetail(err, dsn))
	}
	timeout := time.Duration(cfg.Timeout)
	cc := pcfg.ConnConfig
	if cc.ConnectTimeout <= 0 || cc.ConnectTimeout > timeout {
		cc.ConnectTimeout = timeout
	}
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = "leafline"
	}
	// On a timeout, ask the server to cancel the statement rather than only
	// dropping the connection: a dropped connection's transaction lives on
	// at the server (holding its row locks) until the server notices.
	cc.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 500 * time.Millisecond}
	}

	s := &PostgresSink{log: log.With("sink", "postgres"), timeout: timeout, jsonData: cfg.DataType == "jsonb"}
	stmt := cfg.Statement
	if stmt == "" {
		table := pgx.Identifier(strings.Split(cfg.Table, ".")).Sanitize()
		s.create = fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (event_id text PRIMARY KEY, subject text NOT NULL, origin_stream text NOT NULL, data %s, received_at timestamptz NOT NULL DEFAULT now())", table, cfg.DataType)
		stmt = fmt.Sprintf("INSERT INTO %s (event_id, subject, origin_stream, data) VALUES (@event_id, @subject, @origin_stream, @data) ON CONFLICT (event_id) DO NOTHING", table)
	}
	if s.insert, s.args, err = pgPositional(stmt); err != nil {
		return nil, fmt.Errorf("sink.postgres.statement: %w", err)
	}
	if !slices.Contains(s.args, pgFieldEventID) {
		return nil, errors.New("sink.postgres.statement: must use @event_id, so that a redelivered event is absorbed by its id")
	}
	if s.pool, err = pgxpool.NewWithConfig(context.Background(), pcfg); err != nil {
		return nil, fmt.Errorf("sink.postgres: %w", err)
	}
	return s, nil
}

// readPostgresDSN returns the connection string and the config path it came from.
func readPostgresDSN(cfg topology.PostgresSinkConfig) (dsn, path string, err error) {
	switch {
	case cfg.DSNFile != "" && cfg.DSNEnv != "":
		return "", "sink.postgres", errors.New("sink.postgres: set dsn_file or dsn_env, not both")
	case cfg.DSNFile != "":
		path = "sink.postgres.dsn_file"
		b, err := os.ReadFile(cfg.DSNFile)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return "", path, fmt.Errorf("%s: cannot read %s: %w", path, cfg.DSNFile, err)
		}
		dsn = strings.TrimSpace(string(b))
		if dsn == "" {
			return "", path, fmt.Errorf("%s: %s is empty", path, cfg.DSNFile)
		}
	case cfg.DSNEnv != "":
		path = "sink.postgres.dsn_env"
		dsn = strings.TrimSpace(os.Getenv(cfg.DSNEnv))
		if dsn == "" {
			return "", path, fmt.Errorf("%s: environment variable %s is unset or empty", path, cfg.DSNEnv)
		}
	default:
		return "", "sink.postgres", errors.New("sink.postgres: one of dsn_file or dsn_env is required")
	}
	return dsn, path, nil
}

// pgParseErrorDetail returns what is wrong with a connection string, without
// the string. pgx's message quotes the string with its password masked on
// a best-effort basis only, and its cause may quote it whole (a URL parse
// error does), so only pgx's own short reason is kept ("invalid port",
// "failed to parse as URL"), and only when it is plain words.
func pgParseErrorDetail(err error, dsn string) string {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return ""
	}
	msg := pe.Error()
	if cause := errors.Unwrap(pe); cause != nil {
		msg = strings.TrimSuffix(msg, " ("+cause.Error()+")")
	}
	msg = msg[strings.LastIndex(msg, "`: ")+1:]
	msg = strings.TrimPrefix(msg, ": ")
	if msg == "" || !pgPlainWords.MatchString(msg) || strings.Contains(dsn, msg) {
		return ""
	}
	return ": " + msg
}

var pgPlainWords = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_ ]*$`)

// pgPositional rewrites the named parameters of stmt to $1…$n, and returns
// which event field each takes.
func pgPositional(stmt string) (string, []pgField, error) {
	named := pgx.NamedArgs{
		"event_id":      pgFieldEventID,
		"subject":       pgFieldSubject,
		"origin_stream": pgFieldOriginStream,
		"data":          pgFieldData,
	}
	sql, args, err := named.RewriteQuery(context.Background(), nil, stmt, nil)
	if err != nil {
		return "", nil, err
	}
	fields := make([]pgField, len(args))
	for i, a := range args {
		f, ok := a.(pgField)
		if !ok {
			return "", nil, fmt.Errorf("parameter $%d is not one of @event_id, @subject, @origin_stream, @data", i+1)
		}
		fields[i] = f
	}
	return sql, fields, nil
}

// Write writes evs in one transaction; see PostgresSink for the results.
func (s *PostgresSink) Write(ctx context.Context, evs []Event) []error {
	errs := make([]error, len(evs))
	if len(evs) == 0 {
		return errs
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	pending := make([]int, len(evs))
	for i := range pending {
		pending[i] = i
	}
	s.write(ctx, evs, pending, errs)
	return errs
}

// write writes evs[pending] and sets their errs.
func (s *PostgresSink) write(ctx context.Context, evs []Event, pending []int, errs []error) {
	reconnected := false
	conflicts := 0
	for len(pending) > 0 {
		f := s.tx(ctx, evs, pending)
		if f == nil {
			return
		}
		err := f.err
		if ctx.Err() != nil {
			s.failDone(ctx, pending, errs)
			return
		}
		var pe *pgconn.PgError
		class := ""
		if errors.As(err, &pe) && len(pe.Code) == 5 {
			class = pe.Code[:2]
		}
		refused := class == "22" || class == "23"
		down := pgUnavailable(err, class, f.lost)
		switch {
		case refused && f.at >= 0:
			i := pending[f.at]
			errs[i] = Permanent(fmt.Errorf("postgres refused event %s: %w", evs[i].ID, err))
			s.log.Warn("postgres refused event", "event_id", evs[i].ID, "sqlstate", pe.Code, "constraint", pe.ConstraintName)
			pending = pgRemove(pending, f.at)
		case refused && f.at == pgAtCommit && len(pending) > 1:
			s.log.Warn("postgres refused a batch at commit; writing its events one by one",
				"events", len(pending), "sqlstate", pe.Code, "constraint", pe.ConstraintName)
			for n, i := range pending {
				if ctx.Err() != nil {
					s.failDone(ctx, pending[n:], errs)
					return
				}
				s.write(ctx, evs, []int{i}, errs)
			}
			return
		case refused && f.at == pgAtCommit:
			i := pending[0]
			errs[i] = Permanent(fmt.Errorf("postgres refused event %s at commit: %w", evs[i].ID, err))
			s.log.Warn("postgres refused event", "event_id", evs[i].ID, "sqlstate", pe.Code, "constraint", pe.ConstraintName)
			return
		case class == "40" && f.at >= 0 && conflicts < pgMaxConflicts:
			conflicts++
			i := pending[f.at]
			errs[i] = fmt.Errorf("postgres event %s: %w", evs[i].ID, err)
			s.log.Info("postgres event conflicted; retried later", "event_id", evs[i].ID, "sqlstate", pe.Code)
			pending = pgRemove(pending, f.at)
		case down && f.lost && !reconnected:
			// A pooled connection the server dropped (it restarted, or
			// the network failed): the batch runs again on a fresh one.
			// Whatever the lost one did is absorbed as a redelivery.
			reconnected = true
			s.log.Info("postgres connection lost; the batch runs again on a fresh one", "events", len(pending), "error", err)
			s.pool.Reset()
		case down:
			s.log.Warn("postgres unavailable; events retried later", "events", len(pending), "error", err)
			s.failAll(pending, errs, fmt.Errorf("%w: postgres: %w", ErrUnavailable, err))
			return
		case class == "40" || class == "53" || class == "57":
			s.log.Warn("postgres busy; events retried later", "events", len(pending), "sqlstate", pe.Code, "error", err)
			s.failAll(pending, errs, fmt.Errorf("postgres: %w", err))
			return
		default:
			// A misconfiguration (class 42, 28, …) or a failure the server
			// did not explain: never a reason to dead-letter events.
			attrs := []any{"events", len(pending), "error", err}
			if pe != nil {
				attrs = append(attrs, "sqlstate", pe.Code)
				if s.create != "" && pe.Code == "42P01" {
					s.created.Store(false) // the table was dropped: create it again
				}
			}
			s.log.Error("postgres failed the batch; events retried later", attrs...)
			s.failAll(pending, errs, fmt.Errorf("postgres: %w", err))
			return
		}
	}
}

// pgTxFailure is a failed transaction: the error, where it arose (an index
// into pending, pgAtCommit or pgAtOther), and whether the connection was lost.
type pgTxFailure struct {
	err  error
	at   int
	lost bool
}

// Positions of an error that no event's statement raised: at the commit,
// or anywhere else (the connect, BEGIN, the table's creation).
const (
	pgAtCommit = -1
	pgAtOther  = -2
)

// tx runs one transaction for evs[pending]: BEGIN, one statement per
// event and COMMIT, all in one pipeline. Until the default table has been
// created once, its CREATE TABLE IF NOT EXISTS runs first, on its own.
func (s *PostgresSink) tx(ctx context.Context, evs []Event, pending []int) *pgTxFailure {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return &pgTxFailure{err: err, at: pgAtOther}
	}
	defer conn.Release()

	if s.create != "" && !s.created.Load() {
		// Not in the batch: pgx prepares the batch's statements first,
		// and the insert cannot be prepared before its table exists.
		if _, err := conn.Exec(ctx, s.create); err != nil {
			return &pgTxFailure{err: err, at: pgAtOther, lost: conn.Conn().IsClosed()}
		}
		s.created.Store(true)
	}

	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	first := b.Len()
	for _, i := range pending {
		b.Queue(s.insert, s.argsFor(evs[i])...)
	}
	b.Queue("COMMIT")

	br := conn.SendBatch(ctx, b)
	f := &pgTxFailure{at: pgAtOther}
	for q := 0; q < b.Len() && f.err == nil; q++ {
		if _, f.err = br.Exec(); f.err != nil {
			switch {
			case q == b.Len()-1:
				f.at = pgAtCommit
			case q >= first:
				f.at = q - first
			}
		}
	}
	if err := br.Close(); f.err == nil {
		f.err = err
	}
	if f.err == nil {
		return nil
	}
	f.lost = conn.Conn().IsClosed()
	// After a failed statement the transaction is still open, aborted. A
	// failed rollback closes the connection, and the pool drops it.
	_ = br.Tx().Rollback(ctx)
	return f
}

func (s *PostgresSink) argsFor(ev Event) []any {
	args := make([]any, len(s.args))
	for i, f := range s.args {
		switch f {
		case pgFieldEventID:
			args[i] = ev.ID
		case pgFieldSubject:
			args[i] = ev.Subject
		case pgFieldOriginStream:
			args[i] = ev.OriginStream
		case pgFieldData:
			if s.jsonData {
				args[i] = string(ev.Data)
			} else if ev.Data == nil {
				args[i] = []byte{} // an empty payload, not NULL
			} else {
				args[i] = ev.Data
			}
		}
	}
	return args
}

// failDone fails evs[pending] once ctx is done: the batch's timeout, or
// the caller gave up.
func (s *PostgresSink) failDone(ctx context.Context, pending []int, errs []error) {
	cause := context.Cause(ctx)
	s.log.Warn("postgres write timed out or was cancelled; events retried later", "events", len(pending), "error", cause)
	s.failAll(pending, errs, fmt.Errorf("%w: postgres: %w", ErrUnavailable, cause))
}

func (s *PostgresSink) failAll(pending []int, errs []error, err error) {
	for _, i := range pending {
		errs[i] = err
	}
}

// Close closes the connection pool. It is idempotent.
func (s *PostgresSink) Close() error {
	s.closeOnce.Do(s.pool.Close)
	return nil
}

func pgRemove(pending []int, at int) []int {
	return append(pending[:at:at], pending[at+1:]...)
}

// pgUnavailable reports whether err means that the server could not be
// reached or went away: a failed connect, a lost connection, a server
// shutting down (57P01-57P03) or refusing connections (class 08).
func pgUnavailable(err error, class string, lost bool) bool {
	switch class {
	case "08", "57":
		var pe *pgconn.PgError
		errors.As(err, &pe)
		return pe.Code != "57014" // query_canceled is a timeout, not an outage
	case "":
		var ce *pgconn.ConnectError
		return lost || errors.As(err, &ce) || pgconn.Timeout(err)
	}
	return false
}
