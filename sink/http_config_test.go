package sink_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/sink/sinktest"
	"github.com/leafline/leafline/topology"
)

// httpTestPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, as PEM files.
type httpTestPKI struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
	server                    tls.Certificate
}

func newHTTPTestPKI(t *testing.T) httpTestPKI {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "leafline test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(err)
	ca, err := x509.ParseCertificate(caDER)
	must(err)
	issue := func(serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: "leafline test " + strconv.FormatInt(serial, 10)},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		must(err)
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		must(err)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	}
	p := httpTestPKI{
		caFile:   filepath.Join(dir, "ca.pem"),
		certFile: filepath.Join(dir, "client.pem"),
		keyFile:  filepath.Join(dir, "client-key.pem"),
		pool:     x509.NewCertPool(),
	}
	p.pool.AddCert(ca)
	must(os.WriteFile(p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600))
	clientCert, clientKey := issue(2, x509.ExtKeyUsageClientAuth)
	must(os.WriteFile(p.certFile, clientCert, 0o600))
	must(os.WriteFile(p.keyFile, clientKey, 0o600))
	p.server, err = tls.X509KeyPair(issue(3, x509.ExtKeyUsageServerAuth))
	must(err)
	return p
}

func TestHTTPSink_TLS(t *testing.T) {
	pki := newHTTPTestPKI(t)
	var clientCN atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clientCN.Store(r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{pki.server},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pki.pool,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	cases := []struct {
		name string
		cfg  topology.HTTPSinkConfig
		want httpWant
	}{
		{"ca and client cert", topology.HTTPSinkConfig{CAFile: pki.caFile, CertFile: pki.certFile, KeyFile: pki.keyFile}, httpOK},
		{"no client cert", topology.HTTPSinkConfig{CAFile: pki.caFile}, httpTemporary},
		{"system roots", topology.HTTPSinkConfig{CertFile: pki.certFile, KeyFile: pki.keyFile}, httpTemporary},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.URL = srv.URL
			s := newHTTPSink(t, tc.cfg)
			err := httpWriteAll(t, s, sinktest.Events(1))[0]
			httpCheckOutcome(t, "event", err, tc.want)
			if err != nil && !errors.Is(err, sink.ErrUnavailable) {
				t.Errorf("a TLS failure is not ErrUnavailable: %v", err)
			}
			t.Logf("outcome: %v", err)
		})
	}
	if cn, _ := clientCN.Load().(string); cn != "leafline test 2" {
		t.Errorf("the server saw client certificate %q", cn)
	}

	bad := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		cfg    topology.HTTPSinkConfig
		inErrs []string
	}{
		{"ca not PEM", topology.HTTPSinkConfig{CAFile: bad}, []string{"sink.http.ca_file:", "no PEM certificate"}},
		{"ca missing", topology.HTTPSinkConfig{CAFile: bad + ".missing"}, []string{"sink.http.ca_file:", "no such file"}},
		{"cert missing", topology.HTTPSinkConfig{CertFile: bad + ".missing", KeyFile: pki.keyFile}, []string{"sink.http.cert_file:"}},
		{"key alone", topology.HTTPSinkConfig{KeyFile: pki.keyFile}, []string{"sink.http.cert_file:", "go together"}},
		{"key mismatch", topology.HTTPSinkConfig{CertFile: pki.certFile, KeyFile: bad}, []string{"sink.http.cert_file:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.URL = srv.URL
			_, err := sink.NewHTTP(tc.cfg, nil)
			if err == nil {
				t.Fatal("NewHTTP succeeded")
			}
			for _, s := range tc.inErrs {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestHTTPSink_Headers(t *testing.T) {
	got := make(chan http.Header, 1)
	url, _ := httpScripted(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Clone():
		default:
		}
	})
	file := filepath.Join(t.TempDir(), "headers")
	content := "# credentials for the target\nX-Api-Key: key-from-file-s3cret\n\n  # indented comment\r\nX-Tenant:   edge 7  \r\n"
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LEAFLINE_TEST_HTTP_TOKEN", "Bearer tok-from-env-s3cret")
	var logs bytes.Buffer
	s, err := sink.NewHTTP(topology.HTTPSinkConfig{
		URL:         url,
		HeadersFile: file,
		HeadersEnv:  map[string]string{"authorization": "LEAFLINE_TEST_HTTP_TOKEN"},
	}, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := httpWriteAll(t, s, sinktest.Events(2))[0]; err != nil {
		t.Fatal(err)
	}
	h := <-got
	for name, want := range map[string]string{
		"X-Api-Key":     "key-from-file-s3cret",
		"X-Tenant":      "edge 7",
		"Authorization": "Bearer tok-from-env-s3cret",
		"User-Agent":    "leafline",
	} {
		if h.Get(name) != want {
			t.Errorf("header %s = %q, want %q", name, h.Get(name), want)
		}
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Errorf("a header value was logged:\n%s", logs.String())
	}
}

func TestHTTPSink_HeaderErrors(t *testing.T) {
	cases := []struct {
		name    string
		file    string            // headers_file's content; "" means none
		env     map[string]string // headers_env
		setenv  map[string]string
		inErr   []string
		noEcho  string
		okNoErr bool
	}{
		{name: "bare line", file: "X-Ok: 1\nbare-s3cret\n", inErr: []string{"sink.http.headers_file:", "line 2", `not a "Name: value" line`}, noEcho: "s3cret"},
		{name: "bad name", file: "# c\nBad Name s3cret: v\n", inErr: []string{"line 2", "not a valid header name"}, noEcho: "s3cret"},
		{name: "control character", file: "X-Key: ab\x01s3cret\n", inErr: []string{"line 1", "X-Key", "not allowed"}, noEcho: "s3cret"},
		{name: "empty value", file: "X-Key:\n", inErr: []string{"line 1", "empty value"}},
		{name: "reserved", file: "content-type: text/plain\nLeafline-Batch-Size: 3\n", inErr: []string{"line 1", "line 2", "Content-Type is set by the sink", "Leafline-Batch-Size is set by the sink"}},
		{name: "twice", file: "X-Key: a\nx-key: b\n", inErr: []string{"line 2", "already set by"}},
		{name: "file and env", file: "Authorization: a\n", env: map[string]string{"Authorization": "LEAFLINE_TEST_HDR"}, setenv: map[string]string{"LEAFLINE_TEST_HDR": "s3cret"}, inErr: []string{"sink.http.headers_env.Authorization", "already set by"}, noEcho: "s3cret"},
		{name: "env unset", env: map[string]string{"Authorization": "LEAFLINE_TEST_UNSET_VAR"}, inErr: []string{"sink.http.headers_env.Authorization", "LEAFLINE_TEST_UNSET_VAR is unset"}},
		{name: "env bad name", env: map[string]string{"X Key": "LEAFLINE_TEST_HDR"}, setenv: map[string]string{"LEAFLINE_TEST_HDR": "v"}, inErr: []string{`sink.http.headers_env["X Key"]`, "not a valid header name"}},
		{name: "comments and blanks only", file: "# nothing\n\n   \n", okNoErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.setenv {
				t.Setenv(k, v)
			}
			cfg := topology.HTTPSinkConfig{URL: "http://127.0.0.1:1", HeadersEnv: tc.env}
			if tc.file != "" {
				cfg.HeadersFile = filepath.Join(t.TempDir(), "headers")
				if err := os.WriteFile(cfg.HeadersFile, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s, err := sink.NewHTTP(cfg, nil)
			if tc.okNoErr {
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
				return
			}
			if err == nil {
				t.Fatal("NewHTTP succeeded")
			}
			for _, want := range tc.inErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if tc.noEcho != "" && strings.Contains(err.Error(), tc.noEcho) {
				t.Errorf("error %q echoes the header's content", err)
			}
		})
	}
	_, err := sink.NewHTTP(topology.HTTPSinkConfig{URL: "http://127.0.0.1:1", HeadersFile: "/nonexistent/headers"}, nil)
	if err == nil || !strings.Contains(err.Error(), "sink.http.headers_file:") {
		t.Errorf("a missing headers_file: got %v", err)
	}
}

func TestHTTPSink_Config(t *testing.T) {
	// A target that is down does not stop the sink from being built.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	s := newHTTPSink(t, topology.HTTPSinkConfig{URL: down})
	err = httpWriteAll(t, s, sinktest.Events(1))[0]
	httpCheckOutcome(t, "event to a closed port", err, httpTemporary)
	if !errors.Is(err, sink.ErrUnavailable) {
		t.Errorf("a refused connection is not ErrUnavailable: %v", err)
	}

	_, err = sink.NewHTTP(topology.HTTPSinkConfig{URL: "ftp://x", Mode: "bulk", MaxConcurrency: -1, Timeout: -1, PoisonAfter: 2}, nil)
	for _, want := range []string{"sink.http.url:", "sink.http.mode:", "sink.http.max_concurrency:", "sink.http.timeout:", "sink.http.poison_after: 2 is outside 3..100"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a bad config: error %v does not name %s", err, want)
		}
	}
}
