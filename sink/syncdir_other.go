//go:build !windows

package sink

import "os"

// syncDir fsyncs dir, so that the names created in it survive a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
