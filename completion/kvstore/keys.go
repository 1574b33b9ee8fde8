package kvstore

import "encoding/base64"

// KVKeyPrefix starts every completion key; it is one key token.
const KVKeyPrefix = "e."

// KVKey returns the completion bucket key for eventID:
//
//	"e." + base64.RawURLEncoding(eventID)
//
// The unpadded URL-safe alphabet is [A-Za-z0-9_-], all legal in KV keys and
// free of '.', so the key is exactly two tokens for ANY event_id (dots,
// '*', '>', spaces, non-ASCII), distinct ids give distinct keys, and "e.>"
// selects every completion. A 512-byte id gives a 685-byte key. The original
// id is stored in the record (Completion.EventID). eventID must be non-empty;
// KVKey("") is "e.", which the KV rejects.
func KVKey(eventID string) string {
	return KVKeyPrefix + base64.RawURLEncoding.EncodeToString([]byte(eventID))
}

// DefaultBucket is the completion bucket when StoreConfig.Bucket is zero.
const DefaultBucket = "leafline_completions"

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}
