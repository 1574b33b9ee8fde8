package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/internal/jstest"
)

// stockServer runs a plain nats-server with JetStream in domain, as an
// operator would for the hub.
func stockServer(t *testing.T, domain string) *server.Server {
	t.Helper()
	return jstest.Start(t, jstest.Options{Domain: domain})
}

// editStream changes a live stream's config as an operator would by hand,
// and returns a client of the server and the stream.
func editStream(t *testing.T, url, name string, edit func(*jetstream.StreamConfig)) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	c := s.CachedInfo().Config
	edit(&c)
	if _, err := js.UpdateStream(ctx, c); err != nil {
		t.Fatal(err)
	}
	return js, s
}

func runProvision(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := cmdProvision(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestProvision_StockServer(t *testing.T) {
	_, hubCfg, _ := outboxFixture(t)
	srv := stockServer(t, "hub")
	url := srv.ClientURL()

	code, out, _ := runProvision("--config", hubCfg, "--server", url, "--lint-only")
	if code != exitFailure || !strings.Contains(out, "stream HA: missing") || !strings.Contains(out, "stream RH: missing") {
		t.Fatalf("lint of an empty server: code %d\n%s", code, out)
	}
	for i := range 2 { // the second run is a restart: it changes nothing
		code, out, errs := runProvision("--config", hubCfg, "--server", url)
		if code != exitOK || strings.Contains(out, "warning") {
			t.Fatalf("provision #%d: code %d\n%s%s", i+1, code, out, errs)
		}
	}
	if code, out, _ := runProvision("--config", hubCfg, "--server", url, "--lint-only"); code != exitOK {
		t.Fatalf("lint after provision: code %d\n%s", code, out)
	}

	// An operator switches the receipts stream to DiscardOld by hand: the
	// lint says why that loses receipts, and provision refuses to touch it.
	editStream(t, url, "RH", func(c *jetstream.StreamConfig) { c.Discard = jetstream.DiscardOld })
	if code, out, _ := runProvision("--config", hubCfg, "--server", url, "--lint-only"); code != exitFailure || !strings.Contains(out, "stream RH") {
		t.Fatalf("lint of a DiscardOld receipts stream: code %d\n%s", code, out)
	}
	if code, _, errs := runProvision("--config", hubCfg, "--server", url); code != exitFailure || !strings.Contains(errs, "discard") {
		t.Fatalf("provision over a DiscardOld receipts stream: code %d\n%s", code, errs)
	}

	if code, _, errs := runProvision("--config", hubCfg, "--server", "nats://127.0.0.1:1"); code != exitFailure || !strings.Contains(errs, "connect") {
		t.Fatalf("unreachable server: code %d %s", code, errs)
	}
	if code, _, errs := runProvision("--server", url); code != exitUsage || !strings.Contains(errs, "--config") {
		t.Fatalf("no config: code %d %s", code, errs)
	}
}
