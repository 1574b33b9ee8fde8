package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/cmd/leafline/internal/demo"
	"github.com/leafline/leafline/cmd/leafline/internal/sinkbench"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/memlimit"
	"github.com/leafline/leafline/internal/progress"
	"github.com/leafline/leafline/publish"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/status"

	"github.com/leafline/leafline/topology"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed (or the demo lost something)
	exitUsage   = 2 // bad command line or configuration
)

type command struct {
	name, args, help string
	run              func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands []command

func init() {
	commands = []command{
		{"demo", "[--events N] [--cut DURATION] [--bad N --dlq] [--ack-confirm] [--keep] [--sink TYPE --sink-…]", "run L1, hub and edge in one process on loopback and prove every event completes", cmdDemo},
		{"run", "--config FILE", "run the box described by FILE (any role)", cmdRun},
		{"check", "--config FILE", "validate FILE and its topology; exit non-zero listing every problem", cmdCheck},
		{"publish", "--config FILE [--count N] [--batch N] [--event-id ID] [--subject S] [--data TEXT]", "publish events to the origin stream at L1", cmdPublish},
		{"status", "--config FILE EVENT_ID", "print an event's completion record at L1 as JSON", cmdStatus},
		{"pending", "--config FILE [--overdue] [--site S] [--unidentified] [--limit N] [--after CURSOR] [--json]", "list events still pending (or overdue) at L1, or the origin messages without a usable event_id", cmdPending},
		{"summary", "--config FILE [--json]", "counts per status and per site at L1, oldest pending event, how full each stream is", cmdSummary},
		{"cleanup", "--config FILE (--dry-run | --once) [--server URL] [--creds FILE] [--json]", "show what the L1 cleanup policy would delete from the origin stream now, or run one pass (audit record first, then the delete)", cmdCleanup},
		{"audit", "--config FILE [--server URL] [--creds FILE] EVENT_ID", "print the audit records of an event's origin messages that the cleanup deleted", cmdAudit},
		{"metrics", "--config FILE [--json] [--url URL]", "print the running box's leafline_* metrics as a table or JSON", cmdMetrics},
		{"topology", "render|permissions|certs [flags]", "render a site's nats-server config, print a link's permissions, or create a private CA, certificates and nkeys", cmdTopology},
		{"provision", "--config FILE [--server URL] [--creds FILE] [--lint-only] [--server-config FILE]", "create a site's streams and consumers on a stock nats-server, then lint them live (and its configuration file)", cmdProvision},
		{"trim", "--config FILE [--server URL] [--creds FILE] [--every INTERVAL]", "delete from a stock nats-server site's streams what their takers have ACKed (a box does it itself)", cmdTrim},
		{"bench", "[--only PHASES] [--transport LIST] [--backlog N] [--e2e N] [--drain N] [--sinks LIST]", "measure leafline on this machine: the runner, end to end, the drain after a cut, each sink; prints a table and a bench line", cmdBench},
		{"backup", "--config FILE --out ARCHIVE", "copy a stopped box's data dir (streams, consumers, outbox or completion state) into one archive", cmdBackup},
		{"restore", "--config FILE --from ARCHIVE", "fill a stopped box's empty data dir from a backup of its site; its links then take it from where the copy was taken", cmdRestore},
		{"outbox", "check|inspect --config FILE [--json]", "verify the edge's outbox file, or count pending and published receipts (box stopped)", cmdOutbox},
		{"version", "", "print the version, the commit it was built from, and the Go and nats-server versions (also --version)", cmdVersion},
	}
}

func run(ctx context.Context, args []string) int {
	return dispatch(ctx, args, os.Stdout, os.Stderr)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	case "-version", "--version":
		return cmdVersion(ctx, nil, stdout, stderr)
	case sinkbench.EchoWorkerArg:
		// The exec row of leafline bench starts this program as its worker.
		if err := sinkbench.RunEchoWorker(os.Stdin, stdout); err != nil {
			fmt.Fprintf(stderr, "leafline: bench worker: %v\n", err)
			return exitFailure
		}
		return exitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			if wantsHelp(args[1:]) {
				// Help is an answer, not an error: on stdout, exit 0, as
				// Go's tools and natscli do.
				if code := c.run(ctx, args[1:], stdout, stdout); code != exitUsage {
					return code
				}
				return exitOK
			}
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "leafline: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: leafline COMMAND [flags]")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n           %s\n", c.name, c.args, c.help)
	}
}

// newFlags returns a flag set that reports errors to stderr and never exits.
// Its usage names the command's arguments and what it does.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("leafline "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { commandUsage(fs, name) }
	return fs
}

// parse parses args and checks the number of positional arguments. Flags
// may come before, between or after the positional arguments (status ID
// --config F); everything after "--" is positional.
func parse(fs *flag.FlagSet, args []string, positional int, stderr io.Writer) bool {
	var pos, tail []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, tail = args[:i], args[i+1:]
	}
	for {
		if err := fs.Parse(args); err != nil {
			return false
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	// fs.Args() is what the commands read: the positional arguments.
	if err := fs.Parse(append([]string{"--"}, append(pos, tail...)...)); err != nil {
		return false
	}
	if fs.NArg() != positional {
		if positional == 0 {
			fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		} else {
			fmt.Fprintf(stderr, "%s: want %d argument(s), got %d\n", fs.Name(), positional, fs.NArg())
		}
		return false
	}
	return true
}

func loadConfig(fs *flag.FlagSet, path string, stderr io.Writer) (*topology.Config, bool) {
	if path == "" {
		fmt.Fprintf(stderr, "%s: --config FILE is required\n", fs.Name())
		return nil, false
	}
	if err := configMissing(path); err != nil {
		fmt.Fprintf(stderr, "%s: --config: %v\n", fs.Name(), err)
		return nil, false
	}
	cfg, err := topology.LoadConfig(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return nil, false
	}
	return cfg, true
}

func newLogger(cfg topology.LogConfig, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// applyMemoryLimit sets the process's Go memory limit: the config's, the
// environment's, the control group's or the role's default, in that order
// (package memlimit), and logs which.
func applyMemoryLimit(cfg *topology.Config, log *slog.Logger) {
	c := memlimit.For(cfg)
	memlimit.Apply(c)
	log.Info("memory limit", "bytes", c.Bytes, "mib", c.Bytes>>20, "source", c.Source)
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("run", stderr)
	path := fs.String("config", "", "box config `FILE`")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	cfg, ok := loadConfig(fs, *path, stderr)
	if !ok {
		return exitUsage
	}
	log := newLogger(cfg.Log, stderr)
	applyMemoryLimit(cfg, log)
	app, err := leafline.New(cfg, log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return exitUsage
	}
	reloadOnSignal(ctx, app, *path, log, reloadSignals...)
	if err := app.Run(ctx); err != nil {
		log.Error("leafline exited", "err", err)
		return exitFailure
	}
	return exitOK
}

func cmdCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("check", stderr)
	path := fs.String("config", "", "box config `FILE`")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	cfg, ok := loadConfig(fs, *path, stderr)
	if !ok {
		return exitUsage
	}
	if err := cfg.CheckFiles(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return exitUsage
	}
	// What run needs of the machine, beyond the config itself.
	if err := checkDataDir(cfg.DataDir); err != nil {
		fmt.Fprintf(stderr, "%s: %s: %v\n", fs.Name(), *path, err)
		return exitUsage
	}
	// The streams' byte limits must fit what nats-server allows on this
	// disk, or the start fails creating them.
	storage, storageWarnings, err := box.CheckStorage(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s: %v\n", fs.Name(), *path, err)
		return exitUsage
	}
	site, _ := cfg.Topology.Site(cfg.Site)
	fmt.Fprintf(stdout, "%s: ok (site %s, role %s, domain %s, %d sites in topology)\n",
		*path, site.Name, site.Role, site.Domain, len(cfg.Topology.Sites))
	fmt.Fprintf(stdout, "%s: %s\n", *path, storage)
	fmt.Fprintf(stdout, "%s: memory limit %s\n", *path, memlimit.For(cfg))
	for _, w := range append(lintConfig(cfg), storageWarnings...) {
		fmt.Fprintf(stdout, "%s: warning: %s\n", *path, w)
	}
	return exitOK
}

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", stderr)
	events := fs.Int("events", 1000, "events to publish at L1")
	cut := fs.Duration("cut", 3*time.Second, "how long to cut the edge<->hub link")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for every completion")
	dir := fs.String("dir", "", "keep the sites' data under `DIR` (default: a temp dir, removed)")
	verbose := fs.Bool("v", false, "log the boxes' info messages")
	bad := fs.Int("bad", 0, "also publish N bad events (oversize for the edge); with --dlq they are dead-lettered and reported to L1")
	dlq := fs.Bool("dlq", false, "enable the edge's dead-letter queue")
	keep := fs.Bool("keep", false, "keep the sites running after the summary, until Ctrl-C, so that the printed URLs answer")
	confirm := fs.Bool("ack-confirm", false, "confirm every ACK and Term with the server (DoubleAck)")
	sinkType := fs.String("sink", "store", "edge1's sink: store, file, http, exec, postgres or nats")
	sinkURL := fs.String("sink-url", "", "http sink: the `URL` events are POSTed to")
	sinkMode := fs.String("sink-mode", "batch", "http sink: batch or single")
	sinkCommand := fs.String("sink-command", "", "exec sink: the worker's `command` line, split on spaces (no shell quoting)")
	sinkDSNEnv := fs.String("sink-dsn-env", "", "postgres sink: the environment `VAR` holding the connection string")
	sinkSubject := fs.String("sink-subject", "", "nats sink: the service's request `subject` on edge1's NATS server")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	sinkCfg, err := demoSink(*sinkType, *sinkURL, *sinkMode, *sinkCommand, *sinkDSNEnv, *sinkSubject)
	if err != nil {
		fmt.Fprintf(stderr, "leafline demo: %v\n", err)
		return exitUsage
	}
	if *events < 2 || *events > 10_000_000 {
		fmt.Fprintf(stderr, "leafline demo: --events must be 2..10000000, got %d\n", *events)
		return exitUsage
	}
	if *bad < 0 || *bad > 10000 {
		fmt.Fprintf(stderr, "leafline demo: --bad must be 0..10000, got %d\n", *bad)
		return exitUsage
	}
	if *bad > 0 && !*dlq {
		fmt.Fprintln(stderr, "leafline demo: --bad needs --dlq: without a dead-letter queue the edge leaves a bad event unacked for an operator, so it never completes at L1")
		return exitUsage
	}
	if *cut < 0 || *cut > time.Hour || *timeout <= 0 || *timeout > 24*time.Hour {
		fmt.Fprintln(stderr, "leafline demo: --cut must be 0..1h and --timeout 1ns..24h")
		return exitUsage
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	res, err := demo.Run(ctx, demo.RunOptions{
		Events: *events, Cut: *cut, Timeout: *timeout, Dir: *dir, Progress: stderr, Logger: log,
		Bad: *bad, DeadLetter: *dlq, AckConfirm: *confirm, Sink: sinkCfg,
		Hold: holdDemo(ctx, *keep, stdout, stderr),
	})
	if !*keep || err != nil {
		fmt.Fprintln(stdout, res.Summary())
	}
	if err != nil {
		fmt.Fprintf(stderr, "leafline demo: %v\n", err)
		return exitFailure
	}
	if !res.OK() {
		if res.Lost > 0 {
			fmt.Fprintf(stderr, "leafline demo: %d events lost: not completed at L1, and no longer anywhere they could complete from\n", res.Lost)
		}
		if res.Incomplete > 0 {
			fmt.Fprintf(stderr, "leafline demo: %d events incomplete: still on their way (unprocessed in the edge's stream, or their receipt not yet at L1) when --timeout %s ran out\n", res.Incomplete, *timeout)
		}
		if res.DuplicateCompletions > 0 {
			fmt.Fprintf(stderr, "leafline demo: %d completions applied twice at L1\n", res.DuplicateCompletions)
		}
		return exitFailure
	}
	return exitOK
}

// demoSink turns the demo's --sink flags into edge1's sink config, and
// refuses a flag that does not belong to the chosen sink. The config is
// validated with the rest of edge1's, with the same paths as in a file.
func demoSink(typ, url, mode, command, dsnEnv, subject string) (topology.SinkConfig, error) {
	c := topology.SinkConfig{Type: typ}
	given := map[string]bool{"--sink-url": url != "", "--sink-mode": mode != "batch", "--sink-command": command != "", "--sink-dsn-env": dsnEnv != "", "--sink-subject": subject != ""}
	allowed := map[string][]string{}
	switch typ {
	case "store", "file":
	case "http":
		c.HTTP = &topology.HTTPSinkConfig{URL: url, Mode: mode}
		allowed["http"] = []string{"--sink-url", "--sink-mode"}
	case "exec":
		c.Exec = &topology.ExecSinkConfig{Command: strings.Fields(command)}
		allowed["exec"] = []string{"--sink-command"}
	case "postgres":
		c.Postgres = &topology.PostgresSinkConfig{DSNEnv: dsnEnv}
		allowed["postgres"] = []string{"--sink-dsn-env"}
	case "nats":
		c.NATS = &topology.NATSSinkConfig{Subject: subject}
		allowed["nats"] = []string{"--sink-subject"}
	default:
		return c, fmt.Errorf("--sink: %q is not one of %s", typ, strings.Join(topology.SinkTypes, ", "))
	}
	for flag, set := range given {
		if set && !slices.Contains(allowed[typ], flag) {
			return c, fmt.Errorf("%s does not apply to --sink %s", flag, typ)
		}
	}
	return c, nil
}

// connect dials server, by default the box's own NATS client listener,
// with extra options (credentials) if any.
func connect(cfg *topology.Config, server string, extra ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	if server == "" && cfg.Cluster.Enabled() {
		// A box on a cluster has no listener of its own: its cluster's.
		server, extra = cfg.Cluster.ClusterURL(), append(box.ClusterClientOptions(cfg.Cluster), extra...)
	}
	if server == "" {
		server = "nats://" + cfg.NATS.Listen
		// The box's own listener takes nats.auth's password, if it has one.
		user, pw, ok, err := cfg.ClientCredentials()
		if err != nil {
			return nil, nil, err
		}
		if ok {
			extra = append([]nats.Option{nats.UserInfo(user, pw)}, extra...)
		}
	}
	opts := append([]nats.Option{nats.Name("leafline-cli"), nats.Timeout(5 * time.Second)}, extra...)
	nc, err := nats.Connect(server, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s: %w", server, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func cmdPublish(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("publish", stderr)
	path := fs.String("config", "", "L1 box config `FILE`")
	server := fs.String("server", "", "NATS `URL` (default: the config's nats.listen)")
	count := fs.Int("count", 1, "number of events")
	id := fs.String("event-id", "", "event_id (only with --count 1; default: a new time-ordered UUIDv7 per event)")
	subject := fs.String("subject", "", "subject (default: the first origin subject with its wildcard replaced by \"cli\")")
	data := fs.String("data", "", "payload (default: a JSON object holding the event_id)")
	batch := fs.Int("batch", publish.DefaultBatch, "events per atomic batch (1: one publish per event)")
	retryFor := fs.Duration("retry-for", publish.DefaultRetryFor, "how long to send a batch again while the origin stream has no leader (a node down, an election) or is full (waiting for the cleanup to make room)")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	cfg, ok := loadConfig(fs, *path, stderr)
	if !ok || !requireL1("publish", *path, *server, cfg, stderr) {
		return exitUsage
	}
	subj, err := publishArgs(cfg, *count, *batch, *id, *subject)
	if err != nil {
		fmt.Fprintf(stderr, "leafline publish: %v\n", err)
		return exitUsage
	}
	if *retryFor <= 0 || *retryFor > time.Hour {
		fmt.Fprintf(stderr, "leafline publish: --retry-for must be more than 0 and at most 1h, got %v\n", *retryFor)
		return exitUsage
	}
	nc, js, err := connect(cfg, *server)
	if err != nil {
		fmt.Fprintf(stderr, "leafline publish: %v\n", err)
		return exitFailure
	}
	defer nc.Close()
	pub, err := publish.New(publish.Config{JS: js, Stream: cfg.Topology.Events.OriginStream, Batch: *batch, RetryFor: *retryFor})
	if err != nil {
		fmt.Fprintf(stderr, "leafline publish: %v\n", err)
		return exitUsage
	}
	bar := progress.Start(stderr, "leafline publish", int64(*count)) // a terminal only
	defer bar.Stop()
	for done := 0; done < *count; {
		evs := cliEvents(min(*count-done, publish.MaxBatch), *id, subj, *data)
		res, err := pub.Publish(ctx, evs)
		for _, r := range res {
			bar.Println(stdout, fmt.Sprintf("published event_id=%s stream=%s seq=%d duplicate=%t", r.ID, r.Stream, r.Seq, r.Duplicate))
		}
		bar.Add(int64(len(res)))
		if err != nil {
			if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
				err = fmt.Errorf("%w: no stream answered for %s: is L1 running at %s, with its origin stream %s?", err, subj, nc.ConnectedUrlRedacted(), cfg.Topology.Events.OriginStream)
			}
			if strings.Contains(err.Error(), "maximum bytes exceeded") {
				err = fmt.Errorf("%w: %s", err, originFull(ctx, nc, cfg))
			}
			fmt.Fprintf(stderr, "leafline publish: %v\n", err)
			if left := *count - done - len(evs); left > 0 {
				fmt.Fprintf(stderr, "leafline publish: %d further events were not attempted\n", left)
			}
			return exitFailure
		}
		done += len(evs)
	}
	return exitOK
}

// publishArgs checks publish's flags and returns the subject to publish
// on: the one given, or the first origin subject made concrete.
func publishArgs(cfg *topology.Config, count, batch int, id, subject string) (string, error) {
	switch {
	case count < 1 || count > 10_000_000:
		return "", fmt.Errorf("--count must be 1..10000000, got %d", count)
	case batch < 1 || batch > publish.MaxBatch:
		return "", fmt.Errorf("--batch must be 1..%d, got %d", publish.MaxBatch, batch)
	case id != "" && count != 1:
		return "", errors.New("--event-id needs --count 1")
	}
	if id != "" {
		if err := receipt.ValidateEventID(id); err != nil {
			return "", fmt.Errorf("--event-id: %w", err)
		}
	}
	if subject == "" {
		subject = concreteSubject(cfg.Topology.Events.Subjects[0])
	}
	if err := originSubject(cfg.Topology, subject); err != nil {
		return "", fmt.Errorf("--subject: %w", err)
	}
	return subject, nil
}

// cliEvents are n events on subj: with the event_id given, or each a new
// time-ordered UUIDv7 (as the README advises); with the payload given, or
// a JSON object holding the event_id.
func cliEvents(n int, id, subj, data string) []publish.Event {
	evs := make([]publish.Event, 0, n)
	for range n {
		eid := id
		if eid == "" {
			eid = uuid.Must(uuid.NewV7()).String()
		}
		ev := publish.Event{ID: eid, Subject: subj, Data: []byte(data)}
		if data == "" {
			ev.Data, _ = json.Marshal(map[string]string{"event_id": eid})
		}
		evs = append(evs, ev)
	}
	return evs
}

// concreteSubject turns a subject filter into a publishable subject.
func concreteSubject(filter string) string {
	toks := strings.Split(filter, ".")
	for i, t := range toks {
		if t == "*" || t == ">" {
			toks[i] = "cli"
		}
	}
	return strings.Join(toks, ".")
}

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("status", stderr)
	path := fs.String("config", "", "L1 box config `FILE`")
	server := fs.String("server", "", "NATS `URL` (default: the config's nats.listen)")
	if !parse(fs, args, 1, stderr) {
		return exitUsage
	}
	cfg, ok := loadConfig(fs, *path, stderr)
	if !ok || !requireL1("status", *path, *server, cfg, stderr) {
		return exitUsage
	}
	eid := fs.Arg(0)
	if err := receipt.ValidateEventID(eid); err != nil {
		fmt.Fprintf(stderr, "leafline status: EVENT_ID: %v\n", err)
		return exitUsage
	}
	nc, _, err := connect(cfg, *server)
	if err != nil {
		fmt.Fprintf(stderr, "leafline status: %v\n", err)
		return exitFailure
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	c, err := status.NewStatusClient(nc, "").Get(rctx, eid)
	if errors.Is(err, record.ErrNotFound) {
		fmt.Fprintf(stderr, "leafline status: no completion recorded for event_id %q\n", eid)
		return exitFailure
	}
	if err != nil {
		fmt.Fprintf(stderr, "leafline status: %v\n", err)
		return exitFailure
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.Encode(c)
	return exitOK
}

// originFull says why the origin stream refused events for lack of room,
// naming the sites that hold the most pending events there (L1's status
// service): the origin stream keeps each event until every site expected
// to process it has reported it (with completion.cleanup), or keeps
// everything (without).
func originFull(ctx context.Context, nc *nats.Conn, cfg *topology.Config) string {
	stream := cfg.Topology.Events.OriginStream
	msg := fmt.Sprintf("the origin stream %s is full (jetstream.max_stream_bytes %d)", stream, cfg.JetStream.MaxStreamBytes)
	if !cfg.Completion.Cleanup.On() {
		msg += "; completion.cleanup is off, so it keeps every event: enable it to delete the events that are done"
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sum, err := status.NewStatusClient(nc, "").Summary(rctx)
	if err != nil {
		return msg + fmt.Sprintf(" (which sites hold it is unknown: %v)", err)
	}
	sites := slices.Clone(sum.Sites)
	slices.SortFunc(sites, func(a, b record.SiteSummary) int { return cmp.Compare(b.Pending, a.Pending) })
	var held []string
	for _, s := range sites[:min(len(sites), 3)] {
		if s.Pending == 0 {
			break
		}
		h := fmt.Sprintf("%s holds %d pending events", s.Site, s.Pending)
		if s.OldestPending != nil {
			h += fmt.Sprintf(" (the oldest published %s ago)", time.Duration(s.OldestPending.AgeSeconds*float64(time.Second)).Round(time.Second))
		}
		held = append(held, h)
	}
	if len(held) == 0 {
		return msg
	}
	return msg + "; " + strings.Join(held, ", ") + ": bring a site that is away back, or retire it for good (sites[].retired), which closes its pending events"
}
