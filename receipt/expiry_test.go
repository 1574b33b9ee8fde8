package receipt_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leafline/leafline/receipt"
)

func TestDeadline(t *testing.T) {
	pub := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	stored := pub.Add(time.Minute)
	for _, tc := range []struct {
		name    string
		h       map[string]string
		rule    time.Duration
		want    time.Time
		expires bool
		bad     bool
	}{
		{name: "no rule, no header"},
		{name: "rule from publish time", h: map[string]string{receipt.PublishedAtHeader: pub.Format(time.RFC3339Nano)},
			rule: time.Hour, want: pub.Add(time.Hour), expires: true},
		{name: "rule from stored time without publish time", rule: time.Hour, want: stored.Add(time.Hour), expires: true},
		{name: "header overrides rule", h: map[string]string{receipt.PublishedAtHeader: pub.Format(time.RFC3339), receipt.ExpireAfterHeader: "90s"},
			rule: time.Hour, want: pub.Add(90 * time.Second), expires: true},
		{name: "header without rule", h: map[string]string{receipt.ExpireAfterHeader: "2s"}, want: stored.Add(2 * time.Second), expires: true},
		{name: "absolute wins", h: map[string]string{receipt.ExpiresAtHeader: "2026-01-02T05:00:00Z", receipt.ExpireAfterHeader: "1s"},
			rule: time.Second, want: time.Date(2026, 1, 2, 5, 0, 0, 0, time.UTC), expires: true},
		{name: "bad absolute", h: map[string]string{receipt.ExpiresAtHeader: "tomorrow"}, bad: true},
		{name: "bad duration", h: map[string]string{receipt.ExpireAfterHeader: "soon"}, bad: true},
		{name: "negative duration", h: map[string]string{receipt.ExpireAfterHeader: "-1s"}, bad: true},
		{name: "zero duration", h: map[string]string{receipt.ExpireAfterHeader: "0s"}, bad: true},
		{name: "bad publish time", h: map[string]string{receipt.PublishedAtHeader: "yesterday"}, rule: time.Hour, bad: true},
		{name: "bad publish time without expiry is ignored", h: map[string]string{receipt.PublishedAtHeader: "yesterday"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := receipt.Deadline(func(k string) string { return tc.h[k] }, tc.rule, stored)
			if tc.bad {
				if !errors.Is(err, receipt.ErrBadExpiry) {
					t.Fatalf("err = %v, want ErrBadExpiry", err)
				}
				return
			}
			if err != nil || ok != tc.expires || !got.Equal(tc.want) {
				t.Fatalf("Deadline = %v, %v, %v; want %v, %v, nil", got, ok, err, tc.want, tc.expires)
			}
		})
	}
}

func TestStatusExpired_RoundTrip(t *testing.T) {
	r := receipt.New("evt-1", "L1A", "edge1", "edge1", receipt.StatusExpired, time.Time{})
	r.Reason = "expired"
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := receipt.Decode(b)
	if err != nil || got.Status != receipt.StatusExpired {
		t.Fatalf("Decode = %+v, %v", got, err)
	}
	if r.MsgID() == receipt.New("evt-1", "L1A", "edge1", "edge1", receipt.StatusProcessed, time.Time{}).MsgID() {
		t.Fatal("expired and processed receipts share a Nats-Msg-Id")
	}
}
