package topology

// ReceiptBinding is the subject transform of the hub's source of an edge's
// receipts stream, which binds every receipt that link delivers to the
// edge's own site:
//
//	<prefix>.*.*  →  <prefix>.<site>.{{wildcard(2)}}
//
// An edge controls its own server, and so the subjects in its receipts
// stream; whatever site a receipt's subject names there, the hub stores it
// under the site of the link it came through. A subject of any other shape
// is stored unchanged, and L1 refuses it, since it does not name its site
// and status (a receipt's subject must be exactly ReceiptSubject of the
// site and status in its body, a bundle's ReceiptSubject of the site of
// its receipts and "bundle"). A stock nats-server applies it too: it is
// part of the stream configuration that `leafline provision` writes.
//
// NOTE: a stream source bound to a durable consumer cannot filter (the
// server refuses FilterSubject with a durable, and applies no filter to
// what the durable delivers); a transform is what the server applies to
// every message of the source.
func (t *Topology) ReceiptBinding(site string) (source, destination string) {
	p := t.Receipts.SubjectPrefix
	return p + ".*.*", p + "." + site + ".{{wildcard(2)}}"
}
