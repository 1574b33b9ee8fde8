package completion

import (
	"context"
	"time"

	"github.com/leafline/leafline/completion/record"
)

// Audits finds the audit record of an event whose origin message the
// cleanup deleted (cleanup.Cleaner implements it).
type Audits interface {
	Cleaned(ctx context.Context, c *record.Completion) (*record.AuditRef, error)
}

// AttachCleaner makes Get show, as Completion.Cleaned, the audit record of
// an event whose origin message the cleanup deleted.
func (s *Service) AttachCleaner(a Audits) { s.cleaner.Store(&audits{a}) }

// audits boxes an Audits for an atomic.Pointer.
type audits struct{ Audits }

// RedrivenAt reports when this Service last redrove eventID (for
// CleanupConfig.Redriven).
func (s *Service) RedrivenAt(eventID string) (time.Time, bool) {
	s.redrive.mu.Lock()
	defer s.redrive.mu.Unlock()
	t, ok := s.redrive.redriven[eventID]
	return t, ok
}
