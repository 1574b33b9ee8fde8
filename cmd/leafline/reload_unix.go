//go:build !windows

package main

import (
	"os"
	"syscall"
)

// reloadSignals are the signals on which `leafline run` takes its config
// again.
var reloadSignals = []os.Signal{syscall.SIGHUP}
