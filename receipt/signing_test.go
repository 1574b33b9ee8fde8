package receipt

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

// A Signer's signatures are exactly those of Sign with the same key pair,
// and VerifySignature accepts them against the key's public nkey.
func TestSigner_SameSignaturesAsSign(t *testing.T) {
	for _, mk := range []struct {
		name string
		new  func() (nkeys.KeyPair, error)
	}{
		{"user", nkeys.CreateUser},
		{"account", nkeys.CreateAccount},
		{"server", nkeys.CreateServer},
	} {
		t.Run(mk.name, func(t *testing.T) {
			kp, err := mk.new()
			if err != nil {
				t.Fatal(err)
			}
			pub, _ := kp.PublicKey()
			s, err := NewSigner(kp)
			if err != nil {
				t.Fatal(err)
			}
			for i, data := range [][]byte{nil, {}, []byte("x"), signingReceipt(t, "e-1"), signingReceipt(t, fmt.Sprintf("e-%0300d", 7))} {
				want, err := Sign(kp, data)
				if err != nil {
					t.Fatal(err)
				}
				if got := s.Sign(data); got != want {
					t.Fatalf("data %d: Signer.Sign %q, Sign %q", i, got, want)
				}
				if err := VerifySignature(pub, data, want); err != nil {
					t.Fatalf("data %d: %v", i, err)
				}
			}
		})
	}
}

func TestSigner_WrongKeyAndTamperingRefused(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	pub, _ := kp.PublicKey()
	s, err := NewSigner(kp)
	if err != nil {
		t.Fatal(err)
	}
	data := signingReceipt(t, "e-2")
	sig := s.Sign(data)
	if err := VerifySignature(otherPub, data, sig); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("other key: got %v, want ErrBadSignature", err)
	}
	altered := append([]byte{}, data...)
	altered[len(altered)-2] ^= 1
	if err := VerifySignature(pub, altered, sig); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("altered data: got %v, want ErrBadSignature", err)
	}
}

// A key pair without a seed cannot sign: NewSigner says so.
func TestSigner_PublicKeyOnlyRefused(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	pk, err := nkeys.FromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewSigner(pk); err == nil {
		t.Fatal("NewSigner accepted a public key")
	}
}

func signingReceipt(t *testing.T, id string) []byte {
	t.Helper()
	b, err := New(id, "L1A", "edge1", "edge1", StatusProcessed, time.Unix(1700000000, 0).UTC()).Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func BenchmarkSign(b *testing.B) {
	kp, _ := nkeys.CreateUser()
	data := []byte(`{"v":1,"event_id":"bench-0000000000000001","origin_stream":"L1A","site":"edge1","processor":"edge1","status":"processed","processed_at":"2025-01-01T00:00:00Z"}`)
	b.Run("nkeys", func(b *testing.B) {
		for b.Loop() {
			if _, err := Sign(kp, data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("signer", func(b *testing.B) {
		s, err := NewSigner(kp)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			_ = s.Sign(data)
		}
	})
}
