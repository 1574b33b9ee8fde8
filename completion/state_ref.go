package completion

import "github.com/leafline/leafline/completion/record"

// stateRef boxes a State for an atomic.Pointer.
type stateRef struct{ record.State }
