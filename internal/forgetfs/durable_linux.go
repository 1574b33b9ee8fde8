package forgetfs

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxRun bounds the pages written by one pwritev (IOV_MAX is 1024).
const maxRun = 256

// syncFile makes a file's data, size and attributes durable: an unsynced
// truncation first, then every unsynced page, then the size.
func (s *state) syncFile(n *node) error {
	f, err := s.file(n)
	if err != nil {
		return err
	}
	fd := int(f.Fd())
	if n.hide < n.bsize {
		if err := unix.Ftruncate(fd, n.hide); err != nil {
			return err
		}
		n.bsize = n.hide
	}
	if len(n.pages) > 0 {
		idx := slices.Sorted(maps.Keys(n.pages))
		iov := make([][]byte, 0, min(len(idx), maxRun))
		for i := 0; i < len(idx); {
			j := i + 1
			for j < len(idx) && idx[j] == idx[j-1]+1 && j-i < maxRun {
				j++
			}
			iov = iov[:0]
			for _, pi := range idx[i:j] {
				iov = append(iov, n.pages[pi][:min(pageSize, n.size-pi*pageSize)])
			}
			off := idx[i] * pageSize
			if err := pwritevFull(fd, iov, off); err != nil {
				return err
			}
			n.bsize = max(n.bsize, idx[j-1]*pageSize+int64(len(iov[len(iov)-1])))
			i = j
		}
	}
	if n.bsize != n.size {
		if err := unix.Ftruncate(fd, n.size); err != nil {
			return err
		}
		n.bsize = n.size
	}
	n.hide = n.size
	n.pages = nil
	if n.attrDirty {
		if err := writeAttrs(fdPath(f), n); err != nil {
			return err
		}
	}
	return nil
}

func pwritevFull(fd int, iov [][]byte, off int64) error {
	for len(iov) > 0 {
		k, err := unix.Pwritev(fd, iov, off)
		if err != nil {
			return err
		}
		off += int64(k)
		for k > 0 && len(iov) > 0 {
			if k >= len(iov[0]) {
				k -= len(iov[0])
				iov = iov[1:]
			} else {
				iov[0] = iov[0][k:]
				k = 0
			}
		}
	}
	return nil
}

// writeAttrs gives the backing inode at path the node's mode, owner and
// times.
func writeAttrs(path string, n *node) error {
	if err := unix.Chmod(path, n.mode&07777); err != nil {
		return err
	}
	if err := unix.Chown(path, int(n.uid), int(n.gid)); err != nil && err != unix.EPERM {
		return err
	}
	ts := []unix.Timespec{unix.NsecToTimespec(n.atime.UnixNano()), unix.NsecToTimespec(n.mtime.UnixNano())}
	if err := unix.UtimesNano(path, ts); err != nil {
		return err
	}
	n.attrDirty = false
	return nil
}

// syncDir makes a directory's entries durable: the backing directory is
// made to hold exactly its volatile entries. Durable names that changed go
// first (files unlinked, removed directories discarded, directories renamed
// within it parked in staging), then the new names are linked (files) or
// renamed into place from staging (directories).
func (s *state) syncDir(d *node) error {
	if d.removed {
		// Nothing in it can become durable again.
		d.names = nil
		delete(s.changed, d)
		return nil
	}
	if d.loaded {
		dir := s.bpath(d)
		names := slices.Sorted(maps.Keys(d.names))
		for _, name := range names {
			old, ok := d.dur[name]
			if !ok || d.entries[name] == old {
				continue
			}
			switch {
			case old.kind == kindFile:
				if err := s.unlinkDurable(d, name, old); err != nil {
					return err
				}
			case old.removed:
				if err := s.discard(old); err != nil {
					return err
				}
				delete(d.dur, name)
			default:
				// Renamed within d: parked until its new name is added below.
				slot := s.stagingSlot()
				if err := os.Rename(filepath.Join(dir, name), filepath.Join(s.staging, slot)); err != nil {
					return err
				}
				old.bparent, old.bname = nil, slot
				delete(d.dur, name)
			}
		}
		for _, name := range names {
			c := d.entries[name]
			if c == nil || d.dur[name] == c {
				continue
			}
			p := filepath.Join(dir, name)
			if c.kind == kindFile {
				f, err := s.file(c)
				if err != nil {
					return err
				}
				if err := unix.Linkat(unix.AT_FDCWD, fdPath(f), unix.AT_FDCWD, p, unix.AT_SYMLINK_FOLLOW); err != nil {
					return fmt.Errorf("link %s: %w", p, err)
				}
				c.blinks++
				if c.bparent == nil {
					c.bparent, c.bname = d, name
				}
				if err := s.fixStaging(c); err != nil {
					return err
				}
				s.idle(c)
			} else {
				if c.bparent != nil {
					return fmt.Errorf("forgetfs: directory %s is durable elsewhere: %w", p, syscall.EIO)
				}
				if err := os.Rename(s.bpath(c), p); err != nil {
					return err
				}
				c.bparent, c.bname = d, name
			}
			d.dur[name] = c
		}
		d.names = nil
	}
	delete(s.changed, d)
	if d.attrDirty {
		return writeAttrs(s.bpath(d), d)
	}
	return nil
}

// unlinkDurable removes a file's durable name. A file that still has a
// volatile name keeps its backing inode by a staging link.
func (s *state) unlinkDurable(d *node, name string, f *node) error {
	// Open first: the name may be the one it is opened by.
	if _, err := s.file(f); err != nil {
		return err
	}
	if f.blinks == 1 && f.nlink > 0 && f.staged == "" {
		if err := s.stage(f); err != nil {
			return err
		}
	}
	if err := unix.Unlink(filepath.Join(s.bpath(d), name)); err != nil {
		return err
	}
	f.blinks--
	delete(d.dur, name)
	if f.bparent == d && f.bname == name {
		f.bparent, f.bname = nil, ""
	}
	if err := s.fixStaging(f); err != nil {
		return err
	}
	s.idle(f)
	s.maybeFree(f)
	return nil
}

// stage links a file's backing inode into the staging directory.
func (s *state) stage(f *node) error {
	h, err := s.file(f)
	if err != nil {
		return err
	}
	slot := s.stagingSlot()
	if err := unix.Linkat(unix.AT_FDCWD, fdPath(h), unix.AT_FDCWD, filepath.Join(s.staging, slot), unix.AT_SYMLINK_FOLLOW); err != nil {
		return fmt.Errorf("forgetfs: stage: %w", err)
	}
	f.staged = slot
	return nil
}

// fixStaging keeps the rule: a file has a staging link exactly when it
// has a volatile name and no durable one (so that a directory sync can
// still link it).
func (s *state) fixStaging(f *node) error {
	want := f.nlink > 0 && f.blinks == 0
	switch {
	case want && f.staged == "":
		return s.stage(f)
	case !want && f.staged != "":
		// Open first: the staging name may be the one it is opened by.
		if _, err := s.file(f); err != nil {
			return err
		}
		if err := unix.Unlink(filepath.Join(s.staging, f.staged)); err != nil {
			return err
		}
		f.staged = ""
	}
	return nil
}

// discard removes a removed directory's backing and every durable name in
// it; the files among them that still have volatile names elsewhere keep
// their backing inodes by staging links.
func (s *state) discard(d *node) error {
	dir := s.bpath(d)
	for _, name := range slices.Sorted(maps.Keys(d.dur)) {
		c := d.dur[name]
		if c.kind == kindFile {
			if err := s.unlinkDurable(d, name, c); err != nil {
				return err
			}
			continue
		}
		if err := s.discard(c); err != nil {
			return err
		}
		delete(d.dur, name)
	}
	// Anything the model does not show (symlinks, fifos) goes with it.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	d.bparent, d.bname = nil, ""
	return nil
}

// maybeFree forgets a node nothing refers to any more: no kernel
// reference, no open handle, no name.
func (s *state) maybeFree(n *node) {
	if n.lookups > 0 || n.opens > 0 || n.isRoot {
		return
	}
	switch n.kind {
	case kindFile:
		if n.nlink > 0 || n.blinks > 0 {
			return
		}
		if n.f != nil {
			n.f.Close()
			n.f = nil
		}
		if s.byIno[n.bino] == n {
			delete(s.byIno, n.bino)
		}
	case kindDir:
		if !n.removed {
			return
		}
	}
	delete(s.nodes, n.id)
}

// syncAll makes the whole volatile state durable: every file, then every
// directory from the root down.
func (s *state) syncAll() error {
	for _, id := range slices.Sorted(maps.Keys(s.nodes)) {
		if n := s.nodes[id]; n.kind == kindFile && n.dirty() && (n.nlink > 0 || n.blinks > 0) {
			if err := s.syncFile(n); err != nil {
				return err
			}
			s.idle(n)
		}
	}
	return s.syncNames()
}

// synced ends every fsync: with JournaledNames, it commits every name.
func (s *state) synced() error {
	if !s.journal {
		return nil
	}
	return s.syncNames()
}

// syncNames makes every changed directory's entries durable.
func (s *state) syncNames() error {
	ds := slices.SortedFunc(maps.Keys(s.changed), func(a, b *node) int { return int(a.id) - int(b.id) })
	for _, d := range ds {
		if err := s.syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// report counts what a cut drops now.
func (s *state) report() CutReport {
	var r CutReport
	for _, n := range s.nodes {
		switch {
		case n.kind == kindFile && n.dirty():
			r.Files++
			r.Pages += len(n.pages)
		case n.kind == kindDir && n.dirDirty():
			r.Dirs++
		}
	}
	return r
}

// tear keeps a random prefix of one durably named file's unsynced pages
// (see Cut.Torn).
func (s *state) tear(r *rand.Rand, rep *CutReport) error {
	var cands []*node
	for _, id := range slices.Sorted(maps.Keys(s.nodes)) {
		if n := s.nodes[id]; n.kind == kindFile && len(n.pages) > 0 && n.blinks > 0 {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	n := cands[r.IntN(len(cands))]
	idx := slices.Sorted(maps.Keys(n.pages))
	k := 1 + r.IntN(len(idx))
	f, err := s.file(n)
	if err != nil {
		return err
	}
	fd := int(f.Fd())
	for _, pi := range idx[:k] {
		if err := pwritevFull(fd, [][]byte{n.pages[pi][:min(pageSize, n.size-pi*pageSize)]}, pi*pageSize); err != nil {
			return err
		}
	}
	rep.Torn, rep.TornPages, rep.TornOf = s.durablePath(n), k, len(idx)
	return nil
}

// durablePath returns one durable name of a file, relative to the backing
// directory.
func (s *state) durablePath(f *node) string {
	for _, id := range slices.Sorted(maps.Keys(s.nodes)) {
		d := s.nodes[id]
		if d.kind != kindDir || !d.loaded {
			continue
		}
		for name, c := range d.dur {
			if c == f {
				rel, err := filepath.Rel(s.backing, filepath.Join(s.bpath(d), name))
				if err == nil {
					return rel
				}
			}
		}
	}
	return fmt.Sprintf("(inode %d)", f.bino)
}

// closeAll closes every backing inode: after a cut nothing more reaches
// the backing directory.
func (s *state) closeAll() {
	for _, n := range s.nodes {
		if n.f != nil {
			n.f.Close()
			n.f = nil
		}
		n.pages = nil
	}
}
