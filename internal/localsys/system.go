// Package localsys runs a whole leafline topology (one L1, one hub, some
// edges) in this process on loopback, each link through a fault proxy
// that can cut it: the harness of the demo, the system tests and the
// benchmarks. It is generic over the box type, so that the box package's
// own tests can use it without an import cycle.
package localsys

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/leafline/leafline/internal/faultproxy"
	"github.com/leafline/leafline/internal/loopback"
	"github.com/leafline/leafline/pki"
	"github.com/leafline/leafline/topology"
)

// System runs a whole leafline topology — one L1, one hub and some
// edges — as boxes of type A in this process, on loopback, with every leafnode link
// going through a faultproxy.Proxy so that it can be cut. The demo and the
// integration tests use it.
//
// Every link is secured as a real deployment should be: mutual TLS with a
// private CA generated under Dir/pki, an nkey per site, and each site's
// leafnode user restricted to the subjects of its link
// (linkperm.Permissions). Options.Insecure turns that off.
// Box is what System needs of a box: box.App is one.
type Box interface {
	Run(ctx context.Context) error
	Ready() <-chan struct{}
	Crash()
}

type System[A Box] struct {
	Dir      string
	Topology *topology.Topology
	Configs  map[string]*topology.Config
	// Links holds, per downstream site, the proxy on its link to its upstream.
	Links map[string]*faultproxy.Proxy
	// Credentials are the generated CA, certificates and nkeys (nil when
	// Insecure).
	Credentials *pki.Credentials

	log    *slog.Logger
	mu     sync.Mutex
	apps   map[string]*runningApp[A]
	newBox func(cfg *topology.Config, log *slog.Logger) (A, error)
}

type runningApp[A Box] struct {
	app    A
	cancel context.CancelFunc
	done   chan error
}

// Options shape a System.
type Options struct {
	// Edges is the number of edge sites, named edge1, edge2, … Zero means 1.
	Edges int
	// Hubs is the number of hubs, named hub, hub2, hub3, …; edge i's
	// upstream is hub number (i-1) mod Hubs + 1. Zero means 1.
	Hubs int
	// Configure, if set, adjusts each box's config before validation.
	Configure func(*topology.Config)
	Logger    *slog.Logger
	// Insecure runs the links over plain TCP without credentials or
	// permissions (the default is mutual TLS and an nkey per site).
	Insecure bool
	// UnsignedReceipts leaves receipts unsigned (the default is an ed25519
	// receipt key per edge, verified at L1).
	UnsignedReceipts bool
}

// New lays out the topology and configs under dir and starts the link
// proxies. It starts no box; Start makes each with newBox.
func New[A Box](dir string, o Options, newBox func(cfg *topology.Config, log *slog.Logger) (A, error)) (*System[A], error) {
	if o.Edges <= 0 {
		o.Edges = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Hubs = max(o.Hubs, 1)
	ports, err := loopback.FreePorts(1 + o.Hubs)
	if err != nil {
		return nil, err
	}
	t := &topology.Topology{Sites: []topology.Site{
		{Name: "l1", Role: topology.RoleL1, Leafnode: topology.SiteLeafnode{Listen: fmt.Sprintf("127.0.0.1:%d", ports[0])}},
	}}
	hub := func(i int) string {
		if i == 1 {
			return "hub"
		}
		return fmt.Sprintf("hub%d", i)
	}
	for i := 1; i <= o.Hubs; i++ {
		t.Sites = append(t.Sites, topology.Site{Name: hub(i), Role: topology.RoleHub, Upstream: "l1",
			Leafnode: topology.SiteLeafnode{Listen: fmt.Sprintf("127.0.0.1:%d", ports[i])}})
	}
	for i := 1; i <= o.Edges; i++ {
		t.Sites = append(t.Sites, topology.Site{Name: fmt.Sprintf("edge%d", i), Role: topology.RoleEdge, Upstream: hub((i-1)%o.Hubs + 1)})
	}
	var creds *pki.Credentials
	if !o.Insecure {
		// Receipt keys come from receiptKeys below, also for an insecure system.
		if creds, err = pki.WriteCredentials(filepath.Join(dir, "pki"), t, pki.CredentialOptions{Validity: 24 * time.Hour, NoReceiptKeys: true}); err != nil {
			return nil, fmt.Errorf("credentials: %w", err)
		}
	}
	signKeys := map[string]string{}
	if !o.UnsignedReceipts {
		if signKeys, err = receiptKeys(dir, t); err != nil {
			return nil, err
		}
	}
	t.SetDefaults()
	if err := t.Validate(); err != nil {
		return nil, err
	}
	ls := &System[A]{Dir: dir, Topology: t, Configs: map[string]*topology.Config{},
		Links: map[string]*faultproxy.Proxy{}, Credentials: creds, log: o.Logger, apps: map[string]*runningApp[A]{},
		newBox: newBox}
	for i := range t.Sites {
		s := &t.Sites[i]
		cfg := &topology.Config{
			TopologyFile: "topology.json",
			Site:         s.Name,
			DataDir:      filepath.Join(dir, s.Name),
			NATS:         topology.NATSConfig{Listen: "127.0.0.1:0"},
			Ops:          topology.OpsConfig{Listen: "127.0.0.1:0"},
			Topology:     t,
		}
		if s.Upstream != "" {
			up, _ := t.Site(s.Upstream)
			p, err := faultproxy.Listen("127.0.0.1:0", up.Leafnode.Listen)
			if err != nil {
				ls.Close()
				return nil, err
			}
			ls.Links[s.Name] = p
			cfg.Leafnode.UpstreamURL = "nats-leaf://" + p.Addr()
		}
		if creds != nil {
			creds.Apply(cfg, s)
		}
		cfg.Signing.KeyFile = signKeys[s.Name]
		if o.Configure != nil {
			o.Configure(cfg)
		}
		cfg.SetDefaults()
		if err := cfg.Validate(); err != nil {
			ls.Close()
			return nil, err
		}
		ls.Configs[s.Name] = cfg
	}
	return ls, nil
}

// Start runs the named box and waits until it is ready.
func (ls *System[A]) Start(ctx context.Context, name string) (A, error) {
	var none A
	cfg, ok := ls.Configs[name]
	if !ok {
		return none, fmt.Errorf("no site %q", name)
	}
	app, err := ls.newBox(cfg, ls.log)
	if err != nil {
		return none, err
	}
	actx, cancel := context.WithCancel(context.Background())
	ra := &runningApp[A]{app: app, cancel: cancel, done: make(chan error, 1)}
	go func() { ra.done <- app.Run(actx) }()
	select {
	case <-app.Ready():
	case err := <-ra.done:
		cancel()
		if err == nil {
			err = errors.New("stopped before ready")
		}
		return none, fmt.Errorf("%s: %w", name, err)
	case <-ctx.Done():
		cancel()
		<-ra.done
		return none, ctx.Err()
	}
	ls.mu.Lock()
	ls.apps[name] = ra
	ls.mu.Unlock()
	return app, nil
}

// StartAll starts L1, then the hub, then every edge.
func (ls *System[A]) StartAll(ctx context.Context) error {
	for _, s := range ls.Topology.Sites {
		if _, err := ls.Start(ctx, s.Name); err != nil {
			return err
		}
	}
	return nil
}

// App returns the running box of that name, or A's zero value (nil).
func (ls *System[A]) App(name string) A {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ra := ls.apps[name]; ra != nil {
		return ra.app
	}
	var none A
	return none
}

// Stop stops the named box gracefully and returns Run's result.
func (ls *System[A]) Stop(name string) error {
	ls.mu.Lock()
	ra := ls.apps[name]
	delete(ls.apps, name)
	ls.mu.Unlock()
	if ra == nil {
		return nil
	}
	ra.cancel()
	select {
	case err := <-ra.done:
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s: did not stop within 30s", name)
	}
}

// Kill stops the named box abruptly: its server and outbox are closed under
// the running loops, with no drain, as close to a crash as one process gets.
func (ls *System[A]) Kill(name string) {
	ls.mu.Lock()
	ra := ls.apps[name]
	delete(ls.apps, name)
	ls.mu.Unlock()
	if ra == nil {
		return
	}
	ra.app.Crash()
	ra.cancel()
	<-ra.done
}

// Close stops every box and every proxy.
func (ls *System[A]) Close() {
	for i := len(ls.Topology.Sites) - 1; i >= 0; i-- {
		if err := ls.Stop(ls.Topology.Sites[i].Name); err != nil {
			ls.log.Warn("stop", "site", ls.Topology.Sites[i].Name, "err", err)
		}
	}
	for _, p := range ls.Links {
		p.Close()
	}
}

// receiptKeys gives every edge of t a receipt-signing nkey: the seed is
// written under dir, the public key set as the site's receipt_key. It
// returns the seed file of each edge.
func receiptKeys(dir string, t *topology.Topology) (map[string]string, error) {
	files := map[string]string{}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for i := range t.Sites {
		s := &t.Sites[i]
		if s.Role != topology.RoleEdge {
			continue
		}
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, err
		}
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		path := filepath.Join(dir, s.Name+".receipt.nk")
		if err := os.WriteFile(path, seed, 0o600); err != nil {
			return nil, err
		}
		s.ReceiptKey, files[s.Name] = pub, path
	}
	return files, nil
}

// streamState is a stream's state (zero if it cannot be read): Msgs is
// what it holds now (in a trimmed stream, about what is not yet taken),
// LastSeq how many messages it has stored so far, which trimming does not
// lower.
func StreamState(ctx context.Context, js jetstream.JetStream, name string) jetstream.StreamState {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return jetstream.StreamState{}
	}
	return s.CachedInfo().State
}
