package box

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// A ready box can durably write now. The embedded nats-server and bbolt
// keep their files open, so a data dir deleted, replaced or remounted
// read-only under a running box is not seen by them at once: a stream
// keeps PubAck'ing into files that no longer have a name (and that a
// restart will not find) until it needs a new file, then fails every write
// ("Critical write error"), and JetStream stays enabled. So the box checks
// its data dir itself, every second (monitor):
//
//   - the data dir and the JetStream store dir still exist and are the
//     directories the box started on (same device and inode);
//   - every writeProbeEvery, a small file can be created, written, fsynced
//     and removed in the store dir.
//
// When a check fails the box stops as it does on a full disk (see
// storage.go): the sink runner, the relay, the completion service and the
// embedded server stop, nothing more is ACKed, /readyz answers 503 with the
// reason and leafline_storage_writable is 0. It never creates the data dir
// itself: once the dir exists and takes a write again (restored, remounted
// or recreated by the operator) the box starts again on it. A probe that
// fails for lack of space takes the full-disk path (storage.go), which
// waits for free space rather than for one successful write.

// errNotWritable wraps why the box's data dir cannot take durable writes.
var errNotWritable = errors.New("the data dir cannot take durable writes")

// writeProbeEvery is how often the probe writes and fsyncs a file.
const writeProbeEvery = 5 * time.Second

// storageProbe checks that the box's data dir is the one it started on and
// takes durable writes.
type storageProbe struct {
	dirs      []string      // data dir, JetStream store dir
	ids       []os.FileInfo // as at start
	lastWrite time.Time
}

// newStorageProbe records the identity of the box's directories, once the
// box has started on them.
func newStorageProbe(dataDir string) (*storageProbe, error) {
	return probeDirs(dataDir, filepath.Join(dataDir, "jetstream"))
}

// probeDirs is a probe of the given directories, which must exist.
func probeDirs(dirs ...string) (*storageProbe, error) {
	p := &storageProbe{dirs: dirs}
	for _, d := range p.dirs {
		fi, err := os.Stat(d)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errNotWritable, err)
		}
		p.ids = append(p.ids, fi)
	}
	return p, nil
}

// check returns an error wrapping errNotWritable when the dirs are gone,
// replaced or refuse a write, and one wrapping errDiskFull when the write
// fails for lack of space.
func (p *storageProbe) check(now time.Time) error {
	for i, d := range p.dirs {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("%w: %w (was it deleted or unmounted while the box ran?)", errNotWritable, err)
		}
		if !os.SameFile(fi, p.ids[i]) {
			return fmt.Errorf("%w: %s is no longer the directory the box started on (deleted and recreated, or another mount): the running server's files are gone", errNotWritable, d)
		}
	}
	if now.Sub(p.lastWrite) < writeProbeEvery {
		return nil
	}
	if err := writeProbe(p.dirs[len(p.dirs)-1]); err != nil {
		if isNoSpace(err) {
			return fmt.Errorf("%w: %w", errDiskFull, err)
		}
		return fmt.Errorf("%w: %w", errNotWritable, err)
	}
	p.lastWrite = now
	return nil
}

// writeProbe creates, writes, fsyncs and removes a small file in dir.
func writeProbe(dir string) error {
	f, err := os.CreateTemp(dir, ".leafline-write-probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	defer os.Remove(name)
	_, err = f.Write([]byte{1})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write probe %s: %w", name, err)
	}
	return os.Remove(name)
}

// waitWritable reports an unusable data dir (log, /readyz, metrics) and
// returns once the data dir exists and takes a durable write again, or when
// ctx is done.
func (a *App) waitWritable(ctx context.Context, cause error) error {
	dir := a.cfg.DataDir
	a.notReady.Store(fmt.Sprintf("storage not writable: %v; processing is stopped and nothing is ACKed; the box starts again on %s once it exists and takes writes (restore or remount it, or restart the box)", cause, dir))
	a.metrics.storageWritable.Set(0)
	a.metrics.jetstreamEnabled.Set(0)
	a.log.Error("STORAGE NOT WRITABLE: processing stopped, nothing is ACKed until the data dir takes durable writes again",
		"data_dir", dir, "cause", cause)
	var err error
	return pollStorage(ctx, func(waited time.Duration) bool {
		var fi os.FileInfo
		fi, err = os.Stat(dir)
		if err == nil && !fi.IsDir() {
			err = fmt.Errorf("%s is not a directory", dir)
		}
		if err == nil {
			err = writeProbe(dir)
		}
		if err != nil {
			return false
		}
		a.log.Info("data dir writable again: restarting the box", "data_dir", dir,
			"stopped_for", waited.Round(time.Second).String())
		a.notReady.Store("restarting after storage not writable")
		a.metrics.storageWritable.Set(1)
		return true
	}, func() { a.log.Warn("storage not writable: still waiting", "data_dir", dir, "err", err) })
}
