// Package console serves the L1 console: one read-only web page that shows,
// per edge site, its link state and since when, the last receipt L1 holds
// from it, its pending / overdue / dead-lettered counts and its backlog over
// the last hour; how full each of L1's streams is against its limits
// (record.Summary.Streams, highlighted from record.StreamFillWarning); the
// overdue and dead-lettered events; and the full record of any event by id.
//
// # What it knows, and from where
//
// Everything comes from what L1 itself can know:
//
//   - counts, events and the streams' fill from the completion service
//     (StatusSource);
//   - the last receipt of a site from the completion service
//     (Config.LastReceipts: what this L1 process recorded), else from L1's
//     receipts stream (the newest message on the site's receipt subjects
//     not yet trimmed);
//   - link state from the link beats each hub publishes on
//     LinkSubject(hub) every BeatInterval: the hub lists its downstream
//     sites, whether each one's leafnode connection is up and since when.
//
// A site is "online" when a fresh beat of its hub says its link is up,
// "offline" when a fresh beat says it is down (since the hub saw it drop, or
// since the hub started if it never saw it), and "unknown" when no beat of
// its hub arrived within OfflineAfter: then L1 cannot tell the edge's link
// from the hub's (the hub's own link, or the hub itself, is down). The
// page says so in words. A hub that is a stock nats-server (not a leafline
// box) sends no beats: its sites stay "unknown".
//
// NOTE: a hub knows a downstream link by the server name the site's box
// declares (its site name). Link permissions keep a site from reaching
// another's streams, but not from declaring another's name: the link
// state is an operator's aid, never an input to delivery or completion.
//
// # Guarantees
//
//   - Read-only: every route answers GET or HEAD only and changes nothing.
//   - Bounded load: the completion service is asked for a summary once per
//     SampleEvery, whatever the number of open pages; each page refresh
//     reads the cached sample.
//   - The backlog trend is a ring of at most one hour of samples per site,
//     in memory: a restart of L1 starts it afresh.
//   - Lists of events are pages of the status index, each page shown
//     newest first (by last update); the order across pages is the
//     index's.
package console
