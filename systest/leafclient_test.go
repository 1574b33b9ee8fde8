package systest

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/topology"
)

// rawLeaf is a hand-written leafnode connection. A stock nats-server that
// dials a leafnode link learns its permissions from the accepting side and
// never sends what they deny; an attacker who holds a box's credentials
// needs no stock server. The tests dial with one to show that the
// accepting side itself refuses.
type rawLeaf struct {
	conn net.Conn
	r    *bufio.Reader
}

// rawLeafCreds are the credentials an attacker presents: a TLS client
// certificate (tls) and an nkey seed file.
type rawLeafCreds struct {
	tls      topology.TLSFiles
	seedFile string
}

// dialRawLeaf connects to a leafnode listener at addr (host:port) with
// creds and completes the handshake (INFO, TLS, CONNECT, PING/PONG). It
// returns the server's error line when it refuses the connection.
func dialRawLeaf(t *testing.T, addr string, creds rawLeafCreds) (*rawLeaf, error) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	l := &rawLeaf{conn: conn, r: bufio.NewReader(conn)}
	line, err := l.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	var info struct {
		Nonce       string `json:"nonce"`
		TLSRequired bool   `json:"tls_required"`
	}
	if !strings.HasPrefix(line, "INFO ") {
		return nil, fmt.Errorf("first line %q is not INFO", line)
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "INFO ")), &info); err != nil {
		return nil, err
	}
	if info.TLSRequired {
		tc, err := box.UpstreamTLSConfig(creds.tls, &url.URL{Host: addr})
		if err != nil {
			return nil, err
		}
		tconn := tls.Client(conn, tc)
		if err := tconn.Handshake(); err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		l.conn, l.r = tconn, bufio.NewReader(tconn)
	}
	connect := map[string]any{
		"name": "rogue", "headers": true, "compress_mode": "off", "tls_required": info.TLSRequired, "protocol": 1,
	}
	if creds.seedFile != "" {
		data, err := os.ReadFile(creds.seedFile)
		if err != nil {
			return nil, err
		}
		kp, err := nkeys.FromSeed(bytes.TrimSpace(data))
		if err != nil {
			return nil, err
		}
		pub, _ := kp.PublicKey()
		sig, err := kp.Sign([]byte(info.Nonce))
		if err != nil {
			return nil, err
		}
		connect["nkey"], connect["sig"] = pub, base64.RawURLEncoding.EncodeToString(sig)
	}
	cj, _ := json.Marshal(connect)
	if err := l.send("CONNECT " + string(cj) + "\r\nPING\r\n"); err != nil {
		return nil, err
	}
	for {
		line, err := l.readLine()
		if err != nil {
			return nil, err
		}
		switch {
		case line == "PONG":
			_ = l.conn.SetDeadline(time.Time{})
			return l, nil
		case strings.HasPrefix(line, "-ERR"):
			return nil, errors.New(line)
		case line == "PING":
			if err := l.send("PONG\r\n"); err != nil {
				return nil, err
			}
		}
	}
}

func (l *rawLeaf) send(s string) error {
	_, err := l.conn.Write([]byte(s))
	return err
}

func (l *rawLeaf) readLine() (string, error) {
	line, err := l.r.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// publish sends a message on subject across the link.
func (l *rawLeaf) publish(subject string, data []byte) error {
	return l.send(fmt.Sprintf("LMSG %s %d\r\n%s\r\n", subject, len(data), data))
}

// refusal reads until the server sends an error or closes the connection,
// and returns the error line ("" when it closed without one).
func (l *rawLeaf) refusal(timeout time.Duration) (string, error) {
	_ = l.conn.SetReadDeadline(time.Now().Add(timeout))
	for {
		line, err := l.readLine()
		if strings.HasPrefix(line, "-ERR") {
			return line, nil
		}
		if line == "PING" {
			_ = l.send("PONG\r\n")
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return "", fmt.Errorf("the server neither refused nor closed within %s", timeout)
			}
			return "", nil
		}
	}
}
