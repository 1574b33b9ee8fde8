// Package dirsync makes the names in a directory durable: a file's fsync
// makes its data durable, not the directory entry that names it, and a
// power cut can take a new, renamed or removed name whose directory was
// not fsynced since (POSIX leaves it to the directory's own fsync; ext4
// and XFS commit it with any fsync, other filesystems do not).
//
// Sync fsyncs one directory. Tree fsyncs every directory under a root, for
// files and directories created by code that syncs only their contents
// (nats-server fsyncs a new stream's files and its own directory, not the
// parents that name it).
//
// On Windows both do nothing: NTFS journals its metadata, and a directory
// handle cannot be flushed there.
package dirsync
