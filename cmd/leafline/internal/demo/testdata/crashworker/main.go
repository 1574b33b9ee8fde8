// Command crashworker is an exec-sink worker for measuring the demo with a
// worker that crashes now and then. It stores each event as
// DIR/<event_id>.json (written under a temporary name, fsynced, renamed,
// the directory fsynced), answers ok for an event it already holds, and,
// with -crash-every N, exits with status 1 when it reads the Nth event of
// a run, without answering it: each run answers N-1 events.
//
//	go build -o /tmp/crashworker ./cmd/leafline/internal/demo/testdata/crashworker
//	go run ./cmd/leafline demo --sink exec --sink-command "/tmp/crashworker -crash-every 97 /tmp/events"
//
// It is a test helper, not part of the product.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

var plainName = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]*$`)

func main() {
	crashEvery := flag.Int("crash-every", 0, "exit at the Nth event of each run, without answering it (0: never)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: crashworker [-crash-every N] DIR")
		os.Exit(2)
	}
	dir := flag.Arg(0)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out := bufio.NewWriter(os.Stdout)
	answer := func(id, result, reason string) {
		b, _ := json.Marshal(map[string]string{"event_id": id, "result": result, "error": reason})
		out.Write(append(b, '\n'))
	}
	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	seen := 0
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			break
		}
		seen++
		if *crashEvery > 0 && seen == *crashEvery {
			out.Flush()
			os.Exit(1)
		}
		var ev struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(line, &ev); err != nil || !plainName.MatchString(ev.EventID) {
			answer(ev.EventID, "fail", "not an event with a plain-name event_id")
		} else if err := store(dir, ev.EventID, line); err != nil {
			answer(ev.EventID, "retry", "cannot store the event")
		} else {
			answer(ev.EventID, "ok", "")
		}
		if in.Buffered() == 0 { // nothing more waiting: answer now
			out.Flush()
		}
	}
	out.Flush()
}

// store writes line to dir/<id>.json unless it is there, durably.
func store(dir, id string, line []byte) error {
	final := filepath.Join(dir, id+".json")
	if _, err := os.Stat(final); err == nil {
		return nil
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(line)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), final)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
