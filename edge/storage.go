package edge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leafline/leafline/outbox"
)

// A full disk is not a crash. When the box's storage fills up, the embedded
// nats-server disables JetStream (it never re-enables it by itself), a
// bbolt commit fails with ENOSPC, or the outbox file reaches its size
// limit (outbox.ErrFull; 1 GiB on a 32-bit platform). Either way nothing
// more can be made durable, so nothing more may be ACKed. The box then:
//
//   - logs one ERROR that says so, with the data dir, its free bytes and the
//     free bytes it waits for;
//   - stops the sink runner, the relay, the completion service and the
//     embedded server, and closes the outbox — the same state as after a
//     clean stop, so nothing that was not ACKed is lost, and nothing is
//     ACKed that is not durable;
//   - keeps serving /healthz, /metrics (leafline_storage_full = 1,
//     leafline_storage_free_bytes) and /readyz (503, with the reason);
//   - restarts itself, as a fresh start on the same data dir, once the
//     data dir has resumeFreeBytes free; after outbox.ErrFull, at once
//     (backing off up to 30s), to prune the outbox.

// errJetStreamDisabled: the embedded server turned JetStream off while it
// kept running — what nats-server does after a store write fails for lack
// of space.
var errJetStreamDisabled = errors.New("the embedded nats-server disabled JetStream (it does so when a store write fails for lack of disk space)")

// isStorageFull reports whether err means that the box's storage is full:
// the disk (isNoSpace, per platform) or the outbox file's size limit.
func isStorageFull(err error) bool {
	return isNoSpace(err) || errors.Is(err, outbox.ErrFull) || errors.Is(err, errJetStreamDisabled)
}

// resumeFreeBytes is how much free space the box waits for before it
// restarts after its storage filled up: 2% of the filesystem, at least 8 MiB
// and at most 256 MiB. Restarting with less would only fill the disk again
// at once.
func resumeFreeBytes(total uint64) uint64 {
	const lo, hi = 8 << 20, 256 << 20
	return min(max(total/50, lo), hi)
}

// lowOnSpace reports whether dir's filesystem has less than resumeFreeBytes
// free: a start that fails then is treated as a full disk, not as a fatal
// error.
func lowOnSpace(dir string) bool {
	free, total, err := diskSpace(dir)
	return err == nil && free < resumeFreeBytes(total)
}

// waitForSpace reports the full disk (log, /readyz, metrics) and returns
// once the data dir has room again, after at least minWait, or when ctx is
// done.
func (a *App) waitForSpace(ctx context.Context, cause error, minWait time.Duration) error {
	dir := a.cfg.DataDir
	free, total, serr := diskSpace(dir)
	need := resumeFreeBytes(total)
	reason := fmt.Sprintf("storage full: %v; processing is stopped and nothing is ACKed; the box restarts itself when %s has %d MiB free", cause, dir, need>>20)
	if errors.Is(cause, outbox.ErrFull) {
		// The disk has room; the outbox file reached its size limit. A
		// restart prunes published receipts older than outbox.retention.
		reason = fmt.Sprintf("storage full: %v; processing is stopped and nothing is ACKed; the box restarts itself after %s and prunes its outbox", cause, minWait)
	}
	a.notReady.Store(reason)
	a.metrics.storageFull.Set(1)
	a.metrics.jetstreamEnabled.Set(0)
	a.log.Error("STORAGE FULL: processing stopped, nothing is ACKed until the box has disk space again",
		"data_dir", dir, "free_bytes", free, "resume_at_free_bytes", need, "cause", cause, "statfs_err", serr)
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
		free, total, serr = diskSpace(dir)
		need = resumeFreeBytes(total)
		a.metrics.storageFree.Set(float64(free))
		if serr == nil && free >= need && time.Since(start) >= minWait {
			a.log.Info("disk space available again: restarting the box", "data_dir", dir, "free_bytes", free,
				"stopped_for", time.Since(start).Round(time.Second).String())
			a.notReady.Store("restarting after storage full")
			return nil
		}
		if time.Since(lastLog) >= 30*time.Second {
			lastLog = time.Now()
			a.log.Warn("storage full: still waiting for disk space", "data_dir", dir, "free_bytes", free,
				"resume_at_free_bytes", need, "statfs_err", serr)
		}
	}
}
