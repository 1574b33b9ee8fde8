package runner

import (
	"math/rand/v2"
	"time"

	"github.com/leafline/leafline/topology"
)

// Backoff returns the NAK delay for a message delivered n times
// (n >= 1), from the retry settings. The arithmetic saturates at
// BackoffMaxMS instead of overflowing, whatever n is.
func Backoff(c topology.RetryConfig) func(delivered uint64) time.Duration {
	base := time.Duration(c.BackoffMS) * time.Millisecond
	maxd := time.Duration(c.BackoffMaxMS) * time.Millisecond
	return func(n uint64) time.Duration {
		if n == 0 {
			n = 1
		}
		d := rawBackoff(c.Mode, base, maxd, n)
		switch c.Jitter {
		case "full":
			d = time.Duration(rand.Int64N(int64(d) + 1))
		case "equal":
			half := d / 2
			d = half + time.Duration(rand.Int64N(int64(d-half)+1))
		}
		return d
	}
}

func rawBackoff(mode string, base, maxd time.Duration, n uint64) time.Duration {
	if base <= 0 {
		return 0
	}
	switch mode {
	case "fixed":
		return min(base, maxd)
	case "linear":
		if n > uint64(maxd/base) {
			return maxd
		}
		return min(base*time.Duration(n), maxd)
	default: // exponential: base * 2^(n-1)
		d := base
		for i := uint64(1); i < n; i++ {
			if d >= maxd/2 {
				return maxd
			}
			d *= 2
		}
		return min(d, maxd)
	}
}
