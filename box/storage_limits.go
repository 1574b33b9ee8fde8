package box

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
)

// nats-server reserves a stream's max_bytes when it creates the stream,
// and refuses one whose max_bytes does not fit in what is left of its
// store limit ("insufficient storage resources available"). The store
// limit is jetstream.max_store_bytes when it is set; otherwise 75% of the
// space free on the store's filesystem when the server starts, plus 75%
// of what its streams already hold. A box whose disk is too small for the
// limits of the streams it creates therefore cannot start.
//
// CheckStorage (leafline check) and a start that the server refuses so
// both say it with the figures: the free space found, the streams' limits
// and what they add up to, the server's limit, and the setting to lower.

// streamReserve is what one stream the box creates reserves of the store.
type streamReserve struct {
	name    string
	bytes   int64
	setting string // the config setting that sets bytes; "" when fixed
}

// settingMaxStreamBytes sets the limit of every stream of a site's plan.
const settingMaxStreamBytes = "jetstream.max_stream_bytes"

// storageReserves lists the streams with a byte limit that the box of cfg
// creates on its embedded server.
func storageReserves(cfg *topology.Config, site *topology.Site) []streamReserve {
	var rs []streamReserve
	for _, sc := range jsplan.SitePlan(cfg, site).Streams {
		if sc.MaxBytes > 0 {
			rs = append(rs, streamReserve{name: sc.Name, bytes: sc.MaxBytes, setting: settingMaxStreamBytes})
		}
	}
	if site.Role == topology.RoleHub {
		rs = append(rs, streamReserve{name: "KV_" + ReleasesBucket, bytes: releasesMaxBytes})
	}
	if site.Role == topology.RoleL1 {
		name := cfg.Completion.QuarantineStream
		if name == "" {
			name = completion.DefaultQuarantineStream
		}
		rs = append(rs, streamReserve{name: name, bytes: completion.DefaultQuarantineMaxBytes})
	}
	return rs
}

// storageFit holds the figures that decide whether the streams fit.
type storageFit struct {
	streams  []streamReserve
	dir      string // the filesystem of the store, as statted
	free     uint64 // bytes free there
	statErr  error  // why free is unknown
	stored   int64  // bytes the store holds already (CheckStorage)
	maxStore int64  // jetstream.max_store_bytes; 0 when not set
	limit    int64  // the server's store limit
	reserved int64  // bytes reserved by the streams that exist (at start); -1 when unknown
}

// need is what the streams reserve together.
func (f storageFit) need() int64 {
	var n int64
	for _, s := range f.streams {
		n += s.bytes
	}
	return n
}

// explain says what the streams reserve, what the server allows, and what
// to change.
func (f storageFit) explain() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the streams this box creates reserve %s up front (%s), but nats-server allows at most %s",
		byteSize(f.need()), f.streamList(), byteSize(f.limit))
	free := fmt.Sprintf("%s free on %s", byteSize(int64(f.free)), f.dir)
	if f.statErr != nil {
		free = fmt.Sprintf("the free space of %s unknown (%v)", f.dir, f.statErr)
	}
	if f.maxStore > 0 {
		fmt.Fprintf(&b, ": jetstream.max_store_bytes; %s", free)
	} else {
		fmt.Fprintf(&b, ": 75%% of the space free on its filesystem, jetstream.max_store_bytes being unset; %s", free)
		if f.stored > 0 {
			fmt.Fprintf(&b, ", and %s held by its streams", byteSize(f.stored))
		}
	}
	if f.reserved > 0 {
		fmt.Fprintf(&b, "; %s is reserved already by the streams that exist", byteSize(f.reserved))
	}
	b.WriteString("; ")
	b.WriteString(f.remedy())
	return b.String()
}

// streamList names each stream with its limit: "HA and RH:
// jetstream.max_stream_bytes = 1 GiB each".
func (f storageFit) streamList() string {
	var set []string
	var per int64
	var fixed []string
	for _, s := range f.streams {
		if s.setting == "" {
			fixed = append(fixed, fmt.Sprintf("%s: %s, fixed", s.name, byteSize(s.bytes)))
			continue
		}
		set = append(set, s.name)
		per = s.bytes
	}
	var parts []string
	switch len(set) {
	case 0:
	case 1:
		parts = append(parts, fmt.Sprintf("%s: %s = %s", set[0], settingMaxStreamBytes, byteSize(per)))
	default:
		parts = append(parts, fmt.Sprintf("%s and %s: %s = %s each",
			strings.Join(set[:len(set)-1], ", "), set[len(set)-1], settingMaxStreamBytes, byteSize(per)))
	}
	return strings.Join(append(parts, fixed...), "; ")
}

// remedy names the setting to lower, and the value that fits.
func (f storageFit) remedy() string {
	var fixed int64
	n := 0
	for _, s := range f.streams {
		if s.setting == "" {
			fixed += s.bytes
		} else {
			n++
		}
	}
	// Disk space that makes the server's limit hold what the streams need.
	disk := fmt.Sprintf("give the data dir a filesystem with at least %s free", byteSize(f.need()/3*4))
	if n == 0 || f.limit-fixed < 1<<20*int64(n) {
		if f.maxStore > 0 {
			return fmt.Sprintf("raise jetstream.max_store_bytes to at least %d (%s) if the disk has that free", f.need(), byteSize(f.need()))
		}
		return disk
	}
	per := (f.limit - fixed) / int64(n) &^ (1<<20 - 1)
	lower := fmt.Sprintf("lower %s to at most %d (%s)", settingMaxStreamBytes, per, byteSize(per))
	if f.maxStore > 0 {
		return lower + fmt.Sprintf(", or raise jetstream.max_store_bytes to at least %d (%s) if the disk has that free", f.need(), byteSize(f.need()))
	}
	return lower + ", or " + disk
}

// byteSize is n in the largest binary unit that keeps it whole, or with
// one decimal in GiB or MiB.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// storeDir is the directory the embedded server stores its streams under.
func storeDir(cfg *topology.Config) string { return filepath.Join(cfg.DataDir, "jetstream") }

// CheckStorage tells, before the box of cfg starts, whether the streams it
// creates fit in what nats-server will allow them, from the space free now
// on the filesystem of its data dir (or of its nearest existing parent)
// and what the store already holds. It returns a line with the figures,
// warnings, and an error wrapping ErrStorageLimits that names the setting
// to lower when they do not fit. A box on an existing cluster (cluster
// mode) creates its streams there: it is not checked.
//
// NOTE: the figures are those of now; the server takes its own at start,
// and what else writes to the filesystem in between changes them.
func CheckStorage(cfg *topology.Config) (summary string, warnings []string, err error) {
	if cfg.Cluster.Enabled() {
		return "storage: not checked: the streams live on the cluster", nil, nil
	}
	site, ok := cfg.Topology.Site(cfg.Site)
	if !ok {
		return "", nil, fmt.Errorf("site %q is not in the topology", cfg.Site)
	}
	f := storageFit{streams: storageReserves(cfg, site), maxStore: cfg.JetStream.MaxStoreBytes, reserved: -1}
	f.dir = existingParent(storeDir(cfg))
	f.free, _, f.statErr = diskSpace(f.dir)
	if f.statErr != nil {
		return "", nil, fmt.Errorf("storage: %w", f.statErr)
	}
	f.stored = storedBytes(storeDir(cfg))
	if f.maxStore > 0 {
		f.limit = f.maxStore
	} else {
		f.limit = int64(f.free/4*3) + f.stored/4*3
	}
	summary = fmt.Sprintf("storage: %s free on %s; the streams reserve %s (%s); nats-server allows %s",
		byteSize(int64(f.free)), f.dir, byteSize(f.need()), f.streamList(), byteSize(f.limit))
	if f.need() > f.limit {
		return summary, nil, fmt.Errorf("%w: %s", ErrStorageLimits, f.explain())
	}
	if f.maxStore > 0 && f.need() > int64(f.free)+f.stored {
		warnings = append(warnings, fmt.Sprintf(
			"jetstream.max_store_bytes (%s) lets the streams reserve %s, more than the %s free on %s: the disk fills before the streams reach their limits, and the box then stops as on a full disk",
			byteSize(f.maxStore), byteSize(f.need()), byteSize(int64(f.free)), f.dir))
	}
	return summary, warnings, nil
}

// existingParent is dir, or its nearest parent that exists.
func existingParent(dir string) string {
	d := filepath.Clean(dir)
	for {
		if _, err := os.Stat(d); err == nil {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			return d
		}
		d = parent
	}
}

// storedBytes is the size of the files under dir (0 when it does not
// exist).
func storedBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// jsStorageExceeded is the error code of nats-server's "insufficient
// storage resources available".
var jsStorageExceeded = jetstream.ErrorCode(server.ApiErrors[server.JSStorageResourcesExceededErr].ErrCode)

// storageLimitsError returns err, a failure to create the box's streams,
// wrapped with ErrStorageLimits and the figures when the server refused a
// stream for lack of storage; any other err unchanged.
func (a *App) storageLimitsError(ctx context.Context, err error) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jsStorageExceeded || a.srv == nil {
		return err
	}
	f := storageFit{streams: storageReserves(a.cfg, a.site), maxStore: a.cfg.JetStream.MaxStoreBytes, reserved: -1}
	f.dir = storeDir(a.cfg)
	f.free, _, f.statErr = diskSpace(f.dir)
	if jc := a.srv.JetStreamConfig(); jc != nil {
		f.limit = jc.MaxStore
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if info, ierr := a.js.AccountInfo(ictx); ierr == nil {
		f.reserved = int64(info.ReservedStore)
	}
	return fmt.Errorf("%w: %s: %w", ErrStorageLimits, f.explain(), err)
}
