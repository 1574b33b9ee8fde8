package box

import (
	"context"
	"net/http"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"
)

// Role is what a site's role adds to the box: the edge's sink runner, L1's
// completion service, the hub's link beats. The box owns the embedded
// server, its links, storage and ops endpoint, and calls its role at each
// step of a start and a stop, in this order:
//
//	New:     Init (once: the role keeps the box and registers its metrics)
//	start:   Open, the server and the site's streams, Start, Loops
//	stop:    Stop, the connection and the server close, Closed
//
// A full disk stops everything but the ops endpoint and starts again from
// Open on the same data dir, so a role forgets in Stop or Closed what it
// made in Open and Start. Crash is the power cut's stop: it closes the
// role's own connections and nothing else. On a cluster (an l1 or hub box
// with no embedded server) Open is not called.
type Role interface {
	// Init is called once, by New.
	Init(b *App) error
	// Open runs before the embedded server starts (the edge opens its
	// outbox there).
	Open() error
	// Start builds the role's parts once the site's streams exist.
	Start(ctx context.Context) error
	// Loops runs the role's loops in g until ctx ends.
	Loops(ctx context.Context, g *errgroup.Group)
	// Routes adds the role's routes to the ops endpoint (once, before Run
	// serves it).
	Routes(mux *http.ServeMux)
	// Readiness adds what the role knows to a /readyz answer.
	Readiness(r *Readiness)
	// WatchDirs are directories besides the data dir whose filesystems the
	// box watches for space.
	WatchDirs() []string
	// Stop stops the role's parts; the box's connection is still open.
	Stop()
	// Closed runs once the embedded server has shut down.
	Closed()
	// Crash closes the role's own NATS connections as a power cut would.
	Crash()
}

// BaseRole does nothing at every step: a role embeds it and writes the
// steps it has.
type BaseRole struct{}

func (BaseRole) Init(*App) error                        { return nil }
func (BaseRole) Open() error                            { return nil }
func (BaseRole) Start(context.Context) error            { return nil }
func (BaseRole) Loops(context.Context, *errgroup.Group) {}
func (BaseRole) Routes(*http.ServeMux)                  {}
func (BaseRole) Readiness(*Readiness)                   {}
func (BaseRole) WatchDirs() []string                    { return nil }
func (BaseRole) Stop()                                  {}
func (BaseRole) Closed()                                {}
func (BaseRole) Crash()                                 {}

// Replicas is the replica count of what a role creates: the cluster's on a
// cluster, 1 on an embedded server.
func (a *App) Replicas() int { return a.replicas() }

// NATSErrors is the option that logs and counts a role's own connection's
// asynchronous errors as the box's.
func (a *App) NATSErrors() nats.Option { return a.natsErrors() }
