package bench

import (
	"bytes"
	"encoding/json"
	"testing"
)

// wire's events are valid JSON of the size asked for, and differ.
func TestWireEvent(t *testing.T) {
	for _, size := range []int{256, 1024} {
		a, b := wireEvent(1, size), wireEvent(2, size)
		if len(a) != size || len(b) != size {
			t.Fatalf("size %d: events of %d and %d bytes", size, len(a), len(b))
		}
		var v map[string]any
		if err := json.Unmarshal(a, &v); err != nil {
			t.Fatalf("size %d: %v: %s", size, err, a)
		}
		if bytes.Equal(a, b) {
			t.Fatal("two events are the same")
		}
	}
}
