package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/pki"
	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/linkperm"
	"github.com/leafline/leafline/topology/render"
)

// cmdTopology dispatches "leafline topology render|permissions|certs".
func cmdTopology(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		topologyUsage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	switch args[0] {
	case "render":
		return cmdTopologyRender(args[1:], stdout, stderr)
	case "permissions":
		return cmdTopologyPermissions(args[1:], stdout, stderr)
	case "certs":
		return cmdTopologyCerts(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "leafline topology: unknown subcommand %q\n\n", args[0])
	topologyUsage(stderr)
	return exitUsage
}

func topologyUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: leafline topology SUBCOMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  render      (--config FILE | --topology FILE) [--site NAME] [--out DIR]")
	fmt.Fprintln(w, "              print the site's nats-server configuration (stock nats-server >= 2.15.3 or 2.14.10)")
	fmt.Fprintln(w, "  render      --systemd DIR (--config FILE | --topology FILE) [--site NAME] [--bin PATH] [--config-dir DIR] [--user NAME]")
	fmt.Fprintln(w, "              write a hardened systemd unit per box (the config's site, or every site) to DIR")
	fmt.Fprintln(w, "  permissions (--config FILE | --topology FILE) --site NAME")
	fmt.Fprintln(w, "              print, as JSON, what the site may send and receive across its upstream link")
	fmt.Fprintln(w, "  certs       --topology FILE --dir DIR [--host H]... [--loopback] [--unsigned-receipts] [--validity D] [BOX_CONFIG...]")
	fmt.Fprintln(w, "              create a private CA, a certificate and an nkey per site under DIR, a secured")
	fmt.Fprintln(w, "              DIR/topology.json (mutual TLS, nkeys), and DIR/<name>.json for each BOX_CONFIG")
}

// loadTopologyFlags loads the topology from --config (a box config, whose
// own settings are returned too) or --topology.
func loadTopologyFlags(name, configPath, topologyPath string, stderr io.Writer) (*topology.Topology, *topology.Config, bool) {
	switch {
	case (configPath == "") == (topologyPath == ""):
		fmt.Fprintf(stderr, "leafline topology %s: set one of --config FILE or --topology FILE\n", name)
		return nil, nil, false
	case configPath != "":
		cfg, err := topology.LoadConfig(configPath)
		if err != nil {
			fmt.Fprintf(stderr, "leafline topology %s: %v\n", name, err)
			return nil, nil, false
		}
		return cfg.Topology, cfg, true
	}
	t, err := topology.LoadTopology(topologyPath)
	if err != nil {
		fmt.Fprintf(stderr, "leafline topology %s: %v\n", name, err)
		return nil, nil, false
	}
	return t, nil, true
}

func cmdTopologyRender(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("topology render", stderr)
	config := fs.String("config", "", "box config `FILE` (its local settings fill the output when --site is its site)")
	topo := fs.String("topology", "", "topology `FILE` (box-local settings become placeholders)")
	site := fs.String("site", "", "site `NAME` (default: the config's site)")
	outDir := fs.String("out", "", "`DIR` for the node configurations of a config with cluster.nodes")
	units := systemdFlags(fs)
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	t, cfg, ok := loadTopologyFlags("render", *config, *topo, stderr)
	if !ok {
		return exitUsage
	}
	if units.dir != "" {
		return renderSystemd(units, t, cfg, *site, stdout, stderr) // see systemd_cmd.go
	}
	if cfg != nil && len(cfg.Cluster.Nodes) > 0 && (*site == "" || *site == cfg.Site) {
		return renderCluster(t, cfg, *outDir, stdout, stderr) // cluster_cmds.go
	}
	name := *site
	if name == "" && cfg != nil {
		name = cfg.Site
	}
	if name == "" {
		fmt.Fprintln(stderr, "leafline topology render: --site NAME is required with --topology")
		return exitUsage
	}
	out, err := render.ServerConfig(t, name, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "leafline topology render: %v\n", err)
		return exitUsage
	}
	fmt.Fprint(stdout, out)
	return exitOK
}

func cmdTopologyPermissions(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("topology permissions", stderr)
	config := fs.String("config", "", "box config `FILE`")
	topo := fs.String("topology", "", "topology `FILE`")
	site := fs.String("site", "", "site `NAME` (a hub or an edge)")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	t, cfg, ok := loadTopologyFlags("permissions", *config, *topo, stderr)
	if !ok {
		return exitUsage
	}
	name := *site
	if name == "" && cfg != nil {
		name = cfg.Site
	}
	p, err := linkperm.Of(t, name)
	if err != nil {
		fmt.Fprintf(stderr, "leafline topology permissions: %v\n", err)
		return exitUsage
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.Encode(p)
	return exitOK
}

// hostList collects repeated --host flags.
type hostList []string

func (h *hostList) String() string     { return strings.Join(*h, ",") }
func (h *hostList) Set(v string) error { *h = append(*h, v); return nil }

func cmdTopologyCerts(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("topology certs", stderr)
	topo := fs.String("topology", "", "topology `FILE` to secure")
	dir := fs.String("dir", "", "output `DIR` (created; existing credentials are never overwritten)")
	validity := fs.Duration("validity", 365*24*time.Hour, "certificate validity")
	var hosts hostList
	fs.Var(&hosts, "host", "extra DNS name or IP for the certificate of every site that listens (repeatable)")
	loopback := fs.Bool("loopback", false, "add localhost, 127.0.0.1 and ::1 to the certificates of the sites that listen (a system on one machine)")
	unsigned := fs.Bool("unsigned-receipts", false, "write no receipt-signing keys: edges' receipts stay unsigned (check warns)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *topo == "" || *dir == "" {
		fmt.Fprintln(stderr, "leafline topology certs: --topology FILE and --dir DIR are required")
		return exitUsage
	}
	if *validity < time.Hour || *validity > 10*365*24*time.Hour {
		fmt.Fprintln(stderr, "leafline topology certs: --validity must be 1h..87600h")
		return exitUsage
	}
	// Validate first, then secure the file as written (without the
	// defaults filled in), so that the output reads like the input.
	if _, err := topology.LoadTopology(*topo); err != nil {
		fmt.Fprintf(stderr, "leafline topology certs: %v\n", err)
		return exitUsage
	}
	raw, err := os.ReadFile(*topo)
	if err != nil {
		fmt.Fprintf(stderr, "leafline topology certs: %v\n", err)
		return exitFailure
	}
	var t topology.Topology
	if err := json.Unmarshal(raw, &t); err != nil {
		fmt.Fprintf(stderr, "leafline topology certs: %v\n", err)
		return exitUsage
	}
	absDir, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintf(stderr, "leafline topology certs: %v\n", err)
		return exitFailure
	}
	creds, err := pki.WriteCredentials(absDir, &t, pki.CredentialOptions{Validity: *validity, Hosts: hosts, Loopback: *loopback, NoReceiptKeys: *unsigned})
	if err != nil {
		fmt.Fprintf(stderr, "leafline topology certs: %v\n", err)
		return exitFailure
	}
	secured := filepath.Join(absDir, "topology.json")
	if err := writeJSONNew(secured, &t); err != nil {
		fmt.Fprintf(stderr, "leafline topology certs: %v\n", err)
		return exitFailure
	}
	if _, err := topology.LoadTopology(secured); err != nil {
		fmt.Fprintf(stderr, "leafline topology certs: the secured topology does not load: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "wrote a private CA, %d site certificates and nkeys under %s\n", len(creds.Sites), absDir)
	signed := ", every edge a receipt-signing key"
	if *unsigned {
		signed = "; receipts unsigned"
	}
	fmt.Fprintf(stdout, "wrote %s (every listener mutual TLS, every dialling site an nkey%s)\n", secured, signed)
	for _, box := range fs.Args() {
		out, err := secureBoxConfig(box, absDir, &t, creds)
		if err != nil {
			fmt.Fprintf(stderr, "leafline topology certs: %s: %v\n", box, err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "wrote %s\n", out)
	}
	fmt.Fprintln(stdout, "keep *-key.pem, *.nk and ca-key.pem secret (mode 0600); a box needs only its own files and ca.pem")
	return exitOK
}

// secureBoxConfig writes dir/<base name of path>: the box config at path,
// pointing at dir/topology.json, with the site's TLS files and nkey seed.
// Other keys are kept as they are.
func secureBoxConfig(path, dir string, t *topology.Topology, creds *pki.Credentials) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", err
	}
	siteName, _ := m["site"].(string)
	site, ok := t.Site(siteName)
	if !ok {
		return "", fmt.Errorf("site %q is not in the topology", siteName)
	}
	var cfg topology.Config
	creds.Apply(&cfg, site)
	ln, _ := m["leafnode"].(map[string]any)
	if ln == nil {
		ln = map[string]any{}
	}
	if !cfg.Leafnode.ListenTLS.IsZero() {
		ln["listen_tls"] = cfg.Leafnode.ListenTLS
	}
	if !cfg.Leafnode.UpstreamTLS.IsZero() {
		ln["upstream_tls"] = cfg.Leafnode.UpstreamTLS
	}
	if !cfg.Leafnode.UpstreamAuth.IsZero() {
		ln["upstream_auth"] = cfg.Leafnode.UpstreamAuth
	}
	m["leafnode"] = ln
	if cfg.Signing.KeyFile != "" {
		sg, _ := m["signing"].(map[string]any)
		if sg == nil {
			sg = map[string]any{}
		}
		sg["key_file"] = cfg.Signing.KeyFile
		m["signing"] = sg
	}
	m["topology"] = "topology.json"
	out := filepath.Join(dir, filepath.Base(path))
	if err := writeJSONNew(out, m); err != nil {
		return "", err
	}
	if _, err := topology.LoadConfig(out); err != nil {
		return "", fmt.Errorf("the secured config does not load: %w", err)
	}
	return out, nil
}

func writeJSONNew(path string, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // subjects hold '>'
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// lintConfig returns the warnings of `leafline check` for a loaded config,
// each with its reason: the topology's and the box's risky settings
// (topology.Lint), the streams the site creates (jsplan.PlanWarnings) and,
// on a platform with 32-bit pointers, what could fill an edge's outbox
// (outbox.AddressSpaceWarnings).
func lintConfig(cfg *topology.Config) []string {
	var out []string
	for _, w := range topology.Lint(cfg) {
		out = append(out, w.String())
	}
	for _, w := range jsplan.PlanWarnings(cfg) {
		out = append(out, w.String())
	}
	if site, ok := cfg.Topology.Site(cfg.Site); ok && site.Role == topology.RoleEdge && strconv.IntSize == 32 {
		for _, w := range outbox.AddressSpaceWarnings(cfg.Sink.Type, cfg.Outbox.Retention.D()) {
			out = append(out, w.Setting+": "+w.Msg)
		}
	}
	return out
}
