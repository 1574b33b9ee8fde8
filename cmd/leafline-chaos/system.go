//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leafline/leafline/cmd/leafline-chaos/internal/faultlog"
	"github.com/leafline/leafline/cmd/leafline-chaos/internal/receiver"
	"github.com/leafline/leafline/internal/faultproxy"
	"github.com/leafline/leafline/internal/loopback"
)

// system is the system under test: the boxes as OS processes, their
// configs, and the proxies on every leafnode link.
type system struct {
	o     options
	dir   string
	bin   string
	rec   *faultlog.Log
	boxes map[string]*box
	order []string // l1, hub, edge1[, edge2]: start order
	links []*link  // hub-l1, edge1-hub[, edge2-hub]

	recv *receiver.Receiver // edge1's http sink target, with --sink http
	disk *tmpfs             // edge1's data dir, when the disk fault is enabled
	ns   *nsLink            // the netns leg of edge1-hub, when the netns fault is enabled
	bg   sync.WaitGroup
	// power holds the data dirs on forgetfs, by box, when the powercut
	// fault is enabled (every box but a tmpfs one).
	power map[string]*powerDisk
	// closing is set when the run is over: dead boxes are no longer restarted.
	closing atomic.Bool
	// keep: the run's directory is kept; save the tmpfs contents too.
	keep atomic.Bool
	// fatal receives a box that could not be restarted at all.
	fatal chan error
}

// link is one leafnode link, carried by a faultproxy.
type link struct {
	name  string // "edge1-hub", "hub-l1"
	down  string // the box that dials
	proxy *faultproxy.Proxy
	busy  atomic.Bool // a cut is in progress
}

// newSystem lays out the topology, the configs and the proxies under dir.
// It starts no box.
func newSystem(ctx context.Context, o options, dir, bin string, rec *faultlog.Log) (*system, error) {
	c := &system{o: o, dir: dir, bin: bin, rec: rec, boxes: map[string]*box{}, power: map[string]*powerDisk{}, fatal: make(chan error, 8)}
	ok := false
	defer func() {
		if !ok {
			c.close()
		}
	}()
	ports, err := loopback.FreePorts(3 + 2*(2+o.Edges))
	if err != nil {
		return nil, err
	}
	next := func() string { p := ports[0]; ports = ports[1:]; return fmt.Sprintf("127.0.0.1:%d", p) }
	l1Leaf, hubLeaf, recvAddr := next(), next(), next()

	edges := make([]string, o.Edges)
	for i := range edges {
		edges[i] = fmt.Sprintf("edge%d", i+1)
	}
	if err := writeTopology(o, dir, edges, l1Leaf, hubLeaf); err != nil {
		return nil, err
	}
	if err := c.openLinks(ctx, edges, l1Leaf, hubLeaf); err != nil {
		return nil, err
	}
	if err := c.mountFaultDisks(edges); err != nil {
		return nil, err
	}
	for _, name := range append([]string{"l1", "hub"}, edges...) {
		b := &box{c: c, name: name, cfgPath: filepath.Join(dir, name+".json"), logPath: filepath.Join(dir, name+".log"),
			dataDir: filepath.Join(dir, "data", name), natsAddr: next(), opsAddr: next()}
		if err := writeJSON(b.cfgPath, c.boxConfig(b, recvAddr)); err != nil {
			return nil, err
		}
		c.boxes[name] = b
		c.order = append(c.order, name)
	}
	if o.Sink == "http" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		if c.recv, err = receiver.Start(ctx, exe, recvAddr, filepath.Join(dir, "received"), filepath.Join(dir, "receiver.log")); err != nil {
			return nil, err
		}
	}
	for _, name := range c.order {
		out, err := exec.CommandContext(ctx, bin, "check", "--config", c.boxes[name].cfgPath).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("leafline check %s: %v\n%s", c.boxes[name].cfgPath, err, out)
		}
	}
	ok = true
	return c, nil
}

// writeTopology writes dir/topology.json: l1, the hub and the edges, each
// link on the transport --transport gives it.
func writeTopology(o options, dir string, edges []string, l1Leaf, hubLeaf string) error {
	sites := []map[string]any{
		{"name": "l1", "role": "l1", "leafnode": map[string]any{"listen": l1Leaf}},
		{"name": "hub", "role": "hub", "upstream": "l1", "leafnode": map[string]any{"listen": hubLeaf}},
	}
	for _, e := range edges {
		sites = append(sites, map[string]any{"name": e, "role": "edge", "upstream": "hub"})
	}
	for _, s := range sites[1:] {
		if t := transportOf(o.Transport, s["name"].(string)); t != "" {
			s["transport"] = t
		}
	}
	// Short duplicate windows let L1's redrive (which must wait longer
	// than both) repair a lost event within the drain.
	window := (o.RedriveAfter / 3).String()
	events := map[string]any{"duplicate_window": window}
	if o.Priority {
		events["priorities"] = []map[string]any{{"name": "urgent", "subjects": []string{"events.chaos.0"}}}
	}
	topo := map[string]any{"sites": sites, "events": events, "receipts": map[string]any{"duplicate_window": window}}
	if o.Faults[faultPark] {
		// Small enough that a park passes it: the hub releases the
		// parked edge's oldest events, and L1 sends them again.
		topo["backlog"] = map[string]any{"max_bytes": fmt.Sprintf("%dKiB", parkBudget(o)>>10)}
	}
	return writeJSON(filepath.Join(dir, "topology.json"), topo)
}

// hubEventBytes is about what one chaos event takes in the hub's events
// stream (its payload, subject and headers, with the relay's), for the
// backlog budget.
const hubEventBytes = 256

// parkBudget is each edge's backlog budget at the hub with the park fault:
// what the hub stores for an edge in a third of a park at --rate, so that
// a park passes it even when part of it the hub gets no events (its link
// cut, L1 down), and a link cut shorter than that does not.
func parkBudget(o options) int64 {
	b := int64(o.Rate) * int64(o.ParkFor/time.Second/3) * hubEventBytes
	return max(b, 64<<10)
}

// openLinks puts a proxy that the driver cuts on each leafnode link
// (hub→L1, edge→hub) and, with the netns fault, a veth pair under
// edge1's.
func (c *system) openLinks(ctx context.Context, edges []string, l1Leaf, hubLeaf string) error {
	hubLink, err := faultproxy.Listen("127.0.0.1:0", l1Leaf)
	if err != nil {
		return err
	}
	c.links = append(c.links, &link{name: "hub-l1", down: "hub", proxy: hubLink})
	if c.o.Faults[faultNetns] {
		ns, err := newNSLink(ctx, hubLeaf, c.o.Seed)
		if err != nil {
			c.rec.Skip(faultNetns, "netns fault skipped: %v", err)
		} else {
			c.ns = ns
		}
	}
	for _, e := range edges {
		target := hubLeaf
		if e == "edge1" && c.ns != nil {
			target = c.ns.entry
		}
		p, err := faultproxy.Listen("127.0.0.1:0", target)
		if err != nil {
			return err
		}
		c.links = append(c.links, &link{name: e + "-hub", down: e, proxy: p})
	}
	return nil
}

// mountFaultDisks mounts the small tmpfs under edge1 (the disk fault) and
// forgetfs under every box (the powercut fault), skipping a fault whose
// filesystem this host cannot mount.
func (c *system) mountFaultDisks(edges []string) error {
	o := c.o
	if o.Faults[faultDisk] {
		size := o.DiskSize
		if size == 0 {
			size = diskSizeFor(o)
		}
		t, err := mountTmpfs(filepath.Join(c.dir, "data", "edge1"), size)
		if err != nil {
			c.rec.Skip(faultDisk, "disk fault skipped: %v", err)
		} else {
			c.disk = t
		}
	}

	if o.Faults[faultPowerCut] {
		if err := c.mountPower(append([]string{"l1", "hub"}, edges...)); err != nil {
			if o.UnsafeSync {
				return fmt.Errorf("--unsafe-sync needs the powercut fault: %w", err)
			}
			c.rec.Skip(faultPowerCut, "powercut fault skipped: %v", err)
		}
	}
	return nil
}

// boxConfig is b's leafline config; it sets b's role, environment and
// file sink directory. recvAddr is the http sink's receiver.
func (c *system) boxConfig(b *box, recvAddr string) map[string]any {
	o := c.o
	cfg := map[string]any{
		"topology": "topology.json",
		"site":     b.name,
		"data_dir": b.dataDir,
		"nats":     map[string]any{"listen": b.natsAddr},
		"ops":      map[string]any{"listen": b.opsAddr},
		"log":      map[string]any{"level": "info"},
	}
	switch b.name {
	case "l1":
		b.role = "l1"
		// The checker reads every revision the bucket keeps.
		redrive := o.RedriveAfter.String()
		if o.NegativeControl || o.UnsafeSync {
			// The control proves that the checker sees loss: L1 must
			// not repair it during the drain.
			redrive = "24h"
		}
		cfg["completion"] = map[string]any{
			"redrive_after": redrive, "overdue_after": (o.RedriveAfter / 3).String()}
		if o.Cleanup {
			cfg["completion"].(map[string]any)["cleanup"] = cleanupL1Config()
		}
	case "hub":
		b.role = "hub"
		cfg["leafnode"] = map[string]any{"upstream_url": "nats-leaf://" + c.link("hub-l1").proxy.Addr(), "reconnect_interval": "1s"}
	default:
		c.edgeConfig(b, cfg, recvAddr)
	}
	if c.power[b.name] != nil && o.UnsafeSync {
		js, _ := cfg["jetstream"].(map[string]any)
		if js == nil {
			js = map[string]any{}
		}
		js["sync_interval"] = "2m" // nats-server's default: a PubAck means the page cache
		cfg["jetstream"] = js
	}
	return cfg
}

// edgeConfig fills cfg, the config of the edge b.
func (c *system) edgeConfig(b *box, cfg map[string]any, recvAddr string) {
	o := c.o
	b.role = "edge"
	sink := "store"
	if b.name == "edge2" || o.NegativeControl || o.FileNoDirSync {
		// A real sink write before the outbox commit exercises
		// edge.after_sink_write, where the negative control kills.
		sink = "file"
	}
	cfg["leafnode"] = map[string]any{"upstream_url": "nats-leaf://" + c.link(b.name+"-hub").proxy.Addr(), "reconnect_interval": "1s"}
	cfg["sink"] = map[string]any{"type": sink}
	if b.name == "edge1" && o.Sink == "http" {
		cfg["sink"] = map[string]any{"type": "http", "http": map[string]any{"url": "http://" + recvAddr + "/events", "timeout": "5s"}}
	}
	cfg["delivery"] = map[string]any{"ack_wait": o.AckWait.String(), "batch_size": 64}
	cfg["dead_letter"] = map[string]any{"enabled": true}
	cfg["outbox"] = map[string]any{"relay_interval": "1s", "publish_timeout": "3s"}
	if b.name == "edge1" && c.disk != nil {
		// JetStream reserves each stream's max bytes up front: keep
		// the reservations inside the small filesystem.
		cfg["jetstream"] = map[string]any{"max_store_bytes": c.disk.size, "max_stream_bytes": c.disk.size / 4}
	}
	if o.NegativeControl {
		b.baseEnv = []string{"LEAFLINE_FAILPOINTS=" + negativeControlEnv}
	}
	if o.FileNoDirSync {
		b.baseEnv = []string{"LEAFLINE_FAILPOINTS=" + fileNoDirSyncEnv}
	}
	if sink == "file" {
		b.fileSinkDir = filepath.Join(b.dataDir, "sink")
	}
}

// diskSizeFor estimates what edge1 writes in a run (its events stream,
// receipts stream and outbox grow by about 2 KiB per event) plus room to
// spare, so that only the filler fills the disk.
func diskSizeFor(o options) int64 {
	est := int64(o.Duration.Seconds()+o.DrainTimeout.Seconds()) * int64(o.Rate) * 2048
	size := max(est*3/2, 64<<20)
	return (size + 1<<20 - 1) &^ (1<<20 - 1)
}

func (c *system) link(name string) *link {
	for _, l := range c.links {
		if l.name == name {
			return l
		}
	}
	return nil
}

func (c *system) edges() []*box {
	var out []*box
	for _, n := range c.order {
		if c.boxes[n].role == "edge" {
			out = append(out, c.boxes[n])
		}
	}
	return out
}

// startAll starts every box in order and waits until each is ready.
func (c *system) startAll(ctx context.Context) error {
	for _, n := range c.order {
		if err := c.boxes[n].start(ctx, c.boxes[n].env()); err != nil {
			return err
		}
	}
	return nil
}

// heal restores every link and makes sure every box runs.
func (c *system) heal(ctx context.Context) error {
	for _, l := range c.links {
		l.proxy.Restore()
	}
	if c.ns != nil {
		if err := c.ns.restore(); err != nil {
			return fmt.Errorf("heal netns link: %w", err)
		}
	}
	if c.disk != nil {
		c.disk.removeFiller()
	}
	var errs []error
	for _, n := range c.order {
		b := c.boxes[n]
		b.cont()
		if err := b.waitRunning(ctx, 90*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// close stops every box (SIGTERM, then SIGKILL), the proxies, the netns
// link and the tmpfs.
func (c *system) close() {
	c.closing.Store(true)
	var wg sync.WaitGroup
	for _, b := range c.boxes {
		wg.Add(1)
		go func() { defer wg.Done(); b.stop(syscall.SIGTERM, 20*time.Second) }()
	}
	wg.Wait()
	c.bg.Wait()
	if c.recv != nil {
		c.recv.Close()
	}
	for _, l := range c.links {
		l.proxy.Close()
	}
	if c.ns != nil {
		c.ns.close()
	}
	if c.disk != nil {
		c.disk.unmount(c.keep.Load())
	}
	for name, d := range c.power {
		if err := d.close(); err != nil {
			c.rec.Info("data dir of %s on forgetfs: %v", name, err)
		}
	}
}

// mountPower puts the data dir of each box but a tmpfs one on forgetfs.
// It mounts all of them or none.
func (c *system) mountPower(names []string) error {
	for _, name := range names {
		if name == "edge1" && c.disk != nil {
			continue
		}
		d, err := mountPowerDisk(filepath.Join(c.dir, "data", name), c.o.PowerCutPOSIX)
		if err != nil {
			for _, m := range c.power {
				_ = m.close()
			}
			c.power = map[string]*powerDisk{}
			return err
		}
		c.power[name] = d
	}
	return nil
}

// writeJSON writes v, indented, to path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// buildLeafline builds ./cmd/leafline of the module that holds this file's
// working directory into dir.
func buildLeafline(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "leafline")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/leafline")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/leafline: %v\n%s", err, out.String())
	}
	return bin, nil
}

// moduleRoot finds the directory of go.mod from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find go.mod above the working directory; run from the leafline module or pass --bin")
		}
		dir = parent
	}
}

// transportOf is the transport of site's link for the --transport flag:
// "mixed" puts the hub's link and edge2's on the relay and edge1's on
// sourcing, so that one run with either edge count has both.
func transportOf(flag, site string) string {
	if flag != "mixed" {
		return flag
	}
	if site == "edge1" {
		return "sourcing"
	}
	return "relay"
}
