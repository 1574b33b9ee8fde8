package receipt

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// SignatureHeader carries an edge's ed25519 signature (base64url, no
// padding) of the receipt's encoded bytes or, with ProofHeader, of the
// root of its batch's hash tree. Sourcing keeps headers, so both reach L1
// unchanged. A receipt republished in another batch carries another
// signature and proof; each verifies.
const SignatureHeader = "Leafline-Receipt-Sig"

// ErrBadSignature means a receipt's signature is missing where one is
// required, malformed, or does not verify against its site's key.
var ErrBadSignature = errors.New("receipt signature invalid")

// Sign returns the SignatureHeader value for data.
//
// NOTE: an nkeys.KeyPair decodes its seed and re-derives the ed25519 key on
// every Sign, which costs about as much as the signature itself. To sign
// many receipts with one key, use a Signer.
func Sign(kp nkeys.KeyPair, data []byte) (string, error) {
	sig, err := kp.Sign(data)
	if err != nil {
		return "", fmt.Errorf("receipt: sign: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(sig), nil
}

// Signer signs receipts with one key whose ed25519 private key is derived
// once, in NewSigner. Its signatures are byte for byte those of Sign with
// the same key pair (ed25519 is deterministic). A Signer is safe for
// concurrent use.
type Signer struct {
	priv ed25519.PrivateKey
}

// NewSigner derives the ed25519 private key of kp, which must hold a seed
// (a key pair made from a public key alone cannot sign).
func NewSigner(kp nkeys.KeyPair) (*Signer, error) {
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("receipt: signer: %w", err)
	}
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("receipt: signer: %w", err)
	}
	if len(raw) != ed25519.SeedSize {
		return nil, fmt.Errorf("receipt: signer: seed has %d bytes, want %d", len(raw), ed25519.SeedSize)
	}
	return &Signer{priv: ed25519.NewKeyFromSeed(raw)}, nil
}

// Sign returns the SignatureHeader value for data.
func (s *Signer) Sign(data []byte) string {
	return base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.priv, data))
}

// VerifySignature checks sig (a SignatureHeader value) over data against the
// public nkey pub, for a receipt signed on its own. A Verifier checks batch
// signatures too.
func VerifySignature(pub string, data []byte, sig string) error {
	return NewVerifier().Verify(pub, data, sig, "")
}

// VerifyMsg checks the signature a receipt message carries under the
// public nkey pub: a bundle's (BundleHeader) over its body, or a single
// receipt's, signed alone or as one of a batch (ProofHeader). Every
// failure wraps ErrBadSignature.
func (v *Verifier) VerifyMsg(pub string, data []byte, h nats.Header) error {
	if IsBundle(h) {
		return v.VerifyBundle(pub, data, h.Get(SignatureHeader))
	}
	return v.Verify(pub, data, h.Get(SignatureHeader), h.Get(ProofHeader))
}
