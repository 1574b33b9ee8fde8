package box

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/internal/logx/logxtest"
)

// A slow consumer on one of the box's connections is a warning in the box
// log that names the connection and the subject, and a count by kind.
func TestNATSErrors_SlowConsumerLoggedAndCounted(t *testing.T) {
	var logs logxtest.Buffer
	a := &App{metrics: NewMetrics("edge1", "edge"), log: slog.New(slog.NewTextHandler(&logs, nil)).With("site", "edge1")}
	srv := jstest.Run(t, &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true})
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("leafline-edge1"), a.natsErrors())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ch := make(chan *nats.Msg, 1) // never read: the second message is dropped
	if _, err := nc.ChanSubscribe("work.slow", ch); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := nc.Publish("work.slow", []byte("secret payload")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	check.For(t, 5*time.Second, 20*time.Millisecond, func() error {
		if n := testutil.ToFloat64(a.metrics.natsErrors.WithLabelValues("slow_consumer")); n < 1 {
			return fmt.Errorf("slow consumers counted: %v", n)
		}
		// The handler counts first and logs next.
		if got := logs.Lines("edge1", "nats client error", "connection=leafline-edge1", "kind=slow_consumer", "subject=work.slow"); len(got) == 0 {
			return fmt.Errorf("no warning names the connection, the kind and the subject")
		}
		return nil
	})
	if got := logs.Lines("edge1", "secret payload"); len(got) > 0 {
		t.Errorf("the log holds a payload: %q", got)
	}
}
