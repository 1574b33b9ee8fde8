package edge

// withKeepFree makes a box stop as on a full disk when a watched
// filesystem has less than keepFree(total) bytes free, in place of
// stopFreeBytes; zero leaves the stop to failed writes alone.
func withKeepFree(keepFree func(total uint64) uint64) Option {
	return func(o *options) { o.keepFree = keepFree }
}
