package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTopologyRenderSystemd renders a unit per site of the example
// topology and checks what makes it a hardened service, then has systemd
// itself verify the units where systemd-analyze exists.
func TestTopologyRenderSystemd(t *testing.T) {
	dir := t.TempDir()
	bin, err := os.Executable() // any existing executable: verify checks ExecStart's
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runTopology(t, "render", "--systemd", dir, "--topology", "../../configs/topology.json", "--bin", bin)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	units, _ := filepath.Glob(filepath.Join(dir, "*.service"))
	if len(units) != 4 || strings.Count(out, ".service") != 4 {
		t.Fatalf("units %v, output %q: want one per site of the topology", units, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "leafline-edge1.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{
		"User=leafline\n", "StateDirectory=leafline/edge1\n", "Restart=on-failure\n", "LimitNOFILE=65536\n",
		"ExecStartPre=" + bin + " check --config /etc/leafline/edge1.json\n",
		"ExecStart=" + bin + " run --config /etc/leafline/edge1.json\n",
		"ProtectSystem=strict\n", "NoNewPrivileges=yes\n", "CapabilityBoundingSet=\n",
		"RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX\n", "SystemCallFilter=@system-service\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("edge1's unit lacks %q:\n%s", want, unit)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze on PATH: units not verified by systemd")
	}
	for _, u := range units {
		// verify exits 0 on unknown keys and bad values (it ignores them
		// with a message): any output is a failure.
		got, err := exec.Command(analyze, "verify", u).CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(got))) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", filepath.Base(u), err, got)
		}
	}
}

func TestTopologyRenderSystemd_BadInput(t *testing.T) {
	for _, args := range [][]string{
		{"render", "--systemd", t.TempDir(), "--topology", "../../configs/topology.json", "--site", "nowhere"},
		{"render", "--systemd", t.TempDir(), "--topology", "../../configs/topology.json", "--bin", "leafline"},
		{"render", "--systemd", t.TempDir(), "--topology", "../../configs/topology.json", "--user", "Root User"},
	} {
		if _, errOut, code := runTopology(t, args...); code != exitUsage || !strings.Contains(errOut, "leafline topology render --systemd:") {
			t.Errorf("%v: exit %d %q, want %d naming the problem", args, code, errOut, exitUsage)
		}
	}
}
