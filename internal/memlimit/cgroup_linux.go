package memlimit

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// noLimit is the value cgroup v1 reports for "no limit" (and anything
// above it is no limit either): the largest page-aligned int64.
const noLimit = 1 << 62

// Cgroup returns the memory limit of this process's control group, the
// lowest on its path to the root, and the file that sets it; 0 and ""
// when there is none or it cannot be read.
func Cgroup() (int64, string) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, ""
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return 0, ""
	}
	return lowest(parseCgroups(string(cg)), parseMounts(string(mounts)))
}

// cgroupPaths are a process's control group paths: v2's unified one and
// v1's memory controller's ("" where it has none).
type cgroupPaths struct{ v2, v1 string }

// parseCgroups reads /proc/self/cgroup.
func parseCgroups(s string) cgroupPaths {
	var p cgroupPaths
	for _, line := range strings.Split(s, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			p.v2 = f[2]
		case hasController(f[1], "memory"):
			p.v1 = f[2]
		}
	}
	return p
}

func hasController(list, c string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == c {
			return true
		}
	}
	return false
}

// cgroupMounts are where the cgroup file systems are mounted, with the
// path of the hierarchy each mount shows at its root.
type cgroupMounts struct{ v2, v2root, v1, v1root string }

// parseMounts reads /proc/self/mountinfo: "id parent dev root mountpoint
// options - fstype source superoptions".
func parseMounts(s string) cgroupMounts {
	var m cgroupMounts
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		switch {
		case g[0] == "cgroup2" && m.v2 == "":
			m.v2, m.v2root = f[4], f[3]
		case g[0] == "cgroup" && hasController(g[2], "memory") && m.v1 == "":
			m.v1, m.v1root = f[4], f[3]
		}
	}
	return m
}

// lowest walks each hierarchy the process is in from its group up to
// the mount's root and returns the lowest limit set on the way.
func lowest(p cgroupPaths, m cgroupMounts) (int64, string) {
	var best int64
	var file string
	walk := func(mount, root, path, name string) {
		if mount == "" || path == "" {
			return
		}
		rel, ok := strings.CutPrefix(path, root)
		if !ok {
			return
		}
		dir := filepath.Join(mount, rel)
		for {
			if v := readLimit(filepath.Join(dir, name)); v > 0 && (best == 0 || v < best) {
				best, file = v, filepath.Join(dir, name)
			}
			if dir == mount || !strings.HasPrefix(dir, mount) {
				return
			}
			dir = filepath.Dir(dir)
		}
	}
	walk(m.v2, m.v2root, p.v2, "memory.max")
	walk(m.v1, m.v1root, p.v1, "memory.limit_in_bytes")
	return best, file
}

// readLimit reads a limit file: 0 for "max", a value past noLimit, or a
// file that cannot be read.
func readLimit(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || v <= 0 || v >= noLimit {
		return 0
	}
	return v
}
