package systest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
)

func standaloneJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	return jstest.Connect(t, jstest.Start(t, jstest.Options{}))
}

func edgePlan(t *testing.T) jsplan.Plan {
	t.Helper()
	ls, err := newLocal(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	cfg := ls.Configs["edge1"]
	site, _ := cfg.Topology.Site("edge1")
	return jsplan.SitePlan(cfg, site)
}

func TestReconcile_IdempotentAndNeverDestructive(t *testing.T) {
	ctx := context.Background()
	p := edgePlan(t)
	for name, tc := range map[string]struct {
		pre     *jetstream.StreamConfig // created before jsplan.Reconcile
		wantErr bool
	}{
		"fresh":                 {},
		"receipts discard old":  {pre: &jetstream.StreamConfig{Name: "RE", Subjects: []string{"leafline.receipts.edge1.>"}, Discard: jetstream.DiscardOld, Storage: jetstream.FileStorage}, wantErr: true},
		"receipts memory":       {pre: &jetstream.StreamConfig{Name: "RE", Subjects: []string{"leafline.receipts.edge1.>"}, Discard: jetstream.DiscardNew, Storage: jetstream.MemoryStorage}, wantErr: true},
		"events work queue":     {pre: &jetstream.StreamConfig{Name: "L2A", Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardNew, Storage: jetstream.FileStorage}, wantErr: true},
		"receipts fewer limits": {pre: &jetstream.StreamConfig{Name: "RE", Subjects: []string{"leafline.receipts.edge1.>"}, Discard: jetstream.DiscardNew, Storage: jetstream.FileStorage, MaxBytes: 1 << 20}},
	} {
		t.Run(name, func(t *testing.T) {
			js := standaloneJS(t)
			var before uint64
			if tc.pre != nil {
				s, err := js.CreateStream(ctx, *tc.pre)
				if err != nil {
					t.Fatal(err)
				}
				if len(tc.pre.Subjects) > 0 {
					if _, err := js.Publish(ctx, "leafline.receipts.edge1.processed", []byte("keep me")); err != nil {
						t.Fatal(err)
					}
					before = 1
				}
				_ = s
			}
			err := jsplan.Reconcile(ctx, js, p)
			if tc.wantErr {
				if !errors.Is(err, jsplan.ErrIncompatible) {
					t.Fatalf("got %v, want jsplan.ErrIncompatible", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// A second jsplan.Reconcile (a restart) changes nothing and loses nothing.
			if err := jsplan.Reconcile(ctx, js, p); err != nil {
				t.Fatalf("second reconcile: %v", err)
			}
			s, err := js.Stream(ctx, "RE")
			if err != nil {
				t.Fatal(err)
			}
			info := s.CachedInfo()
			if info.State.Msgs != before {
				t.Fatalf("RE holds %d messages after jsplan.Reconcile, want %d", info.State.Msgs, before)
			}
			if info.Config.Discard != jetstream.DiscardNew || !info.Config.AllowAtomicPublish {
				t.Fatalf("RE config not reconciled: %+v", info.Config)
			}
		})
	}
}

// A box's jsplan.Plan follows the topology: the hub serves one durable source
// consumer per edge with that edge's filter, and one for L1 on RH.
func TestSitePlan_HubServesEachDownstream(t *testing.T) {
	ls, err := newLocal(t.TempDir(), Options{Edges: 2, Configure: withTransport(topology.TransportSourcing, "")})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	cfg := ls.Configs["hub"]
	site, _ := cfg.Topology.Site("hub")
	p := jsplan.SitePlan(cfg, site)
	got := map[string]string{}
	for _, c := range p.Consumers {
		got[c.Stream+"/"+c.Config.Durable] = c.Config.DeliverSubject
		if c.Config.AckPolicy != jetstream.AckFlowControlPolicy {
			t.Fatalf("%s: ack policy %s, want flow control (durable sourcing)", c.Config.Durable, c.Config.AckPolicy)
		}
	}
	want := map[string]string{
		"HA/leafline-src-edge1": "leafline.src.hub.HA.edge1",
		"HA/leafline-src-edge2": "leafline.src.hub.HA.edge2",
		"RH/leafline-src-l1":    "leafline.src.hub.RH.l1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("consumer %s: deliver subject %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	for _, s := range p.Streams {
		if s.Name == "RH" && len(s.Sources) != 2 {
			t.Fatalf("RH sources %d edges, want 2", len(s.Sources))
		}
	}
}

// Stock servers whose durable sourcing can ACK what it skipped are named;
// the fixed releases, later ones and unreadable versions are not.
func TestServerVersionWarning(t *testing.T) {
	for v, want := range map[string]bool{
		"2.15.2":        true,
		"v2.15.0":       true,
		"2.14.9":        true,
		"2.12.4":        true,
		"1.4.1":         true,
		"2.15.3-RC.1":   false,
		"2.15.3":        false,
		"2.14.10":       false,
		"2.16.0":        false,
		"3.0.0":         false,
		"":              false,
		"not-a-version": false,
	} {
		w, got := jsplan.ServerVersionWarning(v)
		if got != want {
			t.Errorf("%q: warned %v, want %v", v, got, want)
		}
		if got && !strings.Contains(w.String(), "nats-server "+v+": ") || got && !strings.Contains(w.Msg, "2.15.3") {
			t.Errorf("%q: warning %q does not name the version and the fix", v, w)
		}
	}
}

// A box upgraded from a release whose backlog batch default was 512 finds
// its sink consumer asking at most 512 per pull: jsplan.Reconcile raises it to
// the store sink's 1000 in place, keeping the consumer and its state.
func TestReconcile_RaisesSinkConsumerRequestBatch(t *testing.T) {
	ctx := context.Background()
	p := edgePlan(t)
	js := standaloneJS(t)
	var sink *jsplan.ConsumerPlan
	for i := range p.Consumers {
		if p.Consumers[i].Stream == "L2A" {
			sink = &p.Consumers[i]
		}
	}
	if sink == nil || sink.Config.MaxRequestBatch != 1000 {
		t.Fatalf("sink consumer jsplan.Plan %+v: want MaxRequestBatch 1000", sink)
	}
	for _, s := range p.Streams {
		if _, err := js.CreateStream(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	old := sink.Config
	old.MaxRequestBatch = 512
	created, err := js.CreateConsumer(ctx, sink.Stream, old)
	if err != nil {
		t.Fatal(err)
	}
	if err := jsplan.Reconcile(ctx, js, p); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	cons, err := js.Consumer(ctx, sink.Stream, old.Durable)
	if err != nil {
		t.Fatal(err)
	}
	info := cons.CachedInfo()
	if info.Config.MaxRequestBatch != 1000 || !info.Created.Equal(created.CachedInfo().Created) {
		t.Fatalf("after reconcile: max_request_batch %d, created %v (was %v): want 1000, the same consumer",
			info.Config.MaxRequestBatch, info.Created, created.CachedInfo().Created)
	}
}

// A relay consumer is created with ACK policy all; one that exists with
// explicit ACKs keeps them, since the server cannot change a policy in
// place and the relay ACKs either way.
func TestReconcile_RelayConsumerAckPolicy(t *testing.T) {
	ctx := context.Background()
	ls, err := newLocal(t.TempDir(), Options{Configure: func(c *topology.Config) {
		c.Topology.Transport = topology.TransportRelay
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	cfg := ls.Configs["edge1"]
	site, _ := cfg.Topology.Site("edge1")
	p := jsplan.SitePlan(cfg, site)
	var relay *jsplan.ConsumerPlan
	for i := range p.Consumers {
		if p.Consumers[i].Config.Durable == topology.RelayConsumerName("hub") {
			relay = &p.Consumers[i]
		}
	}
	if relay == nil || relay.Config.AckPolicy != jetstream.AckAllPolicy {
		t.Fatalf("edge1's relay consumer for the hub: %+v, want one with ACK policy all", relay)
	}
	for _, explicit := range []bool{false, true} {
		js := standaloneJS(t)
		for _, s := range p.Streams {
			if _, err := js.CreateStream(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		want := jetstream.AckAllPolicy
		if explicit {
			old := relay.Config
			old.AckPolicy, want = jetstream.AckExplicitPolicy, jetstream.AckExplicitPolicy
			if _, err := js.CreateConsumer(ctx, relay.Stream, old); err != nil {
				t.Fatal(err)
			}
		}
		if err := jsplan.Reconcile(ctx, js, p); err != nil {
			t.Fatalf("reconcile (existing explicit consumer: %v): %v", explicit, err)
		}
		cons, err := js.Consumer(ctx, relay.Stream, relay.Config.Durable)
		if err != nil {
			t.Fatal(err)
		}
		if got := cons.CachedInfo().Config.AckPolicy; got != want {
			t.Errorf("existing explicit consumer %v: ACK policy %s after jsplan.Reconcile, want %s", explicit, got, want)
		}
	}
}
