package ctxsleep

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestFor(t *testing.T) {
	if !For(context.Background(), time.Millisecond) {
		t.Error("a wait that ran its length reported the context done")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if For(ctx, time.Hour) {
		t.Error("a wait on a cancelled context reported its hour elapsed")
	}
}

func TestUntil(t *testing.T) {
	n := 0
	if err := Until(context.Background(), time.Minute, func() (bool, error) { n++; return n == 3, nil }); err != nil || n != 3 {
		t.Errorf("a condition true on its third call: %v after %d calls", err, n)
	}
	boom := errors.New("boom")
	if err := Until(context.Background(), 30*time.Millisecond, func() (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Errorf("a condition never true: %v, want it to wrap its last error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Until(ctx, time.Hour, func() (bool, error) { return false, nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v", err)
	}
}
