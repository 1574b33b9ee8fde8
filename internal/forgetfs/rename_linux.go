//go:build linux

package forgetfs

import (
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Rename flags (renameat2).
const (
	renameNoReplace = 1 << 0
	renameExchange  = 1 << 1
)

func (r *rawFS) Rename(_ <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	return r.with(in.NodeId, func(d1 *node) error {
		s := r.s
		d2 := s.nodes[in.Newdir]
		if d2 == nil {
			return syscall.ENOENT
		}
		if in.Flags&^(renameNoReplace|renameExchange) != 0 || in.Flags == renameNoReplace|renameExchange {
			return syscall.EINVAL
		}
		src, err := s.child(d1, oldName)
		if err != nil {
			return err
		}
		if d2.kind != kindDir {
			return syscall.ENOTDIR
		}
		if err := s.load(d2); err != nil {
			return err
		}
		if reserved(d2, newName) || d2.removed {
			return syscall.EPERM
		}
		// A directory keeps its parent: see the package doc.
		if src.kind == kindDir && d1 != d2 {
			return syscall.EXDEV
		}
		dst := d2.entries[newName]
		now := time.Now()
		d1.mtime, d2.mtime = now, now
		s.touch(d1, oldName)
		s.touch(d2, newName)
		if in.Flags&renameExchange != 0 {
			return exchange(d1, d2, src, dst, oldName, newName)
		}
		if dst != nil && in.Flags&renameNoReplace != 0 {
			return syscall.EEXIST
		}
		return s.move(d1, d2, src, dst, oldName, newName, now)
	})
}

// exchange swaps src (oldName in d1) and dst (newName in d2).
func exchange(d1, d2, src, dst *node, oldName, newName string) error {
	if dst == nil {
		return syscall.ENOENT
	}
	if dst.kind == kindDir && d1 != d2 {
		return syscall.EXDEV
	}
	d1.entries[oldName], d2.entries[newName] = dst, src
	if src.kind == kindDir {
		src.vname = newName
	}
	if dst.kind == kindDir {
		dst.vname = oldName
	}
	return nil
}

// move gives src (oldName in d1) the name newName in d2, replacing dst if
// there is one.
func (s *state) move(d1, d2, src, dst *node, oldName, newName string, now time.Time) error {
	if dst == src {
		return nil // two names of one file: nothing happens
	}
	if dst != nil {
		switch {
		case src.kind == kindDir && dst.kind != kindDir:
			return syscall.ENOTDIR
		case src.kind != kindDir && dst.kind == kindDir:
			return syscall.EISDIR
		case dst.kind == kindDir:
			if err := s.emptyDir(dst); err != nil {
				return err
			}
		}
	}
	delete(d1.entries, oldName)
	d2.entries[newName] = src
	if src.kind == kindDir {
		src.vname = newName
	}
	src.ctime = now
	if dst == nil {
		return nil
	}
	if dst.kind == kindDir {
		return s.removeDir(dst)
	}
	return s.dropName(dst)
}
