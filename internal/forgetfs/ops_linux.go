package forgetfs

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// How long the kernel may cache names and attributes. Every change goes
// through the kernel, so its caches never go stale while mounted.
const cacheTimeout = time.Second

// rawFS answers the kernel's FUSE requests from the model. Every request
// takes the state's lock and fails with EIO after a cut.
type rawFS struct {
	fuse.RawFileSystem
	s *state
}

func (r *rawFS) String() string { return "forgetfs" }

// status turns an error into the errno the kernel gets; anything that is
// not an errno becomes EIO.
func status(err error) fuse.Status {
	if err == nil {
		return fuse.OK
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return fuse.Status(errno)
	}
	return fuse.EIO
}

// with runs f on node id under the write lock.
func (r *rawFS) with(id uint64, f func(n *node) error) fuse.Status {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		return fuse.EIO
	}
	n := s.nodes[id]
	if n == nil {
		return fuse.ENOENT
	}
	return status(f(n))
}

func (s *state) fillAttr(n *node, a *fuse.Attr) {
	a.Ino = n.id
	a.Mode = n.mode
	a.Owner = fuse.Owner{Uid: n.uid, Gid: n.gid}
	if n.kind == kindFile {
		a.Size = uint64(n.size)
		a.Nlink = uint32(n.nlink)
	} else {
		a.Size = pageSize
		a.Nlink = s.dirLinks(n)
	}
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = pageSize
	a.SetTimes(&n.atime, &n.mtime, &n.ctime)
}

// entry hands the kernel a reference to n.
func (s *state) entry(n *node, out *fuse.EntryOut) {
	n.lookups++
	out.NodeId = n.id
	out.Generation = 1
	out.SetEntryTimeout(cacheTimeout)
	out.SetAttrTimeout(cacheTimeout)
	s.fillAttr(n, &out.Attr)
}

func (r *rawFS) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	return r.with(h.NodeId, func(d *node) error {
		if reserved(d, name) {
			return syscall.ENOENT
		}
		c, err := r.s.child(d, name)
		if err != nil {
			return err
		}
		r.s.entry(c, out)
		return nil
	})
}

func (r *rawFS) Forget(id, nlookup uint64) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[id]
	if s.cut || n == nil {
		return
	}
	n.lookups -= min(n.lookups, nlookup)
	s.maybeFree(n)
}

func (r *rawFS) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	s := r.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := s.nodes[in.NodeId]
	switch {
	case s.cut:
		return fuse.EIO
	case n == nil:
		return fuse.ENOENT
	}
	out.SetTimeout(cacheTimeout)
	s.fillAttr(n, &out.Attr)
	return fuse.OK
}

func (r *rawFS) SetAttr(_ <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	return r.with(in.NodeId, func(n *node) error {
		now := time.Now()
		if size, ok := in.GetSize(); ok {
			if n.kind != kindFile {
				return syscall.EISDIR
			}
			n.truncate(int64(size))
			n.mtime = now
		}
		if m, ok := in.GetMode(); ok {
			n.mode = n.mode&syscall.S_IFMT | m
			n.attrDirty = true
		}
		if uid, ok := in.GetUID(); ok {
			n.uid, n.attrDirty = uid, true
		}
		if gid, ok := in.GetGID(); ok {
			n.gid, n.attrDirty = gid, true
		}
		if t, ok := in.GetATime(); ok {
			n.atime, n.attrDirty = t, true
		}
		if t, ok := in.GetMTime(); ok {
			n.mtime, n.attrDirty = t, true
		}
		n.ctime = now
		out.SetTimeout(cacheTimeout)
		r.s.fillAttr(n, &out.Attr)
		return nil
	})
}

// newFile creates a file in d: its backing inode is born in staging.
func (s *state) newFile(d *node, name string, mode uint32, owner fuse.Owner) (*node, error) {
	slot := s.stagingSlot()
	f, err := os.OpenFile(filepath.Join(s.staging, slot), os.O_RDWR|os.O_CREATE|os.O_EXCL, os.FileMode(mode&0o777))
	if err != nil {
		return nil, err
	}
	if err := unix.Fchmod(int(f.Fd()), mode&07777); err != nil {
		f.Close()
		return nil, err
	}
	if err := unix.Fchown(int(f.Fd()), int(owner.Uid), int(owner.Gid)); err != nil && err != unix.EPERM {
		f.Close()
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	n := s.newNode(kindFile)
	n.setStat(&st)
	n.f = f
	n.nlink, n.blinks, n.staged = 1, 0, slot
	s.byIno[n.bino] = n
	d.entries[name] = n
	s.touch(d, name)
	d.mtime = time.Now()
	return n, nil
}

// creatable checks that name may be created in d.
func (s *state) creatable(d *node, name string) error {
	if d.kind != kindDir {
		return syscall.ENOTDIR
	}
	if d.removed {
		return syscall.ENOENT
	}
	if err := s.load(d); err != nil {
		return err
	}
	if reserved(d, name) {
		return syscall.EPERM
	}
	if d.entries[name] != nil {
		return syscall.EEXIST
	}
	return nil
}

func (r *rawFS) Mknod(_ <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	return r.with(in.NodeId, func(d *node) error {
		if in.Mode&syscall.S_IFMT != syscall.S_IFREG {
			return syscall.EPERM // only regular files are modelled
		}
		if err := r.s.creatable(d, name); err != nil {
			return err
		}
		n, err := r.s.newFile(d, name, in.Mode, in.Owner)
		if err != nil {
			return err
		}
		r.s.idle(n)
		r.s.entry(n, out)
		return nil
	})
}

func (r *rawFS) Create(_ <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return r.with(in.NodeId, func(d *node) error {
		s := r.s
		err := s.creatable(d, name)
		var n *node
		switch {
		case errors.Is(err, syscall.EEXIST) && in.Flags&syscall.O_EXCL == 0:
			n = d.entries[name]
			if n.kind != kindFile {
				return syscall.EISDIR
			}
			if _, err := s.file(n); err != nil {
				return err
			}
			if in.Flags&syscall.O_TRUNC != 0 {
				n.truncate(0)
			}
		case err != nil:
			return err
		default:
			if n, err = s.newFile(d, name, in.Mode, in.Owner); err != nil {
				return err
			}
		}
		n.opens++
		s.entry(n, &out.EntryOut)
		out.OpenOut.OpenFlags = fuse.FOPEN_KEEP_CACHE
		return nil
	})
}

func (r *rawFS) Mkdir(_ <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	return r.with(in.NodeId, func(d *node) error {
		s := r.s
		if err := s.creatable(d, name); err != nil {
			return err
		}
		slot := s.stagingSlot()
		p := filepath.Join(s.staging, slot)
		if err := unix.Mkdir(p, in.Mode&07777); err != nil {
			return err
		}
		if err := unix.Chmod(p, in.Mode&07777); err != nil {
			return err
		}
		if err := unix.Lchown(p, int(in.Uid), int(in.Gid)); err != nil && err != unix.EPERM {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		c := s.newNode(kindDir)
		c.setStat(&st)
		c.loaded = true
		c.entries, c.dur = map[string]*node{}, map[string]*node{}
		c.bparent, c.bname = nil, slot
		c.vparent, c.vname = d, name
		d.entries[name] = c
		s.touch(d, name)
		d.mtime = time.Now()
		s.entry(c, out)
		return nil
	})
}

func (r *rawFS) Unlink(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return r.with(h.NodeId, func(d *node) error {
		s := r.s
		c, err := s.child(d, name)
		if err != nil {
			return err
		}
		if c.kind == kindDir {
			return syscall.EISDIR
		}
		delete(d.entries, name)
		s.touch(d, name)
		d.mtime = time.Now()
		return s.dropName(c)
	})
}

// dropName accounts for a file losing one volatile name.
func (s *state) dropName(f *node) error {
	f.nlink--
	f.ctime = time.Now()
	if err := s.fixStaging(f); err != nil {
		return err
	}
	s.maybeFree(f)
	return nil
}

// removeDir accounts for an empty directory leaving the tree. One that no
// directory sync has named yet is discarded at once; a durable one stays
// until its parent is synced.
func (s *state) removeDir(c *node) error {
	c.removed = true
	if c.bparent == nil {
		if err := s.discard(c); err != nil {
			return err
		}
	}
	s.maybeFree(c)
	return nil
}

// emptyDir checks that a directory has no entries.
func (s *state) emptyDir(c *node) error {
	if err := s.load(c); err != nil {
		return err
	}
	if len(c.entries) > 0 {
		return syscall.ENOTEMPTY
	}
	return nil
}

func (r *rawFS) Rmdir(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return r.with(h.NodeId, func(d *node) error {
		s := r.s
		c, err := s.child(d, name)
		if err != nil {
			return err
		}
		if c.kind != kindDir {
			return syscall.ENOTDIR
		}
		if err := s.emptyDir(c); err != nil {
			return err
		}
		delete(d.entries, name)
		s.touch(d, name)
		d.mtime = time.Now()
		return s.removeDir(c)
	})
}

func (r *rawFS) Link(_ <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	return r.with(in.NodeId, func(d *node) error {
		s := r.s
		n := s.nodes[in.Oldnodeid]
		switch {
		case n == nil || n.nlink == 0:
			return syscall.ENOENT
		case n.kind != kindFile:
			return syscall.EPERM
		}
		if err := s.creatable(d, name); err != nil {
			return err
		}
		d.entries[name] = n
		s.touch(d, name)
		d.mtime = time.Now()
		n.nlink++
		n.ctime = d.mtime
		if err := s.fixStaging(n); err != nil {
			return err
		}
		s.entry(n, out)
		return nil
	})
}

func (r *rawFS) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return r.with(in.NodeId, func(n *node) error {
		if n.kind != kindFile {
			return syscall.EISDIR
		}
		if _, err := r.s.file(n); err != nil {
			return err
		}
		if in.Flags&syscall.O_TRUNC != 0 && in.Flags&syscall.O_ACCMODE != syscall.O_RDONLY {
			n.truncate(0)
			n.mtime = time.Now()
		}
		n.opens++
		out.OpenFlags = fuse.FOPEN_KEEP_CACHE
		return nil
	})
}

func (r *rawFS) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	s := r.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := s.nodes[in.NodeId]
	switch {
	case s.cut:
		return nil, fuse.EIO
	case n == nil:
		return nil, fuse.ENOENT
	case n.kind != kindFile:
		return nil, fuse.Status(syscall.EISDIR)
	}
	if n.f == nil {
		// Not open (a read without an open handle): open it under the
		// write lock.
		s.mu.RUnlock()
		var res fuse.ReadResult
		st := r.with(in.NodeId, func(n *node) error {
			if _, err := s.file(n); err != nil {
				return err
			}
			var err error
			res, err = readInto(n, in, buf)
			return err
		})
		s.mu.RLock()
		return res, st
	}
	res, err := readInto(n, in, buf)
	return res, status(err)
}

func readInto(n *node, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, error) {
	off := int64(in.Offset)
	if off >= n.size {
		return fuse.ReadResultData(nil), nil
	}
	b := buf[:min(int64(len(buf)), int64(in.Size), n.size-off)]
	if err := n.readAt(b, off); err != nil {
		return nil, err
	}
	return fuse.ReadResultData(b), nil
}

func (r *rawFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	return r.Writev(cancel, in, [][]byte{data})
}

func (r *rawFS) Writev(_ <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	var written uint32
	st := r.with(in.NodeId, func(n *node) error {
		if n.kind != kindFile {
			return syscall.EISDIR
		}
		if _, err := r.s.file(n); err != nil {
			return err
		}
		off := int64(in.Offset)
		for _, b := range data {
			if err := n.writeAt(b, off); err != nil {
				return err
			}
			off += int64(len(b))
			written += uint32(len(b))
		}
		n.mtime = time.Now()
		if in.Flags&(syscall.O_SYNC|syscall.O_DSYNC) != 0 {
			if err := r.s.syncFile(n); err != nil {
				return err
			}
			return r.s.synced()
		}
		return nil
	})
	return written, st
}

func (r *rawFS) Fallocate(_ <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	return r.with(in.NodeId, func(n *node) error {
		if n.kind != kindFile {
			return syscall.EISDIR
		}
		if in.Mode != 0 {
			return syscall.EOPNOTSUPP
		}
		n.size = max(n.size, int64(in.Offset+in.Length))
		return nil
	})
}

func (r *rawFS) Release(_ <-chan struct{}, in *fuse.ReleaseIn) {
	r.with(in.NodeId, func(n *node) error {
		n.opens--
		r.s.idle(n)
		r.s.maybeFree(n)
		return nil
	})
}

func (r *rawFS) Fsync(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return r.with(in.NodeId, func(n *node) error {
		var err error
		if n.kind == kindDir {
			err = r.s.syncDir(n)
		} else {
			err = r.s.syncFile(n)
		}
		if err != nil {
			return err
		}
		return r.s.synced()
	})
}

func (r *rawFS) FsyncDir(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return r.with(in.NodeId, func(d *node) error {
		if d.kind != kindDir {
			return syscall.ENOTDIR
		}
		if err := r.s.syncDir(d); err != nil {
			return err
		}
		return r.s.synced()
	})
}

func (r *rawFS) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return r.with(in.NodeId, func(d *node) error {
		s := r.s
		if d.kind != kindDir {
			return syscall.ENOTDIR
		}
		h := &dirHandle{}
		if err := s.listDir(d, h); err != nil {
			return err
		}
		s.nextDir++
		s.dirs[s.nextDir] = h
		d.opens++
		out.Fh = s.nextDir
		return nil
	})
}

// listDir takes a snapshot of a directory's entries for readdir.
func (s *state) listDir(d *node, h *dirHandle) error {
	if err := s.load(d); err != nil {
		return err
	}
	parent := d
	if d.vparent != nil {
		parent = d.vparent
	}
	h.names = append(h.names[:0], direntry{".", d.id, syscall.S_IFDIR}, direntry{"..", parent.id, syscall.S_IFDIR})
	for _, name := range slices.Sorted(maps.Keys(d.entries)) {
		c := d.entries[name]
		h.names = append(h.names, direntry{name, c.id, c.mode})
	}
	return nil
}

func (r *rawFS) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return r.with(in.NodeId, func(d *node) error {
		h := r.s.dirs[in.Fh]
		if h == nil {
			return syscall.EBADF
		}
		if in.Offset == 0 {
			// A rewind sees the directory as it is now.
			if err := r.s.listDir(d, h); err != nil {
				return err
			}
		}
		for i := in.Offset; i < uint64(len(h.names)); i++ {
			e := h.names[i]
			if !out.AddDirEntry(fuse.DirEntry{Name: e.name, Mode: e.mode, Ino: e.id, Off: i + 1}) {
				break
			}
		}
		return nil
	})
}

func (r *rawFS) ReleaseDir(in *fuse.ReleaseIn) {
	r.with(in.NodeId, func(d *node) error {
		delete(r.s.dirs, in.Fh)
		d.opens--
		r.s.maybeFree(d)
		return nil
	})
}

func (r *rawFS) StatFs(_ <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	s := r.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.cut {
		return fuse.EIO
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.backing, &st); err != nil {
		return status(err)
	}
	out.FromStatfsT(&st)
	return fuse.OK
}
