package dirsync_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/leafline/leafline/internal/dirsync"
	"github.com/leafline/leafline/internal/forgetfs"
)

// mount mounts a forgetfs that follows POSIX to the letter (a name is
// durable only once its own directory is fsynced) over backing at mnt, or
// skips where FUSE cannot be mounted.
func mount(t *testing.T, mnt, backing string) *forgetfs.FS {
	t.Helper()
	f, err := forgetfs.Mount(mnt, backing, forgetfs.Options{Name: "dirsync-test"})
	if errors.Is(err, forgetfs.ErrUnavailable) {
		if os.Getenv("LEAFLINE_REQUIRE_FUSE") != "" {
			t.Fatalf("LEAFLINE_REQUIRE_FUSE is set, but: %v", err)
		}
		t.Skipf("dirsync: this host cannot mount FUSE (needs Linux, /dev/fuse, and root or fusermount): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil && !errors.Is(err, forgetfs.ErrCut) {
			t.Errorf("unmount: %v", err)
		}
	})
	return f
}

// TestTree_NamesSurviveAPowerCut creates a file, fsynced, three new
// directories deep (as nats-server creates a stream's message block), cuts
// the power and looks for it: without Tree the whole tree is gone, with it
// the file is there with its data.
func TestTree_NamesSurviveAPowerCut(t *testing.T) {
	for _, tree := range []bool{false, true} {
		name := map[bool]string{false: "without Tree", true: "with Tree"}[tree]
		t.Run(name, func(t *testing.T) {
			mnt, backing := t.TempDir(), t.TempDir()
			f := mount(t, mnt, backing)
			root := filepath.Join(mnt, "jetstream")
			deep := filepath.Join(root, "ACC", "streams", "L2A", "msgs")
			if err := os.MkdirAll(deep, 0o755); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(deep, "1.blk")
			if err := writeSynced(file, []byte("block")); err != nil {
				t.Fatal(err)
			}
			if tree {
				if err := dirsync.Tree(root); err != nil {
					t.Fatalf("Tree: %v", err)
				}
			}
			if _, err := f.PowerCut(forgetfs.Cut{}); err != nil {
				t.Fatalf("power cut: %v", err)
			}
			mount(t, mnt, backing)
			got, err := os.ReadFile(file)
			switch {
			case tree && err != nil:
				t.Fatalf("after Tree and a power cut: %v", err)
			case tree && string(got) != "block":
				t.Fatalf("after Tree and a power cut the file holds %q, want %q", got, "block")
			case !tree && !os.IsNotExist(err):
				// The control: the model does drop names whose directory
				// was never synced, so the case above tests Tree.
				t.Fatalf("without Tree, after a power cut: err = %v, want the file gone", err)
			}
		})
	}
}

func TestTree_MissingRoot(t *testing.T) {
	err := dirsync.Tree(filepath.Join(t.TempDir(), "absent"))
	if !os.IsNotExist(err) {
		t.Fatalf("Tree of a missing root: err = %v, want not-exist", err)
	}
}

func writeSynced(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
