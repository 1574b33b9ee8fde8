package box

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// opsHandler serves /metrics, /healthz, /readyz and, on L1, the status API.
func (a *App) opsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "site": a.site.Name})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		code, body := http.StatusOK, a.readiness()
		if !body.Ready {
			code = http.StatusServiceUnavailable
		}
		WriteJSON(w, code, body)
	})
	a.role.Routes(mux)
	if a.cfg.Ops.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Readiness is the /readyz body.
type Readiness struct {
	Ready             bool   `json:"ready"`
	Reason            string `json:"reason,omitempty"`
	Site              string `json:"site"`
	Role              string `json:"role"`
	UpstreamConnected *bool  `json:"upstream_connected,omitempty"`
	// UpstreamError is why the upstream link is down, when it is known
	// (refused certificate, authorization violation, …).
	UpstreamError string `json:"upstream_error,omitempty"`
	// Direct is a direct-mode edge's consumer on L1: while it is not
	// reachable the edge processes nothing (the box stays ready: its relay
	// and status still work).
	Direct *DirectStatus `json:"direct,omitempty"`
	// LastLinkViolation is the last connection the box's server refused
	// for what it tried (leafline_link_violations_total counts them all).
	LastLinkViolation *LinkViolation `json:"last_link_violation,omitempty"`
}

func (a *App) readiness() Readiness {
	r := Readiness{Ready: a.isReady.Load(), Site: a.site.Name, Role: string(a.site.Role)}
	if !r.Ready {
		r.Reason, _ = a.notReady.Load().(string)
	}
	if full, _ := a.streamFull.Load().(string); r.Ready && full != "" {
		r.Ready, r.Reason = false, full
	}
	if short, _ := a.memoryShort.Load().(string); r.Ready && short != "" {
		r.Ready, r.Reason = false, short
	}
	a.role.Readiness(&r)
	if srv := a.opsSrv.Load(); a.site.Upstream != "" && srv != nil {
		up := UpstreamConnected(srv)
		r.UpstreamConnected = &up
		r.UpstreamError = UpstreamError(srv)
	}
	r.LastLinkViolation = a.metrics.LastLinkViolation()
	return r
}

// WriteJSON writes v as the indented JSON body of an answer with code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// DirectStatus describes a direct-mode edge's consumer on L1 (for /readyz).
type DirectStatus struct {
	// Stream and Consumer name the consumer, Domain L1's JetStream domain.
	Stream   string `json:"stream"`
	Consumer string `json:"consumer"`
	Domain   string `json:"domain"`
	// Reachable: the last attempt reached the consumer on L1. While it is
	// false the sink runner processes nothing.
	Reachable bool `json:"reachable"`
	// Since is when Reachable last changed (zero before the first attempt).
	Since time.Time `json:"since,omitzero"`
	// LastError is why L1 is unreachable, while it is.
	LastError string `json:"last_error,omitempty"`
	// FailedFetches counts the fetches that could not reach L1.
	FailedFetches uint64 `json:"failed_fetches"`
}
