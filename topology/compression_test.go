package topology

import "testing"

func TestTopology_Compression_Bad(t *testing.T) {
	tests := []topologyCase{
		{"unknown default", func(tp *Topology) { tp.Compression = "gzip" }, "compression", `"gzip" is not one of off, accept, s2_auto, s2_fast, s2_better, s2_best`},
		{"unknown on a link", func(tp *Topology) { tp.Sites[2].Compression = "S2_FAST" }, "sites[2].compression", `"S2_FAST" is not one of off`},
		{"server alias", func(tp *Topology) { tp.Sites[2].Compression = "on" }, "sites[2].compression", `"on" is not one of off`},
		{"on l1", func(tp *Topology) { tp.Sites[0].Compression = CompressionS2Fast }, "sites[0].compression", "an l1 site has no upstream link to compress"},
	}
	wantTopologyProblems(t, tests)
}

func TestTopology_LinkCompression(t *testing.T) {
	tp := exampleTopology(t)
	if tp.Sites[0].Role != RoleL1 || tp.Sites[1].Role != RoleHub || len(tp.Downstream(tp.Sites[1].Name)) < 2 {
		t.Fatalf("example topology: want l1, hub, and at least two edges under the hub")
	}
	hub := tp.Sites[1].Name
	tests := []struct {
		name     string
		def      string
		links    map[int]string // site index → its own setting
		link     map[int]string // site index → LinkCompression
		listener map[int]string // site index → ListenerCompression
	}{
		{"nothing set", "", nil,
			map[int]string{0: "", 1: CompressionS2Fast, 2: CompressionS2Fast},
			map[int]string{0: CompressionS2Fast, 1: CompressionS2Fast}},
		{"default only", CompressionS2Best, nil,
			map[int]string{1: CompressionS2Best, 2: CompressionS2Best},
			map[int]string{0: CompressionS2Best, 1: CompressionS2Best}},
		{"one link differs", CompressionOff, map[int]string{2: CompressionS2Fast},
			map[int]string{1: CompressionOff, 2: CompressionS2Fast},
			map[int]string{0: CompressionOff, 1: CompressionAccept}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := exampleTopology(t)
			tp.Compression = tt.def
			for i, m := range tt.links {
				tp.Sites[i].Compression = m
			}
			got, err := ParseTopology(mustMarshal(t, tp), "topology.json")
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range tt.link {
				if g := got.LinkCompression(&got.Sites[i]); g != w {
					t.Errorf("LinkCompression(%s) = %q, want %q", got.Sites[i].Name, g, w)
				}
			}
			for i, w := range tt.listener {
				if g := got.ListenerCompression(&got.Sites[i]); g != w {
					t.Errorf("ListenerCompression(%s) = %q, want %q", got.Sites[i].Name, g, w)
				}
			}
			// An edge is dialled by nobody: its listener has no mode.
			for _, e := range got.Downstream(hub) {
				if g := got.ListenerCompression(e); g != "" {
					t.Errorf("ListenerCompression(%s) = %q, want none", e.Name, g)
				}
			}
		})
	}
}
