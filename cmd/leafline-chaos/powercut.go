//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/internal/forgetfs"
)

// powerDisk is a box's data dir on a forgetfs mount: what the box writes
// stays in memory until it syncs it, and a power cut drops the rest. The
// durable state lives in a backing directory beside the data dir.
type powerDisk struct {
	mnt, backing string
	opts         forgetfs.Options

	mu sync.Mutex
	fs *forgetfs.FS // nil while remounting failed
}

// mountPowerDisk mounts forgetfs on dataDir. Unless posix, names follow
// ext4's journal (forgetfs.Options.JournaledNames): any fsync commits every
// earlier name change.
func mountPowerDisk(dataDir string, posix bool) (*powerDisk, error) {
	d := &powerDisk{mnt: dataDir, backing: dataDir + ".durable", opts: forgetfs.Options{Name: "chaos", JournaledNames: !posix}}
	for _, p := range []string{d.mnt, d.backing} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
	}
	fs, err := forgetfs.Mount(d.mnt, d.backing, d.opts)
	if err != nil {
		return nil, err
	}
	d.fs = fs
	return d, nil
}

// cut drops everything not synced and mounts the durable state again on
// the same path.
func (d *powerDisk) cut(c forgetfs.Cut) (forgetfs.CutReport, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fs == nil {
		return forgetfs.CutReport{}, errors.New("not mounted")
	}
	rep, err := d.fs.PowerCut(c)
	d.fs = nil
	fs, merr := forgetfs.Mount(d.mnt, d.backing, d.opts)
	if merr != nil {
		return rep, errors.Join(err, fmt.Errorf("remount: %w", merr))
	}
	d.fs = fs
	return rep, err
}

func (d *powerDisk) mounted() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fs != nil
}

// close makes everything durable, unmounts, and leaves the durable state
// at the data dir's own path as a plain directory, so that a kept run can
// be checked again (--recheck) without forgetfs.
func (d *powerDisk) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fs == nil {
		return nil
	}
	err := d.fs.Unmount()
	d.fs = nil
	if err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(d.backing, ".forgetfs-staging")); err != nil {
		return err
	}
	// The mount point is empty once unmounted; a lazy unmount still in
	// progress keeps it busy, and the state then stays in the backing dir.
	if err := os.Remove(d.mnt); err != nil {
		return fmt.Errorf("the durable state stays in %s: %w", d.backing, err)
	}
	return os.Rename(d.backing, d.mnt)
}

// powerBoxes are the boxes whose data dirs are on forgetfs.
func (c *system) powerBoxes() []*box {
	var out []*box
	for _, n := range c.order {
		if c.power[n] != nil {
			out = append(out, c.boxes[n])
		}
	}
	return out
}

// pickPowerBox chooses a box on forgetfs: an edge half of the time, else
// the hub or L1.
func (in *injector) pickPowerBox() *box {
	var edges, others []*box
	for _, b := range in.c.powerBoxes() {
		if b.role == "edge" {
			edges = append(edges, b)
		} else {
			others = append(others, b)
		}
	}
	if len(edges) > 0 && (len(others) == 0 || in.rng.IntN(2) == 0) {
		return edges[in.rng.IntN(len(edges))]
	}
	return others[in.rng.IntN(len(others))]
}

// powerCut SIGKILLs the box and cuts the power of its data dir, keeps it
// down for down, and restarts it on what was synced. The process is gone
// before the cut, so nothing it had in flight lands after it; what it had
// written and not synced is gone with the cut. With torn, one file keeps
// a random prefix of its unsynced pages (forgetfs.Cut.Torn).
func (in *injector) powerCut(ctx context.Context, b *box, down time.Duration, torn bool, seed uint64) {
	defer b.mu.Unlock()
	d := in.c.power[b.name]
	if b.running() == nil {
		return // being restarted after another death
	}
	b.stop(syscall.SIGKILL, 10*time.Second)
	rep, err := d.cut(forgetfs.Cut{Torn: torn, Rand: rand.New(rand.NewPCG(seed, 0x5eed))})
	if err != nil {
		in.rec.Info("power cut of %s: %v", b.name, err)
		if !d.mounted() {
			select {
			case in.c.fatal <- fmt.Errorf("power cut of %s: %w", b.name, err):
			default:
			}
			return
		}
	}
	in.rec.Debug("power cut of %s dropped %d files (%d pages) and %d directories' changes; torn: %q %d of %d pages",
		b.name, rep.Files, rep.Pages, rep.Dirs, rep.Torn, rep.TornPages, rep.TornOf)
	note := ""
	if rep.Torn != "" {
		note = "torn"
	}
	in.rec.FaultNote(faultPowerCut, b.name, down, note)
	ctxsleep.For(ctx, down)
	if err := b.start(context.Background(), b.env()); err != nil {
		in.rec.Info("restart of %s after a power cut: %v", b.name, err)
	}
}
