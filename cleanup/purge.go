package cleanup

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// purgeBelow purges every message of stream below seq and returns how
// many the server removed (jetstream.Stream.Purge does not say).
func purgeBelow(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) (uint64, error) {
	req, err := json.Marshal(jetstream.StreamPurgeRequest{Sequence: seq})
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg, err := js.Conn().RequestWithContext(ctx, apiPrefix(js)+"STREAM.PURGE."+stream, req)
	if err != nil {
		return 0, fmt.Errorf("receipts: cleanup: purge %s below %d: %w", stream, seq, err)
	}
	var resp struct {
		Success bool                `json:"success"`
		Purged  uint64              `json:"purged"`
		Error   *jetstream.APIError `json:"error,omitempty"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, fmt.Errorf("receipts: cleanup: purge %s below %d: answer: %w", stream, seq, err)
	}
	if resp.Error != nil {
		return 0, fmt.Errorf("receipts: cleanup: purge %s below %d: %w", stream, seq, resp.Error)
	}
	if !resp.Success {
		return 0, fmt.Errorf("receipts: cleanup: purge %s below %d: not done", stream, seq)
	}
	return resp.Purged, nil
}

// apiPrefix is the JetStream API prefix js sends its requests on.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		p := o.APIPrefix
		if p[len(p)-1] != '.' {
			p += "."
		}
		return p
	}
	return jetstream.DefaultAPIPrefix
}
