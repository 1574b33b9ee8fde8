package console

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// BeatInterval is how often a hub publishes its link beat.
const BeatInterval = time.Second

// LinkSubjectPrefix is the subject prefix of the hubs' link beats.
const LinkSubjectPrefix = "leafline.links"

// LinkSubject is the subject on which hub publishes its link beat.
func LinkSubject(hub string) string { return LinkSubjectPrefix + "." + hub }

// LinkBeat is what a hub says about its downstream links.
type LinkBeat struct {
	Hub   string     `json:"hub"`
	At    time.Time  `json:"at"`
	Sites []SiteLink `json:"sites"`
}

// SiteLink is one downstream site's leafnode link as its hub sees it.
type SiteLink struct {
	Site      string    `json:"site"`
	Connected bool      `json:"connected"`
	Since     time.Time `json:"since"`
	// BytesIn and BytesOut are the message bytes the link has moved since
	// the hub's box started: in from the site (receipts up), out to it
	// (events down). Headers and payload, before compression.
	BytesIn  int64 `json:"bytes_in,omitempty"`
	BytesOut int64 `json:"bytes_out,omitempty"`
	// Backlog is what the hub holds for the site in its events stream
	// (nil: a hub that does not say).
	Backlog *Backlog `json:"backlog,omitempty"`
}

// Backlog is what a hub holds for one edge in its events stream, and how
// far it released the edge past its budget (package jsplan's Backlog and
// Release). L1 paces what it sends again to the edge by it.
type Backlog struct {
	// Messages of the hub's events stream after what the edge has taken,
	// their estimated bytes, and the edge's budget in bytes.
	Messages uint64 `json:"messages"`
	Bytes    int64  `json:"bytes"`
	MaxBytes int64  `json:"max_bytes"`
	// Pending are the edge's own messages there not yet ACKed.
	Pending uint64 `json:"pending"`
	// Released counts the messages released past the edge's floor in
	// all; ReleasedThrough is the origin stream's sequence through which
	// the edge was released (0: never), ReleasedAt when last.
	Released        uint64    `json:"released,omitempty"`
	ReleasedThrough uint64    `json:"released_through,omitempty"`
	ReleasedAt      time.Time `json:"released_at,omitzero"`
}

// LinkWatcher tracks a hub's downstream links across beats: Observe is
// called with the sites connected now, and keeps each site's since time
// from the last change (or from the watcher's start).
type LinkWatcher struct {
	hub   string
	start time.Time
	state map[string]SiteLink
}

// NewLinkWatcher watches the given downstream sites of hub.
func NewLinkWatcher(hub string, sites []string, now time.Time) *LinkWatcher {
	w := &LinkWatcher{hub: hub, start: now, state: map[string]SiteLink{}}
	for _, s := range sites {
		w.state[s] = SiteLink{Site: s, Since: now}
	}
	return w
}

// Observe records which sites are connected at now and returns the beat.
func (w *LinkWatcher) Observe(connected map[string]bool, now time.Time) LinkBeat {
	b := LinkBeat{Hub: w.hub, At: now}
	for _, s := range sortedKeys(w.state) {
		l := w.state[s]
		if c := connected[s]; c != l.Connected {
			l.Connected, l.Since = c, now
			w.state[s] = l
		}
		b.Sites = append(b.Sites, l)
	}
	return b
}

// linkTracker keeps the last beat of every hub.
type linkTracker struct {
	mu    sync.Mutex
	beats map[string]LinkBeat // by hub
	heard map[string]time.Time
	sub   *nats.Subscription
}

func (lt *linkTracker) subscribe(nc *nats.Conn) error {
	lt.beats, lt.heard = map[string]LinkBeat{}, map[string]time.Time{}
	sub, err := nc.Subscribe(LinkSubjectPrefix+".*", func(m *nats.Msg) {
		var b LinkBeat
		if json.Unmarshal(m.Data, &b) != nil || LinkSubject(b.Hub) != m.Subject {
			return // a beat names the hub whose subject it came on
		}
		lt.mu.Lock()
		lt.beats[b.Hub], lt.heard[b.Hub] = b, time.Now()
		lt.mu.Unlock()
	})
	if err != nil {
		return fmt.Errorf("console: subscribe to link beats: %w", err)
	}
	lt.sub = sub
	return nil
}

// Link is a site's link state as the page shows it.
type Link struct {
	State string    `json:"state"` // online, offline or unknown
	Since time.Time `json:"since"`
	Via   string    `json:"via"` // the hub
	// Down and Up are the message bytes the link has moved to the site
	// and from it, as its hub last said (SiteLink); zero when unknown.
	Down int64 `json:"bytes_down"`
	Up   int64 `json:"bytes_up"`
	// Hub is what the hub holds for the site, and how far it released it
	// past its budget, as its hub last said (nil: unknown).
	Hub *Backlog `json:"hub,omitempty"`
}

// link says what L1 knows of site's link through hub at now. A hub that
// was never heard from counts from start.
func (lt *linkTracker) link(site, hub string, now, start time.Time, offlineAfter time.Duration) Link {
	lt.mu.Lock()
	b, ok := lt.beats[hub]
	heard := lt.heard[hub]
	lt.mu.Unlock()
	if !ok {
		return Link{State: "unknown", Since: start, Via: hub}
	}
	for _, l := range b.Sites {
		if l.Site != site {
			continue
		}
		if now.Sub(heard) > offlineAfter {
			return Link{State: "unknown", Since: heard, Via: hub, Down: l.BytesOut, Up: l.BytesIn}
		}
		st := "offline"
		if l.Connected {
			st = "online"
		}
		return Link{State: st, Since: l.Since, Via: hub, Down: l.BytesOut, Up: l.BytesIn, Hub: l.Backlog}
	}
	if now.Sub(heard) > offlineAfter {
		return Link{State: "unknown", Since: heard, Via: hub}
	}
	return Link{State: "unknown", Since: start, Via: hub}
}
