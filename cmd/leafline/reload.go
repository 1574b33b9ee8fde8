package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/topology"
)

// reloadOnSignal makes the box take its config file again, its topology
// included, on each of the signals sigs (SIGHUP: `systemctl reload`),
// until ctx ends (box.App.Reload). A file that does not load, or that the
// box cannot take without a restart of the process, is logged and the box
// runs on as it was.
func reloadOnSignal(ctx context.Context, app *box.App, path string, log *slog.Logger, sigs ...os.Signal) {
	if len(sigs) == 0 {
		return
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
			}
			cfg, err := topology.LoadConfig(path)
			if err != nil {
				log.Error("reload: the config does not load; running on as before", "config", path, "err", err)
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			err = app.Reload(rctx, cfg)
			cancel()
			if err != nil {
				log.Error("reload failed", "config", path, "err", err)
				continue
			}
			log.Info("reloaded", "config", path, "sites", len(cfg.Topology.Sites))
		}
	}()
}
