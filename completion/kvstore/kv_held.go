package kvstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
	"github.com/nats-io/nats.go/jetstream"
)

// HeldEvents returns up to limit records of status origin_unknown, from
// the pending index entries without published_at; none without an index.
func (st *Store) HeldEvents(ctx context.Context, limit int) ([]record.Completion, error) {
	if st.ix == nil {
		return nil, nil
	}
	var ids []string
	if _, err := st.scan(ctx, eventKey(kindPending).String()+".>", func(e idxEntry) {
		if _, id, err := parseIndexKey(e.Key); err == nil && len(e.Value) == 0 && len(ids) < limit {
			ids = append(ids, id)
		}
	}); err != nil {
		return nil, err
	}
	var out []record.Completion
	for _, id := range ids {
		c, _, _, err := st.get(ctx, id)
		if errors.Is(err, record.ErrNotFound) || errors.Is(err, record.ErrCorruptRecord) {
			continue
		}
		if err != nil {
			return out, err
		}
		if c.Status == record.EventOriginUnknown {
			out = append(out, c)
		}
	}
	return out, nil
}

// DropHeld removes the record of c.EventID if it still is c (same last
// change, still origin_unknown), by a purge on the revision read, and then
// what is left of it (dropRecord).
func (st *Store) DropHeld(ctx context.Context, c *record.Completion) (bool, error) {
	now, rev, _, err := st.get(ctx, c.EventID)
	if errors.Is(err, record.ErrNotFound) || errors.Is(err, record.ErrCorruptRecord) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if now.Status != record.EventOriginUnknown || !now.UpdatedAt.Equal(c.UpdatedAt) {
		return false, nil // changed since it was read: a receipt or the origin arrived
	}
	if err := st.kv.Purge(ctx, KVKey(c.EventID), jetstream.LastRevision(rev)); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return false, nil
		}
		return false, fmt.Errorf("receipts: remove the record of %s: %w", receipt.ShortQuote(c.EventID), err)
	}
	return true, st.dropRecord(ctx, c.EventID)
}

// dropRecord removes what is left of a purged record: the purge marker
// (so that it counts in no Summary) and the pending index entry. Both
// removals reach only what precedes them: a record written meanwhile
// keeps its messages, and its index entry is written again.
func (st *Store) dropRecord(ctx context.Context, id string) error {
	stream, err := st.js.Stream(ctx, StreamPrefix+st.kv.Bucket())
	if err != nil {
		return fmt.Errorf("receipts: bucket stream: %w", err)
	}
	subj := "$KV." + st.kv.Bucket() + "." + KVKey(id)
	m, err := stream.GetLastMsgForSubject(ctx, subj)
	if err == nil && m.Header.Get("KV-Operation") != "" {
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(m.Sequence+1)); err != nil {
			return fmt.Errorf("receipts: drop the purge marker of %s: %w", receipt.ShortQuote(id), err)
		}
	}
	tok := idToken(id)
	if err := st.ix.remove(ctx, eventKey(kindPending).key(tok)); err != nil {
		return err
	}
	if c, _, _, err := st.get(ctx, id); err == nil {
		// Written since: its entry may have gone with ours.
		c.Derive()
		for _, k := range indexKeys(&c) {
			if err := st.ix.create(ctx, k.key(tok), publishedValue(&c)); err != nil {
				return err
			}
		}
	}
	return nil
}
