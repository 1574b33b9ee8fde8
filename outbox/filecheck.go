package outbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strings"
)

// This file validates the structure of a bbolt file (on-disk format version
// 2, as written by go.etcd.io/bbolt v1.3 to v1.5) by reading it with pread,
// before bbolt maps it. bbolt trusts its pages: a truncated file, a page id
// pointing past the end or a branch pointing back at its ancestor makes it
// fault, panic or recurse until the stack overflows, and the last two cannot
// be recovered. checkFile finds those cases first. It checks:
//
//   - both meta pages: magic, version, checksum, page size, txid parity;
//   - the newest meta's high-water mark against the file size (truncation);
//   - every page reachable from the root bucket: in range, self-identifying,
//     of the right type, element offsets inside the page, keys in order,
//     referenced once (no cycles), at most maxDepth deep;
//   - the freelist: in range, no duplicates, no reachable page listed free
//     (bbolt would hand it out and overwrite live data).
//
// Pages are little- or big-endian as the machine that wrote them; bbolt has
// the same restriction.

const (
	bboltMagic         = 0xED0CDAED
	bboltVersion       = 2
	pageHeaderSize     = 16
	elementSize        = 16 // branch and leaf page elements
	metaSize           = 64
	branchPageFlag     = 0x01
	leafPageFlag       = 0x02
	metaPageFlag       = 0x04
	freelistPageFlag   = 0x10
	bucketLeafFlag     = 0x01
	pgidNoFreelist     = ^uint64(0)
	maxDepth           = 64
	maxProblems        = 20
	minPageSize        = 512
	maxPageSize        = 1 << 24
	inBucketHeaderSize = 16
)

var ne = binary.NativeEndian

type bboltMeta struct {
	magic, version, pageSize, flags uint32
	root, freelist, pgid, txid      uint64
	err                             error
}

func parseMeta(page []byte) bboltMeta {
	if len(page) < pageHeaderSize+metaSize {
		return bboltMeta{err: errors.New("short read")}
	}
	b := page[pageHeaderSize : pageHeaderSize+metaSize]
	m := bboltMeta{
		magic:    ne.Uint32(b[0:]),
		version:  ne.Uint32(b[4:]),
		pageSize: ne.Uint32(b[8:]),
		flags:    ne.Uint32(b[12:]),
		root:     ne.Uint64(b[16:]), // root bucket: root pgid, then sequence at 24
		freelist: ne.Uint64(b[32:]),
		pgid:     ne.Uint64(b[40:]),
		txid:     ne.Uint64(b[48:]),
	}
	h := fnv.New64a()
	h.Write(b[:56])
	switch {
	case m.magic != bboltMagic:
		m.err = errors.New("bad magic")
	case m.version != bboltVersion:
		m.err = fmt.Errorf("bbolt format version %d, want %d", m.version, bboltVersion)
	case ne.Uint64(b[56:]) != h.Sum64():
		m.err = errors.New("checksum mismatch")
	case m.pageSize < minPageSize || m.pageSize > maxPageSize || m.pageSize&(m.pageSize-1) != 0:
		m.err = fmt.Errorf("implausible page size %d", m.pageSize)
	}
	return m
}

type fileChecker struct {
	r         io.ReaderAt
	size      int64
	ps        uint64 // page size
	hwm       uint64 // high-water mark: pages [0, hwm) are in use or free
	reachable map[uint64]bool
	problems  []string
}

func (c *fileChecker) problem(format string, args ...any) {
	if len(c.problems) < maxProblems {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
	}
}

func (c *fileChecker) full() bool { return len(c.problems) >= maxProblems }

// checkFile validates f's structure. It returns the problems found, or an
// error if the file could not be read.
func checkFile(f *os.File) ([]string, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	c := &fileChecker{r: f, size: st.Size(), reachable: map[uint64]bool{}}
	if c.size == 0 {
		return []string{"file is empty (truncated?)"}, nil
	}
	m, err := c.metas()
	if err != nil || len(c.problems) > 0 {
		return c.problems, err
	}
	if err := c.freelistAndTree(m); err != nil {
		return nil, err
	}
	return c.problems, nil
}

func (c *fileChecker) readAt(n, off uint64) ([]byte, error) {
	b := make([]byte, n)
	k, err := c.r.ReadAt(b, int64(off))
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return b[:k], err
}

// metas reads and validates both meta pages and returns the newest.
func (c *fileChecker) metas() (bboltMeta, error) {
	p0, err := c.readAt(pageHeaderSize+metaSize, 0)
	if err != nil {
		return bboltMeta{}, err
	}
	m0 := parseMeta(p0)
	var m1 bboltMeta
	if m0.err == nil {
		p1, err := c.readAt(pageHeaderSize+metaSize, uint64(m0.pageSize))
		if err != nil {
			return bboltMeta{}, err
		}
		m1 = parseMeta(p1)
	} else {
		// Find meta 1 the way bbolt does: try every plausible page size.
		m1.err = errors.New("not found")
		for ps := int64(minPageSize); ps <= maxPageSize && ps < c.size; ps <<= 1 {
			p1, err := c.readAt(pageHeaderSize+metaSize, uint64(ps))
			if err != nil {
				return bboltMeta{}, err
			}
			if m := parseMeta(p1); m.err == nil && int64(m.pageSize) == ps {
				m1 = m
				break
			}
		}
	}
	switch {
	case m0.err != nil && m1.err != nil:
		c.problem("both bbolt meta pages are invalid (meta 0: %v; meta 1: %v)", m0.err, m1.err)
		return bboltMeta{}, nil
	case m0.err != nil || m1.err != nil:
		bad, good, err := 0, m1, m0.err
		if m1.err != nil {
			bad, good, err = 1, m0, m1.err
		}
		c.problem("bbolt meta page %d is invalid (%v); bbolt would silently fall back to transaction %d and could lose the last commit",
			bad, err, good.txid)
		return bboltMeta{}, nil
	case m0.pageSize != m1.pageSize:
		c.problem("meta pages disagree on the page size (%d, %d)", m0.pageSize, m1.pageSize)
		return bboltMeta{}, nil
	case m0.txid%2 != 0 || m1.txid%2 != 1:
		c.problem("meta pages hold transactions %d and %d: wrong parity", m0.txid, m1.txid)
		return bboltMeta{}, nil
	}
	m := m0
	if m1.txid > m0.txid {
		m = m1
	}
	c.ps, c.hwm = uint64(m.pageSize), m.pgid
	// Meta page headers: bbolt's Check reads them.
	for id := uint64(0); id < 2; id++ {
		h, err := c.readAt(pageHeaderSize, id*c.ps)
		if err != nil {
			return bboltMeta{}, err
		}
		if len(h) < pageHeaderSize || ne.Uint64(h) != id || ne.Uint16(h[8:]) != metaPageFlag {
			c.problem("meta page %d: bad page header", id)
		}
		c.reachable[id] = true
	}
	switch {
	case c.hwm < 3:
		c.problem("meta: implausible page count %d", c.hwm)
	case c.hwm > uint64(c.size)/c.ps:
		c.problem("file is truncated: transaction %d uses %d pages of %d bytes, the file has %d bytes",
			m.txid, c.hwm, c.ps, c.size)
	case m.root < 2 || m.root >= c.hwm:
		c.problem("meta: root page %d out of range [2, %d)", m.root, c.hwm)
	case m.freelist != pgidNoFreelist && (m.freelist < 2 || m.freelist >= c.hwm):
		c.problem("meta: freelist page %d out of range [2, %d)", m.freelist, c.hwm)
	}
	return m, nil
}

// page reads page id including its overflow pages, after checking its
// header: want is the page type, or 0 for branch or leaf. ok is false when
// a problem was recorded.
func (c *fileChecker) page(id uint64, want uint16, from string) (buf []byte, ok bool, err error) {
	if id < 2 || id >= c.hwm {
		c.problem("%s: page %d out of range [2, %d)", from, id, c.hwm)
		return nil, false, nil
	}
	if c.reachable[id] {
		c.problem("%s: page %d referenced more than once", from, id)
		return nil, false, nil
	}
	h, err := c.readAt(c.ps, id*c.ps)
	if err != nil {
		return nil, false, err
	}
	if uint64(len(h)) < c.ps {
		c.problem("%s: page %d: short read", from, id)
		return nil, false, nil
	}
	pid, flags, overflow := ne.Uint64(h), ne.Uint16(h[8:]), uint64(ne.Uint32(h[12:]))
	switch {
	case pid != id:
		c.problem("%s: page %d identifies itself as %d", from, id, pid)
		return nil, false, nil
	case want != 0 && flags != want, want == 0 && flags != branchPageFlag && flags != leafPageFlag:
		c.problem("%s: page %d has unexpected type flags %#x", from, id, flags)
		return nil, false, nil
	case id+overflow >= c.hwm:
		c.problem("%s: page %d overflows past the high-water mark (%d pages)", from, id, overflow)
		return nil, false, nil
	}
	for i := id; i <= id+overflow; i++ {
		if c.reachable[i] {
			c.problem("%s: page %d (overflow of %d) referenced more than once", from, i, id)
			return nil, false, nil
		}
		c.reachable[i] = true
	}
	if overflow == 0 {
		return h, true, nil
	}
	buf, err = c.readAt((overflow+1)*c.ps, id*c.ps)
	if err != nil {
		return nil, false, err
	}
	if uint64(len(buf)) < (overflow+1)*c.ps {
		c.problem("%s: page %d: short read", from, id)
		return nil, false, nil
	}
	return buf, true, nil
}

func (c *fileChecker) freelistAndTree(m bboltMeta) error {
	var free []uint64
	if m.freelist != pgidNoFreelist {
		buf, ok, err := c.page(m.freelist, freelistPageFlag, "freelist")
		if err != nil {
			return err
		}
		if ok {
			idx, count := uint64(0), uint64(ne.Uint16(buf[10:]))
			if count == 0xFFFF {
				idx, count = 1, ne.Uint64(buf[pageHeaderSize:])
			}
			if count > (uint64(len(buf))-pageHeaderSize)/8-idx {
				c.problem("freelist page %d: %d ids do not fit in %d bytes", m.freelist, count, len(buf))
			} else {
				for i := uint64(0); i < count; i++ {
					free = append(free, ne.Uint64(buf[pageHeaderSize+(idx+i)*8:]))
				}
			}
		}
	}
	if err := c.walkPage(m.root, 0, "root bucket"); err != nil {
		return err
	}
	seen := make(map[uint64]bool, len(free))
	for _, id := range free {
		switch {
		case id < 2 || id >= c.hwm:
			c.problem("freelist: page %d out of range [2, %d)", id, c.hwm)
		case seen[id]:
			c.problem("freelist: page %d listed twice", id)
		case c.reachable[id]:
			c.problem("freelist: page %d is in use but listed free (bbolt would overwrite it)", id)
		}
		seen[id] = true
		if c.full() {
			break
		}
	}
	return nil
}

// walkPage checks the branch or leaf page id and everything below it.
func (c *fileChecker) walkPage(id uint64, depth int, from string) error {
	if c.full() {
		return nil
	}
	if depth > maxDepth {
		c.problem("%s: tree deeper than %d at page %d", from, maxDepth, id)
		return nil
	}
	buf, ok, err := c.page(id, 0, from)
	if err != nil || !ok {
		return err
	}
	flags := ne.Uint16(buf[8:])
	return c.walkNodes(buf, flags, depth, fmt.Sprintf("%s page %d", from, id))
}

// walkNodes checks the elements of a page (or of an inline bucket's page).
func (c *fileChecker) walkNodes(buf []byte, flags uint16, depth int, where string) error {
	count := int(ne.Uint16(buf[10:]))
	if flags == branchPageFlag && count == 0 {
		c.problem("%s: empty branch page", where)
		return nil
	}
	if pageHeaderSize+count*elementSize > len(buf) {
		c.problem("%s: %d elements do not fit in %d bytes", where, count, len(buf))
		return nil
	}
	var prev []byte
	for i := 0; i < count && !c.full(); i++ {
		e := pageHeaderSize + i*elementSize
		el := buf[e : e+elementSize]
		var pos, ksize, vsize, eflags int
		if flags == branchPageFlag {
			pos, ksize = int(ne.Uint32(el[0:])), int(ne.Uint32(el[4:]))
		} else {
			eflags, pos, ksize, vsize = int(ne.Uint32(el[0:])), int(ne.Uint32(el[4:])), int(ne.Uint32(el[8:])), int(ne.Uint32(el[12:]))
		}
		if end := e + pos + ksize + vsize; end > len(buf) || end < e {
			c.problem("%s: element %d points outside the page", where, i)
			return nil
		}
		key := buf[e+pos : e+pos+ksize]
		if i > 0 && bytes.Compare(prev, key) >= 0 {
			c.problem("%s: keys out of order at element %d", where, i)
		}
		prev = key
		if flags == branchPageFlag {
			if err := c.walkPage(ne.Uint64(el[8:]), depth+1, where); err != nil {
				return err
			}
			continue
		}
		if eflags&^bucketLeafFlag != 0 {
			c.problem("%s: element %d has flags %#x", where, i, eflags)
			continue
		}
		if eflags&bucketLeafFlag == 0 {
			continue
		}
		val := buf[e+pos+ksize : e+pos+ksize+vsize]
		name := fmt.Sprintf("%s: bucket %q", where, strings.ToValidUTF8(string(key), "?"))
		if len(val) < inBucketHeaderSize {
			c.problem("%s: bucket header too short", name)
			continue
		}
		if root := ne.Uint64(val); root != 0 {
			if err := c.walkPage(root, depth+1, name); err != nil {
				return err
			}
			continue
		}
		inline := val[inBucketHeaderSize:]
		if len(inline) < pageHeaderSize || ne.Uint16(inline[8:]) != leafPageFlag {
			c.problem("%s: bad inline page", name)
			continue
		}
		if depth+1 > maxDepth {
			c.problem("%s: buckets nested deeper than %d", name, maxDepth)
			continue
		}
		if err := c.walkNodes(inline, leafPageFlag, depth+1, name+" (inline)"); err != nil {
			return err
		}
	}
	return nil
}

func joinProblems(p []string) string {
	s := strings.Join(p, "; ")
	if len(p) >= maxProblems {
		s += "; (more problems not shown)"
	}
	return s
}
