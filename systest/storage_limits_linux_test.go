package systest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/internal/smalldisk"
)

// A hub on a disk smaller than its streams' limits does not start, and
// says why: check before the start, and the start itself, name the free
// space found, what the limits add up to and the setting to lower, with
// a value; a box set to that value starts.
func TestStorage_LimitsAboveDisk_CheckAndStartSayWhy(t *testing.T) {
	t.Run("disk", func(t *testing.T) {
		dir := smallDataDir(t, 64)
		cfg := limitsConfig(t, "hub", dir, 0, 0) // 1 GiB a stream
		_, _, err := box.CheckStorage(cfg)
		wantLimitsErr(t, "check", err,
			"64 MiB free on "+dir, "reserve 2.0 GiB", "(HA and RH: jetstream.max_stream_bytes = 1 GiB each; KV_leafline_releases: 1 MiB, fixed)",
			"allows at most 48 MiB", "jetstream.max_store_bytes being unset",
			"lower jetstream.max_stream_bytes to at most 24117248 (23 MiB)")

		err = runToReady(t, cfg)
		wantLimitsErr(t, "start", err,
			"create stream HA", "insufficient storage resources available",
			"free on "+filepath.Join(dir, "jetstream"), "reserve 2.0 GiB", "lower jetstream.max_stream_bytes to at most")

		// Follow the advice, as it stands after the failed start.
		_, _, err = box.CheckStorage(cfg)
		m := regexp.MustCompile(`max_stream_bytes to at most (\d+) `).FindStringSubmatch(fmt.Sprint(err))
		if m == nil {
			t.Fatalf("check after the failed start: no value to set in %v", err)
		}
		per, _ := strconv.ParseInt(m[1], 10, 64)
		cfg = limitsConfig(t, "hub", dir, 0, per)
		summary, warnings, err := box.CheckStorage(cfg)
		if err != nil || len(warnings) > 0 {
			t.Fatalf("check with max_stream_bytes %d: %v %v", per, err, warnings)
		}
		if !strings.Contains(summary, "HA and RH") {
			t.Errorf("check summary does not name the streams: %s", summary)
		}
		if err := runToReady(t, cfg); err != nil {
			t.Fatalf("start with max_stream_bytes %d: %v", per, err)
		}
	})
	t.Run("max_store_bytes", func(t *testing.T) {
		dir := smallDataDir(t, 64)
		cfg := limitsConfig(t, "hub", dir, 32<<20, 24<<20)
		_, _, err := box.CheckStorage(cfg)
		wantLimitsErr(t, "check", err,
			"reserve 49 MiB", "allows at most 32 MiB: jetstream.max_store_bytes",
			"lower jetstream.max_stream_bytes to at most 15728640 (15 MiB)",
			"or raise jetstream.max_store_bytes to at least 51380224 (49 MiB)")
		// HA fits; RH does not.
		err = runToReady(t, cfg)
		wantLimitsErr(t, "start", err,
			"create stream RH", "24 MiB is reserved already", "allows at most 32 MiB: jetstream.max_store_bytes",
			"lower jetstream.max_stream_bytes to at most 15728640 (15 MiB)")
	})
}

// smallDataDir is a data dir on a tmpfs of mib MiB of its own.
func smallDataDir(t *testing.T, mib int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	smalldisk.Mount(t, dir, mib)
	return dir
}

func wantLimitsErr(t *testing.T, what string, err error, wants ...string) {
	t.Helper()
	if !errors.Is(err, box.ErrStorageLimits) {
		t.Fatalf("%s: got %v, want box.ErrStorageLimits", what, err)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: the error does not say %q:\n%v", what, w, err)
		}
	}
}
