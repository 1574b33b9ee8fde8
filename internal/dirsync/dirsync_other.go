//go:build !windows

package dirsync

import (
	"io/fs"
	"os"
	"path/filepath"
)

// Sync fsyncs dir, so that the names linked, renamed or removed in it
// survive a power cut.
func Sync(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Tree fsyncs every directory under root, root included, deepest first,
// and then root's parent: once it returns, every name under root that
// existed when it started is durable. A directory removed while it walks
// is skipped.
func Tree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil && path != root && os.IsNotExist(err):
			return nil
		case err != nil:
			return err
		case d.IsDir():
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	dirs = append(dirs, filepath.Dir(root))
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := Sync(dirs[i]); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}
