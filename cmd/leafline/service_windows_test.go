package main

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/windows/svc"
)

// TestServiceHandler drives the service control protocol as the service
// control manager would: the service runs, answers Interrogate, cancels the
// command on Stop, and stops with the command's exit code.
func TestServiceHandler(t *testing.T) {
	for _, tt := range []struct {
		name     string
		cmd      svc.Cmd
		code     int
		specific bool
	}{
		{"stop, clean exit", svc.Stop, 0, false},
		{"shutdown, clean exit", svc.Shutdown, 0, false},
		{"stop, failed exit", svc.Stop, 1, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			h := &serviceHandler{stop: cancel, exit: make(chan int, 1)}
			req, status := make(chan svc.ChangeRequest), make(chan svc.Status)
			type result struct {
				specific bool
				code     uint32
			}
			ret := make(chan result, 1)
			go func() {
				s, c := h.Execute(nil, req, status)
				ret <- result{s, c}
			}()
			next := func() svc.Status {
				t.Helper()
				select {
				case s := <-status:
					return s
				case <-time.After(5 * time.Second):
					t.Fatal("no status from the handler")
					return svc.Status{}
				}
			}
			if s := next(); s.State != svc.StartPending {
				t.Fatalf("first status %v, want StartPending", s.State)
			}
			running := next()
			if running.State != svc.Running || running.Accepts != svc.AcceptStop|svc.AcceptShutdown {
				t.Fatalf("second status %+v, want Running accepting Stop and Shutdown", running)
			}
			req <- svc.ChangeRequest{Cmd: svc.Interrogate, CurrentStatus: running}
			if s := next(); s != running {
				t.Fatalf("Interrogate answered %+v, want %+v", s, running)
			}
			if ctx.Err() != nil {
				t.Fatal("context cancelled before Stop")
			}
			req <- svc.ChangeRequest{Cmd: tt.cmd}
			if s := next(); s.State != svc.StopPending || s.WaitHint == 0 {
				t.Fatalf("status after %v: %+v, want StopPending with a wait hint", tt.cmd, s)
			}
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
				t.Fatalf("%v did not cancel the command's context", tt.cmd)
			}
			h.exit <- tt.code
			select {
			case r := <-ret:
				if r.specific != tt.specific || r.code != uint32(tt.code) {
					t.Fatalf("Execute returned (%v, %d), want (%v, %d)", r.specific, r.code, tt.specific, tt.code)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Execute did not return after the command exited")
			}
		})
	}
}

// TestServiceContext_NotAService: outside the service control manager the
// context is the caller's and done returns at once.
func TestServiceContext_NotAService(t *testing.T) {
	ctx := context.Background()
	got, done := serviceContext(ctx)
	if got != ctx {
		t.Fatal("serviceContext changed the context of a process that is not a service")
	}
	done(0)
}
