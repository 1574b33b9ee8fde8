package outbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// SchemaVersion is the schema this build writes and accepts. Open upgrades
// a schema 1 file (no marks bucket) in place, in one transaction.
const SchemaVersion = 2

// Top-level buckets owned by the outbox. The file is shared with the edge's
// store sink (see DB), so the names carry a prefix that other packages must
// not use.
var (
	bucketMeta      = []byte("outbox.meta")      // schema version and counters
	bucketRecords   = []byte("outbox.records")   // Key -> encoded Record
	bucketPending   = []byte("outbox.pending")   // big-endian Seq -> Key, pending only
	bucketPublished = []byte("outbox.published") // big-endian PublishedAt nanos + Seq -> Key, published only
	bucketMarks     = []byte("outbox.marks")     // big-endian Seq -> PublishedAt nanos, records marked published

	// dataBuckets are the buckets besides meta that a file must have: create
	// makes them and checkLayout requires them.
	dataBuckets = [][]byte{bucketRecords, bucketPending, bucketPublished, bucketMarks}

	metaSchema    = []byte("schema")    // uint64 big endian
	metaPending   = []byte("pending")   // uint64 big endian: records in StatePending
	metaPublished = []byte("published") // uint64 big endian: records in StatePublished
)

// Options configures Open. The zero value is ready to use.
type Options struct {
	// OpenTimeout bounds waiting for the file lock held by another process.
	// Zero (or negative) means 5s.
	OpenTimeout time.Duration

	// Now is the clock used for CreatedAt and PublishedAt. Nil means
	// time.Now.
	Now func() time.Time

	// MaxSize is the largest size, in bytes, the file may grow to. A write
	// that would grow it further fails with an error wrapping ErrFull and
	// changes nothing; a file already larger still opens. Zero means
	// MaxSize32 on a platform with 32-bit pointers and no limit
	// otherwise; negative means no limit.
	MaxSize int64
}

// MaxSize32 is the default Options.MaxSize where pointers are 32 bits wide
// (linux/arm, linux/386, windows/386). bbolt maps the whole file into the
// process's address space, which is 2 to 3 GiB there and shared with the Go
// heap and the embedded server; a map that cannot grow makes bbolt fail a
// commit at an arbitrary point. With the file bounded, the box instead
// stops with ErrFull, a storage-full condition it reports and recovers from
// once pruning has freed pages.
const MaxSize32 = 1 << 30

// is32Bit is true where pointers are 32 bits wide.
const is32Bit = strconv.IntSize == 32

// maxSize returns the bbolt MaxSize for opts: 0 for no limit.
func (opts Options) maxSize() int {
	switch {
	case opts.MaxSize < 0 || (opts.MaxSize == 0 && !is32Bit):
		return 0
	case opts.MaxSize == 0:
		return MaxSize32
	case opts.MaxSize > math.MaxInt:
		return math.MaxInt
	}
	return int(opts.MaxSize)
}

// Outbox is a transactional outbox stored in one bbolt file. All methods
// are safe for concurrent use.
type Outbox struct {
	db      *bbolt.DB
	file    *os.File // the file bbolt uses; read directly by Check
	path    string
	maxSize int // bbolt's MaxSize; 0 means no limit
	now     func() time.Time
	closed  atomic.Bool
	failed  atomic.Pointer[error] // first fatal write error; see fail
}

// Open opens the outbox file at path, creating it (and its parent directory,
// mode 0o750) if it does not exist.
//
// A new file is built under a temporary name and linked into place only
// once it is complete, so an existing file at path is always a finished
// outbox: an empty, truncated or otherwise damaged file is reported with an
// error wrapping ErrCorrupt that names it and is never re-initialised.
//
// Before handing the file to bbolt, Open takes its lock (waiting at most
// OpenTimeout), validates both bbolt meta pages and walks every reachable
// page once (reading them with pread), so that damage which would make
// bbolt panic, fault or recurse forever is reported as ErrCorrupt instead.
// It then upgrades a schema 1 file to SchemaVersion (one transaction, see
// upgrade) and checks the outbox buckets and schema version (ErrSchema
// when the version is another). The cost is one read of the live part of
// the file. Check does the full verification, including record invariants;
// callers should run it at startup.
//
// NOTE: if bbolt nevertheless panics inside Open, the panic is recovered
// and the file lock released, but bbolt's read-only memory mapping of the
// file is leaked; the process is expected to exit.
func Open(path string, opts Options) (*Outbox, error) {
	if opts.OpenTimeout <= 0 {
		opts.OpenTimeout = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("outbox: open %s: %w", path, err)
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if err := create(path, opts.OpenTimeout); err != nil {
			return nil, fmt.Errorf("outbox: create %s: %w", path, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("outbox: open %s: %w", path, err)
	}

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("outbox: open %s: %w", path, err)
	}
	if err := lockFile(f, opts.OpenTimeout); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("outbox: open %s: %w", path, err)
	}
	fail := func(err error) (*Outbox, error) {
		unlockFile(f)
		_ = f.Close()
		return nil, err
	}

	var problems []string
	err = guard(nil, func() error {
		var err error
		problems, err = checkFile(f)
		return err
	})
	if err != nil {
		return fail(openError(path, err))
	}
	if len(problems) > 0 {
		return fail(corruptError(path, problems))
	}

	var db *bbolt.DB
	err = guard(nil, func() error {
		var err error
		db, err = bbolt.Open(path, 0o600, &bbolt.Options{
			Timeout: opts.OpenTimeout,
			MaxSize: opts.maxSize(),
			// Hand bbolt the file we locked and validated.
			OpenFile: func(string, int, os.FileMode) (*os.File, error) { return f, nil },
		})
		return err
	})
	if err != nil {
		// On an error return bbolt has closed f; on a panic it has not.
		return fail(openError(path, err))
	}

	if err := guard(nil, func() error { return upgrade(db) }); err != nil {
		_ = db.Close()
		return nil, openError(path, err)
	}
	if err := guard(nil, func() error { return db.View(checkLayout) }); err != nil {
		_ = db.Close()
		if errors.Is(err, ErrSchema) {
			return nil, fmt.Errorf("outbox: open %s: %w", path, err)
		}
		return nil, openError(path, err)
	}
	return &Outbox{db: db, file: f, path: path, now: opts.Now, maxSize: opts.maxSize()}, nil
}

// openError wraps an error from opening bbolt: anything bbolt says about
// the file's content becomes ErrCorrupt with the operator's instructions.
func openError(path string, err error) error {
	if errors.Is(err, ErrCorrupt) || errors.Is(err, berrors.ErrInvalid) ||
		errors.Is(err, berrors.ErrChecksum) || errors.Is(err, berrors.ErrVersionMismatch) {
		if !errors.Is(err, ErrCorrupt) {
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return fmt.Errorf("outbox: open %s: %w; %s", path, err, corruptAdvice)
	}
	return fmt.Errorf("outbox: open %s: %w", path, err)
}

func corruptError(path string, problems []string) error {
	return fmt.Errorf("outbox: %s: %w: %s; %s", path, ErrCorrupt, joinProblems(problems), corruptAdvice)
}

// checkLayout is the cheap sanity read done by Open.
func checkLayout(tx *bbolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return fmt.Errorf("%w: no %s bucket (not a leafline outbox, or damaged)", ErrCorrupt, bucketMeta)
	}
	v := meta.Get(metaSchema)
	if len(v) != 8 {
		return fmt.Errorf("%w: schema version missing or malformed", ErrCorrupt)
	}
	if n := binary.BigEndian.Uint64(v); n != SchemaVersion {
		return fmt.Errorf("%w: file has schema version %d, this build knows %d", ErrSchema, n, SchemaVersion)
	}
	for _, name := range dataBuckets {
		if tx.Bucket(name) == nil {
			return fmt.Errorf("%w: no %s bucket", ErrCorrupt, name)
		}
	}
	for _, k := range [][]byte{metaPending, metaPublished} {
		if len(meta.Get(k)) != 8 {
			return fmt.Errorf("%w: counter %s missing or malformed", ErrCorrupt, k)
		}
	}
	return nil
}

// upgrade brings a schema 1 file to schema 2 in one transaction: it adds
// the marks bucket. Schema 1 marked a record published by rewriting it
// (State and PublishedAt in the record); those records stay as they are
// and are still read as published. Any other version is left to
// checkLayout.
func upgrade(db *bbolt.DB) error {
	var version uint64
	if err := db.View(func(tx *bbolt.Tx) error {
		if meta := tx.Bucket(bucketMeta); meta != nil {
			if v := meta.Get(metaSchema); len(v) == 8 {
				version = binary.BigEndian.Uint64(v)
			}
		}
		return nil
	}); err != nil || version != 1 {
		return err
	}
	return db.Update(func(tx *bbolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketMarks); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(metaSchema, u64(SchemaVersion))
	})
}

// create builds a new outbox file under a temporary name in the same
// directory and links it to path, so that a crash never leaves a
// half-initialised file at path.
func create(path string, timeout time.Duration) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".new-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer os.Remove(name)
	if err := tmp.Close(); err != nil {
		return err
	}
	db, err := bbolt.Open(name, 0o600, &bbolt.Options{Timeout: timeout})
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		for k, v := range map[string]uint64{string(metaSchema): SchemaVersion, string(metaPending): 0, string(metaPublished): 0} {
			if err := meta.Put([]byte(k), u64(v)); err != nil {
				return err
			}
		}
		for _, name := range dataBuckets {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// Link, not rename: if another process created path meanwhile, keep
	// theirs. Fall back to rename where hard links are not supported.
	if err := os.Link(name, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		if err := os.Rename(name, path); err != nil {
			return err
		}
	}
	return syncDir(dir)
}

// Close closes the file. It waits for transactions in progress. A second
// Close, and any other method called after Close, returns an error wrapping
// ErrClosed.
func (o *Outbox) Close() error {
	if !o.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("outbox: close %s: %w", o.path, ErrClosed)
	}
	if err := o.db.Close(); err != nil {
		return fmt.Errorf("outbox: close %s: %w", o.path, err)
	}
	return nil
}

// DB returns the underlying bbolt database. The edge's store sink keeps its
// own buckets in the same file and writes them in Commit's callback. It
// must not touch the outbox's buckets (names starting with "outbox."), must
// use managed transactions only and must not close the DB.
func (o *Outbox) DB() *bbolt.DB { return o.db }

// Path returns the file path given to Open.
func (o *Outbox) Path() string { return o.path }

// guard runs fn with faults on unexpected addresses turned into panics
// (bbolt reads a memory mapping of the file) and converts a panic into an
// ErrCorrupt error. A panic raised while *inCallback is true came from the
// caller's Commit callback, not from bbolt, and is re-raised.
func guard(inCallback *bool, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if inCallback != nil && *inCallback {
				panic(r)
			}
			err = fmt.Errorf("%w: bbolt panicked: %v", ErrCorrupt, r)
		}
	}()
	return fn()
}

func (o *Outbox) usable() error {
	if o.closed.Load() {
		return fmt.Errorf("outbox: %s: %w", o.path, ErrClosed)
	}
	return nil
}

// view runs fn in a managed read transaction.
func (o *Outbox) view(fn func(*bbolt.Tx) error) error {
	if err := o.usable(); err != nil {
		return err
	}
	return o.mapErr(guard(nil, func() error { return o.db.View(fn) }))
}

// callbackError marks an error returned by the caller's Commit callback:
// the transaction was rolled back cleanly, the outbox stays usable.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }
func (e *callbackError) Unwrap() error { return e.err }

// update runs fn in a managed write transaction. Any error other than
// ErrClosed or a callbackError is fatal: it is remembered and returned by
// every later write (see the package Caveats).
func (o *Outbox) update(inCallback *bool, fn func(*bbolt.Tx) error) error {
	if err := o.usable(); err != nil {
		return err
	}
	if p := o.failed.Load(); p != nil {
		return fmt.Errorf("outbox: %s: refusing writes after an earlier fatal error: %w", o.path, *p)
	}
	err := o.mapErr(guard(inCallback, func() error { return o.db.Update(fn) }))
	var cbErr *callbackError
	if err != nil && !errors.Is(err, ErrClosed) && !errors.As(err, &cbErr) {
		o.failed.CompareAndSwap(nil, &err)
	}
	return err
}

func (o *Outbox) mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, berrors.ErrDatabaseNotOpen):
		return fmt.Errorf("outbox: %s: %w", o.path, ErrClosed)
	case errors.Is(err, ErrCorrupt):
		return fmt.Errorf("outbox: %s: %w; %s", o.path, err, corruptAdvice)
	case errors.Is(err, berrors.ErrMaxSizeReached):
		return fmt.Errorf("outbox: %s: %w: the file may not grow past %d bytes: %w", o.path, ErrFull, o.maxSize, err)
	}
	return err
}

// buckets returns the outbox buckets of tx, or ErrCorrupt if one is missing.
type buckets struct{ meta, records, pending, published, marks *bbolt.Bucket }

func getBuckets(tx *bbolt.Tx) (buckets, error) {
	b := buckets{
		meta:      tx.Bucket(bucketMeta),
		records:   tx.Bucket(bucketRecords),
		pending:   tx.Bucket(bucketPending),
		published: tx.Bucket(bucketPublished),
		marks:     tx.Bucket(bucketMarks),
	}
	if b.meta == nil || b.records == nil || b.pending == nil || b.published == nil || b.marks == nil {
		return b, fmt.Errorf("%w: an outbox bucket is missing", ErrCorrupt)
	}
	return b, nil
}

// load decodes the record stored under key and sets its State and
// PublishedAt from the marks bucket: a record is written once, pending, and
// marking it published adds a mark instead of rewriting it (a schema 1
// record may itself say it is published). Data aliases bbolt memory.
func (b buckets) load(key, v []byte) (Record, error) {
	r, err := decodeRecord(key, v)
	if err != nil {
		return Record{}, err
	}
	m := b.marks.Get(u64(r.Seq))
	switch {
	case m == nil:
		return r, nil
	case len(m) != 8:
		return Record{}, fmt.Errorf("%w: mark of record %q (seq %d) has length %d", ErrCorrupt, key, r.Seq, len(m))
	case r.State != StatePending:
		return Record{}, fmt.Errorf("%w: record %q (seq %d) is marked published twice", ErrCorrupt, key, r.Seq)
	}
	r.State, r.PublishedAt = StatePublished, nanosToTime(int64(binary.BigEndian.Uint64(m)))
	return r, nil
}

// counter reads a uint64 counter from the meta bucket.
func (b buckets) counter(k []byte) (uint64, error) {
	v := b.meta.Get(k)
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: counter %s missing or malformed", ErrCorrupt, k)
	}
	return binary.BigEndian.Uint64(v), nil
}

// addCounters adjusts both counters by the given deltas.
func (b buckets) addCounters(dPending, dPublished int64) error {
	for _, c := range []struct {
		k []byte
		d int64
	}{{metaPending, dPending}, {metaPublished, dPublished}} {
		if c.d == 0 {
			continue
		}
		n, err := b.counter(c.k)
		if err != nil {
			return err
		}
		if c.d < 0 && uint64(-c.d) > n {
			return fmt.Errorf("%w: counter %s would go below zero", ErrCorrupt, c.k)
		}
		if err := b.meta.Put(c.k, u64(uint64(int64(n)+c.d))); err != nil {
			return err
		}
	}
	return nil
}

func u64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func publishedKey(r *Record) []byte {
	ns := timeToNanos(r.PublishedAt)
	if ns < 0 {
		ns = 0
	}
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(ns))
	return binary.BigEndian.AppendUint64(k, r.Seq)
}
