package receipt

import (
	"crypto/sha256"
	"encoding/hex"
)

// PayloadDigest is the SHA-256 of an event's payload in lowercase hex, as
// sha256sum prints it: what a receipt's payload_sha256 and a completion
// record's payload_sha256 hold. It tells a reused event_id (the same id
// published again, after the origin stream's duplicate window, with another
// payload) from a redelivery or a redrive of the same event.
func PayloadDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// isDigest reports whether s has the form PayloadDigest returns.
func isDigest(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
