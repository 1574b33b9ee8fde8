//go:build unix

package box

import "syscall"

// noSpaceErrs are the errors isStorageFull must take for a full disk.
var noSpaceErrs = []error{syscall.ENOSPC, syscall.EDQUOT}
