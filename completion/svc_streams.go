package completion

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/record"
)

const (
	// streamInfoBudget bounds the info calls of one read of the streams'
	// fill, all streams together.
	streamInfoBudget = 2 * time.Second
	// streamFillTTL is how long Summary reuses the fill it read.
	streamFillTTL = 2 * time.Second
)

// streamFills is the fill of ServiceConfig.Streams as last read.
type streamFills struct {
	mu    sync.Mutex // one read at a time; the others wait for it and reuse it
	at    time.Time  // when fills was read; zero = never
	fills []record.StreamFill
}

// streamFill returns what each of ServiceConfig.Streams holds against its
// limits: read with one info call per stream, within streamInfoBudget,
// at most once per streamFillTTL however often Summary is called. A stream
// that does not exist is left out silently; one whose info cannot be read
// (JetStream unreachable, the budget spent) is left out and logged at
// debug level: the summary is answered without it.
func (s *Service) streamFill(ctx context.Context) []record.StreamFill {
	if len(s.cfg.Streams) == 0 {
		return nil
	}
	c := &s.fills
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < streamFillTTL {
		return slices.Clone(c.fills)
	}
	ictx, cancel := context.WithTimeout(ctx, streamInfoBudget)
	defer cancel()
	var fills []record.StreamFill
	for _, name := range s.cfg.Streams {
		st, err := s.cfg.JS.Stream(ictx, name)
		if err != nil {
			if !errors.Is(err, jetstream.ErrStreamNotFound) {
				s.log.Debug("summary: stream info", "stream", name, "err", err)
			}
			continue
		}
		info := st.CachedInfo()
		fills = append(fills, record.NewStreamFill(name, info.State.Bytes, info.State.Msgs, info.Config.MaxBytes, info.Config.MaxMsgs))
	}
	// A read cut short by the caller is not kept for the next one.
	if ctx.Err() == nil {
		c.at, c.fills = time.Now(), fills
	}
	return slices.Clone(fills)
}
