package memlimit

import (
	"math"
	"testing"
)

func TestChoose(t *testing.T) {
	base := Inputs{Role: "hub", RoleDefault: 256 << 20}
	tests := []struct {
		name   string
		in     func(Inputs) Inputs
		bytes  int64
		source string
	}{
		{"role default", func(i Inputs) Inputs { return i }, 256 << 20, "default for hub"},
		{"no role default", func(i Inputs) Inputs { i.RoleDefault = 0; return i }, 0, "default for hub"},
		{"cgroup", func(i Inputs) Inputs { i.Cgroup, i.CgroupFile = 1000<<20, "/sys/fs/cgroup/x/memory.max"; return i }, 900 << 20, "cgroup /sys/fs/cgroup/x/memory.max"},
		{"cgroup below the role's default", func(i Inputs) Inputs { i.Cgroup, i.CgroupFile = 100<<20, "m"; return i }, 90 << 20, "cgroup m"},
		{"GOMEMLIMIT over cgroup", func(i Inputs) Inputs { i.Env, i.EnvBytes, i.Cgroup = "300MiB", 300<<20, 1<<30; return i }, 300 << 20, "GOMEMLIMIT"},
		{"GOMEMLIMIT=off", func(i Inputs) Inputs { i.Env, i.EnvBytes = "off", math.MaxInt64; return i }, 0, "GOMEMLIMIT=off"},
		{"config over everything", func(i Inputs) Inputs {
			i.Configured, i.Env, i.EnvBytes, i.Cgroup = 128<<20, "300MiB", 300<<20, 1<<30
			return i
		}, 128 << 20, "memory_limit_bytes"},
		{"config none", func(i Inputs) Inputs { i.Configured, i.Cgroup = -1, 1<<30; return i }, 0, "memory_limit_bytes -1"},
	}
	for _, tt := range tests {
		c := Choose(tt.in(base))
		if c.Bytes != tt.bytes || c.Source != tt.source {
			t.Errorf("%s: Choose = %d %q, want %d %q", tt.name, c.Bytes, c.Source, tt.bytes, tt.source)
		}
	}
}
