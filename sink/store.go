package sink

import (
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/bbolt"
)

// StoreSink stores each event in the box's bbolt file, in bucket "events",
// keyed by event_id, in the same transaction as its receipt.
type StoreSink struct{}

var storeBucket = []byte("events")

type storedEvent struct {
	Subject  string    `json:"subject"`
	Data     []byte    `json:"data"`
	StoredAt time.Time `json:"stored_at"`
}

// WriteTx stores the events not already stored.
func (StoreSink) WriteTx(tx *bbolt.Tx, evs []Event) error {
	b, err := tx.CreateBucketIfNotExists(storeBucket)
	if err != nil {
		return fmt.Errorf("store sink: %w", err)
	}
	now := time.Now().UTC()
	for _, ev := range evs {
		key := []byte(ev.ID)
		if b.Get(key) != nil {
			continue // already stored: a redelivery
		}
		v, err := json.Marshal(storedEvent{Subject: ev.Subject, Data: ev.Data, StoredAt: now})
		if err != nil {
			return fmt.Errorf("store sink: %w", err)
		}
		if err := b.Put(key, v); err != nil {
			return fmt.Errorf("store sink: %w", err)
		}
	}
	return nil
}

// CountStored returns how many events the store sink holds in db.
func CountStored(db *bbolt.DB) (int, error) {
	n := 0
	err := db.View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket(storeBucket); b != nil {
			n = b.Stats().KeyN
		}
		return nil
	})
	return n, err
}
