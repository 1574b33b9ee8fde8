// Package topology is leafline's configuration: the shared topology that
// every box loads, and the per-box Config that adds a box's local settings.
// It is pure data and imports no other leafline package but its own strict
// JSON decoder (internal/strictjson). Package topology/render turns a
// topology into stock nats-server configurations and systemd units.
//
// # The topology
//
// A Topology names every site (exactly one l1, one or more hubs, one or
// more edges), each site's JetStream domain, how the sites dial each other
// (edge → hub → l1 leafnode links), the event streams and subjects of the
// forward path (L1A → HA → L2A) and the receipt streams of the return path
// (RE → RH → R1). Every stream, consumer and server option a site needs is
// derived from it; a box's Config adds only what is local to the box (data
// directory, listen addresses, sink, delivery tuning) and names its site.
// An edge's delivery_mode "direct" replaces its sourced copy (L2A) with a
// consumer of its own on L1A, reached through both links (Site.DeliveryMode):
// L1 creates it (Site.DirectConsumer), and the links let the edge only look
// it up, pull and ACK (linkperm.Direct).
//
// # Secure links
//
// Each leafnode link is described by both ends in the topology: the
// listening site's leafnode.tls ("off", "on", "mutual") and the dialling
// site's leafnode.auth (method "none", "nkey", "password" or "creds", with
// only public material: a public nkey, a bcrypt hash). The secret halves and
// the certificate files are box-local (Config.Leafnode: listen_tls,
// upstream_tls, upstream_auth), read from files or the environment when the
// box starts, so no config ever holds a secret and any config can be
// printed. Package linkperm derives, per link, the only subjects that may
// cross it (the two durable sources); topology/render writes a site as a
// stock nats-server configuration; Lint reports links without TLS or
// credentials and other risky settings. The zero values ("off", "none")
// keep plain links working; `leafline topology certs` secures a topology.
//
// # Loading
//
// LoadConfig reads a box config, loads the topology it names (relative to
// the config file), fills the defaults of both and validates both.
// ParseTopology, LoadTopology and ParseConfig do the parts on their own.
//
// Decoding is strict. It refuses:
//   - empty input, input that is not valid UTF-8, and anything after the
//     top-level JSON object;
//   - unknown keys (keys are case-sensitive) and duplicate keys, at any depth;
//   - null, and values of the wrong JSON type;
//   - numbers that are not integers where an integer is expected, or that
//     do not fit (1e400, 99999999999999999999);
//   - durations that are not strings such as "30s", are negative, or exceed
//     a year.
//
// # Defaults
//
// Every field's doc comment says what its zero value means; SetDefaults
// (Topology.SetDefaults, Config.SetDefaults) writes those values in, so that
// code reading a loaded value never interprets a zero. The loaders call it
// between decoding and validation. Code that builds a value in memory calls
// SetDefaults and then Validate itself.
//
// # Errors
//
// Every problem is reported at once, each with its path and its file:
//
//	topology.json: sites[2].upstream: unknown site "hubb"
//	edge1.json: delivery.retry.backoff_max_ms: 500 is below delivery.retry.backoff_ms (1000)
//
// A *ValidationError holds the problems of one file; LoadConfig joins the
// config's and the topology's with errors.Join when both have problems.
// Every decoding and validation error matches ErrInvalid with errors.Is; an
// unreadable config or topology path given to LoadConfig or LoadTopology
// returns the I/O error instead, wrapped.
//
// # Caveats
//
//   - Validate checks a value; it does not fill defaults. Calling it on a
//     value SetDefaults has not seen reports every defaulted field as out of
//     range.
//   - Config.Validate checks the config against Config.Topology when it is
//     set, but does not validate the topology itself: call
//     Topology.Validate for that (the loaders do).
//   - Edge-only settings (delivery, event_id, dead_letter) are validated on
//     every box but used only by edges; on an l1 or hub config they are
//     ignored, except a sink type other than "store", which is refused.
//   - When a file has decoding problems, its semantic rules are not checked:
//     a value that failed to decode would only produce misleading follow-on
//     problems. Fix the decoding problems and run the check again.
//   - Relative paths other than "topology" (data_dir, sink.dir, certificate
//     and credential files) are relative to the process's working
//     directory, not to the config file.
//   - Loading does not open certificate or credential files; CheckFiles
//     does (`leafline check`), and the box reads them when it starts.
//   - Messages quote configured names and subjects to say what is wrong,
//     but never an upstream URL, which may carry credentials.
package topology
