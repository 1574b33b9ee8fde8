// Package jstest starts embedded JetStream servers for tests: one place
// for the options every package's tests use (loopback, a random port, a
// temporary store, cleanup with the test).
package jstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options shape Start. The zero value is a JetStream server on
// 127.0.0.1, a random port, with the default sync interval.
type Options struct {
	// SyncAlways fsyncs every write, as leafline boxes run.
	SyncAlways bool
	// StoreDir keeps the store in a directory of the caller's (to restart
	// a server on the same data); empty = t.TempDir().
	StoreDir string
	// Domain is the JetStream domain; empty = none.
	Domain string
}

// Start runs an embedded JetStream server and returns it; it is shut down
// with the test.
func Start(t testing.TB, o Options) *server.Server {
	t.Helper()
	dir := o.StoreDir
	if dir == "" {
		dir = t.TempDir()
	}
	return Run(t, &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
		SyncAlways: o.SyncAlways, JetStreamDomain: o.Domain,
	})
}

// Run starts an embedded server with the options given (a test that needs
// a cluster, leafnodes, TLS or a rendered config builds its own), waits
// until it takes connections and shuts it down with the test. NoSigs is
// always set: a test server never handles the process's signals.
func Run(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	opts.NoSigs = true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("jstest: new server: %v", err)
	}
	go s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("jstest: server not ready")
	}
	return s
}

// Connect returns a JetStream context on a new connection to s, closed
// with the test.
func Connect(t testing.TB, s *server.Server) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("jstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jstest: jetstream: %v", err)
	}
	return js
}

// Restart shuts s down and starts a server on the same options and store
// (a new port); the new one is shut down with the test.
func Restart(t testing.TB, s *server.Server, o Options) *server.Server {
	t.Helper()
	o.StoreDir = s.JetStreamConfig().StoreDir
	s.Shutdown()
	s.WaitForShutdown()
	return Start(t, o)
}

// StartJS is Start and Connect: a server and a JetStream context on it.
func StartJS(t testing.TB, o Options) (*server.Server, jetstream.JetStream) {
	t.Helper()
	s := Start(t, o)
	return s, Connect(t, s)
}

// Ctx returns a context that ends with the test, or after a minute.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// NewKV creates a file-stored KV bucket of history 1.
func NewKV(t testing.TB, js jetstream.JetStream, bucket string) jetstream.KeyValue {
	t.Helper()
	kv, err := js.CreateKeyValue(Ctx(t), jetstream.KeyValueConfig{Bucket: bucket, History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatalf("jstest: create kv %s: %v", bucket, err)
	}
	return kv
}

// Unconnected returns a JetStream context on a connection that was never
// opened: every call fails, which is enough for configuration tests.
func Unconnected(t testing.TB) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(&nats.Conn{})
	if err != nil {
		t.Fatalf("jstest: jetstream: %v", err)
	}
	return js
}

// PublishAll publishes msg(i) for i below n with async publishes, at most
// 1024 awaiting their PubAck, and waits for every PubAck.
func PublishAll(b testing.TB, js jetstream.JetStream, n int, msg func(i int) *nats.Msg) {
	b.Helper()
	for i := 0; i < n; i++ {
		if _, err := js.PublishMsgAsync(msg(i)); err != nil {
			b.Fatal(err)
		}
		if i%1024 == 0 {
			<-js.PublishAsyncComplete()
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publishes did not complete")
	}
}

// ConnectURL returns a JetStream context on a new connection to url
// (a server of another process), closed with the test.
func ConnectURL(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// ConsumerInfo returns the info of consumer name on stream, failing t when
// it cannot be read.
func ConsumerInfo(t testing.TB, js jetstream.JetStream, stream, name string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, name)
	if err != nil {
		t.Fatalf("consumer %s on %s: %v", name, stream, err)
	}
	return c.CachedInfo()
}
