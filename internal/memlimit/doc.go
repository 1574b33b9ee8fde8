// Package memlimit chooses the Go memory limit of a leafline process.
//
// The limit is soft (runtime/debug.SetMemoryLimit): the garbage collector
// works harder as the process nears it, and a process whose live data
// needs more goes over it, slower, rather than fail. In order, the first
// that names one wins:
//
//  1. the box config's memory_limit_bytes (-1: none);
//  2. GOMEMLIMIT in the environment (the runtime already applied it);
//  3. the process's control group: 90% of its memory limit
//     (topology.CgroupMemoryShare) (cgroup v2
//     memory.max, v1 memory.limit_in_bytes, the lowest on its path), so
//     that the kernel's hard limit leaves room for what the Go runtime
//     does not count (stacks it has not yet returned, C allocations);
//  4. the default of the box's role (topology.DefaultMemoryLimit).
package memlimit
