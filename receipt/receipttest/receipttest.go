// Package receipttest makes receipts for tests.
package receipttest

import (
	"fmt"
	"testing"
	"time"

	"github.com/leafline/leafline/receipt"
)

// Receipt returns a valid receipt "processed" by edge-1 for event id.
func Receipt(id string) receipt.Receipt {
	return receipt.New(id, "L1A", "edge-1", "edge-1", receipt.StatusProcessed, time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC))
}

// Encode encodes r, or fails t.
func Encode(t testing.TB, r receipt.Receipt) []byte {
	t.Helper()
	b, err := r.Encode()
	if err != nil {
		t.Fatalf("receipttest: encode: %v", err)
	}
	return b
}

// EventID names the i-th event of a test.
func EventID(i int) string { return fmt.Sprintf("evt-%05d", i) }
