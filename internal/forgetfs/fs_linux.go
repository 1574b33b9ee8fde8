package forgetfs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is a mounted forgetting filesystem.
type FS struct {
	mnt, backing string
	s            *state
	srv          *fuse.Server
	direct       bool // mounted by mount(2), not by fusermount

	mu   sync.Mutex // serializes PowerCut and Unmount
	gone bool
}

// Mount mounts at mountpoint a filesystem that shows the durable state
// held by backing (an existing directory, not inside mountpoint) and keeps
// every change in memory until it is synced (see the package doc).
//
// As root it mounts with mount(2) directly; otherwise, or if that fails,
// with fusermount3 or fusermount. An error that means this host cannot
// mount FUSE at all wraps ErrUnavailable.
func Mount(mountpoint, backing string, o Options) (*FS, error) {
	mnt, err := filepath.Abs(mountpoint)
	if err != nil {
		return nil, err
	}
	if backing, err = filepath.Abs(backing); err != nil {
		return nil, err
	}
	for _, p := range []string{mnt, backing} {
		if st, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("forgetfs: %w", err)
		} else if !st.IsDir() {
			return nil, fmt.Errorf("forgetfs: %s is not a directory", p)
		}
	}
	if within(backing, mnt) || within(mnt, backing) {
		return nil, fmt.Errorf("forgetfs: mount point %s and backing directory %s must not contain each other", mnt, backing)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	s, err := newState(backing)
	if err != nil {
		return nil, err
	}
	s.journal = o.JournaledNames
	name := o.Name
	if name == "" {
		name = "forgetfs"
	}
	opts := fuse.MountOptions{
		Name:               name,
		FsName:             backing,
		DisableXAttrs:      true,
		DisableReadDirPlus: true,
		MaxWrite:           1 << 20,
		MaxBackground:      64,
		Debug:              o.Debug,
	}
	srv, direct, err := mount(&rawFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), s: s}, mnt, opts)
	if err != nil {
		s.closeAll()
		return nil, err
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		s.closeAll()
		return nil, fmt.Errorf("forgetfs: mount %s: %w", mnt, err)
	}
	return &FS{mnt: mnt, backing: backing, s: s, srv: srv, direct: direct}, nil
}

func within(parent, p string) bool {
	return p == parent || strings.HasPrefix(p, parent+string(filepath.Separator))
}

// mount tries mount(2) as root, then fusermount.
func mount(raw fuse.RawFileSystem, mnt string, opts fuse.MountOptions) (*fuse.Server, bool, error) {
	var errs []error
	unavailable := true
	if os.Geteuid() == 0 {
		o := opts
		o.DirectMountStrict = true
		srv, err := fuse.NewServer(raw, mnt, &o)
		if err == nil {
			return srv, true, nil
		}
		errs = append(errs, fmt.Errorf("mount(2): %w", err))
		if !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.ENODEV) {
			unavailable = false
		}
	} else {
		errs = append(errs, errors.New("not root, so no mount(2)"))
	}
	if bin := fusermount(); bin != "" {
		srv, err := fuse.NewServer(raw, mnt, &opts)
		if err == nil {
			return srv, false, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", bin, err))
	} else {
		errs = append(errs, errors.New("no fusermount3 or fusermount on PATH"))
	}
	err := fmt.Errorf("forgetfs: mount %s: %w", mnt, errors.Join(errs...))
	if unavailable {
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil, false, err
}

func fusermount() string {
	for _, name := range []string{"fusermount3", "fusermount"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Mountpoint returns the absolute path where the filesystem is mounted.
func (f *FS) Mountpoint() string { return f.mnt }

// Backing returns the absolute path of the backing directory.
func (f *FS) Backing() string { return f.backing }

// Sync makes everything durable, as if every file and then every
// directory had been synced.
func (f *FS) Sync() error {
	s := f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		return ErrCut
	}
	return s.syncAll()
}

// PowerCut drops every unsynced change at once, then unmounts. Requests
// after the cut fail with EIO; a process that still has files open keeps
// the mount busy, and the unmount is then lazy (it completes when the last
// of them is closed, for example when the process dies). The backing
// directory holds the synced state from the moment PowerCut returns, and
// the same mount point can be mounted again at once.
func (f *FS) PowerCut(c Cut) (CutReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		return CutReport{}, ErrCut
	}
	s := f.s
	s.mu.Lock()
	rep := s.report()
	var terr error
	if c.Torn {
		r := c.Rand
		if r == nil {
			r = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		}
		terr = s.tear(r, &rep)
	}
	s.cut = true
	s.closeAll()
	s.mu.Unlock()
	f.gone = true
	if err := f.unmount(); err != nil {
		return rep, errors.Join(terr, err)
	}
	if terr != nil {
		return rep, fmt.Errorf("forgetfs: torn write: %w", terr)
	}
	return rep, nil
}

// Unmount makes everything durable (Sync), then unmounts, lazily if the
// mount is busy. A second Unmount, or one after PowerCut, returns an
// error wrapping ErrCut.
func (f *FS) Unmount() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		return ErrCut
	}
	s := f.s
	s.mu.Lock()
	serr := s.syncAll()
	s.cut = true
	s.closeAll()
	s.mu.Unlock()
	f.gone = true
	return errors.Join(serr, f.unmount())
}

// unmount detaches the mount, lazily if it is busy.
func (f *FS) unmount() error {
	if f.direct {
		err := syscall.Unmount(f.mnt, 0)
		if errors.Is(err, syscall.EBUSY) {
			err = syscall.Unmount(f.mnt, syscall.MNT_DETACH)
		}
		if err != nil {
			return fmt.Errorf("forgetfs: unmount %s: %w", f.mnt, err)
		}
		return nil
	}
	out, err := exec.Command(fusermount(), "-u", "-z", f.mnt).CombinedOutput()
	if err != nil {
		return fmt.Errorf("forgetfs: fusermount -u -z %s: %v: %s", f.mnt, err, strings.TrimSpace(string(out)))
	}
	return nil
}
