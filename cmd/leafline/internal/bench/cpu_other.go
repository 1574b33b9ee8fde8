//go:build !unix

package bench

import "time"

// cpuTime is not measured here: the CPU column reads zero.
func cpuTime() time.Duration { return 0 }
