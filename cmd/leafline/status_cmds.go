package main

// The status commands ask the L1 box's "leafline-status" NATS micro service
// (request/reply on its client listener) rather than reading the KV buckets:
// the service owns the index, the overdue threshold and the per-instance
// counters, so the CLI shows exactly what HTTP and `nats req` show, needs
// only a NATS connection (no JetStream API permissions), and works the same
// against an external cluster.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/status"
)

// statusTimeout bounds one request to the status service.
const statusTimeout = 15 * time.Second

// cmdPending lists pending (or overdue) events:
//
//	leafline pending --config FILE [--overdue] [--site S] [--limit N] [--after CURSOR] [--json]
func cmdPending(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("pending", stderr)
	path := fs.String("config", "", "L1 box config `FILE`")
	server := fs.String("server", "", "NATS `URL` (default: the config's nats.listen)")
	overdue := fs.Bool("overdue", false, "only events pending longer than the overdue threshold")
	site := fs.String("site", "", "only events this `SITE` has not reported")
	limit := fs.Int("limit", record.DefaultListLimit, fmt.Sprintf("at most `N` events (1..%d)", record.MaxListLimit))
	after := fs.String("after", "", "continue after this `CURSOR` (printed with the previous page)")
	asJSON := fs.Bool("json", false, "print the page as JSON")
	unidentified := fs.Bool("unidentified", false, "list the origin messages without a usable event_id instead (never tracked)")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	cfg, ok := loadConfig(fs, *path, stderr)
	if !ok || !requireL1("pending", *path, *server, cfg, stderr) || !checkEdgeSite("pending", *site, cfg, stderr) {
		return exitUsage
	}
	if *limit < 1 || *limit > record.MaxListLimit {
		fmt.Fprintf(stderr, "leafline pending: --limit must be 1..%d, got %d\n", record.MaxListLimit, *limit)
		return exitUsage
	}
	if *unidentified {
		if *overdue || *site != "" {
			fmt.Fprintln(stderr, "leafline pending: --unidentified takes no --overdue or --site")
			return exitUsage
		}
		return listUnidentified(ctx, cfg, *server, *after, *limit, *asJSON, stdout, stderr)
	}
	q := record.ListQuery{Status: record.ListPending, Site: *site, Limit: *limit, After: *after}
	if *overdue {
		q.Status = record.ListOverdue
	}
	if err := q.Validate(); err != nil {
		fmt.Fprintf(stderr, "leafline pending: %v\n", err)
		return exitUsage
	}
	nc, _, err := connect(cfg, *server)
	if err != nil {
		fmt.Fprintf(stderr, "leafline pending: %v\n", err)
		return exitFailure
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	items, next, err := status.NewStatusClient(nc, "").List(rctx, q)
	if err != nil {
		fmt.Fprintf(stderr, "leafline pending: %v\n", err)
		return exitFailure
	}
	if *asJSON {
		if items == nil {
			items = []record.Completion{}
		}
		return statusPrintJSON(stdout, stderr, status.ListPage{Items: items, Next: next})
	}
	writePendingTable(stdout, items, next, time.Now())
	return exitOK
}

// writePendingTable prints a page of events as a table.
func writePendingTable(w io.Writer, items []record.Completion, next string, now time.Time) {
	if len(items) == 0 {
		fmt.Fprintln(w, "no events")
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "EVENT_ID\tSTATUS\tPUBLISHED\tAGE\tMISSING\tOVERDUE")
		for _, c := range items {
			published, age := "-", "-"
			if c.OriginKnown() {
				published = c.PublishedAt.UTC().Format(time.RFC3339)
				age = now.Sub(c.PublishedAt).Round(time.Second).String()
			}
			missing := strings.Join(c.Missing, ",")
			if !c.OriginKnown() {
				missing = "(origin not seen)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", statusPrintable(c.EventID), c.Status, published, age, missing, statusYesNo(c.Overdue))
		}
		tw.Flush()
	}
	if next != "" {
		fmt.Fprintf(w, "more: --after %s\n", next)
	}
}

// cmdSummary prints counts per status and per site, and how full each of
// L1's streams is:
//
//	leafline summary --config FILE [--json]
func cmdSummary(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("summary", stderr)
	path := fs.String("config", "", "L1 box config `FILE`")
	server := fs.String("server", "", "NATS `URL` (default: the config's nats.listen)")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	cfg, ok := loadConfig(fs, *path, stderr)
	if !ok || !requireL1("summary", *path, *server, cfg, stderr) {
		return exitUsage
	}
	nc, _, err := connect(cfg, *server)
	if err != nil {
		fmt.Fprintf(stderr, "leafline summary: %v\n", err)
		return exitFailure
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	sum, err := status.NewStatusClient(nc, "").Summary(rctx)
	if err != nil {
		fmt.Fprintf(stderr, "leafline summary: %v\n", err)
		return exitFailure
	}
	if *asJSON {
		return statusPrintJSON(stdout, stderr, sum)
	}
	writeSummaryTable(stdout, sum)
	return exitOK
}

// writeSummaryTable prints a Summary as text, a per-site table and a
// per-stream table.
func writeSummaryTable(w io.Writer, s record.Summary) {
	fmt.Fprintf(w, "events %d: pending %d, complete %d, dead_lettered %d, expired %d, conflict %d, overdue %d (pending longer than %s)\n",
		s.Events, s.Pending, s.Complete, s.DeadLettered, s.Expired, s.Conflict, s.Overdue, s.OverdueAfter)
	if s.Retired > 0 {
		fmt.Fprintf(w, "retired %d: closed because a site they were routed to was retired before it reported them\n", s.Retired)
	}
	if s.PendingOriginUnknown > 0 {
		fmt.Fprintf(w, "pending without a seen origin message: %d\n", s.PendingOriginUnknown)
	}
	if s.Unidentified > 0 {
		fmt.Fprintf(w, "origin messages without a usable event_id (never tracked): %d; leafline pending --unidentified lists them\n", s.Unidentified)
	}
	if p := s.OldestPending; p != nil {
		fmt.Fprintf(w, "oldest pending: %s, published %s (%s ago)\n", statusPrintable(p.EventID),
			p.PublishedAt.UTC().Format(time.RFC3339), statusAge(p.AgeSeconds))
	}
	if s.Truncated {
		fmt.Fprintln(w, "note: the backlog exceeds one scan; overdue counts are lower bounds")
	}
	if len(s.Sites) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SITE\tPENDING\tOVERDUE\tDEAD_LETTERED\tEXPIRED\tCONFLICT\tRETIRED\tOLDEST_PENDING")
		for _, r := range s.Sites {
			oldest := "-"
			if r.OldestPending != nil {
				oldest = statusAge(r.OldestPending.AgeSeconds)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", r.Site, r.Pending, r.Overdue, r.DeadLettered, r.Expired, r.Conflict, r.Retired, oldest)
		}
		tw.Flush()
	}
	if len(s.Streams) > 0 {
		fmt.Fprintln(w)
		writeStreamsTable(w, s.Streams)
	}
	if st := s.Instance; st != nil {
		fmt.Fprintf(w, "\nanswering instance (since start): received %d, applied %d, duplicates absorbed %d, conflicts %d, quarantined %d, retried %d\n",
			st.Received, st.Applied, st.Duplicates, st.Conflicts, st.Quarantined, st.Retried)
	}
}

// writeStreamsTable prints what each stream holds against its limits,
// then a warning for each one that is filling up (record.StreamFill.Filling).
func writeStreamsTable(w io.Writer, fills []record.StreamFill) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tMESSAGES\tBYTES\tLIMIT\tFILL")
	for _, f := range fills {
		var limits []string
		if f.MaxBytes > 0 {
			limits = append(limits, record.BinarySize(uint64(f.MaxBytes)))
		}
		if f.MaxMsgs > 0 {
			limits = append(limits, fmt.Sprintf("%d messages", f.MaxMsgs))
		}
		limit, fill := "-", "-"
		if f.Limited() {
			limit, fill = strings.Join(limits, ", "), fmt.Sprintf("%d%%", f.Percent())
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", statusPrintable(f.Stream), f.Msgs, record.BinarySize(f.Bytes), limit, fill)
	}
	tw.Flush()
	for _, f := range fills {
		if f.Filling() {
			fmt.Fprintf(w, "warning: stream %s is %d%% full: it refuses new messages at its limit\n", statusPrintable(f.Stream), f.Percent())
		}
	}
}

func statusPrintJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "leafline: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// statusPrintable quotes an event_id that would break a table row (whitespace,
// control characters) and leaves the others as they are.
func statusPrintable(s string) string {
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

func statusAge(seconds float64) string {
	return time.Duration(seconds * float64(time.Second)).Round(time.Second).String()
}

func statusYesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
