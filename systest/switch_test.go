package systest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/internal/localsys"
	"github.com/leafline/leafline/topology"
)

// Every link switched from one transport to the other while events flow,
// with the hub crashing in the middle of it and coming back on the new
// transport: every event completes, each hop stored each event once (the
// streams' last sequences count what they ever stored), and L1 saw no
// receipt twice.
func TestSystem_SwitchTransportCopiesNothing(t *testing.T) {
	for _, tc := range []struct{ from, to string }{
		{topology.TransportSourcing, topology.TransportRelay},
		{topology.TransportRelay, topology.TransportSourcing},
	} {
		t.Run(tc.from+" to "+tc.to, func(t *testing.T) {
			ls := testSystem(t, Options{Configure: withTransport(tc.from, "")}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			first := publishN(t, jstest.ConnectURL(t, ls.App("l1").ClientURL()), "before", 600)
			// In flight on every hop: some at the edge, none complete yet
			// or all of them.
			check.For(t, 30*time.Second, 5*time.Millisecond, func() error {
				if n := localsys.StreamState(ctx, jstest.ConnectURL(t, ls.App("edge1").ClientURL()), "L2A").LastSeq; n == 0 {
					return fmt.Errorf("nothing at the edge yet")
				}
				return nil
			})
			ls.Kill("hub")
			for _, name := range []string{"edge1", "l1"} {
				if err := ls.Stop(name); err != nil {
					t.Fatal(err)
				}
			}
			ls.Topology.Transport = tc.to
			for _, name := range []string{"l1", "hub", "edge1"} {
				if _, err := ls.Start(ctx, name); err != nil {
					t.Fatalf("start %s on %s: %v", name, tc.to, err)
				}
			}
			waitLinks(t, ls)
			second := publishN(t, jstest.ConnectURL(t, ls.App("l1").ClientURL()), "after", 400)
			// Receipts applied before the switch are not in the restarted
			// service's counts: the summary counts the records.
			svc := leafline.Completions(ls.App("l1"))
			check.For(t, 90*time.Second, 50*time.Millisecond, func() error {
				sum, err := svc.State().Summary(ctx)
				if err != nil {
					return err
				}
				if sum.Complete != int64(len(first)+len(second)) {
					return fmt.Errorf("%d of %d events complete; %s", sum.Complete, len(first)+len(second), pathState(ls))
				}
				return nil
			})

			const events = 1000
			for _, s := range []struct{ site, stream string }{{"hub", "HA"}, {"edge1", "L2A"}} {
				js := jstest.ConnectURL(t, ls.App(s.site).ClientURL())
				if n := localsys.StreamState(ctx, js, s.stream).LastSeq; n != events {
					t.Errorf("%s at %s stored %d messages for %d events", s.stream, s.site, n, events)
				}
			}
			if d := svc.Stats().Duplicates; d != 0 {
				t.Errorf("L1 received %d receipts twice", d)
			}
			// The consumer of the link's old transport is gone.
			old := topology.SourceConsumerName("edge1")
			if tc.to == topology.TransportSourcing {
				old = topology.RelayConsumerName("edge1")
			}
			hjs := jstest.ConnectURL(t, ls.App("hub").ClientURL())
			if _, err := hjs.Consumer(ctx, "HA", old); err != jetstream.ErrConsumerNotFound {
				t.Errorf("consumer %s on HA after the switch: %v, want it deleted", old, err)
			}
		})
	}
}
