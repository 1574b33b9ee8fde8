package completion

import (
	"context"
	"fmt"
	"time"

	"github.com/leafline/leafline/completion/record"
)

// Get returns the completion record of eventID (see Store.Get), with
// Cleaned set when an attached Cleaner deleted its origin message;
// ErrNotReady before Setup or Run has opened the buckets.
func (s *Service) Get(ctx context.Context, eventID string) (record.Completion, error) {
	st := s.State()
	if st == nil {
		return record.Completion{}, record.ErrNotReady
	}
	c, err := st.Get(ctx, eventID)
	if cl := s.cleaner.Load(); err == nil && cl != nil {
		c.Cleaned, err = cl.Cleaned(ctx, &c)
	}
	return c, err
}

// List returns a page of events (see Store.List); ErrNotReady before Setup
// or Run has opened the buckets.
func (s *Service) List(ctx context.Context, q record.ListQuery) ([]record.Completion, string, error) {
	st := s.State()
	if st == nil {
		if err := q.Validate(); err != nil {
			return nil, "", err
		}
		return nil, "", record.ErrNotReady
	}
	return st.List(ctx, q)
}

// Summary returns Store.Summary with this instance's Stats and the fill
// of ServiceConfig.Streams (see streamFill: read at most every 2 s, never
// an error); ErrNotReady before Setup or Run has opened the buckets.
func (s *Service) Summary(ctx context.Context) (record.Summary, error) {
	st := s.State()
	if st == nil {
		return record.Summary{}, record.ErrNotReady
	}
	sum, err := st.Summary(ctx)
	if err != nil {
		return record.Summary{}, err
	}
	if sum.Unidentified, err = s.UnidentifiedCount(ctx); err != nil {
		return record.Summary{}, err
	}
	stats := s.Stats()
	sum.Instance = &stats
	sum.Streams = s.streamFill(ctx)
	return sum, nil
}

// retirer is a State that closes the pending events of a retired site
// (package completion/state).
type retirer interface {
	Retire(ctx context.Context, site string, at time.Time, reason string) (int, error)
}

// Retire closes every event pending for site, whose site was retired
// (record.StatusRetired), with reason, and returns how many it closed.
// The state of the previous layout cannot: it returns an error.
func (s *Service) Retire(ctx context.Context, site, reason string) (int, error) {
	st := s.State()
	if st == nil {
		return 0, record.ErrNotReady
	}
	r, ok := st.(retirer)
	if !ok {
		return 0, fmt.Errorf("completion: the %T state cannot retire a site", st)
	}
	return r.Retire(ctx, site, time.Now(), reason)
}
