// Package hop moves messages across one leafnode link from an upstream
// stream into a downstream stream, in batches, with the edge runner's rule:
// commit first, ACK last, design for redelivery. It is the link transport
// that a topology calls "relay" (the other one, "sourcing", is the
// server's own stream sourcing and needs no code here).
//
// The downstream site runs one Mover per link. It pulls from the durable
// pull consumer that the upstream site created for it on the upstream
// stream (through the link, with the upstream domain's API prefix), stores
// each fetched batch in the downstream stream with ONE atomic batch publish
// (one fsync per batch under SyncAlways), and ACKs the batch only after
// the batch's PubAck. A consumer with ACK policy all (the one a leafline
// site creates) gets one ACK per batch, of its newest message, which the
// prefix below makes exact; one with explicit ACKs gets one per message.
//
// # What is kept
//
// Each stored message keeps its subject (mapped by Link.Subject), payload
// and every header, including Nats-Msg-Id. The relay adds two headers:
// HeaderLink (the link's name) and HeaderSeq (the message's sequence in the
// upstream stream).
//
// # Redelivery is absorbed exactly
//
// The relay stores a link's messages in upstream stream order and never
// stores a message while an earlier one of the link is missing
// downstream. So the link's stored messages are always a prefix of the
// upstream messages the consumer is given, and the upstream sequence of
// the newest one (its high-water mark, HeaderSeq) says exactly which are
// stored: a message at or below it is ACKed without storing it again,
// whether it comes back after a lost ACK, a crash between the store and
// the ACK, or long after the stream's duplicate window has passed.
//
// On start the mark is read back from the downstream stream: the newest
// message on the link's subjects (Link.Marks), its tip. The trim of a relayed
// stream therefore keeps the newest message of each link while the link may
// need it (jsplan.TipKeep): once the upstream has recorded the ACK of the
// tip, its ACK floor says as much, and a link that finds no tip but an
// upstream that records what it took takes the upstream after that floor.
// A message that stream sourcing stored there, before the link moved to
// the relay, gives the mark by its Nats-Stream-Source header.
//
// # An upstream replaced or rolled back
//
// A mark is an upstream sequence, and means something only in the
// history of the upstream stream it was taken from. A stream created
// again (its box replaced with a blank disk) starts its sequences again;
// a stream restored from an older copy of its box's data dir goes back
// to an earlier sequence and then stores other messages at the sequences
// the link had passed. Either way a relay that trusted its mark would
// ACK, without storing, every new message at or below it.
//
// So whenever the relay looks its consumer up (a run's start, the link
// back after a failure or a cut) it first checks where it stands, as
// Raft's log matching and Kafka's leader epochs do, before it takes
// anything:
//
//   - The upstream stream's identity (the server's, from its creation
//     time; HeaderUpstream on what the relay stores) is compared with the
//     one the link's tip, its newest stored message, came from. Another
//     identity is a stream created again: the link takes it from its
//     first message (UpstreamReplaced).
//   - If the upstream has not recorded the link's ACK of the tip, the
//     relay asks the consumer for the message at the tip's sequence: it
//     must be the same message (its Nats-Msg-Id and payload). If it is
//     not, or the upstream no longer holds it, the upstream's history
//     forked after its consumer's ACK floor, the last point on which both
//     histories agree: the link takes it again from there
//     (UpstreamRolledBack). An upstream that has recorded that ACK holds
//     the tip's history (it trims only what every taker has ACKed).
//   - A link that holds nothing downstream while its upstream consumer
//     records that it took messages (a box replaced with a blank disk
//     under its old name) takes the upstream after that ACK floor, not
//     from its start, and reports it (DownstreamNew): what the old box
//     had taken and not passed on is for the repair upstream of it to
//     send again (a hub's release, L1's redrive), where replaying the
//     whole upstream would repeat its history to every box below.
//
// Both changes of the upstream are logged at WARN with both identities,
// and each of the three is counted (Link.Changed). Nothing is skipped:
// what the link takes again from the earlier sequence includes what it
// had stored before the fork, which every taker absorbs as it absorbs any
// redelivery. A first delivery at
// or below the mark, which only a changed upstream can give once the
// consumer was positioned, is not ACKed: the relay looks again first.
//
// # Starting from the mark
//
// When the relay looks its consumer up and has checked the upstream (see
// above), and whenever a batch shows a delivery lost in flight,
// it resets the consumer to the sequence after the mark (the server's
// consumer reset). The consumer then counts everything up to the mark as
// ACKed and delivers again from there: a restored link moves at once
// instead of waiting out the AckWait of what the cut swallowed, and a
// consumer that is new, or that the other transport left, starts exactly
// after what is stored, so switching a link's transport copies nothing.
// An upstream that refuses the reset (a server without it) costs only
// time: the redeliveries are absorbed as below.
//
// The prefix holds because a batch is stored only when no earlier message
// of the link can be missing. Normally each new message is a first
// delivery with the delivery sequence right after the previous one stored:
// the consumer gives new messages in stream order, so nothing of its
// filter lies between them. Otherwise (the first batch of a run, a
// redelivery, a delivery lost in flight to a link cut or an expired pull
// request) the relay asks the consumer how many messages it has delivered
// and not had ACKed; only when the batch in hand is all of them is it
// stored. If not, the batch is NAKed and comes again with the lost
// delivery once that one's AckWait expires; the consumer's MaxAckPending
// must be at most Batch so that they fit in one fetch. The relay needs
// on the upstream only its own consumer: pull requests, ACKs, and its
// consumer's info and reset.
//
// # Messages another link carries
//
// A link with Link.Skip leaves the messages it names to another link
// (a priority class's, which takes them through its own consumer into its
// own stream): it ACKs them without storing them. The mark then counts
// them as handled, in memory; read back after a restart it is the newest
// message stored, so the skipped ones after it come again and are skipped
// again. The stored messages are still a prefix of the link's, less the
// skipped ones.
//
// # An idle link
//
// A pull request waits up to Link.Expiry for a message, which comes as
// soon as there is one. With Link.LinkUp and Link.IdleExpiry, a link
// that has had nothing to move asks less often: each step that brought
// nothing doubles the next request's wait, up to IdleExpiry, and skips
// the request that would not wait; a message restarts the count, and so
// does the link coming back, whose wake-up also ends a request that the
// cut lost, so a long request carries two heartbeats, not the client's
// one every 5 s. What an idle link crosses (a request, its heartbeats
// and its expiry, each way the link is pulled) then falls with the wait:
// a box's idle relay link carried about a ninth of what it did at a 2 s
// wait.
//
// # A refused store
//
// A batch that the downstream stream refuses (a full disk, a stream limit
// with DiscardNew) is neither stored nor ACKed: it comes again after the
// consumer's AckWait. Each refusal in a row doubles the wait before the
// next step, from 1 s up to 10 s, so that a link whose downstream stays
// full costs one fetch and one refused store per 10 s rather than a loop;
// the first store that succeeds resets it.
//
// # A bandwidth cap
//
// A link with Link.BytesPerSecond holds the bytes its relay pulls across
// it to that rate. What is counted is each fetched message's payload and
// headers as they are sent (the "NATS/1.0" line, every "Key: value" line
// and the blank line after them): the message bytes that nats-server's
// leafnode statistics count, and so leafline_link_bytes_total. Not
// counted: each message's subject and ACK reply subject and the protocol
// line around it, the relay's own pull requests, ACKs and consumer calls
// (a few hundred bytes a batch, the other way), TLS, and compression,
// which shrinks what the line carries. A message that comes again (a
// lost ACK, a NAKed batch) crosses again and is counted again.
//
// The cap is a token bucket that holds one Link.Window's worth (1 s
// unless set) and starts full. Every fetch waits until the bucket holds
// half a window's worth (sleeping, never polling), asks the server for
// at most what the bucket holds (a pull request's max bytes), and takes
// what it got out of the bucket. So over any span of T the relay moves
// at most BytesPerSecond × T plus one window's worth, plus one message
// larger than what the bucket held: such a message would never fit a
// bounded fetch, so the relay takes it alone, whatever its size, and
// waits until the bucket has filled back. A link with a backlog averages
// the cap over a few windows. A fetch that must take every unACKed
// message at once (after a lost delivery on an upstream that refuses
// the consumer reset; see above) is not bounded by bytes either, and its
// bytes are owed in the same way. The cap changes none of the rules
// above: a batch is stored whole before it is ACKed, and the prefix and
// mark hold, as the batches are only smaller.
//
// The links of one leafnode link that carry its priority classes and the
// rest of its stream share one Cap (Link.Cap), each with its Rank. While
// a more urgent link's last fetch brought messages (a backlog), a less
// urgent one's fetch may carry only a quarter of what the bucket holds:
// the urgent link gets at least four fifths of the cap and the other at
// least a fifth, and together they hold the cap as one link would.
//
// # Caveats
//
//   - A batch that the server refuses because one of its Nats-Msg-Ids is
//     still in the downstream duplicate window (two upstream messages with
//     one id) is stored one message at a time instead; the server drops the
//     duplicate as sourcing would.
//   - The upstream owner must not delete unACKed messages of the link (the
//     trim never does, but for an edge past its backlog budget, whose
//     released messages its upstream sends again by other means): the
//     lookup would then skip them. A deleted tip that the upstream had not
//     recorded as ACKed reads as a rolled-back upstream: the link takes
//     it again from its ACK floor, a repeat and never a loss.
//   - Two relays must not run on one link at once.
//   - A cap holds one relay, in one direction. Both directions of a
//     leafnode link are capped by the relay at each end, each on its own.
package hop
