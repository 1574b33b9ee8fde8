package outbox_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"go.etcd.io/bbolt"

	"github.com/leafline/leafline/outbox"
)

// printPublisher stands in for the edge's JetStream publisher, which sets
// Nats-Msg-Id to Record.Key and waits for every PubAck.
type printPublisher struct{}

func (printPublisher) Publish(_ context.Context, recs []outbox.Record) error {
	for _, r := range recs {
		fmt.Printf("publish %s to %s\n", r.Key, r.Subject)
	}
	return nil
}

// The edge's per-batch flow: commit the receipt together with the business
// record, publish, mark published, then ACK the source message.
func ExampleOutbox_Commit() {
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	o, err := outbox.Open(filepath.Join(dir, "outbox.db"), outbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer o.Close()
	if err := o.Check(); err != nil { // at startup
		log.Fatal(err)
	}

	receipt := outbox.Record{Key: "evt-42/store/done", Subject: "receipts.edge1", Data: []byte(`{"event_id":"evt-42"}`)}
	stored, err := o.Commit([]outbox.Record{receipt}, func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("store.events"))
		if err != nil {
			return err
		}
		return b.Put([]byte("evt-42"), []byte("business record"))
	})
	if err != nil {
		log.Fatal(err) // fatal: do not ACK, stop the process
	}
	if stored[0].State == outbox.StatePending {
		if err := (printPublisher{}).Publish(context.Background(), stored); err != nil {
			return // no ACK; the Relay republishes it
		}
		if err := o.MarkPublished([]string{stored[0].Key}); err != nil {
			log.Fatal(err)
		}
	}
	// ACK the source message here.

	// A redelivery of the same event finds the stored record.
	again, _ := o.Commit([]outbox.Record{receipt}, nil)
	fmt.Println(again[0].Seq, again[0].State)
	s, _ := o.Stats()
	fmt.Printf("pending %d, published %d\n", s.Pending, s.Published)
	// Output:
	// publish evt-42/store/done to receipts.edge1
	// 1 published
	// pending 0, published 1
}
