//go:build !unix && !windows

package outbox

import (
	"os"
	"time"
)

// On other systems Open relies on bbolt's own lock, taken after the file
// has been validated.
func lockFile(*os.File, time.Duration) error { return nil }

func unlockFile(*os.File) {}
