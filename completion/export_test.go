package completion

// What the external tests of this package see of its internals.
var (
	LaneHash = laneHash
	Backoff  = backoff
)

// RefusalCounters is the number of refusal reasons the Service counts.
const RefusalCounters = len(refusals{})

// Cfg returns the Service's configuration, with its defaults filled.
func (s *Service) Cfg() ServiceConfig { return s.cfg }
