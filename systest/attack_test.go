package systest

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/logx/logxtest"
	"github.com/leafline/leafline/internal/loopback"
	"github.com/leafline/leafline/pki"
	"github.com/leafline/leafline/receipt"

	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/render"
)

// The attack suite: an attacker holds one edge (edge1) — its box, its
// certificate, its nkey and its receipt key, as with a stolen field box —
// and tries to speak for another site. Each test shows the attempt refused,
// visible in a metric and a log line, and the genuine receipts accepted
// afterwards.

// attackSystem runs a secured two-edge system in which edge1 receives only
// the events on events.both.> and edge2 every event, with the boxes' log
// lines (warnings and errors) in logs.
func attackSystem(t *testing.T, unsigned bool) (*System, *logxtest.Buffer) {
	t.Helper()
	logs := &logxtest.Buffer{}
	ls := testSystem(t, Options{
		Edges:            2,
		UnsignedReceipts: unsigned,
		Logger:           slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Configure: func(cfg *topology.Config) {
			s, _ := cfg.Topology.Site("edge1")
			s.Filter = "events.both.>"
		},
	}, nil)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	return ls, logs
}

// publishEvent publishes one event at L1 and returns its id.
func publishEvent(t *testing.T, ls *System, subject, id string) string {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Data = []byte(`{"k":1}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := jstest.ConnectURL(t, ls.App("l1").ClientURL()).PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	return id
}

// recordOf returns L1's completion record of id.
func recordOf(t *testing.T, ls *System, id string) (record.Completion, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return leafline.Completions(ls.App("l1")).Get(ctx, id)
}

// waitRecord polls id's record at L1 until ok accepts it.
func waitRecord(t *testing.T, ls *System, id string, ok func(record.Completion) bool) record.Completion {
	t.Helper()
	var c record.Completion
	check.For(t, 60*time.Second, 50*time.Millisecond, func() error {
		var err error
		if c, err = recordOf(t, ls, id); err != nil {
			return err
		}
		if !ok(c) {
			return fmt.Errorf("%q: %+v", id, c)
		}
		return nil
	})
	return c
}

// attacker is edge1's box in the attacker's hands: its own server, which
// it reconfigures at will, and its receipt key.
type attacker struct {
	t   *testing.T
	ls  *System
	js  jetstream.JetStream
	key nkeys.KeyPair // nil when receipts are unsigned
}

func newAttacker(t *testing.T, ls *System) *attacker {
	t.Helper()
	a := &attacker{t: t, ls: ls, js: jstest.ConnectURL(t, ls.App("edge1").ClientURL())}
	if path := ls.Configs["edge1"].Signing.KeyFile; path != "" {
		seed, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if a.key, err = nkeys.FromSeed(bytes.TrimSpace(seed)); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// captureAllReceipts widens edge1's receipts stream to every site's
// receipt subjects, which the box's own server accepts from its owner.
func (a *attacker) captureAllReceipts() {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc := a.ls.Topology.Receipts
	s, err := a.js.Stream(ctx, rc.EdgeStream)
	if err != nil {
		a.t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Subjects = []string{rc.SubjectPrefix + ".>"}
	if _, err := a.js.UpdateStream(ctx, cfg); err != nil {
		a.t.Fatal(err)
	}
}

// send stores r, signed with edge1's receipt key when it has one, in
// edge1's receipts stream on subject, from where the hub sources it.
func (a *attacker) send(subject string, r receipt.Receipt) {
	a.t.Helper()
	data, err := r.Encode()
	if err != nil {
		a.t.Fatal(err)
	}
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, r.ReceiptID)
	if a.key != nil {
		sig, err := receipt.Sign(a.key, data)
		if err != nil {
			a.t.Fatal(err)
		}
		m.Header.Set(receipt.SignatureHeader, sig)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.js.PublishMsg(ctx, m); err != nil {
		a.t.Fatalf("publish on %s: %v", subject, err)
	}
}

// receipt is a receipt for id in the topology's origin stream.
func (a *attacker) receipt(id, processor, site string, st receipt.Status) receipt.Receipt {
	r := receipt.New(id, a.ls.Topology.Events.OriginStream, processor, site, st, time.Time{})
	if st == receipt.StatusDeadLettered {
		r.Reason = "forged"
	}
	return r
}

// registryValue is the value of the metric name with labels (a counter or
// gauge) in reg, or 0 when it has no such series.
func registryValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	v, err := box.GatherValue(reg, name, labels)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitRefused waits until L1 has quarantined n receipts for reason, in its
// metric and its log.
func waitRefused(t *testing.T, ls *System, logs *logxtest.Buffer, reason string, n float64) {
	t.Helper()
	reg := ls.App("l1").Metrics().Registry()
	check.For(t, 60*time.Second, 50*time.Millisecond, func() error {
		if got := registryValue(t, reg, "leafline_completion_refused_total", map[string]string{"reason": reason}); got != n {
			return fmt.Errorf("leafline_completion_refused_total{reason=%q} = %v, want %v", reason, got, n)
		}
		if len(logs.Lines("l1", "receipts: quarantined", "refusal="+reason)) == 0 {
			return fmt.Errorf("no log line for refusal %s", reason)
		}
		return nil
	})
}

// TestAttack_ReceiptInAnotherSitesName (attacks 1 and 2): edge1 completes
// an event "as edge2" while edge2 is down, first by writing edge2's
// receipt subject into its own receipts stream (without receipt keys, as
// in the setup `topology certs` produces without --receipt-keys), then by
// a receipt of its own site, properly signed, that names edge2 as its
// processor. The hub stores everything edge1's link delivers under edge1's
// subjects, so the first disagrees with its subject at L1; the second
// speaks for another processor than its site. Both are quarantined; edge2's
// genuine receipt completes the event when edge2 is back.
func TestAttack_ReceiptInAnotherSitesName(t *testing.T) {
	for _, unsigned := range []bool{true, false} {
		t.Run(fmt.Sprintf("unsigned=%v", unsigned), func(t *testing.T) {
			ls, logs := attackSystem(t, unsigned)
			if err := ls.Stop("edge2"); err != nil {
				t.Fatal(err)
			}
			id := publishEvent(t, ls, "events.both.1", "both-1")
			waitRecord(t, ls, id, func(c record.Completion) bool { _, ok := c.Processors["edge1"]; return ok })

			a := newAttacker(t, ls)
			a.captureAllReceipts()
			rt := ls.Topology
			a.send(rt.ReceiptSubject("edge2", "processed"), a.receipt(id, "edge2", "edge2", receipt.StatusProcessed))
			waitRefused(t, ls, logs, completion.RefusedSubjectMismatch, 1)
			a.send(rt.ReceiptSubject("edge1", "processed"), a.receipt(id, "edge2", "edge1", receipt.StatusProcessed))
			waitRefused(t, ls, logs, completion.RefusedProcessorNotSite, 1)

			c, err := recordOf(t, ls, id)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := c.Processors["edge2"]; ok || c.Status != record.EventPending || !slices.Equal(c.Missing, []string{"edge2"}) {
				t.Fatalf("the forged receipts changed the record: %+v", c)
			}

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := ls.Start(ctx, "edge2"); err != nil {
				t.Fatal(err)
			}
			c = waitRecord(t, ls, id, func(c record.Completion) bool { return c.Status == record.EventComplete })
			if p := c.Processors["edge2"]; p.Site != "edge2" || p.Verified == unsigned {
				t.Fatalf("edge2's genuine receipt: %+v", p)
			}
		})
	}
}

// TestAttack_DeadLetterFromElsewhere (attack 3): with signed receipts,
// edge1 dead-letters an event that was routed only to edge2, in its own
// name and (through its widened receipts stream) in edge2's, before edge2
// has processed it; and it reports an event that was never published.
// The first is refused because edge1 is not an expected processor, the
// second because it disagrees with its subject; the third is held as
// origin_unknown and counts for nothing. edge2's genuine receipt, which
// arrives later, completes its event.
func TestAttack_DeadLetterFromElsewhere(t *testing.T) {
	ls, logs := attackSystem(t, false)
	if err := ls.Stop("edge2"); err != nil {
		t.Fatal(err)
	}
	id := publishEvent(t, ls, "events.only2.1", "only2-1")
	waitRecord(t, ls, id, func(c record.Completion) bool {
		return c.OriginKnown() && slices.Equal(c.Expected, []string{"edge2"})
	})

	a := newAttacker(t, ls)
	rt := ls.Topology
	dead := string(receipt.StatusDeadLettered)
	a.send(rt.ReceiptSubject("edge1", dead), a.receipt(id, "edge1", "edge1", receipt.StatusDeadLettered))
	waitRefused(t, ls, logs, completion.RefusedNotExpected, 1)
	a.captureAllReceipts()
	a.send(rt.ReceiptSubject("edge2", dead), a.receipt(id, "edge2", "edge2", receipt.StatusDeadLettered))
	waitRefused(t, ls, logs, completion.RefusedSubjectMismatch, 1)
	if c, err := recordOf(t, ls, id); err != nil || c.Status != record.EventPending || len(c.Processors) != 0 {
		t.Fatalf("the forged receipts changed the record: %+v %v", c, err)
	}

	// An event that was never published: held, not a normal record.
	a.send(rt.ReceiptSubject("edge1", "processed"), a.receipt("never-published", "edge1", "edge1", receipt.StatusProcessed))
	c := waitRecord(t, ls, "never-published", func(c record.Completion) bool { return c.Status == record.EventOriginUnknown })
	if len(c.Processors) != 0 || len(c.Held) != 1 {
		t.Fatalf("never-published: %+v", c)
	}
	l1 := ls.App("l1")
	if got := registryValue(t, l1.Metrics().Registry(), "leafline_completion_held_total", nil); got != 1 {
		t.Errorf("leafline_completion_held_total = %v", got)
	}
	if got := registryValue(t, l1.Metrics().Registry(), "leafline_completion_held_receipts", map[string]string{"edge": "edge1"}); got != 1 {
		t.Errorf("leafline_completion_held_receipts{edge=edge1} = %v", got)
	}
	if len(logs.Lines("l1", "receipt held", "never-published")) == 0 {
		t.Error("no log line for the held receipt")
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ls.Start(ctx, "edge2"); err != nil {
		t.Fatal(err)
	}
	c = waitRecord(t, ls, id, func(c record.Completion) bool { return c.Status == record.EventComplete })
	if p := c.Processors["edge2"]; p.Status != receipt.StatusProcessed || !p.Verified || c.Conflict {
		t.Fatalf("edge2's genuine receipt: %+v", c)
	}
	if _, err := recordOf(t, ls, "never-published"); errors.Is(err, record.ErrNotFound) {
		t.Fatal("the held record is gone")
	}
}

// rawEdge1 dials the hub's leafnode listener directly, with edge1's
// certificate and nkey, through a hand-written leafnode client.
func rawEdge1(t *testing.T, ls *System) *rawLeaf {
	t.Helper()
	hub, _ := ls.Topology.Site("hub")
	cfg := ls.Configs["edge1"]
	l, err := dialRawLeaf(t, hub.Leafnode.Listen, rawLeafCreds{tls: cfg.Leafnode.UpstreamTLS, seedFile: cfg.Leafnode.UpstreamAuth.NkeySeedFile})
	if err != nil {
		t.Fatalf("edge1's own credentials refused: %v", err)
	}
	return l
}

// TestAttack_LinkViolation (attacks 1 and 9): with edge1's certificate and
// nkey, a hand-written leafnode client (a stock server would not send what
// its link's permissions deny) delivers a forged receipt on the subject of
// edge2's receipts source at the hub, and subscribes to edge2's event
// deliveries. The hub refuses each and drops the connection; its
// leafline_link_violations_total counts them by kind, a "link violation
// refused" line names them, the forged receipt never reaches L1, and the
// system goes on working.
func TestAttack_LinkViolation(t *testing.T) {
	ls, logs := attackSystem(t, false)
	hub := ls.App("hub")
	rt := ls.Topology
	a := newAttacker(t, ls)
	forged := a.receipt("forged-delivery", "edge2", "edge2", receipt.StatusProcessed)
	data, err := forged.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		kind   string
		attack func(*rawLeaf) error
	}{
		{box.ViolationPublish, func(l *rawLeaf) error {
			return l.publish(topology.SourceDeliverSubject("edge2", rt.Receipts.EdgeStream, "hub"), data)
		}},
		{box.ViolationSubscribe, func(l *rawLeaf) error {
			return l.send("LS+ " + topology.SourceDeliverSubject("hub", rt.Events.HubStream, "edge2") + "\r\n")
		}},
	} {
		l := rawEdge1(t, ls)
		if err := tt.attack(l); err != nil {
			t.Fatal(err)
		}
		line, err := l.refusal(10 * time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tt.kind, err)
		}
		t.Logf("%s: the hub answered %q", tt.kind, line)
		check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
			if got := registryValue(t, hub.Metrics().Registry(), "leafline_link_violations_total", map[string]string{"kind": tt.kind, "conn": "leafnode"}); got != 1 {
				return fmt.Errorf("leafline_link_violations_total{kind=%q} = %v", tt.kind, got)
			}
			if len(logs.Lines("hub", "link violation refused", "kind="+tt.kind, "conn=leafnode")) == 0 {
				return fmt.Errorf("no log line for the %s violation", tt.kind)
			}
			return nil
		})
	}
	if v := hub.Metrics().LastLinkViolation(); v == nil || v.Kind != box.ViolationSubscribe {
		t.Errorf("last violation %+v", v)
	}
	// The hub's status says so too.
	resp, err := http.Get("http://" + hub.OpsAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready box.Readiness
	err = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if err != nil || ready.LastLinkViolation == nil || ready.LastLinkViolation.Kind != box.ViolationSubscribe ||
		!strings.Contains(ready.LastLinkViolation.Detail, "leafline.src.hub.HA.edge2") {
		t.Errorf("/readyz: %+v %v", ready.LastLinkViolation, err)
	}
	id := publishEvent(t, ls, "events.both.after", "after-violations")
	waitCompleted(t, ls, []string{id}, "edge1", "edge2")
	if reachedL1(t, ls, forged.EventID) {
		t.Fatal("the forged delivery reached L1")
	}
}

// TestWriteCredentials_RoleCertificates (attack 4): each site's certificate
// is only what its role needs, names its own listener's addresses (loopback
// only when asked for) and its site; every edge gets a receipt key.
func TestWriteCredentials_RoleCertificates(t *testing.T) {
	for _, loopback := range []bool{false, true} {
		t.Run(fmt.Sprintf("loopback=%v", loopback), func(t *testing.T) {
			tp := &topology.Topology{Sites: []topology.Site{
				{Name: "l1", Role: topology.RoleL1, Leafnode: topology.SiteLeafnode{Listen: "l1.example.net:7422"}},
				{Name: "hub", Role: topology.RoleHub, Upstream: "l1", Leafnode: topology.SiteLeafnode{Listen: "0.0.0.0:7422"}},
				{Name: "edge1", Role: topology.RoleEdge, Upstream: "hub"},
			}}
			creds, err := pki.WriteCredentials(t.TempDir(), tp, pki.CredentialOptions{Hosts: []string{"hub.example.net"}, Loopback: loopback})
			if err != nil {
				t.Fatal(err)
			}
			lo := map[bool]string{false: "", true: " localhost 127.0.0.1 ::1"}[loopback]
			for _, tt := range []struct {
				site, usage, names string
			}{
				{"l1", "server", "l1.example.net hub.example.net" + lo},
				{"hub", "server client", "hub.example.net" + lo},
				{"edge1", "client", ""},
			} {
				cert := readCert(t, creds.Sites[tt.site].CertFile)
				var usage, names []string
				for _, u := range cert.ExtKeyUsage {
					usage = append(usage, map[x509.ExtKeyUsage]string{x509.ExtKeyUsageServerAuth: "server", x509.ExtKeyUsageClientAuth: "client"}[u])
				}
				names = append(names, cert.DNSNames...)
				for _, ip := range cert.IPAddresses {
					names = append(names, ip.String())
				}
				if got := strings.Join(usage, " "); got != tt.usage {
					t.Errorf("%s: usage %q, want %q", tt.site, got, tt.usage)
				}
				if got := strings.Join(names, " "); got != strings.TrimSpace(tt.names) {
					t.Errorf("%s: names %q, want %q", tt.site, got, tt.names)
				}
				if s, ok := pki.CertSite(cert); !ok || s != tt.site {
					t.Errorf("%s: certificate names site %q", tt.site, s)
				}
			}
			e, _ := tp.Site("edge1")
			if e.ReceiptKey == "" || creds.Sites["edge1"].ReceiptKeyFile == "" {
				t.Fatalf("edge1 has no receipt key: %+v", creds.Sites["edge1"])
			}
			seed, err := os.ReadFile(creds.Sites["edge1"].ReceiptKeyFile)
			if err != nil {
				t.Fatal(err)
			}
			kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
			if err != nil {
				t.Fatal(err)
			}
			if pub, _ := kp.PublicKey(); pub != e.ReceiptKey {
				t.Fatalf("edge1's receipt key file holds %s, the topology %s", pub, e.ReceiptKey)
			}
		})
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestAttack_StolenEdgeCertAsServer (attack 4): a rogue leafnode listener
// serving edge1's stolen certificate, to which edge2 is pointed (a DNS or
// routing attack), is refused by edge2: an edge's certificate is for
// client authentication only and names no address. edge2 says why in its
// link status and log, and its upstream_connected stays 0. With a
// certificate of the old kind (server and client, loopback names) from the
// same CA, the same rogue is accepted: the control shows the attack is real.
func TestAttack_StolenEdgeCertAsServer(t *testing.T) {
	for _, control := range []bool{false, true} {
		t.Run(fmt.Sprintf("control=%v", control), func(t *testing.T) {
			logs := &logxtest.Buffer{}
			ls, err := newLocal(t.TempDir(), Options{
				Edges:  2,
				Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ls.Close)
			stolen := ls.Configs["edge1"].Leafnode.UpstreamTLS
			if control {
				stolen = writeIssued(t, caFromDir(t, ls.Credentials.Dir), t.TempDir(), "edge1", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
			}
			tc, err := box.ListenTLSConfig(stolen, false)
			if err != nil {
				t.Fatal(err)
			}
			ports, err := loopback.FreePorts(1)
			if err != nil {
				t.Fatal(err)
			}
			jstest.Run(t, &server.Options{
				Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true,
				LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: ports[0], TLSConfig: tc, TLSTimeout: box.LeafTLSTimeout},
			})
			ls.Configs["edge2"].Leafnode.UpstreamURL = fmt.Sprintf("nats-leaf://127.0.0.1:%d", ports[0])
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			victim, err := ls.Start(ctx, "edge2")
			if err != nil {
				t.Fatal(err)
			}
			if control {
				check.For(t, 15*time.Second, 50*time.Millisecond, func() error {
					if !victim.UpstreamConnected() {
						return errors.New("control: edge2 did not connect to the rogue server")
					}
					return nil
				})
				return
			}
			check.For(t, 15*time.Second, 50*time.Millisecond, func() error {
				why := box.UpstreamError(victim.Server())
				if !strings.Contains(why, "certificate") {
					return fmt.Errorf("edge2's upstream error %q does not name the certificate", why)
				}
				if len(logs.Lines("edge2", "certificate")) == 0 {
					return errors.New("edge2 logged nothing about the certificate")
				}
				return nil
			})
			if victim.UpstreamConnected() || registryValue(t, victim.Metrics().Registry(), "leafline_upstream_connected", nil) != 0 {
				t.Fatal("edge2 connected to a server with an edge's certificate")
			}
			t.Logf("edge2: %s", box.UpstreamError(victim.Server()))
		})
	}
}

// TestAttack_CertificateOfAnotherSite (attack 5): edge1's certificate with
// edge2's nkey seed (a seed leaked on its own) does not pass for edge2 at
// the hub: the certificate names edge1. The hub refuses the connection,
// counts it (leafline_link_violations_total{kind="auth"}) and logs why;
// each site's own pair is accepted.
func TestAttack_CertificateOfAnotherSite(t *testing.T) {
	ls, logs := attackSystem(t, false)
	hub, _ := ls.Topology.Site("hub")
	e1, e2 := ls.Configs["edge1"].Leafnode, ls.Configs["edge2"].Leafnode
	_, err := dialRawLeaf(t, hub.Leafnode.Listen, rawLeafCreds{tls: e1.UpstreamTLS, seedFile: e2.UpstreamAuth.NkeySeedFile})
	if err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Fatalf("edge1's certificate with edge2's seed: %v, want an authorization violation", err)
	}
	reg := ls.App("hub").Metrics().Registry()
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if got := registryValue(t, reg, "leafline_link_violations_total", map[string]string{"kind": box.ViolationAuth, "conn": "leafnode"}); got != 1 {
			return fmt.Errorf("leafline_link_violations_total{kind=auth} = %v", got)
		}
		if len(logs.Lines("hub", "leafnode refused", "certificate_site=edge1", "credentials_site=edge2")) == 0 {
			return errors.New("no log line names the two sites")
		}
		return nil
	})
	for _, own := range []topology.LeafnodeConfig{e1, e2} {
		if _, err := dialRawLeaf(t, hub.Leafnode.Listen, rawLeafCreds{tls: own.UpstreamTLS, seedFile: own.UpstreamAuth.NkeySeedFile}); err != nil {
			t.Fatalf("a site's own certificate and seed: %v", err)
		}
	}
}

// TestAttack_ClientListenerNeedsAuth (attack 6): a box whose client
// listener takes a password (nats.auth, required to listen beyond the
// machine) refuses a client without it, counts the refusal
// (leafline_link_violations_total{kind="auth",conn="client"}) and logs
// it; a client with it, and the box's own connections, work.
func TestAttack_ClientListenerNeedsAuth(t *testing.T) {
	logs := &logxtest.Buffer{}
	t.Setenv("LEAFLINE_TEST_NATS_PW", "client-s3cret")
	ls, err := newLocal(t.TempDir(), Options{
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Configure: func(cfg *topology.Config) {
			if cfg.Site == "edge1" {
				cfg.NATS.Auth = topology.ClientAuth{PasswordEnv: "LEAFLINE_TEST_NATS_PW"}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	edge, err := ls.Start(ctx, "edge1") // its own connections are inside the process
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nats.Connect(edge.ClientURL()); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Fatalf("a client without the password: %v", err)
	}
	if _, err := nats.Connect(edge.ClientURL(), nats.UserInfo(topology.DefaultClientUser, "wrong")); err == nil {
		t.Fatal("a client with a wrong password connected")
	}
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if got := registryValue(t, edge.Metrics().Registry(), "leafline_link_violations_total", map[string]string{"kind": box.ViolationAuth, "conn": "client"}); got != 2 {
			return fmt.Errorf("leafline_link_violations_total{kind=auth,conn=client} = %v", got)
		}
		if len(logs.Lines("edge1", "link violation refused", "conn=client")) == 0 {
			return errors.New("no log line for the refused client")
		}
		return nil
	})
	nc, err := nats.Connect(edge.ClientURL(), nats.UserInfo(topology.DefaultClientUser, "client-s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, ls.Topology.Receipts.EdgeStream); err != nil {
		t.Fatalf("a client with the password: %v", err)
	}
}

// TestLint_StockHubConfig (attack 7): the lint reads a stock hub's
// nats-server configuration with the server's own parser. The one `leafline
// topology render` writes passes, with its nkey seed's variable unset (it
// is named) and set; five planted mistakes are each reported: a sync
// interval other than always, a JetStream domain other than the site's, a
// link user's publish and subscribe permissions widened beyond its link,
// and a link user that cannot connect as a leafnode. jsplan.Provision refuses a server
// whose domain is not the site's, where it would otherwise exit 0 and
// leave every event pending.
func TestLint_StockHubConfig(t *testing.T) {
	ls, err := newLocal(t.TempDir(), Options{Logger: testLogger(t), Configure: stockSite("hub")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	hubCfg := ls.Configs["hub"]
	conf, err := render.ServerConfig(ls.Topology, "hub", hubCfg)
	if err != nil {
		t.Fatal(err)
	}
	var unset []string
	lintConf := func(conf string) []topology.Warning {
		t.Helper()
		path := filepath.Join(t.TempDir(), "hub.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		ws, u, err := jsplan.ServerConfigWarnings(hubCfg, path)
		if err != nil {
			t.Fatal(err)
		}
		unset = u
		return ws
	}
	// The operator's shell does not hold the hub's nkey seed: the lint
	// reads the file as if it did, and names the variable.
	t.Setenv(render.SeedEnv("hub"), "")
	os.Unsetenv(render.SeedEnv("hub"))
	if ws := lintConf(conf); len(ws) != 0 {
		t.Fatalf("the rendered configuration, its seed unset: %v", ws)
	}
	if want := []string{render.SeedEnv("hub")}; !slices.Equal(unset, want) {
		t.Fatalf("unset variables %v, want %v", unset, want)
	}
	if _, set := os.LookupEnv(render.SeedEnv("hub")); set {
		t.Fatalf("the lint left its stand-in for $%s in the environment", render.SeedEnv("hub"))
	}
	seed, err := os.ReadFile(ls.Credentials.Sites["hub"].NkeySeedFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(render.SeedEnv("hub"), strings.TrimSpace(string(seed)))
	if ws := lintConf(conf); len(ws) != 0 || len(unset) != 0 {
		t.Fatalf("the rendered configuration: warnings %v, unset %v", ws, unset)
	}
	for _, tt := range []struct{ name, from, to, want string }{
		{"sync interval", "sync_interval: always", `sync_interval: "2m"`, "jetstream.sync_interval: is 2m0s, not always"},
		{"domain", `domain: "hub"`, `domain: "hub2"`, `jetstream.domain: is "hub2", site "hub" has "hub"`},
		{"widened permissions", "publish: {allow: [", `publish: {allow: [">", `, `site "edge1"'s leafnode user may publish >, beyond what its link needs`},
		{"widened subscriptions", "subscribe: {allow: [", `subscribe: {allow: ["events.>", `, `site "edge1"'s leafnode user may subscribe events.>, beyond what its link needs`},
		{"no leafnode user", `allowed_connection_types: ["LEAFNODE"]`, `allowed_connection_types: ["STANDARD"]`, `(site edge1): missing: site "edge1" cannot authenticate`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(conf, tt.from) {
				t.Fatalf("the rendered configuration has no %q", tt.from)
			}
			ws := lintConf(strings.Replace(conf, tt.from, tt.to, 1))
			if len(ws) != 1 || !strings.Contains(ws[0].String(), tt.want) {
				t.Fatalf("warnings %v, want one with %q", ws, tt.want)
			}
		})
	}

	srv := jstest.Start(t, jstest.Options{Domain: "not-hub"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := jstest.ConnectURL(t, srv.ClientURL())
	err = jsplan.Provision(ctx, js, hubCfg)
	if !errors.Is(err, jsplan.ErrWrongDomain) || !strings.Contains(err.Error(), `it is "not-hub", site "hub" has "hub"`) {
		t.Fatalf("Provision on a server of another domain: %v", err)
	}

	// The hub's receipts stream as it was before its sources were bound.
	hub, _ := ls.Topology.Site("hub")
	for _, sc := range jsplan.SitePlan(hubCfg, hub).Streams {
		if sc.Name != ls.Topology.Receipts.HubStream {
			continue
		}
		for _, src := range sc.Sources {
			src.SubjectTransforms = nil
		}
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := jsplan.LiveWarnings(ctx, js, hubCfg)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, w := range ws {
		all = append(all, w.String())
	}
	for _, want := range []string{"jetstream domain: " + jsplan.ErrWrongDomain.Error(), "stream RH: its source RE (deliver subject leafline.src.edge1.RE.hub) is not bound"} {
		if !strings.Contains(strings.Join(all, "\n"), want) {
			t.Errorf("no live warning %q in\n%s", want, strings.Join(all, "\n"))
		}
	}
}

// TestAttack_DirectConsumerLocked (attack 8): with edge1's certificate and nkey, a
// hand-written leafnode client asks L1, through the hub, to re-create
// edge1's own consumer on the origin stream with an inactive threshold
// (the server would then delete it, and with it what edge1 has ACKed), to
// update it, and to delete it. The hub refuses each request and counts it;
// the consumer L1 created stays as it was, with its delivery state, and
// the direct edge goes on working.
func TestAttack_DirectConsumerLocked(t *testing.T) {
	ls := directSystem(t, Options{}, map[string]string{"edge1": ""}, nil)
	l1js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	ids := publishN(t, l1js, "before-attack", 5)
	waitCompleted(t, ls, ids, "edge1")
	stream, name := ls.Topology.Events.OriginStream, topology.DirectConsumerName("edge1")
	var before *jetstream.ConsumerInfo
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		before = jstest.ConsumerInfo(t, l1js, stream, name)
		if before.AckFloor.Stream < 5 || before.NumAckPending != 0 {
			return fmt.Errorf("ack floor %d, %d pending", before.AckFloor.Stream, before.NumAckPending)
		}
		return nil
	})

	reshaped := before.Config
	reshaped.InactiveThreshold = 2 * time.Second
	body, err := json.Marshal(map[string]any{"stream_name": stream, "config": reshaped, "action": "create"})
	if err != nil {
		t.Fatal(err)
	}
	update, err := json.Marshal(map[string]any{"stream_name": stream, "config": reshaped, "action": "update"})
	if err != nil {
		t.Fatal(err)
	}
	api := topology.APIPrefix("l1") + ".CONSUMER."
	attempts := []struct {
		subject string
		body    []byte
	}{
		{api + "CREATE." + stream + "." + name + "." + reshaped.FilterSubject, body},
		{api + "CREATE." + stream + "." + name, body},
		{api + "CREATE." + stream + "." + name + "." + reshaped.FilterSubject, update},
		{api + "DURABLE.CREATE." + stream + "." + name, body},
		{api + "DELETE." + stream + "." + name, nil},
	}
	hub := ls.App("hub").Metrics().Registry()
	violations := func() float64 {
		return registryValue(t, hub, "leafline_link_violations_total", map[string]string{"kind": box.ViolationPublish, "conn": "leafnode"})
	}
	for i, a := range attempts {
		l := rawEdge1(t, ls)
		if err := l.send(fmt.Sprintf("LMSG %s %s %d\r\n%s\r\n", a.subject, topology.DirectInboxPrefix("edge1")+".attack", len(a.body), a.body)); err != nil {
			t.Fatal(err)
		}
		line, err := l.refusal(10 * time.Second)
		if err != nil {
			t.Fatalf("%s: %v", a.subject, err)
		}
		if !strings.Contains(line, "Permissions Violation") {
			t.Fatalf("%s: the hub answered %q", a.subject, line)
		}
		check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
			if got := violations(); got != float64(i+1) {
				return fmt.Errorf("leafline_link_violations_total{kind=publish} = %v, want %d", got, i+1)
			}
			return nil
		})
	}

	// The consumer is the one L1 created, with the same delivery state,
	// and the edge goes on with it.
	after := jstest.ConsumerInfo(t, l1js, stream, name)
	if !after.Created.Equal(before.Created) || after.Config.InactiveThreshold != 0 || after.AckFloor.Stream < before.AckFloor.Stream {
		t.Fatalf("the consumer changed: created %s (was %s), inactive threshold %s, ack floor %d (was %d)",
			after.Created, before.Created, after.Config.InactiveThreshold, after.AckFloor.Stream, before.AckFloor.Stream)
	}
	more := publishN(t, l1js, "after-attack", 5)
	waitCompleted(t, ls, append(ids, more...), "edge1")
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		info := jstest.ConsumerInfo(t, l1js, stream, name)
		if !info.Created.Equal(before.Created) || info.AckFloor.Stream < before.AckFloor.Stream+5 {
			return fmt.Errorf("created %s, ack floor %d", info.Created, info.AckFloor.Stream)
		}
		return nil
	})
	if got := registryValue(t, ls.App("l1").Metrics().Registry(), "leafline_direct_consumer_altered_total", map[string]string{"edge": "edge1"}); got != 0 {
		t.Fatalf("leafline_direct_consumer_altered_total{edge=edge1} = %v", got)
	}
}
