// Package jstest starts embedded JetStream servers for tests: one place
// for the options every package's tests use (loopback, a random port, a
// temporary store, cleanup with the test).
package jstest

import (
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
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
		SyncAlways: o.SyncAlways, JetStreamDomain: o.Domain,
	})
	if err != nil {
		t.Fatalf("jstest: new server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("jstest: server not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
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
