package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/render"
)

type systemdArgs struct {
	dir string
	o   render.SystemdOptions
}

func systemdFlags(fs *flag.FlagSet) *systemdArgs {
	a := &systemdArgs{}
	fs.StringVar(&a.dir, "systemd", "", "write a systemd unit per box to `DIR` instead of a nats-server config")
	fs.StringVar(&a.o.Binary, "bin", "", "with --systemd: the leafline executable (default /usr/local/bin/leafline)")
	fs.StringVar(&a.o.ConfigDir, "config-dir", "", "with --systemd: the `DIR` of the box configs <site>.json (default /etc/leafline)")
	fs.StringVar(&a.o.User, "user", "", "with --systemd: the dedicated user that runs the box (default leafline)")
	return a
}

// renderSystemd writes the unit of the config's site (or of --site), or of
// every site of the topology, to a.dir; existing units are replaced.
func renderSystemd(a *systemdArgs, t *topology.Topology, cfg *topology.Config, site string, stdout, stderr io.Writer) int {
	cfgs := map[string]*topology.Config{}
	if cfg != nil {
		cfgs[cfg.Site] = cfg
		if site == "" {
			site = cfg.Site
		}
	}
	units := map[string]string{}
	var err error
	if site != "" {
		var u string
		if u, err = render.SystemdUnit(t, site, cfgs[site], a.o); err == nil {
			units[render.SystemdUnitName(site)] = u
		}
	} else {
		units, err = render.SystemdUnits(t, cfgs, a.o)
	}
	if err != nil {
		fmt.Fprintf(stderr, "leafline topology render --systemd: %v\n", err)
		return exitUsage
	}
	if err := os.MkdirAll(a.dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "leafline topology render --systemd: %v\n", err)
		return exitFailure
	}
	names := make([]string, 0, len(units))
	for n := range units {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(a.dir, n)
		if err := os.WriteFile(p, []byte(units[n]), 0o644); err != nil {
			fmt.Fprintf(stderr, "leafline topology render --systemd: %v\n", err)
			return exitFailure
		}
		fmt.Fprintln(stdout, p)
	}
	return exitOK
}
