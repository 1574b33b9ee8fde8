package record

import "time"

// Unidentified describes an origin message the tracker could not identify.
type Unidentified struct {
	Stream      string    `json:"stream"`
	Seq         uint64    `json:"seq"`
	Subject     string    `json:"subject"`
	PublishedAt time.Time `json:"published_at"`
	Size        int       `json:"size"`
	// Reason says why it has no usable event_id; never the payload.
	Reason     string    `json:"reason"`
	RecordedAt time.Time `json:"recorded_at"`
}

// UnidentifiedPage is one page of Unidentified records, oldest first; Next
// is the cursor of the following page ("" at the end).
type UnidentifiedPage struct {
	Items []Unidentified `json:"items"`
	Next  string         `json:"next,omitempty"`
}
