// Package natsproc runs stock nats-server processes for tests, benchmarks
// and scripts: the server of the version go.mod pins, built once per
// process from the module cache, started from a configuration file,
// killed with SIGKILL and started again on the same store.
//
// It guarantees that a Server it started is stopped by Stop (or by the
// cleanup of the test that started it), and that Kill leaves the store as
// a power cut would for the process: nothing is flushed or closed first.
//
// # Caveats
//
// Building the binary takes seconds with a warm build cache and minutes
// with a cold one. LEAFLINE_NATS_SERVER names a binary to use instead.
// SIGKILL exists on Unix only; the package is for Unix hosts.
package natsproc
