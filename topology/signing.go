package topology

import (
	"github.com/nats-io/nkeys"
)

// SigningConfig holds an edge's receipt-signing key.
type SigningConfig struct {
	// KeyFile is the path of the nkey seed ("SU…") this edge signs its
	// receipts with. Required on an edge whose topology site has a
	// receipt_key, and its public key must be that receipt_key. The seed
	// never appears in logs or printed configs.
	KeyFile string `json:"key_file,omitempty"`
}

func (t *Topology) validateReceiptKey(p *problems, i int) {
	s := t.Sites[i]
	if s.ReceiptKey == "" {
		return
	}
	path := fieldPath(elemPath("sites", i), "receipt_key")
	if s.Role != RoleEdge {
		p.add(path, "only edge sites sign receipts; site %q is %s", s.Name, s.Role)
		return
	}
	if !nkeys.IsValidPublicUserKey(s.ReceiptKey) {
		p.add(path, "not a public user nkey (it starts with \"U\"; `nk -gen user -pubout` makes one)")
	}
}

// validateSigningAgainst checks the box's signing key against its site.
// The key file itself is read at startup, where a missing or mismatched
// seed stops the box with the file named.
func (c *Config) validateSigningAgainst(p *problems, s *Site) {
	switch {
	case s.ReceiptKey != "" && c.Signing.KeyFile == "":
		p.add("signing.key_file", "required: site %q has a receipt_key in the topology, so L1 accepts only receipts signed with it", s.Name)
	case s.ReceiptKey == "" && c.Signing.KeyFile != "":
		p.add("signing.key_file", "site %q has no receipt_key in the topology: L1 could not verify these signatures", s.Name)
	case s.Role != RoleEdge && c.Signing.KeyFile != "":
		p.add("signing.key_file", "only edge sites sign receipts; site %q is %s", s.Name, s.Role)
	}
}
