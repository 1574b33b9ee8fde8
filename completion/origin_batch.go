package completion

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
)

// handleOriginBatch records a batch of origin messages with one
// ApplyOriginBatch and ends each message as handleOrigin does. Messages
// without a usable event_id or expected set take handleOrigin's path.
func (s *Service) handleOriginBatch(ctx context.Context, b []laneItem) {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
	defer cancel()
	var origins []record.Origin
	var msgs []jetstream.Msg
	var metas []*jetstream.MsgMetadata
	for _, it := range b {
		p := it.prep.(originPrep)
		meta, merr := it.msg.Metadata()
		var expected []string
		err := errors.Join(merr, p.err)
		if err == nil {
			expected, err = s.expected(it.msg.Subject())
		}
		if err != nil {
			s.handleOrigin(ctx, it.msg, it.prep)
			continue
		}
		s.originReceived.Add(1)
		origins = append(origins, record.Origin{
			EventID: p.id, Stream: meta.Stream, Subject: it.msg.Subject(), Seq: meta.Sequence.Stream,
			PublishedAt: meta.Timestamp, Expected: expected, Digest: receipt.PayloadDigest(it.msg.Data()),
		})
		msgs, metas = append(msgs, it.msg), append(metas, meta)
	}
	if len(origins) == 0 {
		return
	}
	for i, r := range s.State().ApplyOriginBatch(opCtx, origins, time.Now()) {
		s.finishOrigin(msgs[i], metas[i], origins[i], r.Outcome, r.Held, r.Err)
	}
}

// consumeOrigins runs the origin loop's pipeline on iter: batches
// (ApplyBatch > 1) or one message per lane.
func (s *Service) consumeOrigins(ctx context.Context, iter jetstream.MessagesContext) error {
	if s.cfg.ApplyBatch > 1 {
		return batchPipeline(ctx, iter, min(s.cfg.InFlight, maxBatchWorkers), s.cfg.ApplyBatch, s.prepareOrigin, s.handleOriginBatch)
	}
	return pipeline(ctx, iter, s.cfg.InFlight, s.prepareOrigin, s.handleOrigin)
}
