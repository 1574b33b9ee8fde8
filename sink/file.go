package sink

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leafline/leafline/internal/dirsync"
	"github.com/leafline/leafline/internal/failpoint"
)

// FileSink writes one file per event under Dir. Each file is written to a
// temporary name, fsynced, renamed into place, and the directory fsynced, so
// a file that exists is complete: an existing file means "already done".
type FileSink struct {
	Dir string
}

// NewFileSink creates dir if needed.
func NewFileSink(dir string) (*FileSink, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("file sink: %w", err)
	}
	return &FileSink{Dir: dir}, nil
}

// FileName maps an event_id to a file name that is safe for any id.
func FileName(eventID string) string { return encodeID(eventID) + ".json" }

// Write writes every event not already present, then fsyncs the directory
// once for the whole batch.
func (s *FileSink) Write(ctx context.Context, evs []Event) []error {
	errs := make([]error, len(evs))
	wrote := false
	for i, ev := range evs {
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		final := filepath.Join(s.Dir, FileName(ev.ID))
		if _, err := os.Stat(final); err == nil {
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			errs[i] = err
			continue
		}
		errs[i] = writeFileSync(final, ev)
		wrote = wrote || errs[i] == nil
	}
	if wrote && !failpoint.Enabled(failpoint.SinkFileSkipDirSync) {
		if err := dirsync.Sync(s.Dir); err != nil {
			for i := range errs {
				if errs[i] == nil {
					errs[i] = err
				}
			}
		}
	}
	return errs
}

func writeFileSync(final string, ev Event) error {
	body, err := json.Marshal(struct {
		EventID string `json:"event_id"`
		Subject string `json:"subject"`
		Data    []byte `json:"data"`
	}{ev.ID, ev.Subject, ev.Data})
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(final), ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// encodeID maps any event_id to a portable file name: "b-" + base64url for
// short ids, "h-" + sha256 hex for ids whose encoding would be too long for
// a file name. Both are injective for practical purposes and never contain
// a path separator.
func encodeID(id string) string {
	enc := base64.RawURLEncoding.EncodeToString([]byte(id))
	if len(enc) <= 200 {
		return "b-" + enc
	}
	sum := sha256.Sum256([]byte(id))
	return "h-" + hex.EncodeToString(sum[:])
}
