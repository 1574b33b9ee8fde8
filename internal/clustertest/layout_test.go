//go:build unix

package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/loopback"
	"github.com/leafline/leafline/internal/natsproc"
	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/render"
)

// boxEnv, set in a child's environment, makes the test binary run the box
// config it names instead of the tests, as `leafline run` would.
const boxEnv = "LEAFLINE_CLUSTERTEST_BOX"

func TestMain(m *testing.M) {
	if path := os.Getenv(boxEnv); path != "" {
		os.Exit(runBox(path))
	}
	code := m.Run()
	natsproc.Cleanup()
	os.Exit(code)
}

func runBox(path string) int {
	cfg, err := topology.LoadConfig(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	app, err := leafline.New(cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := app.Run(ctx); err != nil {
		log.Error("box exited", "err", err)
		return 1
	}
	return 0
}

// node addresses: L1's on 127.0.0.11-13, the hub's on 127.0.0.21-23, with
// the same three ports on each address.
var (
	l1IPs  = []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"}
	hubIPs = []string{"127.0.0.21", "127.0.0.22", "127.0.0.23"}
)

// layout is one run's sites: two clusters of stock servers, and the boxes.
type layout struct {
	t   *testing.T
	dir string
	// l1Nodes and hubNodes are the clusters' servers.
	l1Nodes, hubNodes []*natsproc.Server
	// boxes by name: l1-a, l1-b, hub-a, edge1, edge2.
	boxes map[string]*box
	// l1URL is where events are published: L1's client URLs.
	l1URL string
}

// layoutOptions vary the layout for measurements.
type layoutOptions struct {
	// embeddedL1 runs L1 as one box with its embedded server (l1-a; no
	// l1-b) instead of a cluster, for a side-by-side measurement.
	embeddedL1 bool
}

// box is one leafline box run as a child process of the test binary.
type box struct {
	t      *testing.T
	name   string
	config string
	ops    string // ops host:port
	log    string
	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
}

func needLoopbackNet(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.23:0")
	if err != nil {
		t.Skipf("needs the 127.0.0.0/8 loopback network (127.0.0.11-13, 127.0.0.21-23): %v", err)
	}
	l.Close()
}

// newLayout writes the topology and box configs, renders the clusters'
// server configurations with render.ClusterConfigs, and starts the six
// servers. Boxes are started by the test.
func newLayout(t *testing.T, o layoutOptions) *layout {
	t.Helper()
	if testing.Short() {
		t.Skip("runs six nats-server processes and five boxes; skipped with -short")
	}
	needLoopbackNet(t)
	wd, _ := os.Getwd()
	bin, err := natsproc.Binary(wd)
	if err != nil {
		t.Fatal(err)
	}
	ports, err := loopback.FreePorts(13)
	if err != nil {
		t.Fatal(err)
	}
	lay := &layout{t: t, dir: t.TempDir(), boxes: map[string]*box{}}
	l1Client, l1Route, l1Leaf, hubClient, hubRoute, hubLeaf := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	lay.write("topology.json", topologyJSON(l1IPs[0], l1Leaf, hubIPs[0], hubLeaf))
	l1Cluster := clusterJSON(lay.dir, "l1", l1IPs, l1Client, l1Route, l1Leaf)
	hubCluster := clusterJSON(lay.dir, "hub", hubIPs, hubClient, hubRoute, hubLeaf)
	hubUp := urlList("nats-leaf", l1IPs, l1Leaf)
	lay.l1URL = strings.Join([]string{
		fmt.Sprintf("nats://%s:%d", l1IPs[0], l1Client), fmt.Sprintf("nats://%s:%d", l1IPs[1], l1Client), fmt.Sprintf("nats://%s:%d", l1IPs[2], l1Client),
	}, ",")
	if o.embeddedL1 {
		hubUp = urlList("nats-leaf", l1IPs[:1], l1Leaf)
		lay.l1URL = fmt.Sprintf("nats://%s:%d", l1IPs[0], l1Client)
	}
	edgeUp := urlList("nats-leaf", hubIPs, hubLeaf)
	boxes := []struct {
		name, cfg string
	}{
		{"l1-a", fmt.Sprintf(`{"topology": "topology.json", "site": "l1", "data_dir": %q, "ops": {"listen": "127.0.0.1:%d"}, "cluster": %s}`,
			filepath.Join(lay.dir, "l1-a"), ports[6], l1Cluster)},
		{"l1-b", fmt.Sprintf(`{"topology": "topology.json", "site": "l1", "data_dir": %q, "ops": {"listen": "127.0.0.1:%d"}, "cluster": %s}`,
			filepath.Join(lay.dir, "l1-b"), ports[7], l1Cluster)},
		{"hub-a", fmt.Sprintf(`{"topology": "topology.json", "site": "hub", "data_dir": %q, "ops": {"listen": "127.0.0.1:%d"}, "leafnode": {"upstream_urls": %s}, "cluster": %s}`,
			filepath.Join(lay.dir, "hub-a"), ports[8], hubUp, hubCluster)},
		{"edge1", edgeJSON(lay.dir, "edge1", ports[9], ports[10], edgeUp)},
		{"edge2", edgeJSON(lay.dir, "edge2", ports[11], ports[12], edgeUp)},
	}
	if o.embeddedL1 {
		boxes[0].cfg = fmt.Sprintf(`{"topology": "topology.json", "site": "l1", "data_dir": %q, "nats": {"listen": "%s:%d"}, "ops": {"listen": "127.0.0.1:%d"}}`,
			filepath.Join(lay.dir, "l1-a"), l1IPs[0], l1Client, ports[6])
		boxes = append(boxes[:1], boxes[2:]...)
	}
	for _, b := range boxes {
		path := lay.write(b.name+".json", b.cfg)
		cfg, err := topology.LoadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		lay.boxes[b.name] = &box{t: t, name: b.name, config: path, ops: cfg.Ops.Listen, log: filepath.Join(lay.dir, b.name+".log")}
	}
	if !o.embeddedL1 {
		lay.l1Nodes = lay.startCluster(bin, "l1-a", l1Client)
	}
	lay.hubNodes = lay.startCluster(bin, "hub-a", hubClient)
	t.Cleanup(lay.stop)
	return lay
}

// startCluster renders the cluster of the box config's site and starts its servers.
func (lay *layout) startCluster(bin, boxName string, clientPort int) []*natsproc.Server {
	t := lay.t
	cfg, err := topology.LoadConfig(lay.boxes[boxName].config)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := render.ClusterConfigs(cfg.Topology, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var servers []*natsproc.Server
	for i, n := range rendered {
		path := lay.write(n.Name+".conf", n.Config)
		s := &natsproc.Server{Name: n.Name, Bin: bin, Config: path, Log: filepath.Join(lay.dir, n.Name+".log"),
			Addr: net.JoinHostPort(cfg.Cluster.Nodes[i].Listen[:strings.LastIndex(cfg.Cluster.Nodes[i].Listen, ":")], fmt.Sprint(clientPort))}
		servers = append(servers, s)
	}
	// The servers start together: each waits for its routes' quorum.
	var wg sync.WaitGroup
	errs := make([]error, len(servers))
	for i, s := range servers {
		wg.Go(func() { errs[i] = s.Start(30 * time.Second) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	waitJetStream(t, servers[0].Addr)
	return servers
}

func (lay *layout) write(name, content string) string {
	path := filepath.Join(lay.dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		lay.t.Fatal(err)
	}
	return path
}

// stop stops the boxes, then the servers; a failed test keeps the logs'
// last lines in its output.
func (lay *layout) stop() {
	for _, b := range lay.boxes {
		b.stop()
	}
	for _, s := range append(lay.l1Nodes, lay.hubNodes...) {
		s.Stop()
	}
	if lay.t.Failed() {
		for name := range lay.boxes {
			tail(lay.t, filepath.Join(lay.dir, name+".log"))
		}
	}
}

func tail(t *testing.T, path string) {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	t.Logf("--- %s\n%s", filepath.Base(path), strings.Join(lines, "\n"))
}

func topologyJSON(l1IP string, l1Leaf int, hubIP string, hubLeaf int) string {
	return fmt.Sprintf(`{
  "events": {"origin_stream": "L1A", "subjects": ["events.>"], "hub_stream": "HA", "edge_stream": "L2A", "duplicate_window": "2m"},
  "receipts": {"subject_prefix": "leafline.receipts", "edge_stream": "RE", "hub_stream": "RH", "l1_stream": "R1", "duplicate_window": "10s"},
  "sites": [
    {"name": "l1", "role": "l1", "server": "nats-server", "leafnode": {"listen": "%s:%d"}},
    {"name": "hub", "role": "hub", "server": "nats-server", "upstream": "l1", "leafnode": {"listen": "%s:%d"}},
    {"name": "edge1", "role": "edge", "upstream": "hub"},
    {"name": "edge2", "role": "edge", "upstream": "hub"}
  ]
}`, l1IP, l1Leaf, hubIP, hubLeaf)
}

func clusterJSON(dir, site string, ips []string, client, route, leaf int) string {
	var nodes []string
	for i, ip := range ips {
		nodes = append(nodes, fmt.Sprintf(`{"name": "%s-n%d", "listen": "%s:%d", "cluster_listen": "%s:%d", "leafnode_listen": "%s:%d", "data_dir": %q}`,
			site, i+1, ip, client, ip, route, ip, leaf, filepath.Join(dir, fmt.Sprintf("%s-n%d", site, i+1))))
	}
	return fmt.Sprintf(`{"urls": %s, "replicas": 3, "nodes": [%s]}`, urlList("nats", ips, client), strings.Join(nodes, ", "))
}

func edgeJSON(dir, name string, natsPort, opsPort int, upstreams string) string {
	return fmt.Sprintf(`{"topology": "topology.json", "site": %q, "data_dir": %q,
  "nats": {"listen": "127.0.0.1:%d"}, "ops": {"listen": "127.0.0.1:%d"},
  "leafnode": {"upstream_urls": %s}, "sink": {"type": "store"}}`,
		name, filepath.Join(dir, name), natsPort, opsPort, upstreams)
}

func urlList(scheme string, ips []string, port int) string {
	var us []string
	for _, ip := range ips {
		us = append(us, fmt.Sprintf("%q", fmt.Sprintf("%s://%s:%d", scheme, ip, port)))
	}
	return "[" + strings.Join(us, ", ") + "]"
}

// start runs the box as a child process and waits until its /readyz says ready.
func (b *box) start() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	f, err := os.OpenFile(b.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		b.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), boxEnv+"="+b.config)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	b.cmd, b.done = cmd, done
	deadline := time.Now().Add(60 * time.Second)
	for {
		if ready(b.ops) {
			return
		}
		select {
		case <-done:
			tail(b.t, b.log)
			b.t.Fatalf("box %s exited before it was ready", b.name)
		default:
		}
		if time.Now().After(deadline) {
			tail(b.t, b.log)
			b.t.Fatalf("box %s not ready after 60s", b.name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func ready(ops string) bool {
	resp, err := http.Get("http://" + ops + "/readyz")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var r struct {
		Ready bool `json:"ready"`
	}
	return json.NewDecoder(resp.Body).Decode(&r) == nil && r.Ready
}

// kill sends SIGKILL: the box's in-flight work is abandoned unacked.
func (b *box) kill() { b.signal(syscall.SIGKILL) }

// stop sends SIGTERM and waits for a clean stop.
func (b *box) stop() { b.signal(syscall.SIGTERM) }

func (b *box) signal(sig syscall.Signal) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(sig)
	<-b.done
	b.cmd, b.done = nil, nil
}

// waitJetStream waits until the cluster at addr has a JetStream meta leader.
func waitJetStream(t *testing.T, addr string) {
	t.Helper()
	nc, err := nats.Connect("nats://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	check.For(t, 90*time.Second, 200*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := js.AccountInfo(ctx); err != nil {
			return fmt.Errorf("cluster at %s: JetStream does not answer: %w", addr, err)
		}
		return nil
	})
}
