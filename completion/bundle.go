package completion

import (
	"fmt"

	"github.com/leafline/leafline/receipt"
)

// bundleSite returns the one site every receipt of rs names, or an error
// wrapping ErrSubjectMismatch.
func bundleSite(rs []receipt.Receipt) (string, error) {
	site := rs[0].Site
	for _, r := range rs[1:] {
		if r.Site != site {
			return "", fmt.Errorf("%w: a bundle holds receipts of sites %s and %s", ErrSubjectMismatch, site, r.Site)
		}
	}
	return site, nil
}
