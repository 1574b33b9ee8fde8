package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/leafline/leafline/status"
	"github.com/leafline/leafline/topology"
)

// listUnidentified prints a page of the origin messages L1 recorded without
// a usable event_id (leafline pending --unidentified).
func listUnidentified(ctx context.Context, cfg *topology.Config, server, after string, limit int, asJSON bool, stdout, stderr io.Writer) int {
	nc, _, err := connect(cfg, server)
	if err != nil {
		fmt.Fprintf(stderr, "leafline pending: %v\n", err)
		return exitFailure
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	page, err := status.NewStatusClient(nc, "").Unidentified(rctx, after, limit)
	if err != nil {
		fmt.Fprintf(stderr, "leafline pending: %v\n", err)
		return exitFailure
	}
	if asJSON {
		return statusPrintJSON(stdout, stderr, page)
	}
	if len(page.Items) == 0 {
		fmt.Fprintln(stdout, "no origin messages without a usable event_id")
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "STREAM\tSEQ\tSUBJECT\tPUBLISHED\tBYTES\tREASON")
		for _, u := range page.Items {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", u.Stream, u.Seq, statusPrintable(u.Subject),
				u.PublishedAt.UTC().Format(time.RFC3339), u.Size, strconv.Quote(u.Reason))
		}
		tw.Flush()
	}
	if page.Next != "" {
		fmt.Fprintf(stdout, "more: --unidentified --after %s\n", page.Next)
	}
	return exitOK
}
