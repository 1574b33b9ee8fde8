package box

import "golang.org/x/sys/windows"

// noSpaceErrs are the errors isStorageFull must take for a full disk.
var noSpaceErrs = []error{windows.ERROR_DISK_FULL, windows.ERROR_HANDLE_DISK_FULL, windows.ERROR_DISK_QUOTA_EXCEEDED}
