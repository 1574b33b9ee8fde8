package topology

// The topologies of this package's tests, for its external tests (those of
// the packages built on it, such as linkperm, whose files stand here).
var (
	SecureTopology  = secureTopology
	DirectTopology  = directTopology
	ExampleTopology = exampleTopology
	MustMarshal     = mustMarshal
)
