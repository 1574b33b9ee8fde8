//go:build unix

// Package pgtest starts a real PostgreSQL server for tests: a fresh
// cluster in a temporary directory that listens on a unix socket only, so
// that tests exercise the real server (its SQLSTATEs, its fsync, its
// restarts) without a port to collide on.
//
// The binaries (initdb, pg_ctl) are found on PATH or under
// /usr/lib/postgresql/*/bin; without them Start skips the test. initdb
// refuses to run as root, so when the test runs as root the server runs as
// the "postgres" system user, in a directory owned by it.
//
// Authentication: the superuser "postgres" connects without a password
// (trust); every other role must give its password (scram-sha-256), so a
// test can check what a sink does with a wrong one.
package pgtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// Port is the server's port. It only names the socket file
// (.s.PGSQL.<Port>) in the server's own socket directory, so every server
// can use the same one.
const Port = 5432

// Server is a PostgreSQL cluster in a temporary directory.
type Server struct {
	bin  string // directory holding initdb and pg_ctl
	root string // temporary directory: data/, sock/, postgres.log
	cred *syscall.Credential

	mu      sync.Mutex
	running bool
}

// RequireEnv, when set in the environment (CI sets it), turns Start's skip
// into a failure: there, a missing PostgreSQL is a broken install step,
// not a reason to test less.
const RequireEnv = "LEAFLINE_REQUIRE_POSTGRES"

func skip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf(format+" (and %s is set)", append(args, RequireEnv)...)
	}
	t.Skipf(format, args...)
}

// Start creates a cluster in a temporary directory and starts it; the
// cluster is stopped and removed when the test ends. It skips the test when
// PostgreSQL is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := findBin()
	if err != nil {
		skip(t, "PostgreSQL not installed (apt-get install postgresql): %v", err)
	}
	s := &Server{bin: bin}
	if os.Geteuid() == 0 {
		s.cred, err = postgresUser()
		if err != nil {
			skip(t, "running as root, and initdb refuses root: %v", err)
		}
	}
	// Not t.TempDir: the server's user must be able to reach the directory,
	// and t.TempDir's parents are private to the test's user.
	s.root, err = os.MkdirTemp(s.tempBase(), "pgtest-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		s.stop(t, "immediate")
		if err := os.RemoveAll(s.root); err != nil {
			t.Errorf("pgtest: remove %s: %v", s.root, err)
		}
	})
	if err := s.prepare(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	s.Start(t)
	return s
}

// DSN is a connection string for the superuser, database "postgres".
func (s *Server) DSN() string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", s.SocketDir(), Port)
}

// SocketDir is the directory of the server's unix socket: the host of a
// connection string.
func (s *Server) SocketDir() string { return filepath.Join(s.root, "sock") }

// Start starts the server again after Stop, on the same data directory,
// and returns once it accepts connections. It is a no-op while the server
// runs.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return
	}
	if out, err := s.run("pg_ctl", "start", "-w", "-t", "60", "-D", s.dataDir(), "-l", s.logFile()); err != nil {
		t.Fatalf("pgtest: pg_ctl start: %v\n%s\nserver log:\n%s", err, out, s.logTail())
	}
	s.running = true
}

// Stop shuts the server down (pg_ctl stop -m fast) and returns once it has
// exited: clients are disconnected and new connections fail, as when a
// database goes down. Start brings it back with its data.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.stop(t, "fast")
}

func (s *Server) stop(t testing.TB, mode string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return
	}
	if out, err := s.run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", s.dataDir()); err != nil {
		t.Errorf("pgtest: pg_ctl stop: %v\n%s", err, out)
		return
	}
	s.running = false
}

// tempBase is the directory to create the server's directory in: the
// system's temporary directory, or /tmp when the server runs as another
// user who could not reach it (a TMPDIR private to root).
func (s *Server) tempBase() string {
	base := os.TempDir()
	if s.cred == nil {
		return base
	}
	for d := base; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
			return "/tmp"
		}
		if d == filepath.Dir(d) {
			return base
		}
	}
}

func (s *Server) dataDir() string { return filepath.Join(s.root, "data") }
func (s *Server) logFile() string { return filepath.Join(s.root, "postgres.log") }

// prepare lays out the directory, runs initdb and writes the configuration.
func (s *Server) prepare() error {
	if err := os.Chmod(s.root, 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(s.SocketDir(), 0o755); err != nil {
		return err
	}
	if s.cred != nil {
		// The server's user owns everything: it writes data/, the socket
		// and the log.
		for _, p := range []string{s.root, s.SocketDir()} {
			if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return err
			}
		}
	}
	out, err := s.run("initdb", "-D", s.dataDir(), "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync", "--auth=trust")
	if err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	conf := fmt.Sprintf(`
listen_addresses = ''
unix_socket_directories = '%s'
port = %d
fsync = on
synchronous_commit = on
max_connections = 50
shared_buffers = 32MB
log_min_messages = warning
`, s.SocketDir(), Port)
	if err := appendFile(filepath.Join(s.dataDir(), "postgresql.conf"), conf); err != nil {
		return err
	}
	hba := "local all postgres trust\nlocal all all scram-sha-256\n"
	return os.WriteFile(filepath.Join(s.dataDir(), "pg_hba.conf"), []byte(hba), 0o600)
}

// run runs one of the server's programs as the server's user.
func (s *Server) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.root
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	// pg_ctl start leaves the server running with our pipes unless its
	// output goes to a file (-l): CombinedOutput would then wait for it.
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.Bytes(), err
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logFile())
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// findBin returns the directory holding initdb and pg_ctl: PATH first, then
// the newest /usr/lib/postgresql/<version>/bin.
func findBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				p = r
			}
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", errors.New("initdb and pg_ctl are neither on PATH nor under /usr/lib/postgresql/*/bin")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("no postgres system user to run the server as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func appendFile(name, text string) error {
	f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
