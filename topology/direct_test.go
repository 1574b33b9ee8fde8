package topology

import (
	"slices"
	"strings"
	"testing"
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
	tests := []struct {
		name   string
		mutate func(*Topology)
		path   string
		msg    string
	}{
		{"unknown mode", func(tp *Topology) { tp.Sites[2].DeliveryMode = "drect" }, "sites[2].delivery_mode", `"drect" is not one of sourced, direct`},
		{"mode on hub", func(tp *Topology) { tp.Sites[1].DeliveryMode = DeliveryDirect }, "sites[1].delivery_mode", "only edge sites have a delivery mode"},
		{"mode on l1", func(tp *Topology) { tp.Sites[0].DeliveryMode = DeliverySourced }, "sites[0].delivery_mode", "only edge sites"},
		{"reserved inbox space", func(tp *Topology) { tp.Events.Subjects = []string{"leafline.direct.>"} }, "events.subjects[0]", `overlaps "leafline.direct.>"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := exampleTopology(t)
			tt.mutate(tp)
			_, err := ParseTopology(mustMarshal(t, tp), "topology.json")
			wantProblem(t, err, "topology.json", tt.path, tt.msg)
		})
	}
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
	direct := LinkPermissions{
		Publish: []string{
			"$JS.l1.API.CONSUMER.INFO.L1A.leafline-sink-edge1",
			"$JS.l1.API.CONSUMER.CREATE.L1A.leafline-sink-edge1.events.edge1.>",
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
		if strings.Contains(s, "HA") || strings.Contains(s, "DELETE") || strings.Contains(s, "STREAM") || strings.Contains(s, "edge2") {
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
	sourced.SetDefaults()
	hubBefore, _ := sourced.LinkPermissions("hub")
	want = LinkPermissions{
		Publish:   append(slices.Clone(hubBefore.Publish), direct.Publish...),
		Subscribe: append(slices.Clone(hubBefore.Subscribe), direct.Subscribe...),
	}
	if !equalPerms(hub, want) {
		t.Fatalf("hub:\n got %+v\nwant %+v", hub, want)
	}
	// Without a filter the CREATE subject has no filter token.
	tp.Sites[2].Filter = ""
	if dp, _ := tp.DirectPermissions("edge1"); dp.Publish[1] != "$JS.l1.API.CONSUMER.CREATE.L1A.leafline-sink-edge1" {
		t.Fatalf("no filter: %q", dp.Publish[1])
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
