package state

import (
	"context"
	"fmt"
	"time"

	"github.com/leafline/leafline/completion/record"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"
)

// keyImported marks, in meta, a file whose log has its import done (or
// had nothing to import).
var keyImported = []byte("imported")

// maxFoldEntries bounds the entries the follower folds in one transaction.
const maxFoldEntries = 16

// follow folds, in the background, every entry other boxes append (and,
// at Open, everything the file has not folded yet), until Close. It reads
// the log's headers with an ordered consumer and fetches only the entries
// it has not folded: a box's own entries cost it one header each.
func (s *State) follow() {
	defer s.done.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	for attempt := 0; ; attempt++ {
		err := s.followOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("completion: following the log; starting again", "err", err, "applied", s.applied.Load())
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(time.Duration(attempt+1)*200*time.Millisecond, 5*time.Second)):
		}
	}
}

func (s *State) followOnce(ctx context.Context) error {
	if err := s.catchUp(ctx); err != nil {
		return err
	}
	if err := s.ensureImported(ctx); err != nil {
		return err
	}
	s.markReady()
	cons, err := s.cfg.JS.OrderedConsumer(ctx, s.lg.name, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   s.applied.Load() + 1,
		HeadersOnly:   true,
	})
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return err
		}
		meta, err := msg.Metadata()
		if err != nil {
			return err
		}
		if meta.Sequence.Stream <= s.applied.Load() {
			continue // folded already: this box's own entry
		}
		if err := s.catchUp(ctx); err != nil {
			return err
		}
	}
}

// catchUp folds, under mu, every entry after the checkpoint up to the
// log's last sequence now.
func (s *State) catchUp(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.catchUpLocked(ctx)
}

// catchUpLocked is catchUp for a caller that holds mu.
func (s *State) catchUpLocked(ctx context.Context) error {
	last, err := s.lg.lastSeq(ctx)
	if err != nil {
		return err
	}
	return s.foldUpTo(ctx, last)
}

// foldUpTo folds entries applied+1..last, up to maxFoldEntries per
// transaction. The caller holds mu.
func (s *State) foldUpTo(ctx context.Context, last uint64) error {
	for s.applied.Load() < last {
		from := s.applied.Load() + 1
		to := min(last, from+maxFoldEntries-1)
		var es []entry
		for seq := from; seq <= to; seq++ {
			e, err := s.lg.get(ctx, seq)
			if err != nil {
				return err
			}
			es = append(es, e)
		}
		var changes []change
		if err := s.db.Update(func(tx *bolt.Tx) error {
			var err error
			changes, err = s.foldEntries(tx, to, es)
			return err
		}); err != nil {
			return fmt.Errorf("completion: fold log entries %d..%d: %w", from, to, err)
		}
		s.applied.Store(to)
		s.remember(changes)
		s.markReady()
	}
	return nil
}

// foldEntries folds es, the entries up to seq, in tx: each record replaces
// the one the file holds, each drop removes it. Import records count only
// until the import's end.
func (s *State) foldEntries(tx *bolt.Tx, seq uint64, es []entry) ([]change, error) {
	meta := tx.Bucket(bucketMeta)
	var changes []change
	pos := map[string]int{} // an event's change in changes
	add := func(id string, raw []byte, c *record.Completion) error {
		if i, ok := pos[id]; ok {
			changes[i].new, changes[i].raw = c, raw
			return nil
		}
		old, ok, err := getRecord(tx, id)
		if err != nil {
			return err
		}
		ch := change{id: id, new: c, raw: raw}
		if ok {
			ch.old = &old
		}
		pos[id] = len(changes)
		changes = append(changes, ch)
		return nil
	}
	for _, e := range es {
		imported := meta.Get(keyImported) != nil
		switch e.Import {
		case importNone, importEnd:
			if err := meta.Put(keyImported, []byte(e.Import)); err != nil {
				return nil, err
			}
			continue
		case importBegin:
			continue
		case importRecords:
			if imported {
				continue // a late copy of an import: the log moved on since
			}
		case "":
		default:
			return nil, fmt.Errorf("%w: import %q", ErrBadEntry, e.Import)
		}
		for _, raw := range e.Records {
			c, err := record.DecodeCompletion(raw)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrBadEntry, err)
			}
			if err := add(c.EventID, raw, &c); err != nil {
				return nil, err
			}
		}
		for _, id := range e.Drops {
			if err := add(id, nil, nil); err != nil {
				return nil, err
			}
		}
	}
	return changes, fold(tx, seq, changes, overdueAt(s.cfg.Now(), s.cfg.OverdueAfter))
}

// markReady sets Ready once the file has folded the log as far as it
// reached at Open and the import is done.
func (s *State) markReady() {
	if s.ready.Load() || s.applied.Load() < s.target {
		return
	}
	imported := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		imported = tx.Bucket(bucketMeta).Get(keyImported) != nil
		return nil
	})
	if !imported {
		return
	}
	if s.ready.CompareAndSwap(false, true) {
		s.log.Info("completion: state ready", "applied", s.applied.Load(), "path", s.cfg.Path)
	}
}
