// Package forgetfs is a filesystem that forgets what was not synced: a
// FUSE filesystem over a backing directory that keeps every change in
// memory until it is fsynced, and drops all that was not on PowerCut. It
// is for tests and the chaos driver: a SIGKILL keeps every write that
// reached the page cache, a power cut does not, and only a filesystem
// like this one shows what a program loses then.
//
// # Guarantees
//
// The backing directory always holds the durable state and nothing else.
// What becomes durable, and when, is this model (ext4 with data=ordered
// crashing, read strictly by POSIX; the way LazyFS keeps a page cache):
//
//   - A file's data, size, mode, owner and times are durable once the file
//     is fsynced or fdatasynced (the two are the same here; so is a write
//     through a descriptor opened with O_SYNC or O_DSYNC). Until then
//     writes and truncations live in memory, in 4 KiB pages.
//   - A directory's entries are durable once the directory is fsynced:
//     a name created, linked, renamed into or out of it, or removed, is
//     durable, or reverts, with the directory. A file created and fsynced
//     in a directory that is not fsynced is gone after a cut. A file
//     renamed between two directories can come back under both names
//     (hard links) or neither, if only one of them was synced.
//   - A new directory exists after a cut only if its parent was synced,
//     and holds what it held at its own last sync.
//   - With Options.JournaledNames, every fsync also makes durable every
//     name change made before it, in every directory: ext4's and XFS's
//     behaviour, where any fsync commits the one metadata journal. File
//     data still needs its own file's sync.
//   - Names are durable with the inode they name: a name made durable
//     before its file was ever fsynced shows that file's durable data
//     (empty for a new file).
//   - PowerCut drops every change that is not durable, at one instant:
//     each request is atomic with respect to it, and every request after
//     it fails with EIO. With Cut.Torn, a random prefix of one file's
//     unsynced pages survives too (see Cut).
//   - Mounting the same backing directory again shows exactly the durable
//     state. Unmount makes everything durable first, as a clean shutdown.
//
// # Caveats
//
//   - Only regular files and directories are modelled. Symlinks, device
//     nodes, fifos and sockets cannot be created, and those in the backing
//     directory are not shown. Extended attributes, locks beyond the
//     kernel's local ones, and O_TMPFILE are not supported.
//   - A directory cannot be renamed into another directory (EXDEV): a
//     durable directory has one name, and the model keeps each
//     directory's entries on its own. Renames within one directory work.
//   - Without JournaledNames, journaling filesystems are kinder than this
//     model: ext4 and XFS commit a new file's name when the file is
//     fsynced, and make every rename atomic. A loss found that needs a
//     missing directory fsync may not happen on them, but can on
//     filesystems that follow POSIX to the letter. With JournaledNames
//     the model is slightly kinder than ext4, whose fdatasync of a file
//     whose metadata did not change commits nothing.
//   - The backing directory itself is written without fsync: forgetfs
//     models a power cut, it does not survive one of its host.
//   - Unsynced data lives in the process's memory: a program that writes
//     and never syncs grows it without bound. A full backing filesystem
//     shows as ENOSPC from fsync, not from write.
//   - Do not map a file of the mount (mmap, as bbolt does) in the process
//     that serves it: a page fault on the mapping is not a system call, so
//     the Go runtime cannot stop the world while the faulting thread waits
//     for the server, and the server cannot run until the world restarts.
//     Run such programs in a process of their own, as a box does.
//   - Atimes are not updated by reads. Directory sizes read as 4096.
//   - The name .forgetfs-staging at the top of the backing directory is
//     reserved: it holds inodes that have no durable name, and is emptied
//     at every mount.
//   - Linux only. Mount needs /dev/fuse and either root (mount(2)) or a
//     fusermount binary; otherwise it fails with ErrUnavailable.
package forgetfs
