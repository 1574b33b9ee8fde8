package memlimit

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCgroup_LowestOnThePath(t *testing.T) {
	const cgroups = "12:memory,foo:/app/box\n0::/svc/leafline\n"
	const mounts = "30 22 0:27 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n" +
		"34 30 0:31 / MNT1 rw,relatime - cgroup cgroup rw,memory\n" +
		"40 30 0:37 /svc MNT2 rw,relatime - cgroup2 cgroup2 rw\n"
	dir := t.TempDir()
	v1, v2 := filepath.Join(dir, "v1"), filepath.Join(dir, "v2")
	write := func(path, v string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := parseCgroups(cgroups)
	if p.v1 != "/app/box" || p.v2 != "/svc/leafline" {
		t.Fatalf("parseCgroups = %+v", p)
	}
	m := parseMounts(mounts)
	if m.v1 != "MNT1" || m.v1root != "/" || m.v2 != "MNT2" || m.v2root != "/svc" {
		t.Fatalf("parseMounts = %+v", m)
	}
	m.v1, m.v2 = v1, v2

	// No file sets a limit: none.
	if got, file := lowest(p, m); got != 0 || file != "" {
		t.Fatalf("no limit files: %d %q", got, file)
	}
	// v1 reports "none" as a huge value; v2 as "max".
	write(filepath.Join(v1, "app/box/memory.limit_in_bytes"), "9223372036854771712")
	write(filepath.Join(v2, "leafline/memory.max"), "max")
	if got, _ := lowest(p, m); got != 0 {
		t.Fatalf("unlimited groups: %d", got)
	}
	// The lowest limit on the path wins, whichever hierarchy sets it.
	write(filepath.Join(v2, "memory.max"), "2147483648")
	write(filepath.Join(v1, "app/memory.limit_in_bytes"), "1073741824")
	if got, file := lowest(p, m); got != 1<<30 || file != filepath.Join(v1, "app/memory.limit_in_bytes") {
		t.Fatalf("lowest = %d %q, want 1 GiB from v1's app group", got, file)
	}
	write(filepath.Join(v2, "leafline/memory.max"), "536870912")
	if got, file := lowest(p, m); got != 512<<20 || file != filepath.Join(v2, "leafline/memory.max") {
		t.Fatalf("lowest = %d %q, want 512 MiB from v2's leafline group", got, file)
	}
}

// TestCgroup_ThisProcess reads this machine's own groups: whatever they
// say, it must not fail, and a limit it finds is a positive number from a
// file that exists.
func TestCgroup_ThisProcess(t *testing.T) {
	v, file := Cgroup()
	if v < 0 || (v > 0 && file == "") {
		t.Fatalf("Cgroup = %d %q", v, file)
	}
	if file != "" {
		if _, err := os.Stat(file); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("this process's cgroup memory limit: %d (%s)", v, file)
}
