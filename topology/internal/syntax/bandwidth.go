package syntax

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// BandwidthOff names no cap.
const BandwidthOff = "off"

// bandwidthUnits are the units a bandwidth may be written in, each "/s":
// B, and kB or KB for 1000 bytes, MB and GB for powers of 1000; KiB, MiB
// and GiB for powers of 1024. A lower-case b is a bit, which leafline does
// not count in, so kb/s, Mbit/s and bps are refused rather than guessed.
var bandwidthUnits = []struct {
	name string
	mult float64
}{
	{"B", 1}, {"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
}

// MaxBandwidth bounds a configured cap: 1 TB/s is no link's bandwidth,
// so a larger value is a typo.
const MaxBandwidth = 1e12

// Bandwidth reads a per-link bandwidth cap (Site.Bandwidth): a
// number, then one of the units B, kB, KB, MB, GB (powers of 1000) or
// KiB, MiB, GiB (powers of 1024), then "/s": "64KB/s" is 64,000 bytes a
// second, "64KiB/s" 65,536, "1.5MB/s" 1,500,000. It returns the cap in
// bytes a second, rounded to a whole byte. BandwidthOff and a zero rate ("0B/s")
// mean no cap and return 0. A rate below 1 byte a second, above 1 TB/s,
// negative, without a unit or in bits is an error that says why.
func Bandwidth(s string) (int64, error) {
	if s == BandwidthOff {
		return 0, nil
	}
	num, ok := strings.CutSuffix(s, "/s")
	if !ok {
		return 0, fmt.Errorf("%q is not a bandwidth: write a rate in bytes a second such as \"64KB/s\" or \"1MiB/s\", or \"off\"", s)
	}
	i := strings.IndexFunc(num, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(num)
	}
	if i == 0 {
		return 0, fmt.Errorf("%q is not a bandwidth: it must start with a number, as in \"64KB/s\"", s)
	}
	unit, mult := num[i:], 0.0
	for _, u := range bandwidthUnits {
		if u.name == unit {
			mult = u.mult
		}
	}
	if mult == 0 {
		if strings.HasSuffix(unit, "b") || strings.HasSuffix(unit, "bit") || strings.HasSuffix(unit, "bps") {
			return 0, fmt.Errorf("%q is in bits: leafline caps bytes, write B as in \"8KB/s\" for 64 kbit/s", s)
		}
		return 0, fmt.Errorf("%q has unit %q: want one of B, kB, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024), then /s", s, unit)
	}
	v, err := strconv.ParseFloat(num[:i], 64)
	if err != nil || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a bandwidth: %q is not a number", s, num[:i])
	}
	b := math.Round(v * mult)
	switch {
	case v == 0:
		return 0, nil
	case b < 1:
		return 0, fmt.Errorf("%q is less than 1 byte a second: use \"off\" for no cap", s)
	case b > MaxBandwidth:
		return 0, fmt.Errorf("%q is above 1TB/s, which no link carries", s)
	}
	return int64(b), nil
}
