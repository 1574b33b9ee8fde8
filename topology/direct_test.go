package topology

import (
	"slices"
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

func TestDirect_LinkPermissions(t *testing.T) {
	tp := directTopology(t)
	tp.Transport = TransportSourcing // the receipts' link, by sourcing
	direct := LinkPermissions{
		Publish: []string{
			"$JS.l1.API.CONSUMER.INFO.L1A.leafline-sink-edge1",
			"$JS.l1.API.CONSUMER.MSG.NEXT.L1A.leafline-sink-edge1",
			"$JS.ACK.l1.*.L1A.leafline-sink-edge1.>",
		},
		Subscribe: []string{"leafline.direct.edge1.>"},
	}
	if got, err := tp.DirectPermissions("edge1"); err != nil || !equalPerms(got, direct) {
		t.Fatalf("DirectPermissions = %+v, %v", got, err)
	}
	// edge1 → hub: its receipts source, and its consumer on L1 instead of
	// the forward source.
	got, err := tp.LinkPermissions("edge1")
	if err != nil {
		t.Fatal(err)
	}
	want := LinkPermissions{
		Publish: append([]string{
			"leafline.src.edge1.RE.hub",
			"$JSC.R.edge1.*.RE.leafline-src-hub.*",
		}, direct.Publish...),
		Subscribe: append([]string{
			"$JS.edge1.API.CONSUMER.RESET.RE.leafline-src-hub",
			"$JS.FC.edge1.*.RE.leafline-src-hub.*",
		}, direct.Subscribe...),
	}
	if !equalPerms(got, want) {
		t.Fatalf("edge1:\n got %+v\nwant %+v", got, want)
	}
	for _, s := range append(got.Publish, got.Subscribe...) {
		if strings.Contains(s, "HA") || strings.Contains(s, "DELETE") || strings.Contains(s, "CREATE") || strings.Contains(s, "STREAM") || strings.Contains(s, "edge2") {
			t.Fatalf("edge1's direct link allows %q", s)
		}
	}
	// edge2 stays sourced, exactly as before.
	e2, _ := tp.LinkPermissions("edge2")
	if e2.Publish[0] != "$JS.hub.API.CONSUMER.RESET.HA.leafline-src-edge2" || len(e2.Publish) != 5 || len(e2.Subscribe) != 4 {
		t.Fatalf("edge2: %+v", e2)
	}
	// hub → l1: its own sources, plus edge1's consumer (not edge2's).
	hub, _ := tp.LinkPermissions("hub")
	sourced := secureTopology(t)
	sourced.Transport = TransportSourcing
	sourced.SetDefaults()
	hubBefore, _ := sourced.LinkPermissions("hub")
	want = LinkPermissions{
		Publish:   append(slices.Clone(hubBefore.Publish), direct.Publish...),
		Subscribe: append(slices.Clone(hubBefore.Subscribe), direct.Subscribe...),
	}
	if !equalPerms(hub, want) {
		t.Fatalf("hub:\n got %+v\nwant %+v", hub, want)
	}
	// The filter is L1's to set: no subject of the edge's carries it.
	tp.Sites[2].Filter = ""
	if dp, _ := tp.DirectPermissions("edge1"); !equalPerms(dp, direct) {
		t.Fatalf("no filter: %+v", dp)
	}
	if _, err := tp.DirectPermissions("hub"); err == nil {
		t.Fatal("DirectPermissions of a hub: no error")
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

func equalPerms(a, b LinkPermissions) bool {
	return slices.Equal(a.Publish, b.Publish) && slices.Equal(a.Subscribe, b.Subscribe)
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
