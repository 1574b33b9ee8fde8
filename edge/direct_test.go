package edge

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// A request on a delivery's reply subject (a confirmed +TERM) must go out
// on a direct consumer's own connection: only its inbox crosses the links.
func TestSinkConn(t *testing.T) {
	box, own := &nats.Conn{}, &nats.Conn{}
	if nc := sinkConn(&directConsumer{nc: own}, box); nc != own {
		t.Fatal("a direct consumer's messages are answered on the box's connection")
	}
	if nc := sinkConn(nil, box); nc != box {
		t.Fatal("a sourced edge's messages are not answered on the box's connection")
	}
}
