//go:build linux

package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/internal/jsmsg"
	"github.com/leafline/leafline/topology"
)

// wireModes are the compressions wire measures, in order; the first two
// make the final line's figures.
var wireModes = []string{topology.CompressionOff, topology.CompressionS2Fast, topology.CompressionS2Best}

// wireRes is what wire measured of one compression mode on the edge link.
type wireRes struct {
	mode string
	// down and up are bytes on the wire (the link's fault proxy): hub to
	// edge per event, edge to hub per receipt.
	down, up float64
	// msgDown and msgUp are the same from the hub's leafnode connection
	// statistics (leafline_link_bytes_total): message bytes, before
	// compression.
	msgDown, msgUp float64
}

// wire is the phase wire: for each of wireModes, a system of l1, a hub and
// one edge whose links all use that compression; Wire events are
// published at L1 and the bytes that the hub-edge link carries in each
// direction, from the first publish until L1 has applied every receipt,
// are divided by the events (down) and by the receipts (up). Everything
// the link carries counts: the events, the receipts, and the ACKs,
// flow control and heartbeats of the transport in both directions.
func (r *run) wire(transport string) {
	r.m.Phase("wire bytes on the link [" + transport + "]")
	for _, mode := range wireModes {
		r.wires = append(r.wires, r.wireOnce(transport, mode))
	}
}

func (r *run) wireOnce(transport, mode string) wireRes {
	n := r.o.Wire
	env := newBenchEnv(r.tb, r.TempDir(), 1, map[string]string{"edge1": "events.w.>"}, nil, transport)
	defer env.close()
	env.ls.Topology.Compression = mode
	for _, c := range env.ls.Configs {
		c.JetStream.SyncInterval = "always"
	}
	link := env.ls.Links["edge1"]
	link.CountBytes()
	env.startAll()
	env.waitUntil("links", time.Minute, func() bool { return env.connected("hub")() && env.connected("edge1")() })
	env.open("edge1")
	hub := env.ls.App("hub")
	msg := func(dir string) float64 {
		return benchMetric(hub, "leafline_link_bytes_total", map[string]string{"link": "edge1", "direction": dir})
	}
	up0, down0 := link.Bytes()
	mUp0, mDown0 := msg("in"), msg("out")
	base := env.applied()
	r.m.Track(mode, "events completed", int64(n), func() int64 { return int64(env.applied() - base) })
	ph := r.begin("wire_" + mode)
	if err := wirePublish(r.ctx, env.js["l1"], n, r.o.Size, r.id("w"+mode)); err != nil {
		r.Fatal(err)
	}
	env.waitUntil("wire receipts at L1", 5*time.Minute, func() bool { return env.applied() >= base+uint64(n) })
	up1, down1 := link.Bytes()
	res := wireRes{mode: mode,
		down: float64(down1-down0) / float64(n), up: float64(up1-up0) / float64(n),
		msgDown: (msg("out") - mDown0) / float64(n), msgUp: (msg("in") - mUp0) / float64(n)}
	r.rows = append(r.rows, ph.end("w_"+mode, fmt.Sprintf("edge link bytes, compression %s [%s]", mode, transport), n, nil,
		fmt.Sprintf("wire B/event down %.0f up %.0f; message B down %.0f up %.0f", res.down, res.up, res.msgDown, res.msgUp)))
	return res
}

// wireEvent is event i of wire: a JSON reading of size bytes (at least
// its fields' ~170), different for every i, as a field device sends them:
// a few numbers and names, then a hex trace that pads it to size. The
// bench's other phases send one byte repeated, which compresses far
// better than real events do.
func wireEvent(i, size int) []byte {
	z := benchMix(uint64(i))
	head := fmt.Sprintf(`{"type":"reading","device":"pump-%03d","seq":%d,"at":"2026-12-06T04:%02d:%02d.%03dZ","temp_c":%.2f,"pressure_kpa":%.1f,"flow_lpm":%.2f,"status":"ok","trace":"`,
		z%500, i, (z>>9)%60, (z>>15)%60, (z>>21)%1000, 10+float64((z>>31)%3000)/100, 90+float64((z>>43)%400)/10, float64((z>>51)%9000)/100)
	b := []byte(head)
	for j := uint64(0); len(b) < size-2; j++ {
		b = append(b, "0123456789abcdef"[benchMix(z+j)%16])
	}
	return append(b, '"', '}')
}

// wirePublish publishes n wire events at L1, with at most 2048 PubAcks
// outstanding.
func wirePublish(ctx context.Context, js jetstream.JetStream, n, size int, id func(int) string) error {
	return jsmsg.PublishWindowed(ctx, js, n, 2048, func(i int) *nats.Msg {
		m := nats.NewMsg(fmt.Sprintf("events.w.%d", i%8))
		m.Header.Set(jetstream.MsgIDHeader, id(i))
		m.Data = wireEvent(i, size)
		return m
	})
}

// wireFigures prints the bytes per event of each mode and returns the
// final line's: off, and s2 (s2_fast).
func (r *run) wireFigures() []Figure {
	if len(r.wires) == 0 {
		return nil
	}
	fmt.Fprintf(r.out, "edge link bytes per %d-byte JSON event, on the wire (messages before compression):\n", len(wireEvent(0, r.o.Size)))
	for _, w := range r.wires {
		fmt.Fprintf(r.out, "  %-9s down %6.1f (%6.1f) per event, up %6.1f (%6.1f) per receipt\n", w.mode, w.down, w.msgDown, w.up, w.msgUp)
	}
	var off, s2 wireRes
	for _, w := range r.wires {
		switch w.mode {
		case topology.CompressionOff:
			off = w
		case topology.CompressionS2Fast:
			s2 = w
		}
	}
	return []Figure{
		{"wire_bytes_down_per_event", off.down}, {"wire_bytes_down_per_event_s2", s2.down},
		{"wire_bytes_up_per_receipt", off.up}, {"wire_bytes_up_per_receipt_s2", s2.up},
	}
}

// benchMetric is the value of box's counter or gauge name with labels, 0
// when it has none.
func benchMetric(box *box.App, name string, labels map[string]string) float64 {
	v, _ := box.Metrics().Value(name, labels)
	return v
}
