//go:build !unix

package outbox

import (
	"os"
	"time"
)

// On non-Unix systems Open relies on bbolt's own lock, taken after the
// file has been validated.
func lockFile(*os.File, time.Duration) error { return nil }

func unlockFile(*os.File) {}
