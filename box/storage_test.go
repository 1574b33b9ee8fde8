package box

import (
	"errors"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/leafline/leafline/outbox"
)

func TestStorageFullClassification(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{errJetStreamDisabled, true},
		{fmt.Errorf("%w: outbox commit: outbox: x.db: %w: the file may not grow past 1073741824 bytes", errFatal, outbox.ErrFull), true},
		{fmt.Errorf("%w: outbox commit: %w", errFatal, io.ErrShortWrite), false},
		{errors.New("no space left on device"), false}, // only typed errors count
		{fmt.Errorf("%w: /data has 0 bytes free, below the 4194304 the box keeps free", errDiskFull), true},
	}
	// The platform's own "disk full" errors (storage_*_test.go).
	for _, err := range noSpaceErrs {
		cases = append(cases, struct {
			err  error
			want bool
		}{fmt.Errorf("%w: outbox commit: %w", errFatal, &os.PathError{Op: "write", Path: "outbox.db", Err: err}), true})
	}
	for _, c := range cases {
		if got := isStorageFull(c.err); got != c.want {
			t.Errorf("isStorageFull(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	for _, c := range []struct{ total, want uint64 }{
		{64 << 20, 8 << 20},
		{1 << 30, (1 << 30) / 50},
		{1 << 40, 256 << 20},
	} {
		if got := resumeFreeBytes(c.total); got != c.want {
			t.Errorf("resumeFreeBytes(%d) = %d, want %d", c.total, got, c.want)
		}
	}
	for _, c := range []struct{ total, want uint64 }{
		{64 << 20, 4 << 20},
		{1 << 30, (1 << 30) / 100},
		{1 << 40, 128 << 20},
	} {
		if got := stopFreeBytes(c.total); got != c.want {
			t.Errorf("stopFreeBytes(%d) = %d, want %d", c.total, got, c.want)
		}
		// A box that restarts must not stop again at once.
		if stopFreeBytes(c.total) >= resumeFreeBytes(c.total) {
			t.Errorf("stopFreeBytes(%d) = %d is not below resumeFreeBytes %d", c.total, stopFreeBytes(c.total), resumeFreeBytes(c.total))
		}
	}
}

// The embedded server's lines about a store write that failed for lack of
// space stop the box; its other errors do not.
func TestNoSpaceMessage(t *testing.T) {
	for msg, want := range map[string]bool{
		"JetStream failed to store a msg on stream '$G > HA': write /d/jetstream/$G/streams/HA/msgs/1.blk: no space left on device": true,
		"Filestore [HA] Critical write error: sync /d/jetstream/$G/streams/HA/msgs/3.blk: no space left on device":                  true,
		"Filestore [L2A] Critical write error: write /d/1.blk: disk quota exceeded":                                                 true,
		"Filestore [HA] Critical write error: write /d/1.blk: input/output error":                                                   false,
		"Leafnode connection closed: Stale Connection":                                                                              false,
	} {
		if got := noSpaceMessage(msg); got != want {
			t.Errorf("noSpaceMessage(%q) = %v, want %v", msg, got, want)
		}
	}
}

// errFatal stands for the runner's fatal error, which wraps what failed.
var errFatal = errors.New("fatal")
