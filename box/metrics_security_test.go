package box

import "testing"

func TestLinkViolation_Classify(t *testing.T) {
	for _, tt := range []struct {
		msg, kind, conn string
	}{
		{`127.0.0.1:5 - lid:3 - Publish Violation on "leafline.src.edge2.RE.hub" - Check other side configuration`, ViolationPublish, "leafnode"},
		{`127.0.0.1:5 - lid:3 - Subscription Violation on "x" - Check other side configuration`, ViolationSubscribe, "leafnode"},
		{`127.0.0.1:5 - lid:3 - authentication error - User "UABC"`, ViolationAuth, "leafnode"},
		{`127.0.0.1:5 - lid:3 - TLS leafnode handshake error: remote error: tls: bad certificate`, ViolationTLS, "leafnode"},
		{`127.0.0.1:5 - cid:9 - authentication error`, ViolationAuth, "client"},
		{`127.0.0.1:5 - cid:9 - TLS handshake error: EOF`, ViolationTLS, "client"},
		{`Error trying to connect as leafnode to remote server`, "", ""},
		{`authentication error`, "", ""}, // names no connection
	} {
		v, ok := linkViolation(tt.msg)
		if ok != (tt.kind != "") || v.Kind != tt.kind || v.Conn != tt.conn {
			t.Errorf("linkViolation(%q) = %+v, %v; want %s %s", tt.msg, v, ok, tt.kind, tt.conn)
		}
	}
}
