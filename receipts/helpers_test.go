package receipts

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/internal/jstest"
)

// startJS runs an embedded JetStream server on a random port and returns a
// connected JetStream context. Everything is cleaned up with the test.
func startJS(t testing.TB) (*server.Server, jetstream.JetStream) {
	t.Helper()
	return startJSSync(t, false)
}

// startJSSync is startJS with the server's SyncAlways set to syncAlways.
func startJSSync(t testing.TB, syncAlways bool) (*server.Server, jetstream.JetStream) {
	t.Helper()
	s := jstest.Start(t, jstest.Options{SyncAlways: syncAlways})
	return s, jstest.Connect(t, s)
}

func connectJS(t testing.TB, s *server.Server) jetstream.JetStream {
	t.Helper()
	return jstest.Connect(t, s)
}

// newKV creates a History-1 bucket like Service.Setup does.
func newKV(t testing.TB, js jetstream.JetStream, bucket string) jetstream.KeyValue {
	t.Helper()
	kv, err := js.CreateKeyValue(testCtx(t), jetstream.KeyValueConfig{Bucket: bucket, History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatalf("create kv: %v", err)
	}
	return kv
}

// testCtx returns a context that ends with the test (or after 60s).
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

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

func eventID(i int) string { return fmt.Sprintf("evt-%05d", i) }

// connectJSNoServer returns a JetStream context on a connection that was
// never opened: every call fails, which is enough for config tests.
func connectJSNoServer(t testing.TB) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(&nats.Conn{})
	if err != nil {
		t.Fatal(err)
	}
	return js
}
