package forgetfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pageSize is the unit of unsynced file data, and of a torn write.
const pageSize = 4096

// stagingName is the directory, at the top of the backing directory, that
// holds the backing inodes that have no durable name: files created or
// renamed but not yet named by a directory sync, and new directories. It
// is emptied at every mount (as fsck drops orphan inodes) and never shown.
const stagingName = ".forgetfs-staging"

type kind uint8

const (
	kindFile kind = iota + 1
	kindDir
)

// state is the whole model: the volatile tree the mount shows, and how
// much of it the backing directory (the durable state) holds. One mutex
// guards it all, so every request is atomic with respect to a cut.
type state struct {
	mu      sync.RWMutex
	backing string // absolute
	staging string // backing/stagingName
	cut     bool
	journal bool // Options.JournaledNames

	nodes   map[uint64]*node // by FUSE node ID
	byIno   map[uint64]*node // regular files by backing inode number
	nextID  uint64
	nextStg uint64 // staging names

	dirs    map[uint64]*dirHandle
	nextDir uint64
	// changed holds the directories whose entries changed since their
	// last sync, so that a sync costs what changed, not what exists.
	changed map[*node]struct{}
}

// node is one inode of the mount.
type node struct {
	id      uint64
	kind    kind
	lookups uint64 // kernel references (LOOKUP and friends minus FORGET)
	opens   int

	// Attributes as the mount shows them; a sync writes them to the
	// backing inode when attrDirty.
	mode                uint32 // type and permission bits
	uid, gid            uint32
	atime, mtime, ctime time.Time
	attrDirty           bool

	// Regular files.
	f      *os.File // the backing inode, open while the file is open (or has no known backing name)
	bino   uint64   // its inode number (key of state.byIno)
	nlink  int      // volatile names
	blinks int      // durable names: links in the backing outside staging
	staged string   // its name in the staging directory, or ""
	size   int64
	bsize  int64
	hide   int64
	pages  map[int64]*[pageSize]byte // unsynced pages by index

	// Directories.
	isRoot  bool
	loaded  bool                // entries and dur are read from the backing
	entries map[string]*node    // volatile
	dur     map[string]*node    // durable: what the backing directory holds
	dnlink  uint32              // link count read from the backing, until loaded
	names   map[string]struct{} // entries changed since the last sync
	// The backing location. A directory is at bparent/bname, or at
	// staging/bname when bparent is nil (no directory sync has named it
	// yet). A file has one durable name at bparent/bname, or else its
	// staging name, from which it is opened again when needed.
	bparent *node
	bname   string
	// The volatile location. A directory never changes parent (a rename
	// between directories fails with EXDEV), so bparent is nil or vparent.
	vparent *node
	vname   string
	removed bool // rmdir'd
}

// A file's data is the backing inode's first min(hide, bsize) bytes, with
// the unsynced pages laid over them and zeros elsewhere, up to size.
//
//   - size: the file's size as the mount shows it;
//   - bsize: the backing inode's size (the durable size);
//   - hide: backing bytes at or past it read as zeros (an unsynced
//     truncation below bsize), hide ≤ size.

type dirHandle struct {
	names []direntry
}

type direntry struct {
	name string
	id   uint64
	mode uint32
}

func newState(backing string) (*state, error) {
	s := &state{backing: backing, staging: filepath.Join(backing, stagingName),
		nodes: map[uint64]*node{}, byIno: map[uint64]*node{}, dirs: map[uint64]*dirHandle{}, nextID: 1,
		changed: map[*node]struct{}{}}
	if err := os.RemoveAll(s.staging); err != nil {
		return nil, fmt.Errorf("forgetfs: empty the staging directory: %w", err)
	}
	if err := os.Mkdir(s.staging, 0o700); err != nil {
		return nil, fmt.Errorf("forgetfs: staging directory: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("forgetfs: backing directory: %w", err)
	}
	root := s.newNode(kindDir)
	root.isRoot = true
	root.setStat(&st)
	if err := s.load(root); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *state) newNode(k kind) *node {
	n := &node{id: s.nextID, kind: k}
	s.nextID++
	s.nodes[n.id] = n
	return n
}

func (n *node) setStat(st *unix.Stat_t) {
	n.mode = st.Mode
	n.uid, n.gid = st.Uid, st.Gid
	n.atime = time.Unix(st.Atim.Unix())
	n.mtime = time.Unix(st.Mtim.Unix())
	n.ctime = time.Unix(st.Ctim.Unix())
	if n.kind == kindFile {
		n.size, n.bsize, n.hide = st.Size, st.Size, st.Size
		n.nlink, n.blinks = int(st.Nlink), int(st.Nlink)
		n.bino = st.Ino
	} else {
		n.dnlink = uint32(st.Nlink)
	}
}

// bpath is where a directory's backing lies now.
func (s *state) bpath(d *node) string {
	switch {
	case d.isRoot:
		return s.backing
	case d.bparent == nil:
		return filepath.Join(s.staging, d.bname)
	default:
		return filepath.Join(s.bpath(d.bparent), d.bname)
	}
}

// fdPath names a file's backing inode for link and utimes.
func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

// stagingSlot returns a fresh name in the staging directory.
func (s *state) stagingSlot() string {
	s.nextStg++
	return strconv.FormatUint(s.nextStg, 10)
}

// load reads a directory's entries from its backing the first time the
// mount needs them: until then nothing in it can have changed.
func (s *state) load(d *node) error {
	if d.loaded {
		return nil
	}
	dir := s.bpath(d)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	d.entries = make(map[string]*node, len(ents))
	d.dur = make(map[string]*node, len(ents))
	for _, e := range ents {
		name := e.Name()
		if d.isRoot && name == stagingName {
			continue
		}
		p := filepath.Join(dir, name)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		var c *node
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			if c = s.byIno[st.Ino]; c == nil {
				c = s.newNode(kindFile)
				c.setStat(&st)
				c.bparent, c.bname = d, name
				s.byIno[st.Ino] = c
			}
		case unix.S_IFDIR:
			c = s.newNode(kindDir)
			c.setStat(&st)
			c.bparent, c.bname = d, name
			c.vparent, c.vname = d, name
		default:
			// Symlinks, devices, sockets and fifos are not modelled.
			continue
		}
		d.entries[name] = c
		d.dur[name] = c
	}
	d.loaded = true
	return nil
}

// child returns the named entry of a directory, loading it first.
func (s *state) child(d *node, name string) (*node, error) {
	if d.kind != kindDir {
		return nil, syscall.ENOTDIR
	}
	if err := s.load(d); err != nil {
		return nil, err
	}
	c := d.entries[name]
	if c == nil {
		return nil, syscall.ENOENT
	}
	return c, nil
}

// touch notes that a directory's entry name changed.
func (s *state) touch(d *node, name string) {
	if d.names == nil {
		d.names = map[string]struct{}{}
	}
	d.names[name] = struct{}{}
	s.changed[d] = struct{}{}
}

// filePath is a backing name of a file's inode, or "" if none is known.
func (s *state) filePath(n *node) string {
	switch {
	case n.bparent != nil:
		return filepath.Join(s.bpath(n.bparent), n.bname)
	case n.staged != "":
		return filepath.Join(s.staging, n.staged)
	}
	return ""
}

// file opens a file's backing inode if it is not open.
func (s *state) file(n *node) (*os.File, error) {
	if n.f != nil {
		return n.f, nil
	}
	p := s.filePath(n)
	if p == "" {
		return nil, fmt.Errorf("forgetfs: inode %d has no backing name: %w", n.bino, syscall.EIO)
	}
	f, err := os.OpenFile(p, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if f, err = os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0); err != nil {
			return nil, err
		}
	}
	n.f = f
	return f, nil
}

// idle closes a file's backing inode when no handle is open and it can be
// opened again by name: a box may hold many more files than descriptors.
func (s *state) idle(n *node) {
	if n.kind == kindFile && n.f != nil && n.opens == 0 && s.filePath(n) != "" {
		n.f.Close()
		n.f = nil
	}
}

// reserved is a name the mount refuses to create: the staging directory.
func reserved(d *node, name string) bool { return d.isRoot && name == stagingName }

// dirLinks is a directory's link count: two, plus one per subdirectory.
func (s *state) dirLinks(d *node) uint32 {
	if !d.loaded {
		return max(d.dnlink, 2)
	}
	n := uint32(2)
	for _, c := range d.entries {
		if c.kind == kindDir {
			n++
		}
	}
	return n
}

// visible is how many bytes of the backing inode show through.
func (n *node) visible() int64 { return min(n.hide, n.bsize) }

// readAt fills b with the file's data at off (b is within size).
func (n *node) readAt(b []byte, off int64) error {
	vis := n.visible()
	for len(b) > 0 {
		pi := off / pageSize
		po := off % pageSize
		if p := n.pages[pi]; p != nil {
			k := copy(b, p[po:])
			b, off = b[k:], off+int64(k)
			continue
		}
		// A run of clean pages: one pread for all of it.
		end := off + int64(len(b))
		for q := pi + 1; q*pageSize < end; q++ {
			if n.pages[q] != nil {
				end = q * pageSize
				break
			}
		}
		run := b[:end-off]
		got := 0
		if off < vis {
			want := min(int64(len(run)), vis-off)
			k, err := preadFull(n.f, run[:want], off)
			if err != nil {
				return err
			}
			got = k
		}
		clear(run[got:])
		b, off = b[len(run):], end
	}
	return nil
}

func preadFull(f *os.File, b []byte, off int64) (int, error) {
	got := 0
	for got < len(b) {
		k, err := f.ReadAt(b[got:], off+int64(got))
		got += k
		if errors.Is(err, io.EOF) {
			// A short backing inode reads as zeros.
			return got, nil
		}
		if err != nil {
			return got, err
		}
		if k == 0 {
			break
		}
	}
	return got, nil
}

// page returns the unsynced page pi, creating it from what the file
// shows there now when it is clean.
func (n *node) page(pi int64) (*[pageSize]byte, error) {
	if p := n.pages[pi]; p != nil {
		return p, nil
	}
	p := new([pageSize]byte)
	off := pi * pageSize
	if vis := n.visible(); off < vis {
		if _, err := preadFull(n.f, p[:min(pageSize, vis-off)], off); err != nil {
			return nil, err
		}
	}
	if n.pages == nil {
		n.pages = map[int64]*[pageSize]byte{}
	}
	n.pages[pi] = p
	return p, nil
}

// writeAt lays data over the file at off, growing it as needed.
func (n *node) writeAt(data []byte, off int64) error {
	for len(data) > 0 {
		pi, po := off/pageSize, off%pageSize
		var p *[pageSize]byte
		var err error
		if po == 0 && len(data) >= pageSize && n.pages[pi] == nil {
			// A whole page: nothing of the old one shows through.
			p = new([pageSize]byte)
			if n.pages == nil {
				n.pages = map[int64]*[pageSize]byte{}
			}
			n.pages[pi] = p
		} else if p, err = n.page(pi); err != nil {
			return err
		}
		k := copy(p[po:], data)
		data, off = data[k:], off+int64(k)
		n.size = max(n.size, off)
	}
	return nil
}

// truncate sets the file's size; bytes past it are gone, and read as
// zeros if the file grows again.
func (n *node) truncate(size int64) {
	if size < n.size {
		for pi, p := range n.pages {
			switch start := pi * pageSize; {
			case start >= size:
				delete(n.pages, pi)
			case start+pageSize > size:
				clear(p[size-start:])
			}
		}
		n.hide = min(n.hide, size)
	}
	n.size = size
}

// dirty reports whether a file has anything unsynced.
func (n *node) dirty() bool {
	return len(n.pages) > 0 || n.size != n.bsize || n.hide < n.bsize || n.attrDirty
}

// dirDirty reports whether a directory's entries differ from its durable ones.
func (d *node) dirDirty() bool {
	for name := range d.names {
		if d.entries[name] != d.dur[name] {
			return true
		}
	}
	return false
}
