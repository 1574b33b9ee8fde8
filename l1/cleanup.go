package l1

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/cleanup"
	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/eventid"

	"github.com/leafline/leafline/topology"
)

// NewCleaner returns the cleaner of an L1 box's origin stream as its config
// (completion.cleanup) describes it, reading completion records from st
// (the L1 box's state, or its status service);
// who names the deleter in every audit record. It is built whether or not
// the cleanup is enabled, so that the CLI can show what it would do.
func NewCleaner(cfg *topology.Config, js jetstream.JetStream, st record.RecordReader, who string, log *slog.Logger) (*cleanup.Cleaner, error) {
	c, err := cleanup.NewCleaner(cleanupConfig(cfg, js, st, who, log))
	if err != nil {
		return nil, fmt.Errorf("completion.cleanup: %w", err)
	}
	return c, nil
}

func cleanupConfig(cfg *topology.Config, js jetstream.JetStream, st record.RecordReader, who string, log *slog.Logger) cleanup.CleanupConfig {
	cl := cfg.Completion.Cleanup
	host, _ := os.Hostname()
	c := cleanup.CleanupConfig{
		JS:                js,
		Store:             st,
		OriginStream:      cfg.Topology.Events.OriginStream,
		OriginEventID:     eventid.Extractor(cfg.EventID.JSONField, cfg.EventID.Header, cfg.EventID.MaxLength),
		Grace:             cl.Grace.D(),
		PressureAt:        cl.PressureAt,
		PressureGrace:     cl.PressureGrace.D(),
		AllowDeadLettered: cl.AllowDeadLettered,
		AllowExpired:      cl.AllowExpired,
		Interval:          cl.Interval.D(),
		MaxPerPass:        cl.MaxPerPass,
		AuditStream:       cl.AuditStream,
		AuditSubject:      cl.AuditSubject,
		AuditMaxAge:       cl.AuditRetention.D(),
		AuditMaxBytes:     cl.AuditMaxBytes,
		DeletedBy:         fmt.Sprintf("%s on site %s, host %s, pid %s", who, cfg.Site, host, strconv.Itoa(os.Getpid())),
		Logger:            log,
	}
	if cfg.EventID.JSONField == "" && cfg.EventID.MaxLength >= receipt.MaxEventIDLen {
		// The event_id is a header: a pass reads headers only. (An id
		// over a shorter max_length is one the tracker never recorded,
		// which the cleaner keeps as untracked either way.)
		c.OriginHeader, c.OriginEventID = cfg.EventID.Header, nil
	}
	return c
}

// startCleanup builds the L1 box's cleaner when completion.cleanup is
// enabled: it sees the service's redrives, and the status API shows the
// audit record of each event it cleaned.
func (a *Role) startCleanup(svc *completion.Service) error {
	if !a.cfg.Completion.Cleanup.On() {
		return nil
	}
	cfg := cleanupConfig(a.cfg, a.js, svc.State(), "leafline run", a.log.With("component", "cleanup"))
	cfg.Redriven = svc.RedrivenAt
	c, err := cleanup.NewCleaner(cfg)
	if err != nil {
		return fmt.Errorf("completion.cleanup: %w", err)
	}
	svc.AttachCleaner(c)
	a.cleaner = c
	a.metrics.watchCleanup(c.Stats)
	return nil
}

// cleanupMetrics exports the cleaner's counters; like watchCompletions, a
// later watchCleanup replaces the source.
type cleanupMetrics struct {
	stats atomic.Pointer[func() cleanup.CleanupStats]
	once  sync.Once
}

func (m *metrics) watchCleanup(stats func() cleanup.CleanupStats) {
	m.cleanup.stats.Store(&stats)
	m.cleanup.once.Do(func() {
		get := func() cleanup.CleanupStats { return (*m.cleanup.stats.Load())() }
		m.CounterFunc("cleanup_passes_total", "Cleanup passes over the origin stream.", func() float64 { return float64(get().Passes) })
		m.CounterFunc("cleanup_deleted_total", "Origin messages deleted by the cleanup, each after its audit record was PubAck'ed.", func() float64 { return float64(get().Deleted) })
		m.CounterFunc("cleanup_purged_total", "Origin messages of cleanup_deleted_total deleted by purging the head of the stream, many at once.", func() float64 { return float64(get().Purged) })
		m.CounterFunc("cleanup_bytes_freed_total", "Payload and header bytes of the origin messages the cleanup deleted.", func() float64 { return float64(get().BytesFreed) })
		m.CounterFunc("cleanup_mismatches_total", "Origin messages refused because the message at the recorded sequence is not the recorded event (each counted once).", func() float64 { return float64(get().Mismatches) })
		for _, reason := range cleanup.CleanupSkipReasons {
			m.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Namespace:   box.Namespace,
				Name:        "cleanup_skipped_total",
				Help:        "Origin messages a cleanup pass kept, by reason.",
				ConstLabels: m.withLabel("reason", reason),
			}, func() float64 { return float64(get().Skipped[reason]) }))
		}
	})
}
