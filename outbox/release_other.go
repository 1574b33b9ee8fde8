//go:build !linux

package outbox

// ReleaseMapped is a no-op on this platform (see the Linux version).
func (o *Outbox) ReleaseMapped() error { return o.usable() }
