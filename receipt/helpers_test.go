package receipt

import (
	"testing"
	"time"
)

// testReceipt returns a valid receipt for event id with a fixed processor.
func testReceipt(id string) Receipt {
	return New(id, "L1A", "edge-1", "edge-1", StatusProcessed, time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC))
}

func mustEncode(t testing.TB, r Receipt) []byte {
	t.Helper()
	b, err := r.Encode()
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return b
}
