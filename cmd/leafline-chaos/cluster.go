//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leafline/leafline/internal/faultproxy"
	"github.com/leafline/leafline/internal/loopback"
)

// cluster is the system under test: the boxes as OS processes, their
// configs, and the proxies on every leafnode link.
type cluster struct {
	o     options
	dir   string
	bin   string
	rec   *recorder
	boxes map[string]*box
	order []string // l1, hub, edge1[, edge2]: start order
	links []*link  // hub-l1, edge1-hub[, edge2-hub]

	recv *receiver // edge1's http sink target, with --sink http
	disk *tmpfs    // edge1's data dir, when the disk fault is enabled
	ns   *nsLink   // the netns leg of edge1-hub, when the netns fault is enabled
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

// newCluster lays out the topology, the configs and the proxies under dir.
// It starts no box.
func newCluster(ctx context.Context, o options, dir, bin string, rec *recorder) (*cluster, error) {
	c := &cluster{o: o, dir: dir, bin: bin, rec: rec, boxes: map[string]*box{}, power: map[string]*powerDisk{}, fatal: make(chan error, 8)}
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
	if err := writeJSON(filepath.Join(dir, "topology.json"), map[string]any{"sites": sites,
		"events": map[string]any{"duplicate_window": window}, "receipts": map[string]any{"duplicate_window": window}}); err != nil {
		return nil, err
	}

	// Links: hub→L1 and edge→hub, each through a proxy the driver cuts.
	hubLink, err := faultproxy.Listen("127.0.0.1:0", l1Leaf)
	if err != nil {
		return nil, err
	}
	c.links = append(c.links, &link{name: "hub-l1", down: "hub", proxy: hubLink})
	if o.Faults[faultNetns] {
		ns, err := newNSLink(ctx, hubLeaf, o.Seed)
		if err != nil {
			rec.skip(faultNetns, "netns fault skipped: %v", err)
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
			return nil, err
		}
		c.links = append(c.links, &link{name: e + "-hub", down: e, proxy: p})
	}

	if o.Faults[faultDisk] {
		size := o.DiskSize
		if size == 0 {
			size = diskSizeFor(o)
		}
		t, err := mountTmpfs(filepath.Join(dir, "data", "edge1"), size)
		if err != nil {
			rec.skip(faultDisk, "disk fault skipped: %v", err)
		} else {
			c.disk = t
		}
	}

	if o.Faults[faultPowerCut] {
		if err := c.mountPower(append([]string{"l1", "hub"}, edges...)); err != nil {
			if o.UnsafeSync {
				return nil, fmt.Errorf("--unsafe-sync needs the powercut fault: %w", err)
			}
			rec.skip(faultPowerCut, "powercut fault skipped: %v", err)
		}
	}

	for _, name := range append([]string{"l1", "hub"}, edges...) {
		b := &box{c: c, name: name, cfgPath: filepath.Join(dir, name+".json"), logPath: filepath.Join(dir, name+".log"),
			dataDir: filepath.Join(dir, "data", name), natsAddr: next(), opsAddr: next()}
		cfg := map[string]any{
			"topology": "topology.json",
			"site":     name,
			"data_dir": b.dataDir,
			"nats":     map[string]any{"listen": b.natsAddr},
			"ops":      map[string]any{"listen": b.opsAddr},
			"log":      map[string]any{"level": "info"},
		}
		switch name {
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
			cfg["leafnode"] = map[string]any{"upstream_url": "nats-leaf://" + hubLink.Addr(), "reconnect_interval": "1s"}
		default:
			b.role = "edge"
			sink := "store"
			if name == "edge2" || o.NegativeControl || o.FileNoDirSync {
				// A real sink write before the outbox commit exercises
				// edge.after_sink_write, where the negative control kills.
				sink = "file"
			}
			cfg["leafnode"] = map[string]any{"upstream_url": "nats-leaf://" + c.link(name+"-hub").proxy.Addr(), "reconnect_interval": "1s"}
			cfg["sink"] = map[string]any{"type": sink}
			if name == "edge1" && o.Sink == "http" {
				cfg["sink"] = map[string]any{"type": "http", "http": map[string]any{"url": "http://" + recvAddr + "/events", "timeout": "5s"}}
			}
			cfg["delivery"] = map[string]any{"ack_wait": o.AckWait.String(), "batch_size": 64}
			cfg["dead_letter"] = map[string]any{"enabled": true}
			cfg["outbox"] = map[string]any{"relay_interval": "1s", "publish_timeout": "3s"}
			if name == "edge1" && c.disk != nil {
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
		if c.power[name] != nil && o.UnsafeSync {
			js, _ := cfg["jetstream"].(map[string]any)
			if js == nil {
				js = map[string]any{}
			}
			js["sync_interval"] = "2m" // nats-server's default: a PubAck means the page cache
			cfg["jetstream"] = js
		}
		if err := writeJSON(b.cfgPath, cfg); err != nil {
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
		if c.recv, err = startReceiver(ctx, exe, recvAddr, filepath.Join(dir, "received"), filepath.Join(dir, "receiver.log")); err != nil {
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

// diskSizeFor estimates what edge1 writes in a run (its events stream,
// receipts stream and outbox grow by about 2 KiB per event) plus room to
// spare, so that only the filler fills the disk.
func diskSizeFor(o options) int64 {
	est := int64(o.Duration.Seconds()+o.DrainTimeout.Seconds()) * int64(o.Rate) * 2048
	size := max(est*3/2, 64<<20)
	return (size + 1<<20 - 1) &^ (1<<20 - 1)
}

func (c *cluster) link(name string) *link {
	for _, l := range c.links {
		if l.name == name {
			return l
		}
	}
	return nil
}

func (c *cluster) edges() []*box {
	var out []*box
	for _, n := range c.order {
		if c.boxes[n].role == "edge" {
			out = append(out, c.boxes[n])
		}
	}
	return out
}

// startAll starts every box in order and waits until each is ready.
func (c *cluster) startAll(ctx context.Context) error {
	for _, n := range c.order {
		if err := c.boxes[n].start(ctx, c.boxes[n].env()); err != nil {
			return err
		}
	}
	return nil
}

// heal restores every link and makes sure every box runs.
func (c *cluster) heal(ctx context.Context) error {
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
func (c *cluster) close() {
	c.closing.Store(true)
	var wg sync.WaitGroup
	for _, b := range c.boxes {
		wg.Add(1)
		go func() { defer wg.Done(); b.stop(syscall.SIGTERM, 20*time.Second) }()
	}
	wg.Wait()
	c.bg.Wait()
	if c.recv != nil {
		c.recv.close()
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
			c.rec.info("data dir of %s on forgetfs: %v", name, err)
		}
	}
}

// mountPower puts the data dir of each box but a tmpfs one on forgetfs.
// It mounts all of them or none.
func (c *cluster) mountPower(names []string) error {
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

// box is one leafline process: its config, log, and the current process.
type box struct {
	c                 *cluster
	name, role        string
	cfgPath, logPath  string
	dataDir           string
	fileSinkDir       string // the file sink's directory; empty for another sink
	natsAddr, opsAddr string
	baseEnv           []string // environment of every (re)start
	// beforeStop, if set, runs before the driver stops the box (L1: bank
	// its counters).
	beforeStop func()

	// mu is held by a fault for as long as it acts on the box, so that
	// two faults never act on one box at once.
	mu sync.Mutex

	smu  sync.Mutex
	cur  *proc
	hold bool // a fault keeps the box stopped: do not restart it
	// recovering: a recover loop runs; deaths of the processes it starts
	// do not start another one.
	recovering bool
	starts     int    // processes started
	note       string // why the box may die now (e.g. "disk full"); recorded with an exit
}

// proc is one OS process of a box.
type proc struct {
	cmd       *exec.Cmd
	done      chan struct{} // closed when the process has exited
	expected  atomic.Bool   // the driver stopped it
	ready     atomic.Bool
	paused    atomic.Bool
	env       []string
	logOffset int64
	started   time.Time
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// running returns the live process, or nil.
func (b *box) running() *proc {
	b.smu.Lock()
	defer b.smu.Unlock()
	if b.cur != nil && !b.cur.exited() {
		return b.cur
	}
	return nil
}

// Starts returns how many processes the box has had.
func (b *box) Starts() int {
	b.smu.Lock()
	defer b.smu.Unlock()
	return b.starts
}

// start starts a process with the given extra environment unless one is
// running, and waits until it is ready.
func (b *box) start(ctx context.Context, env []string) error {
	b.smu.Lock()
	if b.cur != nil && !b.cur.exited() {
		p := b.cur
		b.smu.Unlock()
		return b.waitReady(ctx, p, 90*time.Second)
	}
	if b.c.closing.Load() {
		b.smu.Unlock()
		return errors.New("cluster is closing")
	}
	f, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		b.smu.Unlock()
		return err
	}
	off, _ := f.Seek(0, io.SeekEnd)
	fmt.Fprintf(f, "=== chaos: start #%d %s env=%q\n", b.starts+1, time.Now().Format(time.RFC3339Nano), env)
	cmd := exec.Command(b.c.bin, "run", "--config", b.cfgPath)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group (a terminal's Ctrl-C reaches the driver only, which
	// stops the boxes itself); die with the driver.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	f.Close()
	if err != nil {
		b.smu.Unlock()
		return fmt.Errorf("%s: start: %w", b.name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), env: env, logOffset: off, started: time.Now()}
	b.cur = p
	b.starts++
	b.smu.Unlock()
	b.c.bg.Add(1)
	go b.watch(p)
	return b.waitReady(ctx, p, 90*time.Second)
}

// cleanEnv is the driver's environment without failpoints.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEAFLINE_FAILPOINTS=") {
			out = append(out, kv)
		}
	}
	return out
}

// waitReady polls /readyz until the process is ready, exits or times out.
func (b *box) waitReady(ctx context.Context, p *proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	url := "http://" + b.opsAddr + "/readyz"
	for {
		if p.ready.Load() {
			return nil
		}
		if code, _, err := httpGet(url); err == nil && code == http.StatusOK {
			p.ready.Store(true)
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s: exited before it was ready (%s); log:\n%s", b.name, p.cmd.ProcessState, b.logSince(p.logOffset, 15))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not ready after %s; log:\n%s", b.name, timeout, b.logSince(p.logOffset, 15))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitRunning waits until the box has a ready process (restarted by the
// watcher or by a fault).
func (b *box) waitRunning(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if p := b.running(); p != nil {
			if err := b.waitReady(ctx, p, time.Until(deadline)); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no ready process after %s", b.name, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// watch waits for the process to exit. An exit the driver did not cause
// (a failpoint kill, a crash) is recorded and the box is restarted, the way
// a service manager would.
func (b *box) watch(p *proc) {
	defer b.c.bg.Done()
	_ = p.cmd.Wait()
	close(p.done)
	if p.expected.Load() || b.c.closing.Load() {
		return
	}
	tail := b.logSince(p.logOffset, 200)
	b.smu.Lock()
	note := b.note
	hold := b.hold
	b.smu.Unlock()
	if fp := failpointIn(tail); fp != "" {
		b.c.rec.fault(faultFailpoint, fp+"@"+b.name, 0)
	} else if note != "" {
		b.c.rec.info("%s exited during %s (%s); last log lines:\n%s", b.name, note, p.cmd.ProcessState, lastLines(tail, 6))
	} else {
		b.c.rec.finding("%s exited by itself outside any fault (%s); last log lines:\n%s", b.name, p.cmd.ProcessState, lastLines(tail, 12))
	}
	b.smu.Lock()
	if hold || b.recovering {
		b.smu.Unlock()
		return
	}
	b.recovering = true
	b.smu.Unlock()
	b.c.bg.Add(1)
	go func() {
		defer b.c.bg.Done()
		defer func() {
			b.smu.Lock()
			b.recovering = false
			b.smu.Unlock()
		}()
		b.recover()
	}()
}

// recover restarts a box that died by itself, with backoff.
func (b *box) recover() {
	delay := 300 * time.Millisecond
	for attempt := 1; ; attempt++ {
		time.Sleep(delay)
		if b.c.closing.Load() {
			return
		}
		b.smu.Lock()
		hold := b.hold
		b.smu.Unlock()
		if hold {
			return
		}
		err := b.start(context.Background(), b.env())
		if err == nil || b.c.closing.Load() {
			return
		}
		if attempt == 1 || attempt%5 == 0 {
			b.c.rec.info("%s: restart attempt %d failed: %s", b.name, attempt, firstLine(err.Error()))
		} else {
			b.c.rec.debug("%s: restart attempt %d failed: %s", b.name, attempt, firstLine(err.Error()))
		}
		if attempt == 30 {
			select {
			case b.c.fatal <- fmt.Errorf("%s does not start any more: %w", b.name, err):
			default:
			}
			return
		}
		delay = min(delay*2, 5*time.Second)
	}
}

// firstLine shortens a start error to its first line and the last line of
// the log tail it carries.
func firstLine(s string) string {
	first, rest, _ := strings.Cut(s, "\n")
	if lines := strings.Split(strings.TrimSpace(rest), "\n"); rest != "" {
		first += " … " + oneLine(lines[len(lines)-1])
	}
	return first
}

// stop stops the running process with sig, the driver's own doing: it is
// not restarted by the watcher. After timeout it is SIGKILLed. It returns
// once the process has exited.
func (b *box) stop(sig syscall.Signal, timeout time.Duration) {
	p := b.running()
	if p == nil {
		return
	}
	if b.beforeStop != nil && p.ready.Load() && !p.paused.Load() {
		b.beforeStop()
	}
	p.expected.Store(true)
	_ = p.cmd.Process.Signal(sig)
	if p.paused.Load() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

// cont resumes a paused process.
func (b *box) cont() {
	if p := b.running(); p != nil && p.paused.Load() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		p.paused.Store(false)
	}
}

// env returns the environment of the box's next (re)start.
func (b *box) env() []string {
	b.smu.Lock()
	defer b.smu.Unlock()
	return b.baseEnv
}

func (b *box) setEnv(env []string) {
	b.smu.Lock()
	b.baseEnv = env
	b.smu.Unlock()
}

func (b *box) setHold(v bool) {
	b.smu.Lock()
	b.hold = v
	b.smu.Unlock()
}

func (b *box) setNote(s string) {
	b.smu.Lock()
	b.note = s
	b.smu.Unlock()
}

// logSince returns up to the last n lines of the box's log after offset.
func (b *box) logSince(offset int64, n int) string {
	f, err := os.Open(b.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 4*n {
			lines = lines[len(lines)-n:]
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func logSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i := range lines {
		lines[i] = "    " + lines[i]
	}
	return strings.Join(lines, "\n")
}

// failpointIn returns the failpoint name of the last "failpoint NAME:
// SIGKILL" line in a log, or "".
func failpointIn(log string) string {
	name := ""
	for _, line := range strings.Split(log, "\n") {
		if rest, ok := strings.CutPrefix(line, "failpoint "); ok {
			if n, _, ok := strings.Cut(rest, ": SIGKILL"); ok {
				name = n
			}
		}
	}
	return name
}

// readiness is the part of /readyz the driver reads.
type readiness struct {
	Ready             bool   `json:"ready"`
	Reason            string `json:"reason"`
	UpstreamConnected *bool  `json:"upstream_connected"`
}

func (b *box) readyz() (int, readiness, string, error) {
	code, body, err := httpGet("http://" + b.opsAddr + "/readyz")
	var r readiness
	if err == nil {
		_ = json.Unmarshal(body, &r)
	}
	return code, r, strings.TrimSpace(string(body)), err
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

func httpGet(url string) (int, []byte, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, body, err
}

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
