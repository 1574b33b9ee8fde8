package memlimit

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"

	"github.com/leafline/leafline/topology"
)

// Choice is a memory limit and where it comes from.
type Choice struct {
	// Bytes is the limit; 0 means none.
	Bytes int64
	// Source names its origin: "memory_limit_bytes", "GOMEMLIMIT",
	// "cgroup <file>" or "default for <role>".
	Source string
}

func (c Choice) String() string {
	if c.Bytes == 0 {
		return "none (" + c.Source + ")"
	}
	return fmt.Sprintf("%d MiB (%s)", c.Bytes>>20, c.Source)
}

// Inputs are what Choose decides from.
type Inputs struct {
	// Configured is memory_limit_bytes: 0 unset, -1 none, else the limit.
	Configured int64
	// Env is GOMEMLIMIT as the environment sets it ("" unset).
	Env string
	// EnvBytes is the limit the runtime took from Env.
	EnvBytes int64
	// Cgroup is the control group's memory limit (0: none), CgroupFile
	// the file it was read from.
	Cgroup     int64
	CgroupFile string
	// Role and RoleDefault are the box's role and its default limit (0:
	// none).
	Role        string
	RoleDefault int64
}

// Choose picks the limit per the order of the package doc.
func Choose(in Inputs) Choice {
	switch {
	case in.Configured < 0:
		return Choice{0, "memory_limit_bytes -1"}
	case in.Configured > 0:
		return Choice{in.Configured, "memory_limit_bytes"}
	case in.Env != "":
		if in.EnvBytes == math.MaxInt64 {
			return Choice{0, "GOMEMLIMIT=" + in.Env}
		}
		return Choice{in.EnvBytes, "GOMEMLIMIT"}
	case in.Cgroup > 0:
		return Choice{int64(float64(in.Cgroup) * topology.CgroupMemoryShare), "cgroup " + in.CgroupFile}
	}
	return Choice{in.RoleDefault, "default for " + in.Role}
}

// Apply sets the process's memory limit to c (none for 0).
func Apply(c Choice) {
	if c.Bytes > 0 {
		debug.SetMemoryLimit(c.Bytes)
		return
	}
	debug.SetMemoryLimit(math.MaxInt64)
}

// Current is the limit the runtime applies now (0: none).
func Current() int64 {
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		return l
	}
	return 0
}

// For decides the limit of the process of the box cfg configures: from
// its config and role, the environment and its control group.
func For(cfg *topology.Config) Choice {
	role := cfg.Role()
	in := Inputs{Configured: cfg.MemoryLimitBytes, Env: os.Getenv("GOMEMLIMIT"), Role: string(role), RoleDefault: topology.DefaultMemoryLimit(role)}
	if in.Env != "" {
		in.EnvBytes = debug.SetMemoryLimit(-1)
	}
	in.Cgroup, in.CgroupFile = Cgroup()
	return Choose(in)
}
