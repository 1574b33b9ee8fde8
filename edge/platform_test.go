package edge

import (
	"testing"

	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/topology"
)

// TestOutboxLimit32: the 32-bit lint (topology) warns about the bound the
// outbox sets (outbox.MaxSize32); neither package imports the other.
func TestOutboxLimit32(t *testing.T) {
	if outbox.MaxSize32 != topology.OutboxLimit32 {
		t.Fatalf("outbox.MaxSize32 = %d, topology.OutboxLimit32 = %d", outbox.MaxSize32, topology.OutboxLimit32)
	}
}
