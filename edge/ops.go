package edge

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/topology"
)

// opsHandler serves /metrics, /healthz, /readyz and, on L1, the status API.
func (a *App) opsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "site": a.site.Name})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		code, body := http.StatusOK, a.readiness()
		if !body.Ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, body)
	})
	if a.site.Role == topology.RoleL1 {
		// The L1 status API: /v1/events/{event_id}, /v1/events?status=…,
		// /v1/summary — served by the current completion service (a new
		// one after a restart on a full disk).
		mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
			l1 := a.opsL1.Load()
			if l1 == nil {
				msg, _ := a.notReady.Load().(string)
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "the completion service is not running: " + msg})
				return
			}
			l1.status.ServeHTTP(w, r)
		})
		mux.Handle("/console/", a.consoleHandler()) // see role_l1_fleet.go
	}
	if a.cfg.Ops.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// l1Ops is what L1's ops handlers serve from: the current completion
// service (a new one after a restart on a full disk) and its status API.
type l1Ops struct {
	svc    *completion.Service
	status http.Handler
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
	if st := a.opsState.Load(); r.Ready && st != nil && !st.Ready() {
		// Never answer from a partial state: not ready until the local
		// completion state has folded its log.
		stats := st.Stats()
		r.Ready = false
		r.Reason = fmt.Sprintf("completion state catching up with its log (entry %d)", stats.Applied)
		if stats.Rebuilt != "" {
			r.Reason += "; rebuilding: " + stats.Rebuilt
		}
	}
	if srv := a.opsSrv.Load(); a.site.Upstream != "" && srv != nil {
		up := upstreamConnected(srv)
		r.UpstreamConnected = &up
		r.UpstreamError = upstreamError(srv)
	}
	if d := a.opsDirect.Load(); d != nil {
		st := d.Status()
		r.Direct = &st
	}
	r.LastLinkViolation = a.metrics.LastLinkViolation()
	return r
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
