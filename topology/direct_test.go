package topology

import (
	"strings"
	"testing"
	"time"
)

// directTopology is the secure example topology with edge1 in direct
// delivery mode and a filter of its own.
func directTopology(t *testing.T) *Topology {
	t.Helper()
	tp := secureTopology(t)
	tp.Sites[2].DeliveryMode = DeliveryDirect
	tp.Sites[2].Filter = "events.edge1.>"
	tp.SetDefaults()
	if err := tp.Validate(); err != nil {
		t.Fatal(err)
	}
	return tp
}

func TestDirect_Validate(t *testing.T) {
	tests := []topologyCase{
		{"unknown mode", func(tp *Topology) { tp.Sites[2].DeliveryMode = "drect" }, "sites[2].delivery_mode", `"drect" is not one of sourced, direct`},
		{"mode on hub", func(tp *Topology) { tp.Sites[1].DeliveryMode = DeliveryDirect }, "sites[1].delivery_mode", "only edge sites have a delivery mode"},
		{"mode on l1", func(tp *Topology) { tp.Sites[0].DeliveryMode = DeliverySourced }, "sites[0].delivery_mode", "only edge sites"},
		{"reserved inbox space", func(tp *Topology) { tp.Events.Subjects = []string{"leafline.direct.>"} }, "events.subjects[0]", `overlaps "leafline.direct.>"`},
		{"direct consumer of a sourced edge", func(tp *Topology) { tp.Sites[2].DirectConsumer.AckWait = Duration(time.Minute) },
			"sites[2].direct_consumer", `only an edge with delivery_mode "direct"`},
		{"direct ack wait", func(tp *Topology) {
			tp.Sites[2].DeliveryMode, tp.Sites[2].DirectConsumer.AckWait = DeliveryDirect, Duration(time.Millisecond)
		}, "sites[2].direct_consumer.ack_wait", "must be 1s..1h, got 1ms"},
		{"direct max ack pending", func(tp *Topology) {
			tp.Sites[2].DeliveryMode, tp.Sites[2].DirectConsumer.MaxAckPending = DeliveryDirect, -1
		}, "sites[2].direct_consumer.max_ack_pending", "-1"},
		{"direct max deliver", func(tp *Topology) {
			tp.Sites[2].DeliveryMode, tp.Sites[2].DirectConsumer.MaxDeliver = DeliveryDirect, -2
		}, "sites[2].direct_consumer.max_deliver", "must be 0 (unlimited) or at least 1, got -2"},
	}
	wantTopologyProblems(t, tests)
	for _, mode := range []string{"", DeliverySourced, DeliveryDirect} {
		tp := exampleTopology(t)
		tp.Sites[2].DeliveryMode = mode
		got, err := ParseTopology(mustMarshal(t, tp), "topology.json")
		if err != nil {
			t.Fatalf("mode %q: %v", mode, err)
		}
		want := mode
		if want == "" {
			want = DeliverySourced
		}
		if got.Sites[2].DeliveryMode != want || got.Sites[2].Direct() != (mode == DeliveryDirect) {
			t.Fatalf("mode %q: decoded %q", mode, got.Sites[2].DeliveryMode)
		}
		if got.Sites[1].DeliveryMode != "" {
			t.Fatalf("the hub got a delivery mode %q", got.Sites[1].DeliveryMode)
		}
	}
}

func TestDirect_Lint(t *testing.T) {
	tp := directTopology(t)
	var found bool
	for _, w := range tp.Lint() {
		if w.Path == "sites[2].delivery_mode" && strings.Contains(w.Msg, "processes nothing while its link or the hub's link to L1 is down") {
			found = true
		}
		if w.Path == "sites[3].delivery_mode" {
			t.Fatalf("a sourced edge is linted: %v", w)
		}
	}
	if !found {
		t.Fatalf("no direct-mode warning in %v", tp.Lint())
	}
}

// TestDirect_BoxSettingsFollowL1sConsumer: L1 creates a direct-mode
// edge's consumer, so the edge box's delivery settings that the consumer
// carries must agree with the topology's direct_consumer.
func TestDirect_BoxSettingsFollowL1sConsumer(t *testing.T) {
	for _, tt := range []struct {
		name   string
		set    func(*Config, *DirectConsumer)
		path   string
		errMsg string
	}{
		{"defaults agree", func(*Config, *DirectConsumer) {}, "", ""},
		{"both set alike", func(c *Config, dc *DirectConsumer) {
			c.Delivery.AckWait, dc.AckWait = Duration(time.Minute), Duration(time.Minute)
			c.Delivery.MaxDeliver, c.Delivery.MaxDeliverAction, dc.MaxDeliver = 5, "leave", 5
		}, "", ""},
		{"ack wait", func(c *Config, _ *DirectConsumer) { c.Delivery.AckWait = Duration(time.Minute) },
			"delivery.ack_wait", "1m0s is not the AckWait of this direct-mode edge's consumer, which L1 creates (topology sites[2].direct_consumer.ack_wait: 30s)"},
		{"max ack pending", func(c *Config, _ *DirectConsumer) { c.Delivery.MaxAckPending = 100 },
			"delivery.max_ack_pending", "100 is not the MaxAckPending"},
		{"max deliver", func(c *Config, _ *DirectConsumer) { c.Delivery.MaxDeliver = 3 },
			"delivery.max_deliver", "3 is not the MaxDeliver"},
		{"dead letter needs unlimited", func(c *Config, dc *DirectConsumer) {
			c.DeadLetter.Enabled = true
			c.Delivery.MaxDeliver, c.Delivery.MaxDeliverAction, dc.MaxDeliver = 3, "dead_letter", 3
		}, "delivery.max_deliver_action", "dead_letter needs the consumer that L1 creates for this direct-mode edge to deliver without limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tp := exampleTopology(t)
			tp.Sites[2].DeliveryMode = DeliveryDirect
			tp.SetDefaults()
			c := &Config{Site: "edge1", DataDir: t.TempDir(), Topology: tp,
				NATS: NATSConfig{Listen: "127.0.0.1:0"}, Ops: OpsConfig{Listen: "127.0.0.1:0"}}
			tt.set(c, &tp.Sites[2].DirectConsumer)
			c.SetDefaults()
			err := c.Validate()
			if tt.path == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.path+": "+tt.errMsg) {
				t.Fatalf("got %v, want %s: %s", err, tt.path, tt.errMsg)
			}
		})
	}
}
