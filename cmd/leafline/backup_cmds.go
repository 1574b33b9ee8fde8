package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/leafline/leafline/box"
)

// cmdBackup writes a backup of a stopped box's data dir (box.Backup):
//
//	leafline backup --config FILE --out ARCHIVE
func cmdBackup(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("backup", stderr)
	path := fs.String("config", "", "box config `FILE` (the box stopped)")
	out := fs.String("out", "", "the backup `ARCHIVE` to write (.tar.gz); it must not exist")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	if *out == "" {
		fmt.Fprintln(stderr, "leafline backup: --out ARCHIVE is required")
		return exitUsage
	}
	cfg, ok := loadConfig(fs, *path, stderr)
	if !ok {
		return exitUsage
	}
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintf(stderr, "leafline backup: --out: %v\n", err)
		return exitUsage
	}
	m, err := box.Backup(cfg, f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(*out)
		fmt.Fprintf(stderr, "leafline backup: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "backup site=%s role=%s files=%d bytes=%d archive=%s\n", m.Site, m.Role, m.Files, m.Bytes, *out)
	return exitOK
}

// cmdRestore fills an empty data dir from a backup (box.Restore):
//
//	leafline restore --config FILE --from ARCHIVE
func cmdRestore(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("restore", stderr)
	path := fs.String("config", "", "box config `FILE` (the box stopped, its data dir empty or absent)")
	from := fs.String("from", "", "the backup `ARCHIVE` to restore")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	if *from == "" {
		fmt.Fprintln(stderr, "leafline restore: --from ARCHIVE is required")
		return exitUsage
	}
	cfg, ok := loadConfig(fs, *path, stderr)
	if !ok {
		return exitUsage
	}
	f, err := os.Open(*from)
	if err != nil {
		fmt.Fprintf(stderr, "leafline restore: --from: %v\n", err)
		return exitUsage
	}
	defer f.Close()
	m, err := box.Restore(cfg, f)
	if err != nil {
		fmt.Fprintf(stderr, "leafline restore: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "restored site=%s role=%s files=%d bytes=%d taken=%s into=%s\n",
		m.Site, m.Role, m.Files, m.Bytes, m.Created.Format("2006-01-02T15:04:05Z"), filepath.Clean(cfg.DataDir))
	return exitOK
}
