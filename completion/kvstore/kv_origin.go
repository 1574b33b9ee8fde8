package kvstore

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/leafline/leafline/completion/record"
	"github.com/nats-io/nats.go"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// ApplyOriginBatch records origins as if ApplyOrigin were called for each
// in order (with the same now), and returns one result per origin.
//
// The pending index entries of all of them are written with one atomic
// batch to the index bucket's stream, and then their records with one
// atomic batch to the completion bucket's stream, with the same
// create/compare-and-set expectations as ApplyOrigin (see ApplyBatch): two
// disk flushes for up to MaxApplyBatch events. Where a batch is refused or
// cannot be shown to have landed, the origins of that chunk are applied one
// by one with ApplyOrigin (index entries already written are harmless: the
// index is a superset of the truth).
func (s *Store) ApplyOriginBatch(ctx context.Context, origins []record.Origin, now time.Time) []record.OriginResult {
	res := make([]record.OriginResult, len(origins))
	var order []string
	groups := map[string][]int{}
	for i, o := range origins {
		if err := o.Validate(); err != nil {
			res[i].Err = err
			continue
		}
		if _, ok := groups[o.EventID]; !ok {
			order = append(order, o.EventID)
		}
		groups[o.EventID] = append(groups[o.EventID], i)
	}
	now = now.UTC()
	for start := 0; start < len(order); start += MaxApplyBatch {
		chunk := order[start:min(start+MaxApplyBatch, len(order))]
		gs := make([]*batchGroup, len(chunk))
		for j, id := range chunk {
			gs[j] = &batchGroup{eventID: id, idx: groups[id], written: map[idxKey]bool{}, perItem: s.js == nil || s.ix == nil}
		}
		if s.js != nil && s.ix != nil {
			s.readGroups(ctx, gs)
			s.writeOrigins(ctx, origins, gs, res, now)
		}
		eachGroup(gs, func(g *batchGroup) {
			if g.perItem {
				for _, i := range g.idx {
					res[i].Outcome, res[i].Held, res[i].Err = s.ApplyOriginRelease(ctx, origins[i], now)
				}
				return
			}
			if g.val != nil {
				if err := s.cleanup(ctx, idToken(g.eventID), &g.c, g.old, g.written, nil); err != nil {
					for _, i := range g.idx {
						res[i].Err = err
					}
				}
			}
		})
	}
	return res
}

// writeOrigins folds each group's origins into its record (the decisions
// of applyOrigin), writes the index entries and then the records in one
// atomic batch each, and fills in res; on failure it marks the groups for
// the per-origin path.
func (s *Store) writeOrigins(ctx context.Context, origins []record.Origin, gs []*batchGroup, res []record.OriginResult, now time.Time) {
	var idx, recs []*nats.Msg
	var batched []*batchGroup
	for _, g := range gs {
		if g.perItem {
			continue
		}
		changed := false
		for _, i := range g.idx {
			out, rel := g.c.FoldOrigin(origins[i], now)
			res[i].Outcome = out
			res[i].Held = rel
			changed = changed || out != record.OriginKnown
		}
		if !changed {
			continue
		}
		g.c.Derive()
		val := publishedValue(&g.c)
		tok := idToken(g.eventID)
		for _, k := range indexKeys(&g.c) {
			if slices.Contains(g.old, k) && k.kind != kindPending {
				continue
			}
			m := nats.NewMsg(s.ix.subject + k.key(tok))
			m.Data = val
			idx = append(idx, m)
			g.written[k] = true
		}
		rec, err := json.Marshal(g.c)
		if err != nil {
			g.perItem = true
			continue
		}
		g.val = rec
		recs = append(recs, s.casMsg(g))
		batched = append(batched, g)
	}
	if len(idx) > 0 {
		cctx, cancel := context.WithTimeout(ctx, s.callTimeout+time.Duration(len(idx))*time.Millisecond)
		_, err := jetstreamext.PublishMsgBatch(cctx, s.js, idx)
		cancel()
		if err != nil {
			s.batchFallbacks.Add(1)
			markPerItem(batched)
			return
		}
	}
	if len(recs) > 0 && !s.commitBatch(ctx, recs, batched) {
		s.batchFallbacks.Add(1)
		markPerItem(batched)
	}
}

func markPerItem(gs []*batchGroup) {
	for _, g := range gs {
		g.perItem = true
	}
}
