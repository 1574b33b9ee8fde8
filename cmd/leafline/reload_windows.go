//go:build windows

package main

import "os"

// reloadSignals: Windows has no SIGHUP; restart the service to take a new
// config.
var reloadSignals []os.Signal
