package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafline/leafline/internal/check"
)

func runDispatch(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestCLI_HelpOnStdoutExitZero: --help (and -h) of leafline and of every
// command print the usage on stdout and exit 0; a command's usage names
// its arguments.
func TestCLI_HelpOnStdoutExitZero(t *testing.T) {
	cases := [][]string{{"--help"}, {"-h"}, {"help"}, {"status", "--help"}, {"status", "-h"}, {"topology", "--help"},
		{"topology", "render", "--help"}, {"outbox", "--help"}, {"pending", "--config", "x.json", "--help"}}
	for _, c := range commands {
		cases = append(cases, []string{c.name, "--help"})
	}
	for _, args := range cases {
		code, out, errs := runDispatch(args...)
		if code != exitOK || errs != "" || !strings.Contains(strings.ToLower(out), "usage") {
			t.Errorf("leafline %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errs)
		}
	}
	if _, out, _ := runDispatch("status", "--help"); !strings.Contains(out, "EVENT_ID") || !strings.Contains(out, "-config") {
		t.Errorf("status --help does not name EVENT_ID and its flags:\n%s", out)
	}
	// No arguments at all is a usage error.
	if code, out, errs := runDispatch(); code != exitUsage || out != "" || !strings.Contains(errs, "usage") {
		t.Errorf("leafline: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestCLI_Version(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		code, out, errs := runDispatch(args...)
		if code != exitOK || errs != "" || !strings.HasPrefix(out, "leafline ") || !strings.Contains(out, "nats-server v") {
			t.Errorf("leafline %s: exit %d, stdout %q, stderr %q", args[0], code, out, errs)
		}
	}
}

// TestCLI_FlagsAfterPositional: status EVENT_ID --config FILE works as
// well as the other order, and "--" ends the flags.
func TestCLI_FlagsAfterPositional(t *testing.T) {
	e := startStatusEnv(t)
	e.event(t, "ev-1")
	e.event(t, "-dash")
	check.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		for _, c := range []struct {
			id   string
			args []string
		}{
			{"ev-1", []string{"ev-1", "--config", e.cfg}},
			{"ev-1", []string{"--config", e.cfg, "ev-1"}},
			{"-dash", []string{"--config", e.cfg, "--", "-dash"}},
		} {
			code, out, errs := runStatusCmd(cmdStatus, c.args...)
			if code != exitOK || !strings.Contains(out, `"event_id": "`+c.id+`"`) {
				return fmt.Errorf("status %q: exit %d %s %s", c.args, code, out, errs)
			}
		}
		return nil
	})
	if code, _, errs := runStatusCmd(cmdStatus, "a", "b", "--config", e.cfg); code != exitUsage || !strings.Contains(errs, "want 1 argument") {
		t.Fatalf("two ids: exit %d, %s", code, errs)
	}
}

// TestCLI_RefusesWhatItCannotDo: the L1 commands refuse another box's
// config with a message naming L1 (unless --server is given), pending
// refuses an unknown site, and publish refuses a subject the origin stream
// does not take or that has a wildcard — each with exit 2 before anything
// is sent.
func TestCLI_RefusesWhatItCannotDo(t *testing.T) {
	const edge, l1 = "../../configs/edge1.json", "../../configs/l1.json"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--config", edge, "some-id"}, "works at L1"},
		{[]string{"pending", "--config", edge}, "works at L1"},
		{[]string{"summary", "--config", edge}, "works at L1"},
		{[]string{"publish", "--config", edge}, "works at L1"},
		{[]string{"pending", "--config", l1, "--site", "nosuch"}, `--site "nosuch" is not an edge site`},
		{[]string{"publish", "--config", l1, "--subject", "events.>"}, "wildcard"},
		{[]string{"publish", "--config", l1, "--subject", "leafline.receipts.edge1.processed"}, "not a subject of the origin stream L1A"},
		{[]string{"publish", "--config", l1, "--subject", "events..x"}, "empty token"},
		{[]string{"status", "--config", "no/such/file.json", "x"}, "config file no/such/file.json does not exist"},
		{[]string{"demo", "--bad", "5"}, "--bad needs --dlq"},
	} {
		code, out, errs := runDispatch(c.args...)
		if code != exitUsage || out != "" || !strings.Contains(errs, c.want) {
			t.Errorf("leafline %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), code, out, errs, c.want)
		}
	}
}

// TestPending_Unidentified lists the origin messages L1 recorded without a
// usable event_id, and the summary counts them.
func TestPending_Unidentified(t *testing.T) {
	e := startStatusEnv(t)
	m := nats.NewMsg("events.noid")
	m.Data = []byte("x")
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	e.event(t, "ok-1")
	check.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		code, out, errs := runStatusCmd(cmdPending, "--config", e.cfg, "--unidentified")
		if code != exitOK || !strings.Contains(out, "events.noid") || !strings.Contains(out, "missing") {
			return fmt.Errorf("pending --unidentified: exit %d %q %q", code, out, errs)
		}
		code, out, errs = runStatusCmd(cmdSummary, "--config", e.cfg)
		if code != exitOK || !strings.Contains(out, "without a usable event_id (never tracked): 1") {
			return fmt.Errorf("summary: exit %d %q %q", code, out, errs)
		}
		return nil
	})
}

// TestCheck_WhatRunNeeds: check refuses what run would refuse — a data dir
// that cannot be created, two listeners on one address — and names the
// problem; a missing config file is named as such.
func TestCheck_WhatRunNeeds(t *testing.T) {
	dir := t.TempDir()
	copyTopology(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "afile"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	box := func(dataDir, ops string) string {
		p := filepath.Join(dir, fmt.Sprintf("hub-%d.json", len(ops)+len(dataDir)))
		writeJSONFile(t, p, map[string]any{"topology": "topology.json", "site": "hub", "data_dir": dataDir,
			"nats": map[string]any{"listen": "127.0.0.1:14223"}, "ops": map[string]any{"listen": ops}})
		return p
	}
	for _, c := range []struct {
		cfg, want string
	}{
		{box(filepath.Join(dir, "afile", "hub"), "127.0.0.1:18223"), "cannot be created"},
		{box(filepath.Join(dir, "afile"), "127.0.0.1:18223"), "not a directory"},
		{box(filepath.Join(dir, "hub"), "127.0.0.1:14223"), `ops.listen: "127.0.0.1:14223" is the address of nats.listen as well`},
		{filepath.Join(dir, "nosuch.json"), "config file " + filepath.Join(dir, "nosuch.json") + " does not exist"},
	} {
		code, out, errs := runDispatch("check", "--config", c.cfg)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("check %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.cfg, code, out, errs, c.want)
		}
	}
	ok := box(filepath.Join(dir, "new", "hub"), "127.0.0.1:18223")
	if code, out, errs := runDispatch("check", "--config", ok); code != exitOK {
		t.Fatalf("check of a good config: exit %d %s %s", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Fatalf("check created the data dir's parent: %v", err)
	}
}
