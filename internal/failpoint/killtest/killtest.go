//go:build unix

// Package killtest checks, in tests, that a failpoint kills the process
// where it is placed.
package killtest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/failpoint"
)

// RunUntilKilled runs the test named test again in a child process with
// env and the failpoint point set to kill@1, and checks that the child
// died by SIGKILL at that point.
func RunUntilKilled(t testing.TB, test, point string, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), env...), failpoint.EnvVar+"="+point+"=kill@1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want death by SIGKILL\n%s", err, out.String())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want death by SIGKILL\n%s", err, out.String())
	}
	if want := "failpoint " + point + ": SIGKILL"; !strings.Contains(out.String(), want) {
		t.Fatalf("child output lacks %q:\n%s", want, out.String())
	}
}
