package jsplan

import (
	"strings"
	"testing"
)

func TestLintStreams(t *testing.T) {
	ws := LintStreams([]StreamFacts{
		{Name: "L1A", Kind: StreamOrigin, Retention: "workqueue", Discard: "new"},
		{Name: "HA", Kind: StreamEvents, Retention: "limits", Discard: "new", Sources: []SourceFacts{{Name: "L1A", External: true}}},
		{Name: "RE", Kind: StreamReceipts, Retention: "limits", Discard: "old", Subjects: []string{"leafline.receipts.edge1.>"}},
		{Name: "DLQ", Kind: StreamDLQ, Retention: "limits", Discard: "new", Subjects: []string{"events.dlq"}},
		{Name: "OK", Kind: StreamReceipts, Retention: "limits", Discard: "new", Sources: []SourceFacts{{Name: "RE", External: true, Durable: true}}},
	}, []string{"events.>"})
	want := []string{
		"stream L1A: origin stream with workqueue retention",
		"stream HA: sources L1A across a link without durable sourcing",
		"stream RE: receipts stream with DiscardOld",
		`stream DLQ: dlq subject "events.dlq" overlaps the consumed subject "events.>"`,
	}
	if len(ws) != len(want) {
		t.Fatalf("%d warnings: %v", len(ws), ws)
	}
	for i, w := range want {
		if !strings.HasPrefix(ws[i].String(), w) {
			t.Errorf("warning %d = %q, want prefix %q", i, ws[i], w)
		}
	}
}
