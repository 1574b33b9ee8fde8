package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/windows/svc"
)

// serviceName is the name leafline gives the service control manager. A
// service that runs in its own process is known by the name it was
// installed under (sc.exe create NAME), whatever this says.
const serviceName = "leafline"

// stopWaitHint is how long the service control manager is told a stop may
// take: the box drains its sink runner and closes its outbox and server.
const stopWaitHint = 30 * time.Second

// serviceContext hooks the process into the Windows service control
// manager when it was started as a service, and does nothing otherwise.
// As a service, ctx is also cancelled by a Stop or Shutdown request, and
// the process's stdout and stderr (the box's log) are appended to
// leafline.log beside the executable, since a service has no console.
//
// done must be called with the command's exit code before the process
// exits: it reports the service stopped, with that code (a non-zero one as
// a service-specific error, so that the service's recovery actions apply).
func serviceContext(ctx context.Context) (_ context.Context, done func(code int)) {
	isService, err := svc.IsWindowsService()
	if err != nil || !isService {
		return ctx, func(int) {}
	}
	redirectOutput()
	ctx, cancel := context.WithCancel(ctx)
	h := &serviceHandler{stop: cancel, exit: make(chan int, 1)}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		if err := svc.Run(serviceName, h); err != nil {
			fmt.Fprintf(os.Stderr, "leafline: windows service: %v\n", err)
		}
	}()
	return ctx, func(code int) {
		h.exit <- code
		<-ran
	}
}

// redirectOutput appends stdout and stderr to leafline.log beside the
// executable. Without it a service's output is lost.
func redirectOutput() {
	exe, err := os.Executable()
	if err != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(filepath.Dir(exe), "leafline.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	os.Stdout, os.Stderr = f, f
}

// serviceHandler runs the service's side of the control protocol; the
// command itself runs in main.
type serviceHandler struct {
	stop context.CancelFunc // cancels the command's context
	exit chan int           // receives the command's exit code
}

// Execute reports the service running at once, cancels the command on Stop
// or Shutdown (reporting StopPending), and returns when the command has
// returned; svc.Run then reports Stopped with the exit code.
func (h *serviceHandler) Execute(_ []string, req <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	status <- svc.Status{State: svc.StartPending}
	status <- svc.Status{State: svc.Running, Accepts: svc.AcceptStop | svc.AcceptShutdown}
	for {
		select {
		case code := <-h.exit:
			return code != 0, uint32(code)
		case c := <-req:
			switch c.Cmd {
			case svc.Interrogate:
				status <- c.CurrentStatus
			case svc.Stop, svc.Shutdown:
				status <- svc.Status{State: svc.StopPending, WaitHint: uint32(stopWaitHint / time.Millisecond)}
				h.stop()
			}
		}
	}
}
