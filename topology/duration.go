package topology

import (
	"encoding/json"
	"fmt"
	"time"
)

// maxDuration bounds every configured duration: nothing in leafline waits
// for longer than a year, so a larger value is a typo, not a setting.
const maxDuration = 365 * 24 * time.Hour

// Duration is a time.Duration written in JSON as a Go duration string
// ("1s", "2m30s"). Numbers, negative values and values above a year are
// rejected.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats the duration like time.Duration ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"1s\" or \"2m\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"1s\" or \"2m30s\"", s)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	if v > maxDuration {
		return fmt.Errorf("duration %q is longer than a year", s)
	}
	*d = Duration(v)
	return nil
}
