package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// entryVersion is the version of the entries this package writes.
const entryVersion = 1

// Import phases of an entry (entry.Import).
const (
	importNone    = "none"    // the first entry of a log with nothing to import
	importBegin   = "begin"   // the first entry of a log that imports
	importRecords = "records" // records of the previous layout
	importEnd     = "end"     // the import is complete
)

// entry is one log message: the records a batch of decisions produced, in
// full, and the records it removed. Folding an entry never decides
// anything; it writes what the deciding box wrote. So every box that folds
// the log holds the same records, whatever release it runs.
type entry struct {
	V int `json:"v"`
	// Records are the new records, each as receipts encodes a record.
	Records []json.RawMessage `json:"records,omitempty"`
	// Drops are the event_ids whose records were removed.
	Drops []string `json:"drops,omitempty"`
	// Import marks the entries of the import of the previous layout.
	Import string `json:"import,omitempty"`
}

func decodeEntry(seq uint64, b []byte) (entry, error) {
	var e entry
	if err := json.Unmarshal(b, &e); err != nil {
		return entry{}, fmt.Errorf("%w: seq %d: %v", ErrBadEntry, seq, err)
	}
	if e.V != entryVersion {
		return entry{}, fmt.Errorf("%w: seq %d: version %d, this release reads %d", ErrBadEntry, seq, e.V, entryVersion)
	}
	return e, nil
}

// logStream is the log: a stream with one subject, appended to with an
// expected last sequence, so that an entry is decided against the whole
// log before it.
type logStream struct {
	js      jetstream.JetStream
	name    string
	subject string
	created time.Time
	timeout time.Duration
	stream  jetstream.Stream
}

func openLog(ctx context.Context, cfg Config) (*logStream, error) {
	subject := DefaultLogSubject
	if cfg.LogStream != DefaultLogStream {
		subject += "." + cfg.LogStream
	}
	want := jetstream.StreamConfig{
		Name:        cfg.LogStream,
		Description: "leafline completion log: the durable truth of L1's completion records",
		Subjects:    []string{subject},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		Replicas:    cfg.Replicas,
		Compression: jetstream.S2Compression,
		MaxMsgSize:  int32(cfg.MaxEntryBytes) + 4096,
	}
	octx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
	defer cancel()
	st, err := cfg.JS.Stream(octx, cfg.LogStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = cfg.JS.CreateStream(octx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = cfg.JS.Stream(octx, cfg.LogStream)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("completion: log stream %s: %w", cfg.LogStream, err)
	}
	info := st.CachedInfo()
	have := info.Config
	if have.Retention != jetstream.LimitsPolicy || have.MaxAge != 0 || have.MaxMsgs > 0 || have.MaxBytes > 0 || have.MaxMsgsPerSubject > 0 {
		return nil, fmt.Errorf("completion: log stream %s has limits or a retention that would delete entries; the log must keep every entry: %w", cfg.LogStream, ErrInvalidConfig)
	}
	if len(have.Subjects) != 1 || have.Subjects[0] != subject {
		return nil, fmt.Errorf("completion: log stream %s has subjects %v, want [%s]: %w", cfg.LogStream, have.Subjects, subject, ErrInvalidConfig)
	}
	return &logStream{js: cfg.JS, name: cfg.LogStream, subject: subject, created: info.Created, timeout: cfg.OpTimeout, stream: st}, nil
}

// identity names this log stream: its creation time. A stream deleted and
// created again under the same name is another log.
func (l *logStream) identity() string {
	return l.name + "@" + strconv.FormatInt(l.created.UnixNano(), 10)
}

// lastSeq is the log's last sequence (0: empty).
func (l *logStream) lastSeq(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	st, err := l.js.Stream(ctx, l.name)
	if err != nil {
		return 0, fmt.Errorf("completion: log stream %s: %w", l.name, err)
	}
	return st.CachedInfo().State.LastSeq, nil
}

// errConflict is an append that another box got in before: the log's last
// sequence was not the one expected.
var errConflict = errors.New("completion: the log moved on")

// append publishes e expecting the log's last sequence to be after, and
// returns the entry's sequence.
func (l *logStream) append(ctx context.Context, data []byte, after uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	m := &nats.Msg{Subject: l.subject, Data: data, Header: nats.Header{}}
	pa, err := l.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequence(after), jetstream.WithExpectStream(l.name))
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			return 0, errConflict
		}
		return 0, fmt.Errorf("completion: append to log %s: %w", l.name, err)
	}
	if pa.Sequence != after+1 {
		return 0, fmt.Errorf("completion: append to log %s: stored at %d, expected %d", l.name, pa.Sequence, after+1)
	}
	return pa.Sequence, nil
}

// get reads the entry at seq.
func (l *logStream) get(ctx context.Context, seq uint64) (entry, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	m, err := l.stream.GetMsg(ctx, seq)
	if err != nil {
		return entry{}, fmt.Errorf("completion: log entry %d: %w", seq, err)
	}
	return decodeEntry(seq, m.Data)
}

// Entry is a log entry as another program reads it (a checker, an
// auditor): the records it wrote, each as receipts encodes a record, and
// the event_ids whose records it removed. Import entries before the
// import's end carry the previous layout's records.
type Entry struct {
	Records []json.RawMessage
	Drops   []string
	Import  string
}

// DecodeEntry decodes the payload of a log message at seq.
func DecodeEntry(seq uint64, data []byte) (Entry, error) {
	e, err := decodeEntry(seq, data)
	if err != nil {
		return Entry{}, err
	}
	return Entry{Records: e.Records, Drops: e.Drops, Import: e.Import}, nil
}
