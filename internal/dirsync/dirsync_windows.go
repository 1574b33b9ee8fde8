package dirsync

// Sync does nothing on Windows: NTFS journals its metadata, so a name is
// durable without a flush of its directory, and there is no such flush to
// call (os.File.Sync of a directory handle fails with "Access is denied").
func Sync(string) error { return nil }

// Tree does nothing on Windows, as Sync.
func Tree(string) error { return nil }
