package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leafline/leafline/cmd/leafline/internal/demo"
	"github.com/leafline/leafline/topology"
)

// wantsHelp reports whether args ask for help (-h, -help or --help before
// any "--").
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// commandUsage prints a command's usage line, what it does and its flags.
func commandUsage(fs *flag.FlagSet, name string) {
	w := fs.Output()
	found := false
	for _, c := range commands {
		if c.name == name {
			fmt.Fprintf(w, "usage: leafline %s %s\n\n%s\n", c.name, c.args, c.help)
			found = true
		}
	}
	if !found {
		fmt.Fprintf(w, "usage: leafline %s [flags]\n", name)
	}
	fmt.Fprintln(w, "\nflags:")
	fs.PrintDefaults()
}

// cmdVersion prints the build's version: the module version (or
// "(devel)"), the VCS revision it was built from, the Go and nats-server
// versions.
func cmdVersion(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("version", stderr)
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	fmt.Fprintln(stdout, versionLine())
	return exitOK
}

func versionLine() string {
	version, rev, dirty := "(devel)", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	parts := []string{"leafline", version}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "-dirty"
		}
		parts = append(parts, "commit "+rev)
	}
	parts = append(parts, runtime.Version(), "nats-server v"+server.VERSION, runtime.GOOS+"/"+runtime.GOARCH)
	return strings.Join(parts, " ")
}

// requireL1 refuses a command that asks L1 when the config is another
// box's (unless --server names the server to ask): the box would answer
// with something unrelated ("bucket not found"), or, for publish, pass the
// events on to L1 through its links.
func requireL1(name, path, server string, cfg *topology.Config, stderr io.Writer) bool {
	site, ok := cfg.Topology.Site(cfg.Site)
	if server != "" || (ok && site.Role == topology.RoleL1) {
		return true
	}
	role := "unknown"
	if ok {
		role = string(site.Role)
	}
	var l1 string
	for _, s := range cfg.Topology.Sites {
		if s.Role == topology.RoleL1 {
			l1 = s.Name
		}
	}
	fmt.Fprintf(stderr, "leafline %s: %s is the config of site %s (role %s); %s works at L1: give the config of site %s, or --server URL of L1's NATS server\n",
		name, path, cfg.Site, role, name, l1)
	return false
}

// checkEdgeSite refuses a --site that is not an edge of the topology.
func checkEdgeSite(name, site string, cfg *topology.Config, stderr io.Writer) bool {
	if site == "" {
		return true
	}
	var edges []string
	for _, e := range cfg.Topology.Edges() {
		if e.Name == site {
			return true
		}
		edges = append(edges, e.Name)
	}
	fmt.Fprintf(stderr, "leafline %s: --site %q is not an edge site of the topology (edges: %s)\n", name, site, strings.Join(edges, ", "))
	return false
}

// originSubject checks that subj is a subject one publishes to (no
// wildcard, no empty token, no whitespace) and that the origin stream
// captures it.
func originSubject(t *topology.Topology, subj string) error {
	if subj == "" || strings.ContainsAny(subj, " \t\r\n") {
		return fmt.Errorf("%q is not a subject", subj)
	}
	for _, tok := range strings.Split(subj, ".") {
		switch tok {
		case "":
			return fmt.Errorf("%q has an empty token", subj)
		case "*", ">":
			return fmt.Errorf("%q has a wildcard: events are published to a concrete subject", subj)
		}
	}
	for _, f := range t.Events.Subjects {
		if server.SubjectMatchesFilter(subj, f) {
			return nil
		}
	}
	return fmt.Errorf("%q is not a subject of the origin stream %s (%s)", subj, t.Events.OriginStream, strings.Join(t.Events.Subjects, ", "))
}

// checkDataDir reports whether the box could use dir as its data dir: an
// existing dir must take a file; a missing one must be creatable, its
// nearest existing parent being a dir that takes a file. It leaves nothing
// behind.
func checkDataDir(dir string) error {
	d := filepath.Clean(dir)
	for {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				if d == filepath.Clean(dir) {
					return fmt.Errorf("data_dir %s: not a directory", dir)
				}
				return fmt.Errorf("data_dir %s: cannot be created: %s is not a directory", dir, d)
			}
			f, err := os.CreateTemp(d, ".leafline-check-*")
			if err != nil {
				if d == filepath.Clean(dir) {
					return fmt.Errorf("data_dir %s: not writable: %w", dir, err)
				}
				return fmt.Errorf("data_dir %s: cannot be created: %w", dir, err)
			}
			f.Close()
			return os.Remove(f.Name())
		}
		// Missing, or under a file (ENOTDIR): look at the parent.
		parent := filepath.Dir(d)
		if parent == d {
			return fmt.Errorf("data_dir %s: no existing parent directory", dir)
		}
		d = parent
	}
}

// configMissing reports a config file that does not exist as such (rather
// than as the topology loader's open error).
func configMissing(path string) error {
	if _, err := os.Stat(path); errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("config file %s does not exist", path)
	}
	return nil
}

// holdDemo returns the demo's Hold with --keep: it prints the summary and
// waits for ctx (Ctrl-C) while the sites still run.
func holdDemo(ctx context.Context, keep bool, stdout, stderr io.Writer) func(demo.Result) {
	if !keep {
		return nil
	}
	return func(res demo.Result) {
		fmt.Fprintln(stdout, res.Summary())
		fmt.Fprintln(stderr, "demo: the sites keep running; Ctrl-C stops them")
		<-ctx.Done()
	}
}
