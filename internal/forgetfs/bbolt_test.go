//go:build linux

package forgetfs

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// helperEnv makes the test binary run a helper instead of the tests (see
// TestMain). bbolt maps its file, and a page fault on a mapping served by
// the same Go process can deadlock with the garbage collector, so bbolt
// runs in a process of its own, as it does on a box.
const helperEnv = "FORGETFS_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "bolt-write":
		os.Exit(boltWriter(os.Getenv("FORGETFS_DB"), os.Getenv("FORGETFS_NOSYNC") != ""))
	case "bolt-check":
		n, _ := strconv.Atoi(os.Getenv("FORGETFS_COMMITTED"))
		os.Exit(boltChecker(os.Getenv("FORGETFS_DB"), n))
	default:
		fmt.Fprintln(os.Stderr, "unknown helper", os.Getenv(helperEnv))
		os.Exit(2)
	}
}

func boltKey(i int) []byte   { return binary.BigEndian.AppendUint64(nil, uint64(i)) }
func boltValue(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 100+i%900) }

// boltWriter commits one record per transaction and prints the number of
// each commit that returned, until it fails or is killed.
func boltWriter(path string, noSync bool) int {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second, NoSync: noSync})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// bbolt syncs its file, not the directory: a careful program syncs
	// the new file's name itself.
	if d, err := os.Open(filepath.Dir(path)); err != nil || d.Sync() != nil {
		fmt.Fprintln(os.Stderr, "sync directory:", err)
		return 1
	}
	for i := 0; ; i++ {
		err := db.Update(func(tx *bbolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("records"))
			if err != nil {
				return err
			}
			return b.Put(boltKey(i), boltValue(i))
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintln(os.Stdout, i)
	}
}

// boltChecker opens the file, runs bbolt's consistency check and prints
// "check: …" for each problem and "missing N" for each of the first n
// records it lacks, or "unreadable: …" if bbolt cannot open the file (it
// panics on some damage).
func boltChecker(path string, n int) int {
	defer func() {
		if r := recover(); r != nil {
			fmt.Println("unreadable:", r)
		}
	}()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		fmt.Println("unreadable:", err)
		return 0
	}
	defer db.Close()
	_ = db.View(func(tx *bbolt.Tx) error {
		for err := range tx.Check() {
			fmt.Println("check:", err)
		}
		b := tx.Bucket([]byte("records"))
		for i := range n {
			if b == nil || !bytes.Equal(b.Get(boltKey(i)), boltValue(i)) {
				fmt.Println("missing", i)
			}
		}
		return nil
	})
	return 0
}

func helper(name string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), append(env, helperEnv+"="+name)...)
	return cmd
}

// boltCut runs a bbolt writer process on the mount until at least 300
// commits returned, then cuts the power and SIGKILLs the writer at the same
// instant (tearing one file's unsynced pages), and checks the file on a new
// mount. It returns how many commits returned before the cut and how many
// of those the file lacks (all of them if bbolt cannot open it), and what
// else the check found.
func boltCut(t *testing.T, noSync bool, seed uint64) (committed, lost int, problems []string) {
	t.Helper()
	f := mountT(t, t.TempDir())
	path := filepath.Join(f.Mountpoint(), "outbox.db")
	env := []string{"FORGETFS_DB=" + path}
	if noSync {
		env = append(env, "FORGETFS_NOSYNC=1")
	}
	w := helper("bolt-write", env...)
	var stderr bytes.Buffer
	w.Stderr = &stderr
	out, err := w.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	deadline := time.Now().Add(60 * time.Second)
	for committed < 300 && sc.Scan() {
		committed++
		if time.Now().After(deadline) {
			break
		}
	}
	if committed < 300 {
		_ = w.Process.Kill()
		_ = w.Wait()
		t.Fatalf("the writer stopped after %d commits: %s", committed, stderr.String())
		return
	}
	f2, rep := cutAndRemount(t, f, Cut{Torn: true, Rand: rand.New(rand.NewPCG(seed, 1))})
	_ = w.Process.Kill()
	go func() {
		for sc.Scan() {
		}
	}()
	_ = w.Wait()
	t.Logf("%d commits before the cut; cut report: %+v", committed, rep)

	c := helper("bolt-check", "FORGETFS_DB="+filepath.Join(f2.Mountpoint(), "outbox.db"), "FORGETFS_COMMITTED="+strconv.Itoa(committed))
	report, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("checker: %v\n%s", err, report)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(report)), "\n") {
		switch {
		case line == "":
		case strings.HasPrefix(line, "missing "):
			lost++
		case strings.HasPrefix(line, "unreadable: "):
			lost = committed
			problems = append(problems, line)
		default:
			problems = append(problems, line)
		}
	}
	return committed, lost, problems
}

// TestBbolt_EveryCommitSurvivesACut: bbolt fsyncs each commit, so every
// Update that returned is in the file after a cut, whatever the cut
// caught in flight (a torn prefix of unsynced pages included).
func TestBbolt_EveryCommitSurvivesACut(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			committed, lost, problems := boltCut(t, false, seed)
			if lost > 0 {
				t.Errorf("%d of %d committed transactions lost", lost, committed)
			}
			for _, p := range problems {
				t.Errorf("after the cut: %s", p)
			}
		})
	}
}

// TestBbolt_NoSyncLosesCommits is the negative control: with NoSync the
// commits stay unsynced, and the cut must lose some.
func TestBbolt_NoSyncLosesCommits(t *testing.T) {
	committed, lost, problems := boltCut(t, true, 0)
	t.Logf("NoSync: %d of %d committed transactions lost; %q", lost, committed, problems)
	if lost == 0 {
		t.Errorf("all %d NoSync commits survived the cut: the filesystem kept unsynced data", committed)
	}
}
