package box

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/leafline/leafline/internal/dirsync"
	"github.com/leafline/leafline/topology"
)

// A backup is a copy of a stopped box's data dir, in one gzipped tar
// archive: a manifest (BackupManifest) first, then every file and
// directory of the data dir but its lock. It holds everything the box
// keeps (its streams and consumers, and the outbox of an edge, or the
// completion state of L1), as of the moment the box stopped, so a box
// restored from it starts where the copy was taken:
//
//   - its links check which incarnation of each stream they follow
//     (package hop): the other boxes take what the restored box stores
//     from then on, and it takes from them what it holds no more;
//   - what it had stored after the copy is gone with it: an edge
//     restored from an older copy gets again what its hub still holds
//     (absorbed by event_id), while the events it had processed and
//     reported since stay complete at L1, and what its sink wrote of them
//     into the data dir (a store sink's records, a file sink's files
//     there) is gone; events published at an L1 after the copy are lost
//     to it, and L1 keeps taking every receipt and every event published
//     after the restore.
//
// Backup takes the data dir's lock, so it refuses a data dir whose box is
// running: a copy of a running box's files is not consistent.

// BackupManifest describes a backup.
type BackupManifest struct {
	Site    string    `json:"site"`
	Role    string    `json:"role"`
	Domain  string    `json:"domain"`
	DataDir string    `json:"data_dir"`
	Created time.Time `json:"created"`
	Files   int       `json:"files"`
	Bytes   int64     `json:"bytes"`
}

// backupManifestName is the manifest's name in the archive.
const backupManifestName = "leafline-backup.json"

// Backup writes a backup of the stopped box of cfg to w and returns its
// manifest.
func Backup(cfg *topology.Config, w io.Writer) (BackupManifest, error) {
	site, ok := cfg.Topology.Site(cfg.Site)
	if !ok {
		return BackupManifest{}, fmt.Errorf("backup: site %q is not in the topology", cfg.Site)
	}
	dir := cfg.DataDir
	if _, err := os.Stat(dir); err != nil {
		return BackupManifest{}, fmt.Errorf("backup: data_dir: %w", err)
	}
	release, err := lockDataDir(dir)
	if err != nil {
		return BackupManifest{}, fmt.Errorf("backup: stop the box first: %w", err)
	}
	defer release()
	m := BackupManifest{Site: site.Name, Role: string(site.Role), Domain: site.Domain, DataDir: dir, Created: time.Now().UTC()}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() != dataDirLockName {
			m.Files++
			if info, err := d.Info(); err == nil {
				m.Bytes += info.Size()
			}
		}
		return err
	})
	if err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	head, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	if err := tw.WriteHeader(&tar.Header{Name: backupManifestName, Mode: 0o600, Size: int64(len(head)), ModTime: m.Created}); err != nil {
		return m, err
	}
	if _, err := tw.Write(head); err != nil {
		return m, err
	}
	if err := tw.AddFS(skipLock{os.DirFS(dir)}); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	if err := tw.Close(); err != nil {
		return m, err
	}
	return m, gz.Close()
}

// skipLock is a data dir without its lock file.
type skipLock struct{ fs.FS }

func (s skipLock) ReadDir(name string) ([]fs.DirEntry, error) {
	es, err := fs.ReadDir(s.FS, name)
	out := es[:0]
	for _, e := range es {
		if !(name == "." && e.Name() == dataDirLockName) {
			out = append(out, e)
		}
	}
	return out, err
}

// Restore writes the backup read from r into the data dir of cfg, which
// must be empty or absent (the box stopped: Restore takes its lock), and
// returns the backup's manifest. A backup of another site is refused.
// Every file and directory is synced before Restore returns.
func Restore(cfg *topology.Config, r io.Reader) (BackupManifest, error) {
	dir := cfg.DataDir
	if es, err := os.ReadDir(dir); err == nil && len(es) > 0 {
		return BackupManifest{}, fmt.Errorf("restore: data_dir %s is not empty: move it aside first (a box restores into an empty data dir only)", dir)
	}
	release, err := lockDataDir(dir)
	if err != nil {
		return BackupManifest{}, fmt.Errorf("restore: %w", err)
	}
	defer release()
	gz, err := gzip.NewReader(r)
	if err != nil {
		return BackupManifest{}, fmt.Errorf("restore: not a leafline backup: %w", err)
	}
	tr := tar.NewReader(gz)
	var m BackupManifest
	for first := true; ; first = false {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, fmt.Errorf("restore: %w", err)
		}
		if first {
			if m, err = readManifest(h, tr, cfg); err != nil {
				return m, err
			}
			continue
		}
		if err := restoreEntry(dir, h, tr); err != nil {
			return m, fmt.Errorf("restore: %s: %w", h.Name, err)
		}
	}
	if m.Site == "" {
		return m, errors.New("restore: the archive is empty: not a leafline backup")
	}
	return m, dirsync.Tree(dir)
}

// readManifest reads the manifest, the archive's first entry, and checks
// that the backup is of cfg's site.
func readManifest(h *tar.Header, r io.Reader, cfg *topology.Config) (BackupManifest, error) {
	var m BackupManifest
	if h.Name != backupManifestName {
		return m, fmt.Errorf("restore: not a leafline backup: its first entry is %q, not %s", h.Name, backupManifestName)
	}
	if err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&m); err != nil {
		return m, fmt.Errorf("restore: manifest: %w", err)
	}
	if m.Site != cfg.Site {
		return m, fmt.Errorf("restore: the backup is of site %q, this config's site is %q", m.Site, cfg.Site)
	}
	return m, nil
}

// restoreEntry writes one entry of the archive under dir: a directory or
// a regular file, at a path inside dir.
func restoreEntry(dir string, h *tar.Header, r io.Reader) error {
	name := path.Clean(h.Name)
	if name == "." || path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
		return errors.New("a path outside the data dir")
	}
	p := filepath.Join(dir, filepath.FromSlash(name))
	switch h.Typeflag {
	case tar.TypeDir:
		return os.MkdirAll(p, 0o755)
	case tar.TypeReg:
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fs.FileMode(h.Mode)&0o777)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	return fmt.Errorf("entry of type %q: a backup holds only files and directories", string(h.Typeflag))
}
