package topology

import (
	"fmt"
	"strings"
)

// lintReceiptSigning reports the edges whose receipts are unsigned. The
// hub binds each link's receipts to its site (ReceiptBinding), but without
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

// LintLinkPermissions reports what a server's leafnode user for site
// (at its upstream) may do beyond its link's LinkPermissions: each subject
// it may publish or subscribe to must lie within one the topology
// generates. publish and subscribe are the user's allow lists; nil means
// no permissions at all, which is full access. path names the user in the
// warnings.
func (t *Topology) LintLinkPermissions(site, path string, publish, subscribe []string) []Warning {
	want, err := t.LinkPermissions(site)
	if err != nil {
		return []Warning{{path, err.Error()}}
	}
	var out []Warning
	for _, dir := range []struct {
		name       string
		have, want []string
	}{{"publish", publish, want.Publish}, {"subscribe", subscribe, want.Subscribe}} {
		if dir.have == nil {
			out = append(out, Warning{path, fmt.Sprintf(
				"site %q's leafnode user has no %s permissions, which is full access: it can %s any subject across its link; give it exactly the generated ones (`leafline topology permissions`)",
				site, dir.name, dir.name)})
			continue
		}
		var wider []string
		for _, s := range dir.have {
			covered := false
			for _, w := range dir.want {
				covered = covered || subjectSubset(s, w)
			}
			if !covered {
				wider = append(wider, s)
			}
		}
		if len(wider) > 0 {
			out = append(out, Warning{path, fmt.Sprintf(
				"site %q's leafnode user may %s %s, beyond what its link needs (`leafline topology permissions --site %s`): a stolen %s box could reach other sites' streams or speak for them",
				site, dir.name, strings.Join(wider, ", "), site, site)})
		}
	}
	return out
}
