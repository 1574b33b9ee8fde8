package receipt

import (
	"errors"
	"fmt"
	"time"
)

// Headers of an event that bear on its expiry. The edge reads them; the
// publish package stamps PublishedAtHeader on every event it publishes.
const (
	// PublishedAtHeader is the event's publish time at the origin, RFC 3339
	// in UTC. An event's age is measured from it.
	PublishedAtHeader = "Leafline-Published-At"
	// ExpireAfterHeader is the publisher's own expiry for one event: a Go
	// duration ("90s", "2h") from its publish time. It overrides the
	// topology's events.expire_after rules for that event.
	ExpireAfterHeader = "Leafline-Expire-After"
	// ExpiresAtHeader is the publisher's absolute expiry for one event, RFC
	// 3339. It overrides ExpireAfterHeader and the topology's rules.
	ExpiresAtHeader = "Leafline-Expires-At"
)

// ErrBadExpiry means an event's expiry headers cannot be read: the
// processor dead-letters such an event (a permanent failure) rather than
// guess whether the publisher wanted it expired.
var ErrBadExpiry = errors.New("bad expiry header")

// maxExpireAfter bounds ExpireAfterHeader; a larger value is a typo.
const maxExpireAfter = 365 * 24 * time.Hour

// Deadline returns the time after which an event must not be processed,
// and false when it never expires. get reads one of the event's headers
// ("" when absent); rule is the topology's expire_after for the event's
// subject (zero: none); stored is the earliest time the processor itself
// knows the event existed (its own stream's timestamp).
//
// The age is measured from PublishedAtHeader when the event carries it,
// else from stored: stored is later than the origin publish, so an event
// without the header may be processed later than its expiry says, never
// expired early. The precedence is ExpiresAtHeader, then
// ExpireAfterHeader, then rule. A header that is present but unreadable
// is an error wrapping ErrBadExpiry naming the header.
func Deadline(get func(string) string, rule time.Duration, stored time.Time) (time.Time, bool, error) {
	if v := get(ExpiresAtHeader); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("%w: %s: not an RFC 3339 time", ErrBadExpiry, ExpiresAtHeader)
		}
		return t, true, nil
	}
	after := rule
	if v := get(ExpireAfterHeader); v != "" {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			return time.Time{}, false, fmt.Errorf("%w: %s: not a duration such as \"90s\" or \"2h\"", ErrBadExpiry, ExpireAfterHeader)
		case d <= 0 || d > maxExpireAfter:
			return time.Time{}, false, fmt.Errorf("%w: %s: %s is outside (0, 8760h]", ErrBadExpiry, ExpireAfterHeader, d)
		}
		after = d
	}
	if after <= 0 {
		return time.Time{}, false, nil
	}
	from := stored
	if v := get(PublishedAtHeader); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("%w: %s: not an RFC 3339 time", ErrBadExpiry, PublishedAtHeader)
		}
		from = t
	}
	return from.Add(after), true, nil
}
