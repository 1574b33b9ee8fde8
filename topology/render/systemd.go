package render

import (
	"errors"
	"fmt"
	"net"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/leafline/leafline/topology"
)

// SystemdOptions place a box on its machine. Zero values mean the
// defaults named on each field.
type SystemdOptions struct {
	// Binary is the leafline executable ("/usr/local/bin/leafline").
	Binary string
	// ConfigDir holds the box configs, <site>.json ("/etc/leafline").
	ConfigDir string
	// User and Group run the box ("leafline"): a dedicated system user
	// that owns nothing but the box's state directory.
	User, Group string
	// LimitNOFILE is the open-file limit (65536): each link, client and
	// stream file holds descriptors.
	LimitNOFILE int
}

func (o *SystemdOptions) setDefaults() {
	if o.Binary == "" {
		o.Binary = "/usr/local/bin/leafline"
	}
	if o.ConfigDir == "" {
		o.ConfigDir = "/etc/leafline"
	}
	if o.User == "" {
		o.User = "leafline"
	}
	if o.Group == "" {
		o.Group = o.User
	}
	if o.LimitNOFILE == 0 {
		o.LimitNOFILE = 65536
	}
}

// SystemdUnitName is the unit of site's box: "leafline-<site>.service".
func SystemdUnitName(site string) string { return "leafline-" + site + ".service" }

// stateRoot is where systemd keeps StateDirectory= directories.
const stateRoot = "/var/lib"

// SystemdUnit renders a hardened systemd service unit for the box of
// site of t. cfg is the box's config, or nil: its data dir then is
// /var/lib/leafline/<site>, and its listeners are the topology's.
//
// The unit runs `leafline check` before every start (a bad config or an
// unwritable data dir fails the start with the problem in the journal),
// restarts the box when it fails, bounds its memory (MemoryMax=, from
// which the box takes its Go memory limit), and sandboxes it: a read-only file
// system except its data dir, no new privileges, no capabilities (but
// CAP_NET_BIND_SERVICE when a listener's port is below 1024), only IP and
// Unix sockets, the system-service system calls.
//
// NOTE: StateDirectory= must be under /var/lib; a data dir elsewhere is
// made writable with ReadWritePaths= and must exist, owned by the user.
func SystemdUnit(t *topology.Topology, site string, cfg *topology.Config, o SystemdOptions) (string, error) {
	s, ok := t.Site(site)
	if !ok {
		return "", fmt.Errorf("topology: unknown site %q", site)
	}
	o.setDefaults()
	for name, v := range map[string]string{"binary": o.Binary, "config dir": o.ConfigDir} {
		if !path.IsAbs(v) || strings.ContainsAny(v, " \t\n\"'\\%$") {
			return "", fmt.Errorf("topology: systemd %s %q: must be an absolute path without spaces, quotes, %% or $", name, v)
		}
	}
	for _, v := range []string{o.User, o.Group} {
		if !validUnixName(v) {
			return "", fmt.Errorf("topology: systemd user or group %q: use lower-case letters, digits, - and _", v)
		}
	}
	dataDir := path.Join(stateRoot, "leafline", s.Name)
	if cfg != nil && cfg.DataDir != "" {
		dataDir = path.Clean(cfg.DataDir)
	}
	if !path.IsAbs(dataDir) || strings.ContainsAny(dataDir, " \t\n\"'\\%$") {
		return "", fmt.Errorf("topology: data_dir %q: a service needs an absolute path without spaces, quotes, %% or $", dataDir)
	}
	conf := path.Join(o.ConfigDir, s.Name+".json")
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("# %s: leafline %s box of site %s.", SystemdUnitName(s.Name), s.Role, s.Name)
	w("# Rendered by `leafline topology render --systemd`; the box's config is %s.", conf)
	w("[Unit]")
	w("Description=leafline %s box of site %s", s.Role, s.Name)
	w("Wants=network-online.target")
	w("After=network-online.target")
	w("StartLimitIntervalSec=300")
	w("StartLimitBurst=10")
	w("")
	w("[Service]")
	w("Type=simple")
	w("User=%s", o.User)
	w("Group=%s", o.Group)
	w("ExecStartPre=%s check --config %s", o.Binary, conf)
	w("ExecStart=%s run --config %s", o.Binary, conf)
	w("# systemctl reload: the box takes its config and topology again (sites added or retired) without a restart.")
	w("ExecReload=/bin/kill -HUP $MAINPID")
	w("Restart=on-failure")
	w("RestartSec=5s")
	w("# The box drains its consumers and flushes its outbox on SIGTERM.")
	w("TimeoutStopSec=90s")
	w("LimitNOFILE=%d", o.LimitNOFILE)
	if mm := memoryMax(s, cfg); mm > 0 {
		w("# The box's Go memory limit is 90%% of this (%d MiB); the kernel stops it only past it.", int64(float64(mm)*topology.CgroupMemoryShare)>>20)
		w("MemoryMax=%dM", mm>>20)
	}
	if rel, ok := strings.CutPrefix(dataDir, stateRoot+"/"); ok {
		w("StateDirectory=%s", rel)
		w("StateDirectoryMode=0700")
	} else {
		w("ReadWritePaths=%s", dataDir)
	}
	w("WorkingDirectory=%s", dataDir)
	w("UMask=0077")
	w("")
	w("# Sandbox: everything read-only but the data dir; no privileges.")
	w("NoNewPrivileges=yes")
	if lowPort(s, cfg) {
		w("AmbientCapabilities=CAP_NET_BIND_SERVICE")
		w("CapabilityBoundingSet=CAP_NET_BIND_SERVICE")
	} else {
		w("CapabilityBoundingSet=")
	}
	for _, l := range []string{
		"ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "PrivateDevices=yes", "DevicePolicy=closed",
		"ProtectKernelTunables=yes", "ProtectKernelModules=yes", "ProtectKernelLogs=yes", "ProtectControlGroups=yes",
		"ProtectClock=yes", "ProtectHostname=yes", "ProtectProc=invisible",
		"RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX", "RestrictNamespaces=yes", "RestrictRealtime=yes",
		"RestrictSUIDSGID=yes", "LockPersonality=yes", "MemoryDenyWriteExecute=yes", "RemoveIPC=yes",
		"SystemCallArchitectures=native", "SystemCallFilter=@system-service", "SystemCallErrorNumber=EPERM",
	} {
		w("%s", l)
	}
	w("")
	w("[Install]")
	w("WantedBy=multi-user.target")
	return b.String(), nil
}

// memoryMax is the box's MemoryMax=: the control group limit from which
// the box takes the memory limit its config names, or its role's default
// (topology.MemoryMax); 0 for a box without a limit.
func memoryMax(s *topology.Site, cfg *topology.Config) int64 {
	limit := topology.DefaultMemoryLimit(s.Role)
	if cfg != nil && cfg.MemoryLimitBytes != 0 {
		limit = max(cfg.MemoryLimitBytes, 0)
	}
	if limit == 0 {
		return 0
	}
	return topology.MemoryMax(limit)
}

// lowPort reports whether a listener of the box has a port below 1024.
func lowPort(s *topology.Site, cfg *topology.Config) bool {
	addrs := []string{s.Leafnode.Listen}
	if cfg != nil {
		addrs = append(addrs, cfg.NATS.Listen, cfg.Ops.Listen)
	}
	for _, a := range addrs {
		if _, p, err := net.SplitHostPort(a); err == nil {
			if n, err := strconv.Atoi(p); err == nil && n > 0 && n < 1024 {
				return true
			}
		}
	}
	return false
}

func validUnixName(s string) bool {
	if s == "" || len(s) > 32 || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// SystemdUnits renders the unit of every site of t (sorted by site name),
// keyed by unit name. cfgs gives the box config of a site, if known.
func SystemdUnits(t *topology.Topology, cfgs map[string]*topology.Config, o SystemdOptions) (map[string]string, error) {
	units := map[string]string{}
	var errs []error
	names := make([]string, 0, len(t.Sites))
	for _, s := range t.Sites {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	for _, n := range names {
		u, err := SystemdUnit(t, n, cfgs[n], o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		units[SystemdUnitName(n)] = u
	}
	return units, errors.Join(errs...)
}
