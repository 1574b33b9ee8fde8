package completion

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/internal/jstest"
)

// A batch of copies holding one the stream still has in its duplicate
// window is published one by one: the stream drops that copy and stores
// the others.
func TestPublishCopies_DuplicateInBatch(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "O", Subjects: []string{"o.>"}, Storage: jetstream.FileStorage,
		Duplicates: time.Minute, AllowAtomicPublish: true})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(id string) *nats.Msg {
		m := nats.NewMsg("o.x")
		m.Header.Set(jetstream.MsgIDHeader, id)
		return m
	}
	if _, err := js.PublishMsg(ctx, msg("a")); err != nil {
		t.Fatal(err)
	}
	svc := &Service{cfg: ServiceConfig{JS: js}}
	if err := svc.publishCopies(ctx, []*nats.Msg{msg("b"), msg("a"), msg("c")}); err != nil {
		t.Fatalf("publishCopies: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 3 {
		t.Fatalf("stream holds %d messages, want 3 (a once, b, c)", info.State.Msgs)
	}
}
