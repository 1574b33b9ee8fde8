//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/cmd/leafline-chaos/internal/check"
	"github.com/leafline/leafline/cmd/leafline-chaos/internal/faultlog"
)

// recheck runs the checker again on a kept run directory: it reads the
// publish history from history.jsonl and the fault log from chaos.log,
// starts L1 alone on its data dir, reads the completion bucket's history and
// prints the report. It is for runs whose driver died before reporting.
// The metric bound is not available (L1's counters died with the run).
func recheck(ctx context.Context, o options, dir string) (*result, error) {
	states, err := loadHistory(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return nil, err
	}
	edges, l1cfg, err := keptLayout(dir)
	if err != nil {
		return nil, err
	}
	bin := o.Bin
	if bin == "" {
		bin = filepath.Join(dir, "leafline")
	}
	rec := faultlog.New(o.Stderr, o.Verbose, filepath.Join(dir, "recheck.log"))
	defer rec.Close()
	l1cfgPath, err := recheckConfig(ctx, bin, dir, rec)
	if err != nil {
		return nil, err
	}
	c := &system{o: o, dir: dir, bin: bin, rec: rec, boxes: map[string]*box{}, fatal: make(chan error, 8)}
	l1 := &box{c: c, name: "l1", role: "l1", cfgPath: l1cfgPath, logPath: filepath.Join(dir, "l1.log"),
		natsAddr: l1cfg.NATS.Listen, opsAddr: l1cfg.Ops.Listen}
	c.boxes["l1"] = l1
	c.order = []string{"l1"}
	defer func() {
		c.closing.Store(true)
		l1.stop(syscall.SIGTERM, 20*time.Second)
		c.bg.Wait()
	}()
	if err := l1.start(ctx, nil); err != nil {
		return nil, err
	}
	nc, err := nats.Connect("nats://"+l1.natsAddr, nats.Name("chaos-recheck"))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if err := completionLog(ctx, js); err != nil {
		return nil, err
	}
	obs := check.NewObserver(edges)
	n, err := obs.ReadAll(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("read the completion history: %w", err)
	}
	rec.Replay(filepath.Join(dir, "chaos.log"), allFaults)
	v := obs.VerdictOf(states, true)
	res := resultOf(o, v, dir)
	res.DuplicateCompletions = res.DupKV
	res.Faults, res.Kills, res.Cuts, res.LongCuts = faultTotals(rec)
	res.Seed, res.Duration, res.MaxDrainS = parseRunLine(filepath.Join(dir, "chaos.log"))
	res.Findings = append(res.Findings, rec.Findings()...)
	res.FinalLine = res.finalLine()
	fmt.Fprintf(o.Stdout, "recheck of %s (L1 restarted alone; no metric bound)\n", dir)
	fmt.Fprintf(o.Stdout, "history.jsonl ends at %s: %d completion records past its end are not counted (the driver died before writing them down)\n",
		check.EventID(len(states)-1), v.PastHistory)
	res.Redrives = -1
	report(o.Stdout, o, rec, res, v, 0, 0, n, obs.Revisions())
	return res, nil
}

// keptConfig is what recheck needs of a kept box config.
type keptConfig struct {
	NATS struct{ Listen string } `json:"nats"`
	Ops  struct{ Listen string } `json:"ops"`
}

// keptLayout reads a kept run's edges (from topology.json) and L1's config.
func keptLayout(dir string) ([]string, keptConfig, error) {
	var topo struct {
		Sites []struct{ Name, Role string } `json:"sites"`
	}
	var l1cfg keptConfig
	if err := readJSON(filepath.Join(dir, "topology.json"), &topo); err != nil {
		return nil, l1cfg, err
	}
	var edges []string
	for _, s := range topo.Sites {
		if s.Role == "edge" {
			edges = append(edges, s.Name)
		}
	}
	err := readJSON(filepath.Join(dir, "l1.json"), &l1cfg)
	return edges, l1cfg, err
}

// recheckConfig returns the L1 config to recheck with. L1 sets its
// completion bucket to completion.history (zero: 1), so a run kept before
// the driver wrote that setting (its history raised through the JetStream
// API) would lose all but the latest revision of every key on the restart.
// For such a run it writes l1-recheck.json with the highest history, which
// keeps every revision; a binary that rejects the setting predates it and
// never changes the history, so l1.json is used as it is.
func recheckConfig(ctx context.Context, bin, dir string, rec *faultlog.Log) (string, error) {
	orig := filepath.Join(dir, "l1.json")
	var cfg map[string]any
	if err := readJSON(orig, &cfg); err != nil {
		return "", err
	}
	co, _ := cfg["completion"].(map[string]any)
	if co == nil {
		co = map[string]any{}
	}
	if _, ok := co["history"]; ok {
		return orig, nil
	}
	co["history"] = jetstream.KeyValueMaxHistory
	cfg["completion"] = co
	path := filepath.Join(dir, "l1-recheck.json")
	if err := writeJSON(path, cfg); err != nil {
		return "", err
	}
	if out, err := exec.CommandContext(ctx, bin, "check", "--config", path).CombinedOutput(); err != nil {
		rec.Info("%s rejects completion.history (%v: %s); rechecking with l1.json as it is", bin, err, strings.TrimSpace(string(out)))
		return orig, nil
	}
	rec.Info("l1.json has no completion.history: rechecking with l1-recheck.json (history %d) so that L1 keeps every revision", jetstream.KeyValueMaxHistory)
	return path, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func loadHistory(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var states []byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l historyLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			continue // a torn last line
		}
		n, ok := check.EventNum(l.Event)
		if !ok {
			continue
		}
		for len(states) <= n {
			states = append(states, check.None)
		}
		switch l.Op {
		case "publish":
			if states[n] == check.None {
				states[n] = check.Published
			}
		case "ok":
			states[n] = check.Acked
		case "unknown":
			states[n] = check.Unknown
		}
	}
	return states, sc.Err()
}

// parseRunLine reads the seed and duration from the first line of a
// chaos.log and the drain time from its "drain:" line.
func parseRunLine(path string) (seed uint64, d time.Duration, drain float64) {
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.Index(line, "chaos seed="); i >= 0 && seed == 0 {
			for _, f := range strings.Fields(line[i:]) {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "seed":
					seed, _ = strconv.ParseUint(v, 10, 64)
				case "duration":
					d, _ = time.ParseDuration(v)
				}
			}
		}
		if _, rest, ok := strings.Cut(line, "] drain: "); ok && strings.Contains(rest, " after ") {
			s := strings.TrimSuffix(rest[strings.LastIndex(rest, " after ")+7:], "s")
			drain, _ = strconv.ParseFloat(s, 64)
		}
	}
	return seed, d, drain
}
