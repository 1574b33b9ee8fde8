//go:build !linux

package forgetfs

import "fmt"

// FS is a mounted forgetting filesystem; on this platform none can be
// mounted.
type FS struct{}

// Mount fails on this platform: the model needs Linux (FUSE, and linking an
// open file by /proc/self/fd).
func Mount(mountpoint, backing string, o Options) (*FS, error) {
	return nil, fmt.Errorf("%w: forgetfs runs on Linux only", ErrUnavailable)
}

// Mountpoint returns "".
func (f *FS) Mountpoint() string { return "" }

// Backing returns "".
func (f *FS) Backing() string { return "" }

// Sync fails with ErrCut.
func (f *FS) Sync() error { return ErrCut }

// PowerCut fails with ErrCut.
func (f *FS) PowerCut(Cut) (CutReport, error) { return CutReport{}, ErrCut }

// Unmount fails with ErrCut.
func (f *FS) Unmount() error { return ErrCut }
