package box

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leafline/leafline/outbox"
)

// A full disk is not a crash. Nothing more can be made durable, so nothing
// more may be ACKed. The box takes its storage for full when any of these
// is seen, on any role and with either link transport:
//
//   - the filesystem of the data dir (or of the file sink's directory) has
//     less than stopFreeBytes free: 1% of it, between 4 and 128 MiB. The
//     box checks every second, so it normally stops before a store write
//     fails;
//   - the embedded nats-server logs a store write that failed for lack of
//     space. A stream that failed a write refuses every later one until the
//     server restarts, even once space is back, so the box restarts it;
//   - the write probe of the data dir (writable.go) fails with ENOSPC;
//   - a bbolt commit fails with ENOSPC, or the outbox file reaches its size
//     limit (outbox.ErrFull; 1 GiB on a 32-bit platform);
//   - the embedded nats-server disabled JetStream.
//
// The box then:
//
//   - logs one ERROR that says so, with the data dir, its free bytes and the
//     free bytes it waits for;
//   - stops the sink runner, the outbox relay, the link relays (package
//     hop), the completion service and the embedded server, and closes the
//     outbox — the same state as after a clean stop, so nothing that was
//     not ACKed is lost, and nothing is ACKed that is not durable. Nothing
//     runs but the ops endpoint and a statfs a second: no CPU is spent
//     while the disk stays full;
//   - keeps serving /healthz, /metrics (leafline_storage_full = 1,
//     leafline_storage_writable = 0, leafline_storage_free_bytes) and
//     /readyz (503, with the reason, which names the directory);
//   - restarts itself, as a fresh start on the same data dir, once every
//     watched filesystem has resumeFreeBytes free; after outbox.ErrFull, at
//     once (backing off up to 30s), to prune the outbox. The links then
//     resume from their durable consumers: what was not ACKed comes again
//     and is absorbed by the dedupe at each hop.

// errDiskFull: a filesystem the box writes to has no space left, or less
// than the box keeps free.
var errDiskFull = errors.New("disk full")

// errJetStreamDisabled: the embedded server turned JetStream off while it
// kept running — what nats-server does after a store write fails for lack
// of space.
var errJetStreamDisabled = errors.New("the embedded nats-server disabled JetStream (it does so when a store write fails for lack of disk space)")

// isStorageFull reports whether err means that the box's storage is full:
// the disk (isNoSpace, per platform) or the outbox file's size limit.
func isStorageFull(err error) bool {
	return isNoSpace(err) || errors.Is(err, errDiskFull) || errors.Is(err, outbox.ErrFull) || errors.Is(err, errJetStreamDisabled)
}

// resumeFreeBytes is how much free space the box waits for before it
// restarts after its storage filled up: 2% of the filesystem, at least 8 MiB
// and at most 256 MiB. Restarting with less would only fill the disk again
// at once.
func resumeFreeBytes(total uint64) uint64 {
	const lo, hi = 8 << 20, 256 << 20
	return min(max(total/50, lo), hi)
}

// stopFreeBytes is the free space under which the box stops as on a full
// disk: 1% of the filesystem, at least 4 MiB and at most 128 MiB. It is
// below resumeFreeBytes, so that a box that restarts does not stop again
// at once.
func stopFreeBytes(total uint64) uint64 {
	const lo, hi = 4 << 20, 128 << 20
	return min(max(total/100, lo), hi)
}

// storageDirs are the directories whose filesystems the box watches for
// space: the data dir, and those of its role (the file sink's directory).
func (a *App) storageDirs() []string {
	return append([]string{a.cfg.DataDir}, a.role.WatchDirs()...)
}

// checkSpace returns an error wrapping errDiskFull when a watched
// filesystem has less than stopFreeBytes free. A directory that cannot be
// statted (a sink dir not created yet) is skipped: the write probe and the
// writes themselves report it.
func (a *App) checkSpace() error {
	for _, dir := range a.storageDirs() {
		free, total, err := diskSpace(dir)
		if err != nil {
			continue
		}
		if dir == a.cfg.DataDir {
			a.metrics.storageFree.Set(float64(free))
		}
		stop := stopFreeBytes(total)
		if a.opts.keepFree != nil {
			stop = a.opts.keepFree(total)
		}
		if free < stop {
			return fmt.Errorf("%w: %s has %d bytes free, below the %d the box keeps free", errDiskFull, dir, free, stop)
		}
	}
	return nil
}

// noSpaceMessage reports whether a line the embedded nats-server logged
// says that a store write failed for lack of space (the server's own test:
// the error text).
func noSpaceMessage(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "no space left") || strings.Contains(m, "disk quota exceeded") ||
		strings.Contains(m, "there is not enough space on the disk")
}

// storeFailed is the embedded server's log hook: a no-space store failure
// is handed to monitor, which stops the box. It never blocks.
func (a *App) storeFailed(msg string) {
	if !noSpaceMessage(msg) {
		return
	}
	select {
	case a.noSpace <- msg:
	default:
	}
}

// lowOnSpace reports whether dir's filesystem has less than resumeFreeBytes
// free: a start that fails then is treated as a full disk, not as a fatal
// error.
func lowOnSpace(dir string) bool {
	free, total, err := diskSpace(dir)
	return err == nil && free < resumeFreeBytes(total)
}

// storageFullReason is /readyz's reason while the box is stopped for a
// full disk (cause), and restarts after minWait at the earliest.
func (a *App) storageFullReason(cause error, minWait time.Duration) string {
	if errors.Is(cause, outbox.ErrFull) {
		// The disk has room; the outbox file reached its size limit. A
		// restart prunes published receipts older than outbox.retention.
		return fmt.Sprintf("storage full: %v; processing is stopped and nothing is ACKed; the box restarts itself after %s and prunes its outbox", cause, minWait)
	}
	return fmt.Sprintf("storage full: %v; processing is stopped and nothing is ACKed; the box restarts itself when %s", cause, roomNeeded(a.storageDirs()))
}

// reportStorageFull reports the full disk (log, /readyz, metrics), at once:
// stopping the loops and the server may take a while.
func (a *App) reportStorageFull(cause error, minWait time.Duration) {
	dir := a.cfg.DataDir
	free, total, serr := diskSpace(dir)
	a.notReady.Store(a.storageFullReason(cause, minWait))
	a.metrics.storageFull.Set(1)
	a.metrics.storageWritable.Set(0)
	a.metrics.jetstreamEnabled.Set(0)
	a.log.Error("STORAGE FULL: processing stopped, nothing is ACKed until the box has disk space again",
		"data_dir", dir, "free_bytes", free, "resume_at_free_bytes", resumeFreeBytes(total), "cause", cause, "statfs_err", serr)
}

// waitForSpace returns once the data dir has room again (the full disk
// was reported: reportStorageFull), after at least minWait, or when ctx is
// done.
func (a *App) waitForSpace(ctx context.Context, minWait time.Duration) error {
	dirs := a.storageDirs()
	dir := a.cfg.DataDir
	var free, need uint64
	var serr error
	return pollStorage(ctx, func(waited time.Duration) bool {
		var total uint64
		free, total, serr = diskSpace(dir)
		need = resumeFreeBytes(total)
		a.metrics.storageFree.Set(float64(free))
		if serr != nil || free < need || waited < minWait || !a.othersHaveRoom(dirs[1:]) {
			return false
		}
		a.log.Info("disk space available again: restarting the box", "data_dir", dir, "free_bytes", free,
			"stopped_for", waited.Round(time.Second).String())
		a.notReady.Store("restarting after storage full")
		return true
	}, func() {
		a.log.Warn("storage full: still waiting for disk space", "data_dir", dir, "free_bytes", free,
			"resume_at_free_bytes", need, "statfs_err", serr)
	})
}

// pollStorage calls ready once a second until it reports true, and
// remind every 30 s meanwhile; it returns nil then, or ctx's error.
func pollStorage(ctx context.Context, ready func(waited time.Duration) bool, remind func()) error {
	start := time.Now()
	lastLog := start
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if ready(time.Since(start)) {
			return nil
		}
		if time.Since(lastLog) >= 30*time.Second {
			lastLog = time.Now()
			remind()
		}
	}
}

// roomNeeded says how much free space each of dirs needs for the box to
// restart: "/data has 8 MiB free and /sink has 8 MiB free".
func roomNeeded(dirs []string) string {
	var parts []string
	for _, d := range dirs {
		_, total, err := diskSpace(d)
		if err != nil {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s has %d MiB free", d, resumeFreeBytes(total)>>20))
	}
	if len(parts) == 0 {
		return "its data dir has 2% of its filesystem free"
	}
	return strings.Join(parts, " and ")
}

// othersHaveRoom reports whether each of dirs (other than the data dir)
// has resumeFreeBytes free, or cannot be statted.
func (a *App) othersHaveRoom(dirs []string) bool {
	for _, d := range dirs {
		free, total, err := diskSpace(d)
		if err == nil && free < resumeFreeBytes(total) {
			return false
		}
	}
	return true
}
