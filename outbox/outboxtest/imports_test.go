package outboxtest

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: a test double of the outbox's publisher.
func TestImports(t *testing.T) { importcheck.Only(t, "outbox") }
