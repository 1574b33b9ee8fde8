package box

// Option adjusts a box made by New.
type Option func(*options)

type options struct {
	// keepFree, when set, replaces stopFreeBytes (storage.go).
	keepFree func(total uint64) uint64
}

// WithKeepFree makes the box stop as on a full disk when a watched
// filesystem has less than keepFree(total) bytes free, in place of the
// default (1% of the filesystem, at least 4 MiB and at most 128 MiB); a
// keepFree that returns zero leaves the stop to failed writes alone.
func WithKeepFree(keepFree func(total uint64) uint64) Option {
	return func(o *options) { o.keepFree = keepFree }
}
