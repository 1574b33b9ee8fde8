//go:build linux

package forgetfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// mountT mounts a forgetfs over backing on a fresh mount point, or skips
// the test where FUSE cannot be mounted (LEAFLINE_REQUIRE_FUSE makes that
// a failure). It is unmounted with the test.
func mountT(t testing.TB, backing string) *FS {
	t.Helper()
	return mountAt(t, t.TempDir(), backing)
}

func mountAt(t testing.TB, mnt, backing string) *FS {
	t.Helper()
	return mountWith(t, mnt, backing, Options{})
}

func mountWith(t testing.TB, mnt, backing string, o Options) *FS {
	t.Helper()
	f, err := Mount(mnt, backing, o)
	if errors.Is(err, ErrUnavailable) {
		if os.Getenv("LEAFLINE_REQUIRE_FUSE") != "" {
			t.Fatalf("LEAFLINE_REQUIRE_FUSE is set, but: %v", err)
		}
		t.Skipf("forgetfs: this host cannot mount FUSE (needs Linux, /dev/fuse, and root or fusermount): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil && !errors.Is(err, ErrCut) {
			t.Errorf("unmount: %v", err)
		}
	})
	return f
}

// cutAndRemount cuts the power and mounts the same backing directory on
// the same mount point again.
func cutAndRemount(t testing.TB, f *FS, c Cut) (*FS, CutReport) {
	t.Helper()
	rep, err := f.PowerCut(c)
	if err != nil {
		t.Fatalf("power cut: %v", err)
	}
	return mountAt(t, f.Mountpoint(), f.Backing()), rep
}

func writeFile(t testing.TB, path string, data []byte, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func syncPath(t testing.TB, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", path, err)
	}
}

// wantFile fails unless path holds exactly want (nil: does not exist).
func wantFile(t testing.TB, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	switch {
	case want == nil && errors.Is(err, fs.ErrNotExist):
	case want == nil && err == nil:
		t.Errorf("%s exists (%d bytes); want it gone", path, len(got))
	case err != nil:
		t.Errorf("%s: %v", path, err)
	case !bytes.Equal(got, want):
		t.Errorf("%s holds %d bytes %.40q…; want %d bytes %.40q…", path, len(got), got, len(want), want)
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

func TestPowerCut_SyncedDataSurvives(t *testing.T) {
	f := mountT(t, t.TempDir())
	m := f.Mountpoint()
	data := pattern(3*pageSize+100, 1)
	writeFile(t, filepath.Join(m, "a"), data, true)
	syncPath(t, m)
	f, rep := cutAndRemount(t, f, Cut{})
	if rep.Files != 0 || rep.Dirs != 0 {
		t.Errorf("cut report %+v; want nothing unsynced", rep)
	}
	wantFile(t, filepath.Join(f.Mountpoint(), "a"), data)
}

func TestPowerCut_UnsyncedDataIsGone(t *testing.T) {
	f := mountT(t, t.TempDir())
	m := f.Mountpoint()
	old := pattern(2*pageSize, 1)
	writeFile(t, filepath.Join(m, "a"), old, true)
	syncPath(t, m)

	// Overwrite the middle and append, without fsync.
	a, err := os.OpenFile(filepath.Join(m, "a"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt(pattern(100, 9), pageSize-50); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt(pattern(pageSize, 7), 2*pageSize); err != nil {
		t.Fatal(err)
	}
	a.Close()
	// A new file, never synced, in a synced directory.
	writeFile(t, filepath.Join(m, "b"), pattern(10, 3), false)
	syncPath(t, m)

	f, rep := cutAndRemount(t, f, Cut{})
	if rep.Files != 2 || rep.Pages != 4 {
		t.Errorf("cut report %+v; want 2 files and 4 pages unsynced (a: 3, b: 1)", rep)
	}
	wantFile(t, filepath.Join(f.Mountpoint(), "a"), old)
	// b's name was synced with the directory, its data never was.
	wantFile(t, filepath.Join(f.Mountpoint(), "b"), []byte{})
}

func TestPowerCut_FileSyncedInUnsyncedDirectoryDisappears(t *testing.T) {
	f := mountT(t, t.TempDir())
	m := f.Mountpoint()
	writeFile(t, filepath.Join(m, "lost"), []byte("fsynced, but its name never was"), true)
	f, rep := cutAndRemount(t, f, Cut{})
	if rep.Dirs != 1 {
		t.Errorf("cut report %+v; want one unsynced directory", rep)
	}
	wantFile(t, filepath.Join(f.Mountpoint(), "lost"), nil)

	// The same with the directory synced: the file stays.
	m = f.Mountpoint()
	writeFile(t, filepath.Join(m, "kept"), []byte("both synced"), true)
	syncPath(t, m)
	f, _ = cutAndRemount(t, f, Cut{})
	wantFile(t, filepath.Join(f.Mountpoint(), "kept"), []byte("both synced"))
}

// TestPowerCut_JournaledNames: with JournaledNames, an fsync of any file
// makes every earlier name change durable, in every directory; data still
// needs its own file's sync.
func TestPowerCut_JournaledNames(t *testing.T) {
	f := mountWith(t, t.TempDir(), t.TempDir(), Options{JournaledNames: true})
	m := f.Mountpoint()
	if err := os.MkdirAll(filepath.Join(m, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(m, "d", "e", "unsynced"), []byte("data never synced"), false)
	writeFile(t, filepath.Join(m, "elsewhere"), []byte("synced"), true)
	f, _ = cutAndRemount(t, f, Cut{})
	m = f.Mountpoint()
	wantFile(t, filepath.Join(m, "elsewhere"), []byte("synced"))
	wantFile(t, filepath.Join(m, "d", "e", "unsynced"), []byte{})
}

func TestPowerCut_RenameWithoutDirectorySyncReverts(t *testing.T) {
	for _, syncDir := range []bool{false, true} {
		name := map[bool]string{false: "unsynced", true: "synced"}[syncDir]
		t.Run(name, func(t *testing.T) {
			f := mountT(t, t.TempDir())
			m := f.Mountpoint()
			writeFile(t, filepath.Join(m, "config"), []byte("v1"), true)
			syncPath(t, m)
			// The atomic-replace idiom: write a temporary, fsync it, rename it over.
			writeFile(t, filepath.Join(m, "config.tmp"), []byte("v2"), true)
			if err := os.Rename(filepath.Join(m, "config.tmp"), filepath.Join(m, "config")); err != nil {
				t.Fatal(err)
			}
			wantFile(t, filepath.Join(m, "config"), []byte("v2"))
			if syncDir {
				syncPath(t, m)
			}
			f, _ = cutAndRemount(t, f, Cut{})
			m = f.Mountpoint()
			if syncDir {
				wantFile(t, filepath.Join(m, "config"), []byte("v2"))
			} else {
				wantFile(t, filepath.Join(m, "config"), []byte("v1"))
			}
			wantFile(t, filepath.Join(m, "config.tmp"), nil)
		})
	}
}

func TestPowerCut_UnlinkWithoutDirectorySyncReverts(t *testing.T) {
	f := mountT(t, t.TempDir())
	m := f.Mountpoint()
	writeFile(t, filepath.Join(m, "a"), []byte("durable"), true)
	writeFile(t, filepath.Join(m, "b"), []byte("durable too"), true)
	syncPath(t, m)
	for _, n := range []string{"a", "b"} {
		if err := os.Remove(filepath.Join(m, n)); err != nil {
			t.Fatal(err)
		}
	}
	wantFile(t, filepath.Join(m, "a"), nil)
	f, _ = cutAndRemount(t, f, Cut{})
	m = f.Mountpoint()
	wantFile(t, filepath.Join(m, "a"), []byte("durable"))
	// Removed and synced: gone for good.
	if err := os.Remove(filepath.Join(m, "b")); err != nil {
		t.Fatal(err)
	}
	syncPath(t, m)
	f, _ = cutAndRemount(t, f, Cut{})
	wantFile(t, filepath.Join(f.Mountpoint(), "b"), nil)
	wantFile(t, filepath.Join(f.Mountpoint(), "a"), []byte("durable"))
}

func TestPowerCut_Truncate(t *testing.T) {
	f := mountT(t, t.TempDir())
	m := f.Mountpoint()
	p := filepath.Join(m, "a")
	data := pattern(3*pageSize, 1)
	writeFile(t, p, data, true)
	syncPath(t, m)

	// Shrink, then grow again by a write past the end: the bytes between
	// read as zeros, not as the old data.
	if err := os.Truncate(p, 100); err != nil {
		t.Fatal(err)
	}
	a, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt([]byte("end"), 2*pageSize); err != nil {
		t.Fatal(err)
	}
	a.Close()
	want := make([]byte, 2*pageSize+3)
	copy(want, data[:100])
	copy(want[2*pageSize:], "end")
	wantFile(t, p, want)

	// Unsynced: the cut brings back the old length and data.
	f, _ = cutAndRemount(t, f, Cut{})
	m = f.Mountpoint()
	p = filepath.Join(m, "a")
	wantFile(t, p, data)

	// Synced: the truncation is durable.
	if err := os.Truncate(p, 100); err != nil {
		t.Fatal(err)
	}
	syncPath(t, p)
	f, _ = cutAndRemount(t, f, Cut{})
	wantFile(t, filepath.Join(f.Mountpoint(), "a"), data[:100])
}

func TestPowerCut_NewDirectoryNeedsItsParentSynced(t *testing.T) {
	f := mountT(t, t.TempDir())
	m := f.Mountpoint()
	if err := os.MkdirAll(filepath.Join(m, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(m, "d", "e", "x"), []byte("x"), true)
	syncPath(t, filepath.Join(m, "d", "e"))
	syncPath(t, filepath.Join(m, "d"))
	// The root was not synced: d is gone, and everything in it.
	f, _ = cutAndRemount(t, f, Cut{})
	m = f.Mountpoint()
	if _, err := os.Stat(filepath.Join(m, "d")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("d after the cut: %v; want it gone", err)
	}

	if err := os.MkdirAll(filepath.Join(m, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(m, "d", "e", "x"), []byte("x"), true)
	for _, dir := range []string{"d/e", "d", "."} {
		syncPath(t, filepath.Join(m, dir))
	}
	f, _ = cutAndRemount(t, f, Cut{})
	wantFile(t, filepath.Join(f.Mountpoint(), "d", "e", "x"), []byte("x"))
}

func TestPowerCut_RenameBetweenDirectoriesIsDurablePerDirectory(t *testing.T) {
	f := mountT(t, t.TempDir())
	m := f.Mountpoint()
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(m, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(m, "a", "x"), []byte("x"), true)
	for _, d := range []string{"a", "b", "."} {
		syncPath(t, filepath.Join(m, d))
	}
	if err := os.Rename(filepath.Join(m, "a", "x"), filepath.Join(m, "b", "x")); err != nil {
		t.Fatal(err)
	}
	// Only the target is synced: the file has both names after the cut.
	syncPath(t, filepath.Join(m, "b"))
	f, _ = cutAndRemount(t, f, Cut{})
	m = f.Mountpoint()
	wantFile(t, filepath.Join(m, "a", "x"), []byte("x"))
	wantFile(t, filepath.Join(m, "b", "x"), []byte("x"))

	// A directory keeps its parent.
	if err := os.Mkdir(filepath.Join(m, "a", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := os.Rename(filepath.Join(m, "a", "sub"), filepath.Join(m, "b", "sub"))
	if !errors.Is(err, syscall.EXDEV) {
		t.Errorf("rename of a directory between directories: %v; want EXDEV", err)
	}
}

func TestPowerCut_HardLinkAndDirectoryRename(t *testing.T) {
	f := mountT(t, t.TempDir())
	m := f.Mountpoint()
	writeFile(t, filepath.Join(m, "new"), []byte("linked"), true)
	if err := os.Link(filepath.Join(m, "new"), filepath.Join(m, "final")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(m, "new")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(m, "d1"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(m, "d1", "f"), []byte("in d"), true)
	syncPath(t, filepath.Join(m, "d1"))
	syncPath(t, m)
	if err := os.Rename(filepath.Join(m, "d1"), filepath.Join(m, "d2")); err != nil {
		t.Fatal(err)
	}
	syncPath(t, m)
	f, _ = cutAndRemount(t, f, Cut{})
	m = f.Mountpoint()
	wantFile(t, filepath.Join(m, "final"), []byte("linked"))
	wantFile(t, filepath.Join(m, "new"), nil)
	wantFile(t, filepath.Join(m, "d2", "f"), []byte("in d"))
	ents, err := os.ReadDir(m)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"d2", "final"}) {
		t.Errorf("root holds %v; want [d2 final]", names)
	}
}

func TestPowerCut_TornWriteKeepsAPrefixOfPages(t *testing.T) {
	f := mountT(t, t.TempDir())
	m := f.Mountpoint()
	old := pattern(8*pageSize, 1)
	writeFile(t, filepath.Join(m, "log"), old, true)
	syncPath(t, m)
	a, err := os.OpenFile(filepath.Join(m, "log"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	neu := pattern(8*pageSize, 100)
	if _, err := a.WriteAt(neu, 0); err != nil {
		t.Fatal(err)
	}
	a.Close()
	f, rep := cutAndRemount(t, f, Cut{Torn: true, Rand: rand.New(rand.NewPCG(1, 2))})
	if rep.Torn != "log" || rep.TornOf != 8 || rep.TornPages < 1 || rep.TornPages > 8 {
		t.Fatalf("cut report %+v; want some of log's 8 pages torn", rep)
	}
	want := slices.Concat(neu[:rep.TornPages*pageSize], old[rep.TornPages*pageSize:])
	wantFile(t, filepath.Join(f.Mountpoint(), "log"), want)
}

func TestPowerCut_BusyMountIsDetachedAndOldDescriptorsFail(t *testing.T) {
	f := mountT(t, t.TempDir())
	m := f.Mountpoint()
	writeFile(t, filepath.Join(m, "a"), []byte("synced"), true)
	syncPath(t, m)
	held, err := os.OpenFile(filepath.Join(m, "a"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := held.WriteAt([]byte("UNSYNCED"), 0); err != nil {
		t.Fatal(err)
	}
	f, _ = cutAndRemount(t, f, Cut{})
	if _, err := held.WriteAt([]byte("after the cut"), 0); err == nil {
		t.Error("a write through a descriptor of the cut mount succeeded")
	}
	if err := held.Sync(); err == nil {
		t.Error("an fsync through a descriptor of the cut mount succeeded")
	}
	wantFile(t, filepath.Join(f.Mountpoint(), "a"), []byte("synced"))
	if _, err := f.PowerCut(Cut{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.PowerCut(Cut{}); !errors.Is(err, ErrCut) {
		t.Errorf("second PowerCut: %v; want ErrCut", err)
	}
}

func TestUnmount_MakesEverythingDurable(t *testing.T) {
	backing := t.TempDir()
	f := mountT(t, backing)
	m := f.Mountpoint()
	if err := os.MkdirAll(filepath.Join(m, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(m, "d", "e", "x"), []byte("never synced"), false)
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
	if err := f.Unmount(); !errors.Is(err, ErrCut) {
		t.Errorf("second Unmount: %v; want ErrCut", err)
	}
	wantFile(t, filepath.Join(backing, "d", "e", "x"), []byte("never synced"))
	f = mountAt(t, m, backing)
	wantFile(t, filepath.Join(m, "d", "e", "x"), []byte("never synced"))
}

// TestFS_ReadsMatchAPlainFile drives one file with random writes,
// truncations and syncs through the mount and a plain file beside it, and
// compares every read; after a cut the mount must match the plain file as
// it was at the last sync.
func TestFS_ReadsMatchAPlainFile(t *testing.T) {
	f := mountT(t, t.TempDir())
	m := f.Mountpoint()
	ref := filepath.Join(t.TempDir(), "ref")
	writeFile(t, filepath.Join(m, "x"), nil, true)
	writeFile(t, ref, nil, false)
	syncPath(t, m)
	got, err := os.OpenFile(filepath.Join(m, "x"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.OpenFile(ref, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	r := rand.New(rand.NewPCG(7, 7))
	var synced []byte
	for i := range 400 {
		switch op := r.IntN(10); {
		case op < 6:
			b := pattern(1+r.IntN(3*pageSize), byte(i))
			off := int64(r.IntN(10 * pageSize))
			if _, err := got.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
			if _, err := want.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		case op < 8:
			size := int64(r.IntN(12 * pageSize))
			if err := got.Truncate(size); err != nil {
				t.Fatal(err)
			}
			if err := want.Truncate(size); err != nil {
				t.Fatal(err)
			}
		default:
			if err := got.Sync(); err != nil {
				t.Fatal(err)
			}
			if synced, err = os.ReadFile(ref); err != nil {
				t.Fatal(err)
			}
		}
		a, _ := os.ReadFile(filepath.Join(m, "x"))
		b, _ := os.ReadFile(ref)
		if !bytes.Equal(a, b) {
			t.Fatalf("after step %d the mount holds %d bytes, a plain file %d; first difference at %d", i, len(a), len(b), firstDiff(a, b))
		}
	}
	got.Close()
	f, _ = cutAndRemount(t, f, Cut{})
	if synced == nil {
		synced = []byte{}
	}
	wantFile(t, filepath.Join(f.Mountpoint(), "x"), synced)
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestFS_MoreFilesThanDescriptors: the daemon keeps a backing descriptor
// only for open files, so a box may hold more files than the process may
// open (the file sink writes one per event).
func TestFS_MoreFilesThanDescriptors(t *testing.T) {
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	f := mountT(t, t.TempDir())
	m := f.Mountpoint()
	low := old
	low.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	for i := range 1000 {
		writeFile(t, filepath.Join(m, fmt.Sprint(i)), []byte(fmt.Sprint(i)), true)
		if i%100 == 0 {
			syncPath(t, m)
		}
	}
	syncPath(t, m)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	f, _ = cutAndRemount(t, f, Cut{})
	for _, i := range []int{0, 499, 999} {
		wantFile(t, filepath.Join(f.Mountpoint(), fmt.Sprint(i)), []byte(fmt.Sprint(i)))
	}
}
