package receipt

import "strings"

// A receipt of an event of a priority class travels in the class's lane
// on the way to L1, ahead of the receipts of normal events: its subject
// carries the class as a last token after the status (or BundleToken),
//
//	<prefix>.<site>.<status>.<class>     <prefix>.<site>.bundle.<class>
//
// and a normal event's receipt has none ("<prefix>.<site>.<status>"). The
// token only chooses the lane: it is not part of the receipt, its
// message id or its signature, so the same assertion in either lane is
// one receipt.

// MaxClassLen bounds a class token.
const MaxClassLen = 16

// ValidClass reports whether c can be a class token: 1 to MaxClassLen
// lowercase letters, digits or '_', and not BundleToken (which would read
// as a bundle's subject).
func ValidClass(c string) bool {
	if c == "" || len(c) > MaxClassLen || c == BundleToken {
		return false
	}
	for i := 0; i < len(c); i++ {
		if b := c[i]; !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '_') {
			return false
		}
	}
	return true
}

// ClassSubject is subject (a receipt's or a bundle's subject of no class)
// in class's lane; class "" is no class.
func ClassSubject(subject, class string) string {
	if class == "" {
		return subject
	}
	return subject + "." + class
}

// SplitClass splits a receipt subject under prefix into its subject of
// no class and its class token ("" for none). A subject with a token
// after "<prefix>.<site>.<status>" that is not a valid class is returned
// whole, with no class: a receiver then refuses it as a subject that does
// not name its receipt's site and status.
func SplitClass(prefix, subject string) (base, class string) {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok || strings.Count(rest, ".") != 2 {
		return subject, ""
	}
	i := strings.LastIndexByte(subject, '.')
	if c := subject[i+1:]; ValidClass(c) {
		return subject[:i], c
	}
	return subject, ""
}

// ClassConsumer is the name of the durable consumer of class's lane
// beside the consumer named consumer, at any hop of the receipt path.
func ClassConsumer(consumer, class string) string { return consumer + "-" + class }

// LaneOf reports whether the consumer named name is the consumer of a
// class's lane beside the consumer named consumer (ClassConsumer), and
// of which class.
func LaneOf(consumer, name string) (class string, ok bool) {
	class, ok = strings.CutPrefix(name, ClassConsumer(consumer, ""))
	return class, ok && ValidClass(class)
}
