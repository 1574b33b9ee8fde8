//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeCommands returns the shell lines of the first ```sh block under the
// README heading, without comments and blank lines.
func readmeCommands(t *testing.T, readme, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in, block := false, false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in:
			in = line == heading
		case !block && strings.HasPrefix(line, "## "):
			t.Fatalf("%s: no ```sh block under %q", readme, heading)
		case !block:
			block = line == "```sh"
		case line == "```":
			return out
		default:
			if i := strings.Index(line, "  #"); i >= 0 {
				line = line[:i] // a trailing comment
			}
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				out = append(out, line)
			}
		}
	}
	t.Fatalf("%s: heading %q or its ```sh block not found", readme, heading)
	return nil
}

// copyConfigs copies the repository's configs/ into dir/configs with every
// data dir moved under dir/data, and returns the ops ports they name.
func copyConfigs(t *testing.T, repo, dir string) []int {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "configs"), 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(repo, "configs", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("configs: %v", err)
	}
	var ops []int
	opsRe := regexp.MustCompile(`"ops": *\{\s*"listen": *"127\.0\.0\.1:(\d+)"`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte(`"/tmp/leafline/`), []byte(`"`+filepath.Join(dir, "data")+"/"))
		if m := opsRe.FindSubmatch(b); m != nil {
			var p int
			fmt.Sscan(string(m[1]), &p)
			ops = append(ops, p)
		}
		if err := os.WriteFile(filepath.Join(dir, "configs", filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ops
}

// TestReadme_RunningThreeSites walks the README's "Running three sites as
// separate processes" block as a user would, in a directory holding the
// built binary and a copy of configs/ (data dirs moved into the test's
// temp dir): every command must succeed, the published event must be
// completed by both edges, and edge1 must export its metrics. While those
// boxes run, scripts/three-sites.sh must refuse at once, naming a port in
// use, and leave them alone; once they are stopped it must run and lose
// nothing.
func TestReadme_RunningThreeSites(t *testing.T) {
	bin := buildBinary(t)
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	opsPorts := copyConfigs(t, repo, dir)
	if err := os.Link(bin, filepath.Join(dir, "leafline")); err != nil {
		if b, rerr := os.ReadFile(bin); rerr != nil || os.WriteFile(filepath.Join(dir, "leafline"), b, 0o755) != nil {
			t.Fatalf("copy the binary: %v %v", err, rerr)
		}
	}
	lines := readmeCommands(t, filepath.Join(repo, "README.md"), "## Running three sites as separate processes")

	var boxes []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range boxes {
			c.Process.Signal(syscall.SIGTERM)
			c.Wait()
		}
	})
	sh := func(line string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c := exec.CommandContext(ctx, "bash", "-c", line)
		c.Dir = dir
		out, err := c.CombinedOutput()
		return string(out), err
	}
	waitBoxes := func() {
		t.Helper()
		for _, p := range opsPorts {
			waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", p), filepath.Join(dir, "box.log"))
		}
	}
	started := false
	var eventID string
	for _, line := range lines {
		switch {
		case strings.HasPrefix(line, "go build "):
			continue // the binary is in place, built the same way
		case strings.HasSuffix(line, "&"):
			args := strings.Fields(strings.TrimSuffix(line, "&"))
			log, err := os.OpenFile(filepath.Join(dir, "box.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			c := exec.Command(args[0], args[1:]...)
			c.Dir, c.Stdout, c.Stderr = dir, log, log
			if err := c.Start(); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			log.Close()
			boxes = append(boxes, c)
			started = true
			continue
		}
		if started {
			// A user waits until the boxes answer before using them.
			waitBoxes()
			started = false
		}
		if strings.Contains(line, "EVENT_ID") {
			if eventID == "" {
				t.Fatalf("%q: no event published before it", line)
			}
			line = strings.ReplaceAll(line, "EVENT_ID", eventID)
			// The event completes once both edges have reported it.
			var out string
			deadline := time.Now().Add(60 * time.Second)
			for {
				out, err = sh(line)
				if err == nil && strings.Contains(out, `"status": "complete"`) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %v\n%s\nlogs:\n%s", line, err, out, readFile(filepath.Join(dir, "box.log")))
				}
				time.Sleep(200 * time.Millisecond)
			}
			t.Logf("$ %s\n%s", line, out)
			continue
		}
		out, err := sh(line)
		t.Logf("$ %s\n%s", line, out)
		if err != nil {
			t.Fatalf("%s: %v\n%s\nlogs:\n%s", line, err, out, readFile(filepath.Join(dir, "box.log")))
		}
		if m := regexp.MustCompile(`published event_id=(\S+)`).FindStringSubmatch(out); m != nil && eventID == "" {
			eventID = m[1]
		}
		if strings.HasPrefix(line, "curl") && !strings.Contains(out, "leafline_messages_acked_total") {
			t.Fatalf("%s: no leafline_messages_acked_total in\n%s", line, out)
		}
	}
	if eventID == "" || len(boxes) == 0 {
		t.Fatalf("the README block published no event or started no box: %q", lines)
	}

	// scripts/three-sites.sh while the README's boxes run: it refuses at
	// once, names a port, and touches neither the boxes nor their data.
	script := filepath.Join(repo, "scripts", "three-sites.sh")
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, script, args...)
		c.Env = append(os.Environ(), "LEAFLINE_BIN="+bin)
		out, err := c.CombinedOutput()
		return string(out), err
	}
	start := time.Now()
	out, err := run("5")
	if err == nil || !strings.Contains(out, "port(s) in use") || strings.Contains(out, "started ") {
		t.Fatalf("three-sites.sh beside running boxes: err %v\n%s", err, out)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("three-sites.sh took %s to refuse", d)
	}
	waitBoxes()
	for _, site := range []string{"l1", "hub", "edge1", "edge2"} {
		if _, err := os.Stat(filepath.Join(dir, "data", site)); err != nil {
			t.Fatalf("the README boxes' data dir %s: %v", site, err)
		}
	}
	for _, c := range boxes {
		c.Process.Signal(syscall.SIGTERM)
		c.Wait()
	}
	boxes = nil

	// Alone, it runs the same topology and loses nothing.
	out, err = run("20")
	if err != nil || !strings.Contains(out, "lost=0") {
		t.Fatalf("three-sites.sh: %v\n%s", err, out)
	}
	t.Logf("three-sites.sh:\n%s", out)
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
