// Package render writes what runs a topology's sites on real machines: a
// stock nats-server configuration for a site (ServerConfig) or for each
// node of its cluster (ClusterConfigs), and a hardened systemd unit for
// each box (SystemdUnit, SystemdUnits). `leafline topology render` prints
// them.
//
// It reads a loaded topology.Topology and, optionally, the box's
// topology.Config; it imports topology and nothing else of leafline, and
// topology does not import it.
//
// # Guarantees
//
//   - The output depends only on its inputs: the same topology and config
//     render the same bytes (maps are written in sorted order), which the
//     golden files in testdata/ hold.
//   - No secret is ever written. Certificate keys and .creds files are
//     referenced by path; an nkey seed is read from the environment
//     variable SeedEnv(site), a password-authenticated upstream URL from
//     UpstreamURLEnv(site); users authenticated by password carry the
//     topology's bcrypt hash.
//   - A rendered site's leafnode users may do exactly what their link
//     needs (linkperm.Of), and the local clients' user
//     (topology.LocalUser) may not be used by a leafnode.
//
// # Caveats
//
//   - Without the site's own box config, box-local settings are
//     placeholders in the layout `leafline topology certs` writes (certs/,
//     data/<site>/jetstream); the configuration says so in a comment.
//   - A downstream site that authenticates with a .creds file needs an
//     upstream in operator mode, which is not rendered: the permissions its
//     user JWT must carry are written as a comment instead.
//   - Streams and consumers are not part of a server configuration; the
//     box creates them (jsplan.Provision).
//   - Error messages start with "topology: ", like the topology's own:
//     what they report is a site or a box config that cannot be rendered.
package render
