package systest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/completion/state"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/topology"
)

// TestSummary_L1StreamsFill: L1's summary (GET /v1/summary, which
// `leafline summary` and the console show too) tells how full each of
// L1's streams is: the origin stream with its bytes against
// jetstream.max_stream_bytes, then the receipts stream, the completion
// log, the quarantine stream and, if the cleanup created it, its audit
// stream.
func TestSummary_L1StreamsFill(t *testing.T) {
	const (
		maxBytes = 8 << 20
		events   = 100
		payload  = 10_000
	)
	ls := testSystem(t, Options{Configure: func(c *topology.Config) { c.JetStream.MaxStreamBytes = maxBytes }}, nil)
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	publishData(t, js, "fill", events, []byte(strings.Repeat("x", payload)))
	url := "http://" + ls.App("l1").OpsAddr() + "/v1/summary"
	check.For(t, 20*time.Second, 100*time.Millisecond, func() error {
		var sum record.Summary
		code, err := getJSON(url, &sum)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("GET /v1/summary: %d %v", code, err)
		}
		var names []string
		for _, f := range sum.Streams {
			names = append(names, f.Stream)
		}
		// The audit stream shows once the cleanup has created it.
		want := "L1A,R1," + state.DefaultLogStream + ",RQ"
		if got := strings.Join(names, ","); got != want && got != want+",LEAFLINE_AUDIT" {
			return fmt.Errorf("streams %s, want %s[,LEAFLINE_AUDIT]", got, want)
		}
		l1a := sum.Streams[0]
		if l1a.Msgs != events || l1a.Bytes < events*payload || l1a.MaxBytes != maxBytes {
			return fmt.Errorf("L1A: %+v, want %d messages, at least %d bytes, max_bytes %d", l1a, events, events*payload, maxBytes)
		}
		if want := float64(l1a.Bytes) / maxBytes; l1a.Fill != want {
			return fmt.Errorf("L1A: fill %v, want %v", l1a.Fill, want)
		}
		return nil
	})
}
