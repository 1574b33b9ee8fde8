package console

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/status"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var errNoService = errors.New("the completion service is not running")

// Config shapes a Console. Zero durations mean the defaults.
type Config struct {
	// Source answers status queries; it returns nil while the completion
	// service is not running (the page then says so).
	Source func() record.StatusSource
	// NC receives the hubs' link beats.
	NC *nats.Conn
	// JS and ReceiptsStream find each site's last receipt; SubjectPrefix is
	// the receipts' subject prefix (a site's receipts are
	// "<prefix>.<site>.>").
	JS             jetstream.JetStream
	ReceiptsStream string
	SubjectPrefix  string
	// LastReceipts, if set, gives per site when the completion service
	// last recorded one of its receipts (Service.LastReceipts).
	LastReceipts func() map[string]time.Time
	// Sites maps each edge site to its hub, in display order by name.
	Sites map[string]string
	// SampleEvery is how often the summary is sampled (default 10s): the
	// page's data is at most that old, and the trend has one point per
	// sample.
	SampleEvery time.Duration
	// Refresh is how often an open page reloads its data (default
	// SampleEvery).
	Refresh time.Duration
	// OfflineAfter is how long without a beat from a hub makes its sites
	// "unknown" (default 5 × BeatInterval).
	OfflineAfter time.Duration
	Logger       *slog.Logger
}

func (c *Config) setDefaults() {
	if c.SampleEvery <= 0 {
		c.SampleEvery = 10 * time.Second
	}
	if c.Refresh <= 0 {
		c.Refresh = c.SampleEvery
	}
	if c.OfflineAfter <= 0 {
		c.OfflineAfter = 5 * BeatInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports every missing field at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Source == nil {
		errs = append(errs, errors.New("console: Source is required"))
	}
	if c.NC == nil {
		errs = append(errs, errors.New("console: NC is required"))
	}
	if c.JS != nil && c.ReceiptsStream == "" {
		errs = append(errs, errors.New("console: ReceiptsStream is required with JS"))
	}
	return errors.Join(errs...)
}

// Console samples the fleet's state and serves the page (Handler).
type Console struct {
	cfg   Config
	start time.Time
	links linkTracker

	handlerOnce sync.Once
	handler     http.Handler

	mu    sync.Mutex
	last  Snapshot
	trend map[string]*ring
}

// New subscribes to the hubs' link beats. Run samples; Handler serves.
func New(cfg Config) (*Console, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, start: time.Now(), trend: map[string]*ring{}}
	n := int(time.Hour / cfg.SampleEvery)
	for s := range cfg.Sites {
		c.trend[s] = newRing(max(n, 2))
	}
	if err := c.links.subscribe(cfg.NC); err != nil {
		return nil, err
	}
	c.last = c.snapshot(context.Background(), nil, errors.New("no sample yet"))
	return c, nil
}

// Close stops listening to link beats.
func (c *Console) Close() {
	if c.links.sub != nil {
		_ = c.links.sub.Unsubscribe()
	}
}

// Run samples every SampleEvery until ctx ends; it returns nil then.
func (c *Console) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.SampleEvery)
	defer t.Stop()
	for {
		c.Sample(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sample takes one sample now.
func (c *Console) Sample(ctx context.Context) {
	var sum *record.Summary
	err := errNoService
	if src := c.cfg.Source(); src != nil {
		sctx, cancel := context.WithTimeout(ctx, status.HTTPTimeout)
		s, serr := src.Summary(sctx)
		cancel()
		if sum, err = &s, serr; serr != nil {
			sum = nil
		}
	}
	snap := c.snapshot(ctx, sum, err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if sum != nil {
		for i := range snap.Sites {
			s := &snap.Sites[i]
			if r := c.trend[s.Site]; r != nil {
				r.add(sample{at: snap.At, v: s.Pending})
			}
		}
	}
	c.last = snap
}

// Snapshot is the page's data at one sample.
type Snapshot struct {
	At time.Time `json:"at"`
	// Error says why the counts are missing, if they are.
	Error        string          `json:"error,omitempty"`
	Summary      *record.Summary `json:"summary,omitempty"`
	Sites        []SiteView      `json:"sites"`
	OfflineAfter string          `json:"offline_after"`
}

// SiteView is one site's row.
type SiteView struct {
	Site         string    `json:"site"`
	Link         Link      `json:"link"`
	LastReceipt  time.Time `json:"last_receipt,omitzero"`
	Pending      int64     `json:"pending"`
	Overdue      int64     `json:"overdue"`
	DeadLettered int64     `json:"dead_lettered"`
	Expired      int64     `json:"expired"`
	// Trend is the pending count over the last hour, oldest first.
	Trend []int64 `json:"trend,omitempty"`
}

func (c *Console) snapshot(ctx context.Context, sum *record.Summary, err error) Snapshot {
	now := time.Now()
	snap := Snapshot{At: now, Summary: sum, OfflineAfter: c.cfg.OfflineAfter.String()}
	if err != nil {
		snap.Error = err.Error()
	}
	var seen map[string]time.Time
	if c.cfg.LastReceipts != nil {
		seen = c.cfg.LastReceipts()
	}
	counts := map[string]record.SiteSummary{}
	if sum != nil {
		for _, s := range sum.Sites {
			counts[s.Site] = s
		}
	}
	for _, site := range sortedKeys(c.cfg.Sites) {
		if seen[site].IsZero() {
			// Not seen by this instance since it started: the newest
			// receipt still in the stream, if any.
			if seen == nil {
				seen = map[string]time.Time{}
			}
			seen[site] = c.lastReceipt(ctx, site)
		}
		cs := counts[site]
		snap.Sites = append(snap.Sites, SiteView{
			Site:         site,
			Link:         c.links.link(site, c.cfg.Sites[site], now, c.start, c.cfg.OfflineAfter),
			LastReceipt:  seen[site],
			Pending:      cs.Pending,
			Overdue:      cs.Overdue,
			DeadLettered: cs.DeadLettered,
			Expired:      cs.Expired,
		})
	}
	return snap
}

// current returns the last sample with the link states brought up to now
// (beats arrive every second; counts only every SampleEvery).
func (c *Console) current() Snapshot {
	c.mu.Lock()
	snap := c.last
	snap.Sites = append([]SiteView(nil), c.last.Sites...)
	now := time.Now()
	for i := range snap.Sites {
		s := &snap.Sites[i]
		s.Link = c.links.link(s.Site, c.cfg.Sites[s.Site], now, c.start, c.cfg.OfflineAfter)
		if r := c.trend[s.Site]; r != nil {
			s.Trend = r.values(now.Add(-time.Hour))
		}
	}
	c.mu.Unlock()
	return snap
}

// lastReceipt is the store time of the newest receipt of site still in
// L1's receipts stream (applied receipts are trimmed from it); zero when
// there is none or it cannot be read.
func (c *Console) lastReceipt(ctx context.Context, site string) time.Time {
	if c.cfg.JS == nil {
		return time.Time{}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := c.cfg.JS.Stream(ctx, c.cfg.ReceiptsStream)
	if err != nil {
		return time.Time{}
	}
	m, err := st.GetLastMsgForSubject(ctx, c.cfg.SubjectPrefix+"."+site+".>")
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			c.cfg.Logger.Debug("console: last receipt", "site", site, "err", err)
		}
		return time.Time{}
	}
	return m.Time
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

type sample struct {
	at time.Time
	v  int64
}

// ring holds the last n samples.
type ring struct {
	buf  []sample
	next int
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]sample, n)} }

func (r *ring) add(s sample) {
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// values returns the samples taken after since, oldest first.
func (r *ring) values(since time.Time) []int64 {
	var out []int64
	n := r.next
	start := 0
	if r.full {
		n, start = len(r.buf), r.next
	}
	for i := 0; i < n; i++ {
		s := r.buf[(start+i)%len(r.buf)]
		if s.at.After(since) {
			out = append(out, s.v)
		}
	}
	return out
}

func unix(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}
