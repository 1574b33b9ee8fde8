package box

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/jsplan"
)

// ReleasesBucket is the KV bucket in which a hub keeps how far it has
// released each edge past what the edge took (jsplan.Release): one key
// per edge, written before the trim deletes what it releases.
const ReleasesBucket = "leafline_releases"

// releasesMaxBytes bounds the releases bucket: a record of a few hundred
// bytes per edge.
const releasesMaxBytes = 1 << 20

// releases is a hub's jsplan.Releases: the bucket, read once at start and
// kept in memory.
type releases struct {
	kv jetstream.KeyValue
	mu sync.Mutex
	by map[string]jsplan.Release
}

// openReleases opens (creating it if need be) the hub's releases bucket
// and reads it.
func openReleases(ctx context.Context, js jetstream.JetStream, replicas int) (*releases, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: ReleasesBucket,
		Description: "leafline: how far the hub released each edge past what it took",
		History:     1, Storage: jetstream.FileStorage, Replicas: replicas, MaxBytes: releasesMaxBytes})
	if err != nil {
		return nil, fmt.Errorf("releases bucket %s: %w", ReleasesBucket, err)
	}
	r := &releases{kv: kv, by: map[string]jsplan.Release{}}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("releases bucket %s: %w", ReleasesBucket, err)
	}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("releases bucket %s: %s: %w", ReleasesBucket, k, err)
		}
		var rel jsplan.Release
		if err := json.Unmarshal(e.Value(), &rel); err != nil {
			return nil, fmt.Errorf("releases bucket %s: %s: %w", ReleasesBucket, k, err)
		}
		r.by[k] = rel
	}
	return r, nil
}

func (r *releases) Released(site string) jsplan.Release {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.by[site]
}

// Release writes rel and waits for its PubAck.
func (r *releases) Release(ctx context.Context, rel jsplan.Release) error {
	b, err := json.Marshal(rel)
	if err != nil {
		return err
	}
	if _, err := r.kv.Put(ctx, rel.Site, b); err != nil {
		return err
	}
	r.mu.Lock()
	r.by[rel.Site] = rel
	r.mu.Unlock()
	return nil
}
