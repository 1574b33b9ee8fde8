package render_test

import (
	"strings"
	"testing"

	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/render"
)

func TestSystemdUnit_FitsTheBox(t *testing.T) {
	top := &topology.Topology{Sites: []topology.Site{
		{Name: "l1", Role: topology.RoleL1, Leafnode: topology.SiteLeafnode{Listen: "0.0.0.0:443"}},
		{Name: "hub", Role: topology.RoleHub, Upstream: "l1", Leafnode: topology.SiteLeafnode{Listen: "0.0.0.0:7422"}},
		{Name: "edge1", Role: topology.RoleEdge, Upstream: "hub"},
	}}
	for _, tc := range []struct {
		name, site string
		cfg        *topology.Config
		want, not  []string
	}{
		{"low port binds with the one capability", "l1", nil,
			[]string{"AmbientCapabilities=CAP_NET_BIND_SERVICE\n", "CapabilityBoundingSet=CAP_NET_BIND_SERVICE\n"}, []string{"CapabilityBoundingSet=\n"}},
		{"no capability otherwise", "hub", nil, []string{"CapabilityBoundingSet=\n", "StateDirectory=leafline/hub\n"}, []string{"AmbientCapabilities"}},
		{"data dir under /var/lib is the state directory", "edge1", &topology.Config{DataDir: "/var/lib/ll/e1"},
			[]string{"StateDirectory=ll/e1\n", "WorkingDirectory=/var/lib/ll/e1\n"}, []string{"ReadWritePaths"}},
		{"data dir elsewhere is made writable", "edge1", &topology.Config{DataDir: "/srv/leafline"},
			[]string{"ReadWritePaths=/srv/leafline\n", "WorkingDirectory=/srv/leafline\n"}, []string{"StateDirectory="}},
		{"ops on a low port", "edge1", &topology.Config{DataDir: "/var/lib/x", Ops: topology.OpsConfig{Listen: "10.0.0.1:80"}},
			[]string{"AmbientCapabilities=CAP_NET_BIND_SERVICE\n"}, nil},
		// MemoryMax= is the role's default limit (or the config's) over
		// 90%: the box takes that limit back from its control group.
		{"an edge's memory", "edge1", nil, []string{"MemoryMax=178M\n"}, nil},
		{"L1's memory", "l1", nil, []string{"MemoryMax=427M\n"}, nil},
		{"a configured limit", "hub", &topology.Config{MemoryLimitBytes: 900 << 20}, []string{"MemoryMax=1000M\n"}, nil},
		{"no limit", "hub", &topology.Config{MemoryLimitBytes: -1}, nil, []string{"MemoryMax="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := render.SystemdUnit(top, tc.site, tc.cfg, render.SystemdOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(u, w) {
					t.Errorf("lacks %q:\n%s", w, u)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(u, n) {
					t.Errorf("has %q:\n%s", n, u)
				}
			}
		})
	}
	for _, cfg := range []*topology.Config{{DataDir: "data/edge1"}, {DataDir: "/var/lib/my data"}} {
		if _, err := render.SystemdUnit(top, "edge1", cfg, render.SystemdOptions{}); err == nil || !strings.Contains(err.Error(), "data_dir") {
			t.Errorf("data_dir %q: err %v, want one naming data_dir", cfg.DataDir, err)
		}
	}
}
