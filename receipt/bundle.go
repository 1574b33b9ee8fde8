package receipt

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// A bundle is one message that carries several receipts of one site, so
// that the receipt path stores, moves and acknowledges one message per
// group of receipts instead of one per receipt, at every hop (the edge's
// receipts stream, the hub's, L1's) and with either link transport.
//
// Wire format:
//
//   - subject: the site's receipt subject with the status token BundleToken
//     ("<prefix>.<site>.bundle"); no receipt status is spelled so;
//   - body: the receipts, each exactly as Encode writes it, separated by
//     one '\n' (Encode never writes a raw newline);
//   - BundleHeader: the number of receipts, which the body must hold;
//   - Nats-Msg-Id: BundleMsgID of the receipts' MsgIDs;
//   - SignatureHeader, when the site signs: the signature of
//     bundleDomain ‖ body (SignBundle). It covers every receipt of the
//     bundle; a receipt in a bundle carries no signature of its own.
//
// Every receipt of a bundle names the same site. A receiver binds the
// bundle to that site as it binds a single receipt (its subject's site
// token), so a bundle speaks only for the site that sent it.
const (
	// BundleHeader carries a bundle's receipt count.
	BundleHeader = "Leafline-Receipt-Bundle"
	// BundleToken is the last subject token of a bundle.
	BundleToken = "bundle"
	// MaxBundleReceipts bounds the receipts of one bundle.
	MaxBundleReceipts = 1000
	// MaxBundleBytes bounds a bundle's body: far below the server's
	// default max_payload (1 MiB), which every hop must accept.
	MaxBundleBytes = 256 << 10
)

// bundleDomain starts the signed message of every bundle, which no receipt
// (JSON) and no batch root (batchDomain) can equal.
const bundleDomain = "leafline-receipt-bundle-v1\x00"

// IsBundle reports whether a message with these headers is a bundle.
func IsBundle(h interface{ Get(string) string }) bool {
	return h != nil && h.Get(BundleHeader) != ""
}

// EncodeBundle joins encoded receipts into a bundle's body. It refuses an
// empty bundle, more than MaxBundleReceipts receipts, a body above
// MaxBundleBytes, and a receipt holding a newline.
func EncodeBundle(recs [][]byte) ([]byte, error) {
	if len(recs) == 0 || len(recs) > MaxBundleReceipts {
		return nil, fmt.Errorf("receipt: bundle of %d receipts: must be 1..%d", len(recs), MaxBundleReceipts)
	}
	n := len(recs) - 1
	for i, r := range recs {
		if bytes.IndexByte(r, '\n') >= 0 {
			return nil, fmt.Errorf("receipt: bundle: receipt %d holds a newline", i)
		}
		n += len(r)
	}
	if n > MaxBundleBytes {
		return nil, fmt.Errorf("receipt: bundle of %d bytes: more than %d", n, MaxBundleBytes)
	}
	return bytes.Join(recs, []byte{'\n'}), nil
}

// SplitBundle returns the receipts of a bundle's body: exactly count of
// them (the BundleHeader value), each non-empty. An error wraps
// ErrMalformed.
func SplitBundle(body []byte, count string) ([][]byte, error) {
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 || n > MaxBundleReceipts {
		return nil, malformed("bundle count %s: must be 1..%d", ShortQuote(count), MaxBundleReceipts)
	}
	if len(body) > MaxBundleBytes {
		return nil, malformed("bundle of %d bytes: more than %d", len(body), MaxBundleBytes)
	}
	parts := bytes.Split(body, []byte{'\n'})
	if len(parts) != n {
		return nil, malformed("bundle holds %d receipts, its header says %d", len(parts), n)
	}
	for i, p := range parts {
		if len(p) == 0 {
			return nil, malformed("bundle receipt %d is empty", i)
		}
	}
	return parts, nil
}

// Unbundle returns the receipts a message of a receipts stream carries,
// each as Encode wrote it: the body of a single receipt, or the receipts
// of a bundle (h holds BundleHeader). An error wraps ErrMalformed.
func Unbundle(data []byte, h interface{ Get(string) string }) ([][]byte, error) {
	if IsBundle(h) {
		return SplitBundle(data, h.Get(BundleHeader))
	}
	return [][]byte{data}, nil
}

// BundleMsgID is the Nats-Msg-Id of a bundle of receipts with these
// MsgIDs, in order: the same receipts in the same order always give the
// same id, so a bundle published again after a lost PubAck is a duplicate
// within the stream's window. The same receipts bundled otherwise (the
// outbox relay groups what is pending) give another id; L1 counts those
// receipts as duplicates.
func BundleMsgID(ids []string) string {
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{'\n'})
	}
	return "rb-" + hex.EncodeToString(h.Sum(nil)[:20])
}

// bundleMessage is what a bundle's signature signs.
func bundleMessage(body []byte) []byte {
	msg := make([]byte, 0, len(bundleDomain)+len(body))
	return append(append(msg, bundleDomain...), body...)
}

// SignBundle returns the SignatureHeader value of a bundle's body.
func (s *Signer) SignBundle(body []byte) string {
	return s.Sign(bundleMessage(body))
}

// VerifyBundle checks sig (a SignatureHeader value) over a bundle's body
// under the public nkey pub. Every failure wraps ErrBadSignature.
func (v *Verifier) VerifyBundle(pub string, body []byte, sig string) error {
	if err := v.Verify(pub, bundleMessage(body), sig, ""); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	return nil
}

// IsBundleSubject reports whether subject ends with the bundle token,
// or with the bundle token and a class token (ClassSubject).
func IsBundleSubject(subject string) bool {
	if strings.HasSuffix(subject, "."+BundleToken) {
		return true
	}
	i := strings.LastIndexByte(subject, '.')
	return i > 0 && ValidClass(subject[i+1:]) && strings.HasSuffix(subject[:i], "."+BundleToken)
}
