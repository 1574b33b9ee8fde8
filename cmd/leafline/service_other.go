//go:build !windows

package main

import "context"

// serviceContext returns ctx unchanged: only Windows has a service control
// manager to answer (see service_windows.go). Under systemd, `leafline
// run` is a plain process that stops on SIGTERM.
func serviceContext(ctx context.Context) (_ context.Context, done func(code int)) {
	return ctx, func(int) {}
}
