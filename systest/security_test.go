package systest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/internal/logx/logxtest"
	"github.com/leafline/leafline/pki"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology/linkperm"

	"github.com/leafline/leafline/topology"
)

// lines returns the logged lines of site that contain every one of subs.
// caFromDir loads the CA that WriteCredentials wrote under dir, to issue
// more certificates from it.
func caFromDir(t *testing.T, dir string) *pki.CA {
	t.Helper()
	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// writeIssued writes a certificate and key issued by ca under dir.
func writeIssued(t *testing.T, ca *pki.CA, dir, name string, notBefore, notAfter time.Time) topology.TLSFiles {
	t.Helper()
	is, err := ca.Issue(name, []string{"localhost", "127.0.0.1"}, notBefore, notAfter)
	if err != nil {
		t.Fatal(err)
	}
	f := topology.TLSFiles{CertFile: filepath.Join(dir, name+".pem"), KeyFile: filepath.Join(dir, name+"-key.pem")}
	for path, data := range map[string][]byte{f.CertFile: is.CertPEM, f.KeyFile: is.KeyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TestSecurity_LinkRefused: a link with a bad certificate or an unknown
// key never comes up, and both the dialling box (its log and its upstream
// error, which /readyz reports) and the accepting box (its log) say why.
func TestSecurity_LinkRefused(t *testing.T) {
	now := time.Now()
	expired := [2]time.Time{now.Add(-48 * time.Hour), now.Add(-24 * time.Hour)}
	valid := [2]time.Time{now.Add(-time.Hour), now.Add(24 * time.Hour)}
	intruder, err := pki.NewCA("intruder CA", valid[0], valid[1])
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// break adjusts the configs; pki is the system's CA, dir a scratch dir.
		breakLink func(t *testing.T, ls *System, pki *pki.CA, dir string)
		edgeSays  string // in edge1's upstream error and log
		hubSays   string // in the hub's log
	}{
		{"edge trusts another CA", func(t *testing.T, ls *System, _ *pki.CA, dir string) {
			path := filepath.Join(dir, "intruder-ca.pem")
			if err := os.WriteFile(path, intruder.CertPEM, 0o600); err != nil {
				t.Fatal(err)
			}
			ls.Configs["edge1"].Leafnode.UpstreamTLS.CAFile = path
		}, "certificate signed by unknown authority", "tls"},
		{"hub certificate expired", func(t *testing.T, ls *System, pki *pki.CA, dir string) {
			f := writeIssued(t, pki, dir, "hub-expired", expired[0], expired[1])
			ls.Configs["hub"].Leafnode.ListenTLS.CertFile, ls.Configs["hub"].Leafnode.ListenTLS.KeyFile = f.CertFile, f.KeyFile
		}, "certificate has expired", "tls"},
		{"edge certificate expired", func(t *testing.T, ls *System, pki *pki.CA, dir string) {
			f := writeIssued(t, pki, dir, "edge1-expired", expired[0], expired[1])
			ls.Configs["edge1"].Leafnode.UpstreamTLS.CertFile, ls.Configs["edge1"].Leafnode.UpstreamTLS.KeyFile = f.CertFile, f.KeyFile
		}, "client certificate for the upstream (CN=edge1-expired) expired", "certificate has expired"},
		{"edge certificate from another CA", func(t *testing.T, ls *System, _ *pki.CA, dir string) {
			f := writeIssued(t, intruder, dir, "edge1-intruder", valid[0], valid[1])
			ls.Configs["edge1"].Leafnode.UpstreamTLS.CertFile, ls.Configs["edge1"].Leafnode.UpstreamTLS.KeyFile = f.CertFile, f.KeyFile
			// A Go TLS client sends only a certificate that the server's
			// acceptable CAs signed: the hub sees none at all.
		}, "does not verify against the CA trusted for the upstream", "client didn't provide a certificate"},
		{"edge key unknown to the hub", func(t *testing.T, ls *System, _ *pki.CA, dir string) {
			// edge1's box holds a topology naming another key (a stale or
			// forged copy): the hub knows only the real one.
			kp, _ := nkeys.CreateUser()
			seed, _ := kp.Seed()
			pub, _ := kp.PublicKey()
			path := filepath.Join(dir, "other.nk")
			if err := os.WriteFile(path, seed, 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := ls.Configs["edge1"]
			cfg.Topology = cloneTopology(t, cfg.Topology)
			s, _ := cfg.Topology.Site("edge1")
			s.Leafnode.Auth.Nkey = pub
			cfg.Leafnode.UpstreamAuth.NkeySeedFile = path
		}, "Authorization Violation", "authentication error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &logxtest.Buffer{}
			ls, err := newLocal(t.TempDir(), Options{
				Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ls.Close)
			tt.breakLink(t, ls, caFromDir(t, ls.Credentials.Dir), t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, site := range []string{"hub", "edge1"} {
				if _, err := ls.Start(ctx, site); err != nil {
					t.Fatal(err)
				}
			}
			edge := ls.App("edge1")
			var why string
			defer func() {
				if t.Failed() {
					for _, l := range append(logs.Lines("edge1", ""), logs.Lines("hub", "")...) {
						t.Log(l)
					}
				}
			}()
			check.For(t, 15*time.Second, 50*time.Millisecond, func() error {
				why = box.UpstreamError(edge.Server())
				if !strings.Contains(why, tt.edgeSays) {
					return fmt.Errorf("edge1 upstream error %q lacks %q", why, tt.edgeSays)
				}
				if len(logs.Lines("edge1", tt.edgeSays)) == 0 {
					return fmt.Errorf("edge1 log lacks %q", tt.edgeSays)
				}
				if len(logs.Lines("hub", tt.hubSays)) == 0 {
					return fmt.Errorf("hub log lacks %q", tt.hubSays)
				}
				return nil
			})
			if edge.UpstreamConnected() {
				t.Fatal("edge1 is connected through a link that must be refused")
			}
			t.Logf("edge1 upstream error: %s", why)
			for _, l := range append(logs.Lines("edge1", ""), logs.Lines("hub", "")...) {
				t.Log(l)
			}
			t.Logf("hub: %s", logs.Lines("hub", tt.hubSays)[0])
		})
	}
}

func cloneTopology(t *testing.T, tp *topology.Topology) *topology.Topology {
	t.Helper()
	data, err := json.Marshal(tp)
	if err != nil {
		t.Fatal(err)
	}
	out, err := topology.ParseTopology(data, "clone")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSecurity_NkeySeedMismatch: a box whose seed does not belong to the
// public key its topology declares refuses to start, naming both keys but
// never the seed.
func TestSecurity_NkeySeedMismatch(t *testing.T) {
	ls, err := newLocal(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	cfg := ls.Configs["edge1"]
	cfg.Leafnode.UpstreamAuth.NkeySeedFile = ls.Credentials.Sites["hub"].NkeySeedFile
	seed, _ := os.ReadFile(cfg.Leafnode.UpstreamAuth.NkeySeedFile)
	site, _ := cfg.Topology.Site("edge1")
	_, err = box.ServerOptions(cfg, site)
	if err == nil || !strings.Contains(err.Error(), "nkey_seed_file") || !strings.Contains(err.Error(), site.Leafnode.Auth.Nkey) {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), strings.TrimSpace(string(seed))) {
		t.Fatal("the error quotes the seed")
	}
}

// securityFixture is a running two-edge system, secured (the default) or
// not; the insecure one is the control that shows each attack is real.
func securityFixture(t *testing.T, insecure bool) *System {
	t.Helper()
	return testSystem(t, Options{Edges: 2, Insecure: insecure, Configure: withTransport(topology.TransportSourcing, "")}, nil)
}

// forgeReceipt publishes, on edge1's own server, a processed receipt in
// edge2's name.
func forgeReceipt(t *testing.T, ls *System, eventID string) {
	t.Helper()
	r := receipt.New(eventID, ls.Topology.Events.OriginStream, "edge2", "edge2", receipt.StatusProcessed, time.Time{})
	data, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ls.App("edge1").ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m := nats.NewMsg(ls.Topology.ReceiptSubject("edge2", string(receipt.StatusProcessed)))
	m.Header.Set(jetstream.MsgIDHeader, r.MsgID())
	m.Data = data
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// reachedL1 reports whether a receipt for eventID got to L1's completion
// service: it then holds a completion record for the event, or has parked
// the receipt in its quarantine stream. The receipts streams on the way
// cannot tell: they delete what the next hop has taken.
func reachedL1(t *testing.T, ls *System, eventID string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l1 := ls.App("l1")
	if _, err := leafline.Completions(l1).State().Get(ctx, eventID); err == nil {
		return true
	} else if !errors.Is(err, record.ErrNotFound) {
		t.Fatal(err)
	}
	s, err := jstest.ConnectURL(t, l1.ClientURL()).Stream(ctx, ls.Configs["l1"].Completion.QuarantineStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	st := s.CachedInfo().State
	for seq := st.FirstSeq; st.Msgs > 0 && seq <= st.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var rec completion.QuarantineRecord
		if err := json.Unmarshal(m.Data, &rec); err != nil {
			t.Fatalf("quarantine record %d: %v", seq, err)
		}
		if bytes.Contains(rec.Receipt, []byte(eventID)) {
			return true
		}
	}
	return false
}

// TestSecurity_ForgedReceipt: a receipt published in another site's name
// on an edge's own server never reaches L1 through that site's receipts
// stream and the hub: L1 neither records nor quarantines it. Without the
// link permissions it does reach L1: the control shows the attack is real.
func TestSecurity_ForgedReceipt(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		t.Run(fmt.Sprintf("insecure=%v", insecure), func(t *testing.T) {
			ls := securityFixture(t, insecure)
			forged := "forged-" + fmt.Sprint(time.Now().UnixNano())
			forgeReceipt(t, ls, forged)
			if insecure {
				check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
					if !reachedL1(t, ls, forged) {
						return errors.New("forged receipt not (yet) at L1")
					}
					return nil
				})
				return
			}
			// A real event after the forged receipt goes all the way through
			// both edges, the hub and L1: by then anything the forged
			// receipt could have reached, it would have reached.
			ids := publishN(t, jstest.ConnectURL(t, ls.App("l1").ClientURL()), "after-forgery", 1)
			waitCompleted(t, ls, ids, "edge1", "edge2")
			if reachedL1(t, ls, forged) {
				t.Fatal("the forged receipt reached L1")
			}
		})
	}
}

// TestSecurity_EdgeCannotReadOrDelete: through its link an edge can neither
// read another site's stream (its deliveries, or the JetStream API of the
// hub, L1 or another edge) nor delete or create anything; the hub cannot
// reach L1's API either. The insecure control shows that the same requests
// otherwise succeed.
func TestSecurity_EdgeCannotReadOrDelete(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		t.Run(fmt.Sprintf("insecure=%v", insecure), func(t *testing.T) {
			ls := securityFixture(t, insecure)
			edgeNC, err := nats.Connect(ls.App("edge1").ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(edgeNC.Close)
			// edge1 listens on edge2's deliver subject while events flow.
			stolen, err := edgeNC.SubscribeSync(topology.SourceDeliverSubject("hub", "HA", "edge2"))
			if err != nil {
				t.Fatal(err)
			}
			edgeNC.Flush()
			api := func(subject string) error { return jsAPI(edgeNC, subject, nil) }
			reads := []string{
				"$JS.hub.API.STREAM.INFO.HA",
				"$JS.edge2.API.STREAM.INFO.RE",
				"$JS.l1.API.STREAM.INFO.L1A",
				"$JS.hub.API.CONSUMER.INFO.HA.leafline-src-edge2",
			}
			for _, subj := range reads {
				err := api(subj)
				switch {
				case insecure && err != nil:
					t.Fatalf("control: %s failed: %v", subj, err)
				case !insecure && err == nil:
					t.Fatalf("%s answered across edge1's link", subj)
				}
			}
			if insecure {
				// The control stops here: deleting through an open link works,
				// which needs no further proof.
				return
			}
			for _, subj := range []string{
				"$JS.hub.API.STREAM.DELETE.HA",
				"$JS.hub.API.STREAM.DELETE.RH",
				"$JS.edge2.API.STREAM.DELETE.RE",
				"$JS.l1.API.STREAM.DELETE.L1A",
				"$JS.hub.API.CONSUMER.DELETE.HA.leafline-src-edge2",
			} {
				if err := api(subj); err == nil {
					t.Fatalf("%s answered across edge1's link", subj)
				} else if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
					t.Fatalf("%s: %v (want no responders or a timeout: the request must not reach the API)", subj, err)
				}
			}
			// The hub's own link to L1 is as narrow.
			hubNC, err := nats.Connect(ls.App("hub").ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(hubNC.Close)
			if _, err := hubNC.Request("$JS.l1.API.STREAM.DELETE.L1A", nil, 2*time.Second); err == nil {
				t.Fatal("the hub reached L1's API to delete L1A")
			}
			ids := publishN(t, jstest.ConnectURL(t, ls.App("l1").ClientURL()), "after-attempts", 20)
			waitCompleted(t, ls, ids, "edge1", "edge2")
			ctx := context.Background()
			for _, s := range []struct{ site, stream string }{{"hub", "HA"}, {"hub", "RH"}, {"edge2", "RE"}, {"l1", "L1A"}} {
				if _, err := jstest.ConnectURL(t, ls.App(s.site).ClientURL()).Stream(ctx, s.stream); err != nil {
					t.Fatalf("%s's %s: %v", s.site, s.stream, err)
				}
			}
			if m, err := stolen.NextMsg(100 * time.Millisecond); err == nil {
				t.Fatalf("edge1 received edge2's delivery %q", m.Subject)
			}
		})
	}
}

// TestSecurity_LinkPermissionsAreWhatIsUsed: every subject the links use is
// allowed (the system works end to end with the permissions on, see the
// system tests), and the permissions are exactly the topology's.
func TestSecurity_ServerUsersFromTopology(t *testing.T) {
	ls, err := newLocal(t.TempDir(), Options{Edges: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	cfg := ls.Configs["hub"]
	site, _ := cfg.Topology.Site("hub")
	opts, err := box.ServerOptions(cfg, site)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Nkeys) != 2 || opts.NoAuthUser != topology.LocalUser {
		t.Fatalf("nkeys %d, no_auth_user %q", len(opts.Nkeys), opts.NoAuthUser)
	}
	for _, nk := range opts.Nkeys {
		var edge string
		for _, e := range []string{"edge1", "edge2"} {
			if ls.Credentials.Sites[e].Nkey == nk.Nkey {
				edge = e
			}
		}
		want, _ := linkperm.Of(ls.Topology, edge)
		if _, ok := nk.AllowedConnectionTypes["LEAFNODE"]; !ok || len(nk.AllowedConnectionTypes) != 1 {
			t.Fatalf("%s: connection types %v", edge, nk.AllowedConnectionTypes)
		}
		if fmt.Sprint(nk.Permissions.Publish.Allow) != fmt.Sprint(want.Publish) ||
			fmt.Sprint(nk.Permissions.Subscribe.Allow) != fmt.Sprint(want.Subscribe) {
			t.Fatalf("%s: permissions %+v %+v", edge, nk.Permissions.Publish, nk.Permissions.Subscribe)
		}
	}
	if opts.LeafNode.TLSConfig == nil || opts.LeafNode.TLSConfig.ClientCAs == nil {
		t.Fatal("hub listener is not mutual TLS")
	}
	if r := opts.LeafNode.Remotes[0]; !r.TLS || r.Nkey == "" || r.TLSConfig.RootCAs == nil || len(r.TLSConfig.Certificates) != 1 {
		t.Fatalf("hub remote: tls=%v nkey set=%v", r.TLS, r.Nkey != "")
	}
}

// TestSecurity_PasswordLink: a site may authenticate with a password read
// from the environment against the bcrypt hash in the topology; a wrong
// password is refused and said so.
func TestSecurity_PasswordLink(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("right-pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	for _, pw := range []string{"right-pw", "wrong-pw"} {
		t.Run(pw, func(t *testing.T) {
			ls, err := newLocal(t.TempDir(), Options{Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ls.Close)
			s, _ := ls.Topology.Site("edge1")
			s.Leafnode.Auth = topology.LeafAuth{Method: topology.AuthPassword, User: "edge1", PasswordBcrypt: string(hash)}
			cfg := ls.Configs["edge1"]
			cfg.Leafnode.UpstreamAuth = topology.UpstreamAuth{PasswordEnv: "LEAFLINE_TEST_EDGE1_PW"}
			t.Setenv("LEAFLINE_TEST_EDGE1_PW", pw)
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, site := range []string{"hub", "edge1"} {
				if _, err := ls.Start(ctx, site); err != nil {
					t.Fatal(err)
				}
			}
			edge := ls.App("edge1")
			check.For(t, 15*time.Second, 50*time.Millisecond, func() error {
				switch why := box.UpstreamError(edge.Server()); {
				case pw == "right-pw" && !edge.UpstreamConnected():
					return errors.New("not connected: " + why)
				case pw == "wrong-pw" && !strings.Contains(why, "Authorization Violation"):
					return fmt.Errorf("upstream error %q", why)
				}
				return nil
			})
			if strings.Contains(box.UpstreamError(edge.Server()), pw) {
				t.Fatal("the link status quotes the password")
			}
		})
	}
}

// jsAPI sends a JetStream API request (body marshalled as JSON unless nil)
// and returns the API error it answers, or the request's own error.
func jsAPI(nc *nats.Conn, subject string, body any) error {
	var data []byte
	if body != nil {
		data, _ = json.Marshal(body)
	}
	m, err := nc.Request(subject, data, 2*time.Second)
	if err != nil {
		return err
	}
	var resp struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return err
	}
	if resp.Error != nil {
		return errors.New(resp.Error.Description)
	}
	return nil
}
