//go:build !unix && !windows

package box

import "os"

// On other systems the edge's outbox lock is the only one.
func lockFile(*os.File) error { return nil }
