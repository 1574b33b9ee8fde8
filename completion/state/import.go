package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/leafline/leafline/completion/record"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"
)

// The first entry of every log says whether it imports the previous
// layout: a KV bucket of one record per event (Store). An import
// is "begin", then the bucket's records in entries of their own, then
// "end"; no decision is made before "end" (the State is not Ready), so
// the imported records are the whole state the first decisions see. An
// import cut short (a crash) is done again from the start by the next
// box that opens the log: its records are the same, and import records
// after an "end" are ignored.

// imported reports whether the file's log has its import done.
func (s *State) imported() bool {
	done := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		done = tx.Bucket(bucketMeta).Get(keyImported) != nil
		return nil
	})
	return done
}

// ensureImported writes the log's first entry, and the import, if no box
// has finished them yet.
func (s *State) ensureImported(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for round := 0; !s.imported(); round++ {
		if round > maxConflictRounds {
			return fmt.Errorf("completion: import: %w", record.ErrTooManyConflicts)
		}
		err := s.importOnce(ctx)
		if errors.Is(err, errConflict) {
			if err := s.catchUpLocked(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// importOnce appends the first entry, then (when there is a bucket to
// import) its records and "end". errConflict: another box appended first.
func (s *State) importOnce(ctx context.Context) error {
	kvStream, err := s.importSource(ctx)
	if err != nil {
		return err
	}
	if kvStream == nil {
		if s.applied.Load() == 0 {
			return s.appendFold(ctx, entry{Import: importNone})
		}
		// Begun by a box that saw a bucket which is gone now.
		return s.appendFold(ctx, entry{Import: importEnd})
	}
	if s.applied.Load() == 0 {
		if err := s.appendFold(ctx, entry{Import: importBegin}); err != nil {
			return err
		}
	}
	n, err := s.importRecords(ctx, kvStream)
	if err != nil {
		return err
	}
	s.log.Warn("completion: imported the records of the previous layout", "bucket", s.cfg.ImportBucket, "records", n)
	return s.appendFold(ctx, entry{Import: importEnd})
}

// importSource returns the stream of the bucket to import, or nil.
func (s *State) importSource(ctx context.Context) (jetstream.Stream, error) {
	if s.cfg.ImportBucket == "-" {
		return nil, nil
	}
	octx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	st, err := s.cfg.JS.Stream(octx, "KV_"+s.cfg.ImportBucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("completion: import bucket %s: %w", s.cfg.ImportBucket, err)
	}
	if st.CachedInfo().State.Msgs == 0 {
		return nil, nil
	}
	return st, nil
}

// importRecords appends the bucket's records (the last revision of each
// key, not removed) in entries, and returns how many.
func (s *State) importRecords(ctx context.Context, kvStream jetstream.Stream) (int, error) {
	last := kvStream.CachedInfo().State.LastSeq
	prefix := "$KV." + s.cfg.ImportBucket + "."
	cons, err := kvStream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{prefix + "e.>"},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return 0, fmt.Errorf("completion: import bucket %s: %w", s.cfg.ImportBucket, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return 0, err
	}
	defer it.Stop()
	var cur entry
	size, n := 0, 0
	flush := func() error {
		if len(cur.Records) == 0 {
			return nil
		}
		cur.Import = importRecords
		err := s.appendFold(ctx, cur)
		cur, size = entry{}, 0
		return err
	}
	for {
		pending := uint64(0)
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return n, fmt.Errorf("completion: import bucket %s: %w", s.cfg.ImportBucket, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return n, err
		}
		pending = meta.NumPending
		if op := msg.Headers().Get("KV-Operation"); op == "" && strings.HasPrefix(msg.Subject(), prefix) {
			if _, err := record.DecodeCompletion(msg.Data()); err != nil {
				s.log.Warn("completion: import: a record that cannot be read is left out", "key", strings.TrimPrefix(msg.Subject(), prefix), "err", err)
			} else {
				if size+len(msg.Data()) > s.cfg.MaxEntryBytes-1024 {
					if err := flush(); err != nil {
						return n, err
					}
				}
				cur.Records = append(cur.Records, json.RawMessage(msg.Data()))
				size += len(msg.Data()) + 1
				n++
			}
		}
		if pending == 0 || meta.Sequence.Stream >= last {
			return n, flush()
		}
	}
}

// appendFold appends e expecting the checkpoint as the log's last
// sequence, and folds it. The caller holds mu.
func (s *State) appendFold(ctx context.Context, e entry) error {
	e.V = entryVersion
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	seq, err := s.lg.append(ctx, b, s.applied.Load())
	if err != nil {
		return err
	}
	var changes []change
	if err := s.db.Update(func(tx *bolt.Tx) error {
		var err error
		changes, err = s.foldEntries(tx, seq, []entry{e})
		return err
	}); err != nil {
		return fmt.Errorf("completion: fold: %w", err)
	}
	s.applied.Store(seq)
	s.remember(changes)
	return nil
}
