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
	v, b, err := bytesOf(s, num, "a bandwidth", "64KB/s", "/s")
	if err != nil {
		return 0, err
	}
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

// bytesOf reads num, a number then a unit of bandwidthUnits, out of s,
// which is what (example) shows; unit is what follows the unit in s. It
// returns the number and the bytes it makes, rounded to a whole byte.
func bytesOf(s, num, what, example, unit string) (v, b float64, err error) {
	i := strings.IndexFunc(num, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(num)
	}
	if i == 0 {
		return 0, 0, fmt.Errorf("%q is not %s: it must start with a number, as in %q", s, what, example)
	}
	name, mult := num[i:], 0.0
	for _, u := range bandwidthUnits {
		if u.name == name {
			mult = u.mult
		}
	}
	if mult == 0 {
		if strings.HasSuffix(name, "b") || strings.HasSuffix(name, "bit") || strings.HasSuffix(name, "bps") {
			return 0, 0, fmt.Errorf("%q is in bits: leafline counts bytes, write B as in %q", s, example)
		}
		return 0, 0, fmt.Errorf("%q has unit %q: want one of B, kB, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024)%s", s, name, unit)
	}
	v, err = strconv.ParseFloat(num[:i], 64)
	if err != nil || math.IsInf(v, 0) {
		return 0, 0, fmt.Errorf("%q is not %s: %q is not a number", s, what, num[:i])
	}
	return v, math.Round(v * mult), nil
}

// MaxSize bounds a configured size: 1 PB is no box's disk.
const MaxSize = 1e15

// Size reads a size in bytes: a number, then one of the units B, kB, KB,
// MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024): "48MiB" is
// 50,331,648 bytes. A size of 0, below 1 byte, above 1 PB, without a
// unit or in bits is an error that says why.
func Size(s string) (int64, error) {
	_, b, err := bytesOf(s, s, "a size", "48MiB", "")
	switch {
	case err != nil:
		return 0, err
	case b < 1:
		return 0, fmt.Errorf("%q is less than 1 byte", s)
	case b > MaxSize:
		return 0, fmt.Errorf("%q is above 1PB", s)
	}
	return int64(b), nil
}
