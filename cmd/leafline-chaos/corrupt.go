//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/bbolt"

	"github.com/leafline/leafline/internal/loopback"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/topology"
)

// Ways to damage a copy of an outbox file, used in turn.
var corruptModes = []string{"truncate", "meta", "page-header", "record-data"}

// corrupt stops the edge, checks its intact outbox with `leafline outbox
// check`, damages outbox.db in a COPY of its data dir, and checks that both
// `leafline outbox check` and `leafline run` refuse the copy with an error
// naming the file. The copy's box cannot reach the hub (its upstream is a
// closed port), so even a box that wrongly starts touches nothing real.
// Then the edge restarts on its intact data dir.
func (in *injector) corrupt(ctx context.Context, b *box, mode string, seed uint64) {
	defer b.mu.Unlock()
	rng := rand.New(rand.NewPCG(seed, 0xc0))
	t0 := time.Now()
	b.setHold(true)
	b.stop(syscall.SIGTERM, 30*time.Second)
	defer func() {
		b.setHold(false)
		if err := b.start(context.Background(), b.env()); err != nil {
			in.rec.Info("restart of %s after the corrupt-outbox fault: %v", b.name, err)
		}
	}()

	// The intact outbox, after every kill so far, must check clean.
	if code, out := in.outboxCheck(ctx, b.cfgPath); code != 0 {
		in.rec.Finding("`leafline outbox check` fails on the INTACT outbox of %s (exit %d): %s", b.name, code, oneLine(out))
	}
	inspect := ""
	if code, out := in.leafline(ctx, 30*time.Second, "outbox", "inspect", "--config", b.cfgPath, "--json"); code == 0 {
		inspect = oneLine(out)
	}

	cdir := filepath.Join(in.c.dir, fmt.Sprintf("corrupt-%d-%s", in.nCorrDone.Add(1), b.name))
	keep := false
	defer func() {
		if !keep {
			os.RemoveAll(cdir)
		}
	}()
	data := filepath.Join(cdir, "data")
	if err := copyTree(b.dataDir, data); err != nil {
		in.rec.Info("corrupt fault: copy %s: %v", b.dataDir, err)
		return
	}
	db := filepath.Join(data, "outbox.db")
	what, err := damage(db, mode, rng)
	if err != nil {
		in.rec.Info("corrupt fault: damage %s (%s): %v", db, mode, err)
		return
	}
	cfgPath, opsAddr, err := in.copyConfig(b, cdir, data)
	if err != nil {
		in.rec.Info("corrupt fault: config: %v", err)
		return
	}

	var problems []string
	checkCode, checkOut := in.outboxCheck(ctx, cfgPath)
	checkRefused := checkCode == 1 && strings.Contains(checkOut, db)
	if !checkRefused {
		problems = append(problems, fmt.Sprintf("`leafline outbox check` exit %d, want 1 naming %s: %s", checkCode, db, oneLine(checkOut)))
	}
	started, runExit, runLog := in.tryRun(ctx, cfgPath, opsAddr, filepath.Join(cdir, "run.log"))
	switch {
	case started:
		problems = append(problems, "`leafline run` STARTED on the damaged outbox (/readyz 200)")
	case !strings.Contains(runLog, db):
		problems = append(problems, fmt.Sprintf("`leafline run` refused (%s) but its error does not name %s: %s", runExit, db, lastLines(runLog, 3)))
	}
	note := "refused"
	if len(problems) > 0 {
		keep = true
		note = "check failed"
		in.rec.Finding("corrupt outbox (%s: %s) of %s, copy kept in %s: %s", mode, what, b.name, cdir, strings.Join(problems, "; "))
	} else {
		in.rec.Debug("corrupt outbox (%s: %s): refused; run said: %s", mode, what, oneLine(lastLines(runLog, 1)))
	}
	if inspect != "" {
		in.rec.Debug("outbox of %s before the damage: %s", b.name, inspect)
	}
	in.rec.FaultNote(faultCorrupt, b.name+" "+mode, time.Since(t0), note)
}

// outboxCheck runs `leafline outbox check --config cfgPath`. A binary
// without the outbox commands (not yet registered) is told apart, and the
// same check is then done in-process with the outbox package.
func (in *injector) outboxCheck(ctx context.Context, cfgPath string) (int, string) {
	code, out := in.leafline(ctx, 60*time.Second, "outbox", "check", "--config", cfgPath)
	if code != exitUsage || !strings.Contains(out, `unknown command "outbox"`) {
		return code, out
	}
	if in.noOutboxCmd.CompareAndSwap(false, true) {
		in.rec.Info("this leafline binary has no `outbox` command (cmdOutbox is not registered in the commands table); checking outbox files in-process with outbox.Open and Check instead")
	}
	cfg, err := topology.LoadConfig(cfgPath)
	if err != nil {
		return exitUsage, err.Error()
	}
	ob, err := outbox.Open(filepath.Join(cfg.DataDir, "outbox.db"), outbox.Options{OpenTimeout: time.Second})
	if err != nil {
		return 1, err.Error()
	}
	defer ob.Close()
	if err := ob.Check(); err != nil {
		return 1, err.Error()
	}
	return 0, "ok"
}

// leafline runs the leafline binary and returns its exit code and output.
func (in *injector) leafline(ctx context.Context, timeout time.Duration, args ...string) (int, string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, in.c.bin, args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	default:
		return -1, err.Error() + ": " + string(out)
	}
}

// tryRun starts `leafline run` on a config and reports whether it became
// ready (it is then stopped) or how it exited, and its log.
func (in *injector) tryRun(ctx context.Context, cfgPath, opsAddr, logPath string) (started bool, exit string, log string) {
	f, err := os.Create(logPath)
	if err != nil {
		return false, err.Error(), ""
	}
	cmd := exec.Command(in.c.bin, "run", "--config", cfgPath)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return false, err.Error(), ""
	}
	f.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(45 * time.Second)
	for {
		select {
		case err := <-done:
			b, _ := os.ReadFile(logPath)
			if err == nil {
				return false, "exit 0", string(b)
			}
			return false, err.Error(), string(b)
		case <-deadline:
			_ = cmd.Process.Kill()
			<-done
			b, _ := os.ReadFile(logPath)
			return false, "still not ready after 45s", string(b)
		case <-time.After(200 * time.Millisecond):
			if code, _, err := httpGet("http://" + opsAddr + "/readyz"); err == nil && code == 200 {
				_ = cmd.Process.Kill()
				<-done
				b, _ := os.ReadFile(logPath)
				return true, "ready", string(b)
			}
		}
	}
}

// copyConfig writes a copy of b's config that uses dataDir, fresh ports and
// an upstream that refuses connections.
func (in *injector) copyConfig(b *box, cdir, dataDir string) (string, string, error) {
	raw, err := os.ReadFile(b.cfgPath)
	if err != nil {
		return "", "", err
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return "", "", err
	}
	ports, err := loopback.FreePorts(3)
	if err != nil {
		return "", "", err
	}
	ops := fmt.Sprintf("127.0.0.1:%d", ports[1])
	cfg["topology"] = filepath.Join(in.c.dir, "topology.json")
	cfg["data_dir"] = dataDir
	cfg["nats"] = map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", ports[0])}
	cfg["ops"] = map[string]any{"listen": ops}
	cfg["leafnode"] = map[string]any{"upstream_url": fmt.Sprintf("nats-leaf://127.0.0.1:%d", ports[2])} // nobody listens
	if js, ok := cfg["jetstream"].(map[string]any); ok {
		delete(js, "max_store_bytes") // the copy is on the big disk
	}
	path := filepath.Join(cdir, b.name+".json")
	return path, ops, writeJSON(path, cfg)
}

// damage corrupts the bbolt file at path in the given mode and says what it
// did.
func damage(path, mode string, rng *rand.Rand) (string, error) {
	size, ps, root, err := boltLayout(path)
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	flip := func(off int64, n int) error {
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		for i := range buf {
			buf[i] ^= byte(1 + rng.IntN(255))
		}
		_, err := f.WriteAt(buf, off)
		return err
	}
	switch mode {
	case "truncate":
		// Cut inside the live part of the file, past the two meta pages.
		n := 2*ps + rng.Int64N(max(size-3*ps, 1))
		if err := f.Truncate(n); err != nil {
			return "", err
		}
		return fmt.Sprintf("truncated from %d to %d bytes", size, n), nil
	case "meta":
		pg := rng.Int64N(2)
		off := pg*ps + 16 + rng.Int64N(48) // inside the meta struct, before its checksum
		return fmt.Sprintf("flipped 4 bytes at offset %d (meta page %d)", off, pg), flip(off, 4)
	case "page-header":
		if root == 0 {
			return damage(path, "meta", rng)
		}
		off := int64(root)*ps + 8 // page flags and element count
		return fmt.Sprintf("flipped the flags and count of page %d (root of outbox.records)", root), flip(off, 4)
	case "record-data":
		if root == 0 {
			return damage(path, "meta", rng)
		}
		off, err := recordValueOffset(f, int64(root), ps, rng)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("flipped 2 bytes inside a stored receipt at offset %d", off), flip(off, 2)
	}
	return "", fmt.Errorf("unknown corruption mode %q", mode)
}

// boltLayout reads the file's size in use, its page size and the root page
// of the outbox.records bucket (0 if the bucket is inline).
func boltLayout(path string) (size, pageSize int64, root uint64, err error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return 0, 0, 0, err
	}
	defer db.Close()
	pageSize = int64(db.Info().PageSize)
	err = db.View(func(tx *bbolt.Tx) error {
		size = tx.Size()
		if b := tx.Bucket([]byte("outbox.records")); b != nil {
			root = uint64(b.Root())
		}
		return nil
	})
	return size, pageSize, root, err
}

// recordValueOffset walks from page id down the first branch to a leaf and
// returns the file offset of a byte inside the value of a random element.
func recordValueOffset(f *os.File, id, ps int64, rng *rand.Rand) (int64, error) {
	le := binary.LittleEndian
	for depth := 0; depth < 32; depth++ {
		hdr := make([]byte, 16)
		if _, err := f.ReadAt(hdr, id*ps); err != nil {
			return 0, err
		}
		flags, count, overflow := le.Uint16(hdr[8:]), int64(le.Uint16(hdr[10:])), int64(le.Uint32(hdr[12:]))
		if count == 0 {
			return 0, fmt.Errorf("page %d is empty", id)
		}
		buf := make([]byte, (overflow+1)*ps)
		if _, err := f.ReadAt(buf, id*ps); err != nil {
			return 0, err
		}
		switch flags {
		case 0x01: // branch: elements {pos u32, ksize u32, pgid u64}
			id = int64(le.Uint64(buf[16+8:]))
		case 0x02: // leaf: elements {flags u32, pos u32, ksize u32, vsize u32}
			i := rng.Int64N(count)
			el := 16 + 16*i
			pos, ksize, vsize := int64(le.Uint32(buf[el+4:])), int64(le.Uint32(buf[el+8:])), int64(le.Uint32(buf[el+12:]))
			if vsize < 4 || el+pos+ksize+vsize > int64(len(buf)) {
				return 0, fmt.Errorf("page %d element %d: unexpected layout", id, i)
			}
			return id*ps + el + pos + ksize + rng.Int64N(vsize-2), nil
		default:
			return 0, fmt.Errorf("page %d has flags %#x", id, flags)
		}
	}
	return 0, errors.New("tree too deep")
}

// copyTree copies a directory tree of regular files (not the disk filler).
func copyTree(src, dst string) error {
	return filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		switch {
		case fi.IsDir():
			return os.MkdirAll(target, 0o755)
		case !fi.Mode().IsRegular() || fi.Name() == "chaos-filler":
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains([]byte(rel), []byte("..")) {
			return fmt.Errorf("bad path %s", rel)
		}
		return os.WriteFile(target, b, fi.Mode().Perm())
	})
}
