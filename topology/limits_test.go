package topology

import (
	"testing"

	"github.com/leafline/leafline/receipt"
)

// The edge may accept only event_ids that a receipt can carry: otherwise
// it would process events whose receipts L1 refuses.
func TestEventIDLimitsAgree(t *testing.T) {
	cfg := &Config{}
	cfg.SetDefaults()
	if cfg.EventID.MaxLength != receipt.MaxEventIDLen {
		t.Fatalf("default event_id.max_length %d != receipt.MaxEventIDLen %d", cfg.EventID.MaxLength, receipt.MaxEventIDLen)
	}
	cfg.EventID.MaxLength = receipt.MaxEventIDLen + 1
	if err := cfg.Validate(); err == nil {
		t.Fatalf("event_id.max_length %d above the receipt limit was accepted", cfg.EventID.MaxLength)
	}
}
