package box

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/linkperm"
)

// ServerOptions derives the embedded nats-server's options from the box
// config and its site in the topology.
func ServerOptions(cfg *topology.Config, site *topology.Site) (*server.Options, error) {
	host, port, err := splitHostPort(cfg.NATS.Listen)
	if err != nil {
		return nil, fmt.Errorf("nats.listen: %w", err)
	}
	opts := &server.Options{
		ServerName:      site.Name,
		Host:            host,
		Port:            port,
		JetStream:       true,
		JetStreamDomain: site.Domain,
		StoreDir:        filepath.Join(cfg.DataDir, "jetstream"),
		// NoSigs: the process owns signal handling (signal.NotifyContext).
		NoSigs: true,
		// The embedded server's own HTTP monitor stays off; leafline serves
		// /metrics, /healthz and /readyz on its ops address.
		HTTPPort: 0,
	}
	if cfg.JetStream.MaxStoreBytes > 0 {
		opts.JetStreamMaxStore = cfg.JetStream.MaxStoreBytes
	}
	if cfg.JetStream.Durable() {
		opts.SyncAlways = true
	} else {
		d, err := time.ParseDuration(cfg.JetStream.SyncInterval)
		if err != nil {
			return nil, fmt.Errorf("jetstream.sync_interval: %w", err)
		}
		opts.SyncInterval = d
	}
	// Domain- and consumer-scoped JetStream ACK, flow-control and API reply
	// subjects: what lets each link's permissions be narrow (and keeps one
	// edge's ACKs from reaching another edge's consumer of the same name).
	opts.FeatureFlags = linkperm.ServerFeatureFlags()
	if err := leafListener(opts, cfg, site); err != nil {
		return nil, err
	}
	if err := clientSecurity(opts, cfg); err != nil {
		return nil, err
	}
	opts.LeafNode.ReconnectInterval = cfg.Leafnode.ReconnectInterval.D()
	// A link that drops packets without closing is seen down after
	// MaxPingsOut missed pongs, about 3 ping intervals.
	opts.PingInterval = cfg.Leafnode.PingInterval.D()
	opts.MaxPingsOut = 3
	if err := leafRemote(opts, cfg, site); err != nil {
		return nil, err
	}
	return opts, nil
}

// leafListener sets the leafnode listener of a site that has one: where
// downstream sites dial it, its compression and its security.
func leafListener(opts *server.Options, cfg *topology.Config, site *topology.Site) error {
	if site.Leafnode.Listen == "" {
		return nil
	}
	lh, lp, err := splitHostPort(site.Leafnode.Listen)
	if err != nil {
		return fmt.Errorf("leafnode.listen: %w", err)
	}
	opts.LeafNode.Host = lh
	opts.LeafNode.Port = lp
	// Downstream leafs must dial exactly the address they were given
	// (proxies, NAT); never advertise other addresses to them.
	opts.LeafNode.NoAdvertise = true
	// One mode for every link this listener accepts: the links' own
	// when they agree, else accept, which follows each dialling site.
	opts.LeafNode.Compression.Mode = listenerCompression(cfg, site)
	return listenSecurity(opts, cfg, site)
}

// leafRemote sets the link to the site's upstream, if it has one.
func leafRemote(opts *server.Options, cfg *topology.Config, site *topology.Site) error {
	ups := cfg.UpstreamURLs(site)
	if len(ups) == 0 {
		return nil
	}
	// Several URLs (the nodes of an upstream cluster): the link dials
	// the next one when the node it uses dies.
	urls := make([]*url.URL, 0, len(ups))
	for _, up := range ups {
		u, err := url.Parse(up)
		if err != nil {
			// Never quote the URL: it may carry credentials.
			return errors.New("leafnode upstream url: not a valid URL")
		}
		urls = append(urls, u)
	}
	remote := &server.RemoteLeafOpts{
		URLs: urls,
		// Never reconnect "around" the given address to servers
		// discovered through it.
		IgnoreDiscoveredServers: true,
	}
	if cfg.Topology != nil {
		remote.Compression.Mode = cfg.Topology.LinkCompression(site)
	}
	if err := upstreamSecurity(remote, cfg, site); err != nil {
		return err
	}
	opts.LeafNode.Remotes = []*server.RemoteLeafOpts{remote}
	return nil
}

// listenerCompression is the compression mode of site's leafnode listener
// (topology ListenerCompression); "" leaves nats-server's default.
func listenerCompression(cfg *topology.Config, site *topology.Site) string {
	if cfg.Topology == nil {
		return ""
	}
	return cfg.Topology.ListenerCompression(site)
}

func splitHostPort(hp string) (string, int, error) {
	host, ps, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.Atoi(ps)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("invalid port %q", ps)
	}
	if p == 0 {
		p = server.RANDOM_PORT
	}
	return host, p, nil
}

// startServer starts the embedded server and waits until it accepts
// connections and JetStream is enabled.
func startServer(opts *server.Options, log *slog.Logger) (*server.Server, error) {
	return startServerWith(opts, log, nil)
}

// startServerWith is startServer with a hook that sees every warning and
// error line of the server (the box counts link violations with it).
func startServerWith(opts *server.Options, log *slog.Logger, onError func(msg string)) (*server.Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	sl := &serverLog{log: log.With("component", "nats-server"), onError: onError}
	if la, ok := opts.CustomClientAuthentication.(*linkAuth); ok {
		la.started(s, log)
	}
	if len(opts.LeafNode.Remotes) > 0 && len(opts.LeafNode.Remotes[0].URLs) > 0 {
		sl.link.setUpstream(opts.LeafNode.Remotes[0].URLs[0])
	}
	// Certificates that cannot work are reported, not fatal: an edge goes
	// on processing with its link down, and the link status says why.
	sl.link.preflight = certificateFindings(opts, time.Now())
	for _, f := range sl.link.preflight {
		log.Warn("leafnode certificate problem", "problem", f)
	}
	s.SetLoggerV2(sl, false, false, false)
	go s.Start()
	if err := waitReady(s, sl, 30*time.Second); err != nil {
		s.Shutdown()
		return nil, err
	}
	if !s.JetStreamEnabled() {
		s.Shutdown()
		return nil, fmt.Errorf("nats-server: JetStream did not start (store dir %s)", opts.StoreDir)
	}
	return s, nil
}

// waitReady waits until the server listens on all its ports. A listener
// that cannot bind (a port in use) is fatal to the server, which logs it
// and never becomes ready: that line is returned at once, naming the port,
// rather than after the whole timeout.
func waitReady(s *server.Server, sl *serverLog, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if s.ReadyForConnections(50 * time.Millisecond) {
			return nil
		}
		if msg := sl.fatal.Load(); msg != nil {
			return fmt.Errorf("nats-server: %s", *msg)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server: not listening after %s", timeout)
		}
	}
}

// UpstreamConnected reports whether the server's solicited (upstream)
// leafnode connection is up.
func UpstreamConnected(s *server.Server) bool {
	lz, err := s.Leafz(nil)
	if err != nil {
		return false
	}
	for _, l := range lz.Leafs {
		if l.IsSpoke {
			return true
		}
	}
	return false
}

// serverLog routes the embedded server's log lines to slog. Server notices
// are logged at debug level: they are many and describe the server, not
// leafline; warnings and errors keep their level. It also remembers the
// last error of the upstream leafnode link (see linkstatus.go), and the
// first fatal error, which stops the server from starting (see waitReady).
type serverLog struct {
	log     *slog.Logger
	link    linkStatus
	fatal   atomic.Pointer[string]
	onError func(msg string) // nil: none
}

func (l *serverLog) Noticef(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.link.observeNotice(msg)
	l.log.Debug(msg)
}
func (l *serverLog) Warnf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if msg == plaintextPasswordWarning {
		// The only password that is not a bcrypt hash is the empty one of
		// the local clients' user (see listenSecurity); the topology
		// refuses any other.
		l.log.Debug(msg)
		return
	}
	l.link.observeError(msg)
	l.log.Warn(msg)
	if l.onError != nil {
		l.onError(msg)
	}
}

const plaintextPasswordWarning = "Plaintext passwords detected, use nkeys or bcrypt"

func (l *serverLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.fatal.CompareAndSwap(nil, &msg)
	l.log.Error(msg)
}
func (l *serverLog) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.link.observeError(msg)
	l.log.Error(msg)
	if l.onError != nil {
		l.onError(msg)
	}
}
func (l *serverLog) Debugf(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Tracef(format string, v ...any) {}
