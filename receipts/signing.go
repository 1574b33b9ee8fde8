package receipts

import (
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/nats-io/nkeys"
)

// SignatureHeader carries an edge's ed25519 signature of the receipt's
// encoded bytes (base64url, no padding). Sourcing keeps headers, so the
// signature reaches L1 unchanged. ed25519 signatures are deterministic: a
// republished receipt carries the same signature.
const SignatureHeader = "Leafline-Receipt-Sig"

// ErrBadSignature means a receipt's signature is missing where one is
// required, malformed, or does not verify against its site's key.
var ErrBadSignature = errors.New("receipt signature invalid")

// Sign returns the SignatureHeader value for data.
func Sign(kp nkeys.KeyPair, data []byte) (string, error) {
	sig, err := kp.Sign(data)
	if err != nil {
		return "", fmt.Errorf("receipts: sign: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(sig), nil
}

// VerifySignature checks sig (a SignatureHeader value) over data against the
// public nkey pub.
func VerifySignature(pub string, data []byte, sig string) error {
	if sig == "" {
		return fmt.Errorf("%w: unsigned", ErrBadSignature)
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return fmt.Errorf("%w: not base64url", ErrBadSignature)
	}
	kp, err := nkeys.FromPublicKey(pub)
	if err != nil {
		return fmt.Errorf("%w: bad public key: %v", ErrBadSignature, err)
	}
	if err := kp.Verify(data, raw); err != nil {
		return fmt.Errorf("%w: does not verify against the site's key", ErrBadSignature)
	}
	return nil
}
