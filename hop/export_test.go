package hop

// SetBeforeAck installs a hook that runs after a batch is stored and
// before it is ACKed; an error from it stops Run as a crash would.
func (r *Mover) SetBeforeAck(f func() error) { r.beforeAck = f }

// StoreBackoff is the wait after the n-th store refused in a row.
var StoreBackoff = storeBackoff
