package forgetfs

import (
	"errors"
	"math/rand/v2"
)

// ErrUnavailable is wrapped by Mount when this host cannot mount a FUSE
// filesystem at all: no /dev/fuse, not root and no fusermount, or a mount
// refused for lack of privilege. Tests skip on it:
//
//	fs, err := forgetfs.Mount(mnt, backing, forgetfs.Options{})
//	if errors.Is(err, forgetfs.ErrUnavailable) {
//		t.Skipf("no FUSE here: %v", err)
//	}
var ErrUnavailable = errors.New("forgetfs: FUSE mounts are unavailable")

// ErrCut is wrapped by every method called after PowerCut or Unmount:
// the filesystem is gone until it is mounted again.
var ErrCut = errors.New("forgetfs: power is cut")

// Options shape Mount. The zero value is a working filesystem.
type Options struct {
	// Name is the filesystem's type suffix in /proc/mounts
	// ("fuse.<Name>"); empty = "forgetfs".
	Name string
	// Debug logs every FUSE request and reply with the standard log
	// package; false = silent.
	Debug bool
	// JournaledNames makes every fsync, of a file or a directory, also
	// make durable every name change made before it, in every directory,
	// as ext4 and XFS do by committing all metadata in one journal. False
	// = POSIX to the letter: a name is durable only once its own directory
	// is synced. File data is durable only by a sync of its own file
	// either way.
	JournaledNames bool
}

// Cut shapes PowerCut. The zero value drops every unsynced change.
type Cut struct {
	// Torn, if set, keeps one random prefix of one file's unsynced pages:
	// among the files that have a durable name and unsynced pages, one is
	// picked, its unsynced pages are taken in offset order, and the first
	// k of them (1 ≤ k ≤ all) reach the backing directory, as a write
	// that the device had partly done when the power went. A page is
	// kept whole or not at all. Unsynced truncations of that file are not
	// applied; its durable size grows to cover the kept pages (no further
	// than its unsynced size).
	Torn bool
	// Rand picks the torn file and the prefix; nil = a generator seeded
	// from the operating system.
	Rand *rand.Rand
}

// CutReport says what a PowerCut dropped.
type CutReport struct {
	// Files is how many files had unsynced data, size or attributes.
	Files int
	// Pages is how many unsynced pages those files held.
	Pages int
	// Dirs is how many directories had entries changed since their last
	// sync (creations, renames, unlinks that were dropped).
	Dirs int
	// Torn is the path, relative to the backing directory, of the file
	// whose pages were partly kept (Cut.Torn); empty when none was.
	Torn string
	// TornPages of TornOf unsynced pages of Torn were kept.
	TornPages, TornOf int
}
