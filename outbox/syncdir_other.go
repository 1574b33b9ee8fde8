//go:build !windows

package outbox

import "os"

// syncDir fsyncs dir, so that a file linked or renamed into it survives a
// crash.
func syncDir(dir string) error {
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
