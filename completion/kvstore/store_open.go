package kvstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
	"github.com/nats-io/nats.go/jetstream"
)

// OpenStore opens (with cfg.Create: creates if absent) the completion and
// index buckets and returns an indexed Store.
func OpenStore(ctx context.Context, cfg StoreConfig) (*Store, error) {
	setDefault(&cfg.Bucket, DefaultBucket)
	setDefault(&cfg.IndexBucket, cfg.Bucket+IndexBucketSuffix)
	setDefault(&cfg.Replicas, 1)
	setDefault(&cfg.History, 1)
	setDefault(&cfg.OverdueAfter, DefaultOverdueAfter)
	setDefault(&cfg.CallTimeout, DefaultCallTimeout)
	var errs []error
	if cfg.JS == nil {
		errs = append(errs, errors.New("JS: required"))
	}
	for _, f := range []struct{ field, v string }{{"Bucket", cfg.Bucket}, {"IndexBucket", cfg.IndexBucket}} {
		if err := receipt.CheckName(f.v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.field, err))
		}
	}
	if cfg.Bucket == cfg.IndexBucket {
		errs = append(errs, errors.New("IndexBucket: must differ from Bucket"))
	}
	for i, site := range cfg.Sites {
		if err := receipt.CheckName(site); err != nil {
			errs = append(errs, fmt.Errorf("Sites[%d]: %w", i, err))
		}
	}
	if cfg.History < 1 || cfg.History > jetstream.KeyValueMaxHistory {
		errs = append(errs, fmt.Errorf("History: must be 1..%d, got %d", jetstream.KeyValueMaxHistory, cfg.History))
	}
	if cfg.OverdueAfter < 0 || cfg.CallTimeout < 0 {
		errs = append(errs, errors.New("OverdueAfter, CallTimeout: must not be negative"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", record.ErrInvalidConfig, errors.Join(errs...))
	}
	kv, err := OpenBucket(ctx, cfg.JS, cfg.Bucket, "leafline completions, one key per event_id", cfg.Create, cfg.Replicas, cfg.History)
	if err != nil {
		return nil, err
	}
	if cfg.Create {
		if err := setHistory(ctx, cfg.JS, cfg.Bucket, cfg.History); err != nil {
			return nil, err
		}
		if err := enableAtomic(ctx, cfg.JS, cfg.Bucket); err != nil {
			return nil, err
		}
	}
	ikv, err := OpenBucket(ctx, cfg.JS, cfg.IndexBucket, "leafline completion status index", cfg.Create, cfg.Replicas, 1)
	if err != nil {
		return nil, err
	}
	if cfg.Create {
		if err := enableAtomic(ctx, cfg.JS, cfg.IndexBucket); err != nil {
			return nil, err
		}
	}
	ix, err := newIndex(ctx, cfg.JS, ikv)
	if err != nil {
		return nil, fmt.Errorf("receipts: open store: %w", err)
	}
	st := NewStore(kv)
	st.ix, st.overdueAfter, st.callTimeout = ix, cfg.OverdueAfter, cfg.CallTimeout
	st.sites = record.NormalizeNames(cfg.Sites)
	st.holdUnknown = cfg.HoldUntilOrigin
	st.js = cfg.JS
	return st, nil
}

// OpenBucket opens the KV bucket name, creating it (file storage,
// replicas, history) when absent and create is set.
func OpenBucket(ctx context.Context, js jetstream.JetStream, name, desc string, create bool, replicas, history int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) && create {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      name,
			Description: desc,
			History:     uint8(history),
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // another instance won the race
			kv, err = js.KeyValue(ctx, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("receipts: bucket %s: %w", name, err)
	}
	return kv, nil
}

// setHistory makes bucket keep history revisions per key. A KV bucket's
// history is its stream's MaxMsgsPerSubject, so an existing bucket is
// reconciled with a stream update of that one field (everything else is
// kept as it is): no recreate, no purge. Several instances may do it at
// once; the updates are idempotent.
func setHistory(ctx context.Context, js jetstream.JetStream, bucket string, history int) error {
	stream, err := js.Stream(ctx, StreamPrefix+bucket)
	if err != nil {
		return fmt.Errorf("receipts: bucket %s: %w", bucket, err)
	}
	cfg := stream.CachedInfo().Config
	if cfg.MaxMsgsPerSubject == int64(history) {
		return nil
	}
	cfg.MaxMsgsPerSubject = int64(history)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("receipts: bucket %s: set history %d: %w", bucket, history, err)
	}
	return nil
}

// StreamPrefix names the stream behind a KV bucket.
const StreamPrefix = "KV_"
