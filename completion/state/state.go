package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"
)

// Defaults of Config.
const (
	// DefaultLogStream names the log stream when Config.LogStream is zero.
	DefaultLogStream = "LEAFLINE_COMPLETION_LOG"
	// DefaultLogSubject is the log stream's one subject.
	DefaultLogSubject = "leafline.completion.log"
	// DefaultMaxEntryBytes bounds one log entry's payload; it stays below
	// the server's default max_payload (1 MiB).
	DefaultMaxEntryBytes = 512 << 10
	// DefaultMaxInputs bounds the receipts, origins and removals decided
	// together in one log entry and one transaction.
	DefaultMaxInputs = 4096
	// DefaultOpTimeout bounds one round trip to JetStream.
	DefaultOpTimeout = 10 * time.Second

	// ServiceApplyBatch and ServiceBatchSize are the Service
	// settings (ApplyBatch, BatchSize) that suit a State: the applier
	// commits what is waiting together, so large batches mean few commits.
	ServiceApplyBatch = 1024
	ServiceBatchSize  = 2048
)

// Config configures Open. Zero values mean the defaults stated on each
// field.
type Config struct {
	// JS is the JetStream context of the L1 domain. Required.
	JS jetstream.JetStream
	// Path is the local state file. Required. A missing file is rebuilt
	// from the log; a file that cannot be opened as a state file is moved
	// aside (Path + ".corrupt-<unix time>") and rebuilt.
	Path string
	// LogStream is the log stream, created if absent (file storage,
	// Replicas, no limits); zero = DefaultLogStream. Every box that shares
	// a completion state shares this stream.
	LogStream string
	// Replicas of a log stream Open creates; zero = 1.
	Replicas int
	// ImportBucket is the KV bucket of the previous layout (one record per
	// event, package kvstore's Store). When the log is new and the bucket
	// exists, its records are imported first. Zero = DefaultBucket;
	// "-" imports nothing.
	ImportBucket string
	// OverdueAfter: a pending event published this long ago is overdue;
	// zero = DefaultOverdueAfter.
	OverdueAfter time.Duration
	// Sites are always listed in Summary, even with nothing to report.
	Sites []string
	// HoldUntilOrigin holds receipts for events whose origin is unknown
	// (see StoreConfig.HoldUntilOrigin).
	HoldUntilOrigin bool
	// MaxEntryBytes bounds a log entry; zero = DefaultMaxEntryBytes.
	MaxEntryBytes int
	// MaxInputs bounds the inputs of one entry; zero = DefaultMaxInputs.
	MaxInputs int
	// OpTimeout bounds each JetStream round trip; zero = DefaultOpTimeout.
	OpTimeout time.Duration
	// Logger; nil = slog.Default().
	Logger *slog.Logger
	// Now is the clock of the read-time views (overdue); nil = time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.LogStream == "" {
		c.LogStream = DefaultLogStream
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.ImportBucket == "" {
		c.ImportBucket = kvstore.DefaultBucket
	}
	if c.OverdueAfter == 0 {
		c.OverdueAfter = kvstore.DefaultOverdueAfter
	}
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = DefaultMaxEntryBytes
	}
	if c.MaxInputs == 0 {
		c.MaxInputs = DefaultMaxInputs
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports every problem of c at once.
func (c *Config) Validate() error {
	var errs []error
	if c.JS == nil {
		errs = append(errs, errors.New("JS: required"))
	}
	if c.Path == "" {
		errs = append(errs, errors.New("Path: required"))
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("Replicas: must be 1..5, got %d", c.Replicas))
	}
	if c.OverdueAfter < 0 || c.OpTimeout < 0 {
		errs = append(errs, errors.New("OverdueAfter, OpTimeout: must not be negative"))
	}
	if c.MaxEntryBytes < 4<<10 || c.MaxEntryBytes > 8<<20 {
		errs = append(errs, fmt.Errorf("MaxEntryBytes: must be 4KiB..8MiB, got %d", c.MaxEntryBytes))
	}
	if c.MaxInputs < 1 {
		errs = append(errs, fmt.Errorf("MaxInputs: must be positive, got %d", c.MaxInputs))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// State is the completion state of an L1 box: see the package doc.
type State struct {
	cfg Config
	log *slog.Logger
	db  *bolt.DB
	lg  *logStream

	// mu serializes every change of db: the applier's decisions and the
	// follower's folds. Readers use bbolt read transactions and take no
	// lock.
	mu sync.Mutex
	// applied is the log sequence folded into db (its checkpoint).
	applied atomic.Uint64
	// target is the log's last sequence when Open began: the State is
	// ready once applied reaches it.
	target  uint64
	ready   atomic.Bool
	rebuilt string // why db was rebuilt from the log ("" = it was not)
	// cache and cacheOld hold records as the file holds them, decoded, for
	// the events changed last (an event's origin and receipts come close
	// together): two generations, the older dropped when the newer fills.
	// Read and written under mu; their records are never changed in place.
	cache, cacheOld map[string]*record.Completion

	reqs      chan *request
	stop      chan struct{}
	done      sync.WaitGroup
	closeOnce sync.Once

	entries, inputs, conflicts atomic.Uint64
}

var _ record.State = (*State)(nil)

// Open opens the state file (rebuilding it when missing or unreadable),
// creates the log stream if absent, imports the previous layout into a new
// log, and starts folding the log in the background. It returns before the
// state has caught up with the log: until Ready, queries and applies
// answer ErrNotReady (WaitReady blocks).
func Open(ctx context.Context, cfg Config) (*State, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &State{cfg: cfg, log: cfg.Logger.With("component", "completion"), reqs: make(chan *request, 64), stop: make(chan struct{}),
		cache: map[string]*record.Completion{}, cacheOld: map[string]*record.Completion{}}
	if err := s.openDB(); err != nil {
		return nil, err
	}
	lg, err := openLog(ctx, cfg)
	if err != nil {
		s.db.Close()
		return nil, err
	}
	s.lg = lg
	if err := s.checkLogIdentity(); err != nil {
		s.db.Close()
		return nil, err
	}
	if s.target, err = lg.lastSeq(ctx); err != nil {
		s.db.Close()
		return nil, err
	}
	if s.rebuilt != "" {
		s.log.Warn("completion: rebuilding the local state from the log", "why", s.rebuilt, "path", cfg.Path, "log_entries", s.target)
	}
	s.done.Add(2)
	go s.follow()
	go s.applier()
	return s, nil
}

// Ready reports whether the state has folded the log as far as it
// reached when Open began (and the previous layout is imported).
func (s *State) Ready() bool { return s.ready.Load() }

// WaitReady blocks until Ready or ctx is done.
func (s *State) WaitReady(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !s.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("completion: %w: %w", record.ErrNotReady, ctx.Err())
		case <-s.stop:
			return fmt.Errorf("completion: %w", ErrClosed)
		case <-t.C:
		}
	}
	return nil
}

// Close stops the applier and the follower and closes the file. Applies
// under way finish first. A second Close returns an error wrapping
// ErrClosed.
func (s *State) Close() error {
	err := fmt.Errorf("completion: %w", ErrClosed)
	s.closeOnce.Do(func() {
		close(s.stop)
		s.done.Wait()
		err = s.db.Close()
	})
	return err
}

// Stats are the State's counters, for metrics.
type Stats struct {
	// Applied is the log sequence folded into the local file.
	Applied uint64 `json:"applied"`
	// Ready is false while the state catches up with the log.
	Ready bool `json:"ready"`
	// Rebuilt says why the local file was rebuilt from the log at Open
	// ("" = it was not).
	Rebuilt string `json:"rebuilt,omitempty"`
	// Entries and Inputs count the log entries this State appended and the
	// receipts, origins and removals in them; Conflicts the appends another
	// box got in first.
	Entries, Inputs, Conflicts uint64
}

// Stats returns a snapshot of the counters.
func (s *State) Stats() Stats {
	return Stats{Applied: s.applied.Load(), Ready: s.Ready(), Rebuilt: s.rebuilt,
		Entries: s.entries.Load(), Inputs: s.inputs.Load(), Conflicts: s.conflicts.Load()}
}

// OverdueAfter returns the overdue threshold.
func (s *State) OverdueAfter() time.Duration { return s.cfg.OverdueAfter }

// openDB opens the file, moving aside one that is not a state file.
func (s *State) openDB() error {
	_, statErr := os.Stat(s.cfg.Path)
	if errors.Is(statErr, os.ErrNotExist) {
		s.rebuilt = "no local state file"
	}
	db, err := openFile(s.cfg.Path)
	if errors.Is(err, bolt.ErrTimeout) {
		// Another State (another process, or this one) has it open:
		// never take it for a corrupt file.
		return fmt.Errorf("completion: open %s: the file is in use by another completion state: %w", s.cfg.Path, err)
	}
	if err != nil && statErr == nil {
		aside := fmt.Sprintf("%s.corrupt-%d", s.cfg.Path, time.Now().Unix())
		if rerr := os.Rename(s.cfg.Path, aside); rerr != nil {
			return fmt.Errorf("completion: open %s: %w (and moving it aside: %v)", s.cfg.Path, err, rerr)
		}
		s.log.Error("completion: the local state file cannot be read; moved aside, rebuilding from the log", "path", s.cfg.Path, "moved_to", aside, "err", err)
		s.rebuilt = "local state file unreadable: " + err.Error()
		db, err = openFile(s.cfg.Path)
	}
	if err != nil {
		return fmt.Errorf("completion: open %s: %w", s.cfg.Path, err)
	}
	s.db = db
	s.applied.Store(readCheckpoint(db))
	return nil
}

// checkLogIdentity binds the file to the log stream it folds: a file made
// from another stream (the log deleted and created again) is emptied and
// rebuilt.
func (s *State) checkLogIdentity() error {
	id := s.lg.identity()
	have, err := readLogIdentity(s.db)
	if err != nil {
		return err
	}
	if have == "" || have == id {
		return writeLogIdentity(s.db, id)
	}
	s.log.Warn("completion: the local state was made from another log stream; rebuilding", "path", s.cfg.Path, "log_stream", s.cfg.LogStream)
	s.rebuilt = "the log stream was created again"
	if err := resetFile(s.db); err != nil {
		return err
	}
	s.applied.Store(0)
	return writeLogIdentity(s.db, id)
}

func (s *State) notReady() error {
	select {
	case <-s.stop:
		return fmt.Errorf("completion: %w", ErrClosed)
	default:
	}
	if !s.Ready() {
		return fmt.Errorf("completion: %w: folding the log (%d of %d entries)", record.ErrNotReady, s.applied.Load(), s.target)
	}
	return nil
}

// Get returns the record of eventID as Store.Get does.
func (s *State) Get(ctx context.Context, eventID string) (record.Completion, error) {
	if err := receipt.ValidateEventID(eventID); err != nil {
		return record.Completion{}, err
	}
	if err := s.notReady(); err != nil {
		return record.Completion{}, err
	}
	var c record.Completion
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		var ok bool
		c, ok, err = getRecord(tx, eventID)
		if err == nil && !ok {
			err = fmt.Errorf("completion: event %q: %w", short(eventID), record.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return record.Completion{}, err
	}
	c.View(s.cfg.Now(), s.cfg.OverdueAfter)
	return c, nil
}

// All returns every record (for tests and small deployments), at most
// MaxAll.
func (s *State) All(ctx context.Context) ([]record.Completion, error) {
	if err := s.notReady(); err != nil {
		return nil, err
	}
	var out []record.Completion
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRecords).ForEach(func(k, v []byte) error {
			if len(out) >= record.MaxAll {
				return fmt.Errorf("completion: more than %d records", record.MaxAll)
			}
			c, err := record.DecodeCompletion(v)
			if err != nil {
				return err
			}
			c.View(s.cfg.Now(), s.cfg.OverdueAfter)
			out = append(out, c)
			return nil
		})
	})
	return out, err
}

// maxCache bounds the decoded records each generation of State.cache
// holds (about a kilobyte each).
const maxCache = 32768

// cached returns the cached record of id, or nil. The caller holds mu.
func (s *State) cached(id string) *record.Completion {
	if c := s.cache[id]; c != nil {
		return c
	}
	return s.cacheOld[id]
}

// remember puts what changes made of their records into the cache. The
// caller holds mu and has committed them.
func (s *State) remember(changes []change) {
	if len(s.cache)+len(changes) > maxCache {
		s.cacheOld, s.cache = s.cache, make(map[string]*record.Completion, maxCache)
	}
	for _, ch := range changes {
		delete(s.cacheOld, ch.id)
		if ch.new == nil {
			delete(s.cache, ch.id)
		} else {
			s.cache[ch.id] = ch.new
		}
	}
}

func short(id string) string {
	if len(id) > 64 {
		return id[:64] + "…"
	}
	return id
}
