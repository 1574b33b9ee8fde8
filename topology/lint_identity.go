package topology

import (
	"fmt"
)

// lintReceiptSigning reports the edges whose receipts are unsigned. The
// hub binds each link's receipts to its site (jsplan.ReceiptBinding), but without
// a signature L1 trusts every hop on the way: anything that can write to
// the hub's or L1's receipts stream can speak for the edge.
func (t *Topology) lintReceiptSigning() []Warning {
	var out []Warning
	for i := range t.Sites {
		s := &t.Sites[i]
		if s.Role != RoleEdge || s.ReceiptKey != "" {
			continue
		}
		out = append(out, Warning{sitePath(i, "receipt_key"), fmt.Sprintf(
			"UNSIGNED RECEIPTS: edge %q's receipts carry no signature, so L1 takes the hub's word for where each came from, and anything that can write to %s or %s can complete events in %q's name; give the edge a receipt_key (`leafline topology certs` writes one per edge)",
			s.Name, t.Receipts.HubStream, t.Receipts.L1Stream, s.Name)})
	}
	return out
}
