package box

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
)

// startOnCluster starts an l1 or hub box against the existing cluster its
// config names (topology.ClusterConfig): no embedded server, one client
// connection that fails over between the cluster's URLs. The box checks
// that the servers serve the site's JetStream domain, then creates or
// reconciles its streams and consumers there with cluster.replicas (an
// existing one is updated in place, scaled to that count, and never
// deleted or purged), and starts its role's work as a client: on L1 the
// completion service (with the origin tracker, redrive and status API),
// on a hub only trimming, since the links are the servers' own durable
// sourcing. Several boxes of one site may run at once: creating an asset
// that another box created is an update to the same configuration, the
// completion service's instances share its durable consumer and apply
// each event once through the bucket's create/compare-and-set, and
// trimming deletes only what every taker has taken.
func (a *App) startOnCluster(ctx context.Context) error {
	cl := a.cfg.Cluster
	opts := []nats.Option{
		nats.Name("leafline-" + a.site.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// A cluster still starting is waited for, not a reason to exit.
		nats.RetryOnFailedConnect(true),
		a.natsErrors(),
	}
	opts = append(opts, ClusterClientOptions(cl)...)
	var err error
	if a.nc, err = nats.Connect(cl.ClusterURL(), opts...); err != nil {
		return fmt.Errorf("cluster.urls: connect: %w", err)
	}
	if a.js, err = jetstream.New(a.nc); err != nil {
		return err
	}
	ai, err := a.waitJetStream(ctx)
	if err != nil {
		return err
	}
	if ai.Domain != a.site.Domain {
		return fmt.Errorf("cluster: the servers' JetStream domain is %q, site %q's domain in the topology is %q", ai.Domain, a.site.Name, a.site.Domain)
	}
	// Each step is repeated (it is idempotent) while a stream's leader is
	// being elected.
	err = a.Wait(ctx, "the cluster's streams", func(ctx context.Context) error {
		if err := jsplan.Reconcile(ctx, a.js, a.clusterPlan()); err != nil {
			return err
		}
		if err := a.prune(ctx); err != nil {
			return err
		}
		a.plans, err = a.trimPlans(ctx)
		return err
	})
	if err != nil {
		return err
	}
	a.log.Info("running on cluster", "server", a.nc.ConnectedServerName(), "replicas", cl.Replicas)
	// The role waits for its own streams (App.Wait) within this bound.
	rctx, cancel := context.WithTimeout(ctx, clusterStartWithin)
	defer cancel()
	return a.role.Start(rctx)
}

// clusterStartWithin bounds a role's start on a cluster, its waits for
// elections included.
const clusterStartWithin = 5 * time.Minute

// waitJetStream waits until the cluster's JetStream answers: a cluster
// that is starting, or electing a new meta leader after a node died, does
// not answer for a while, and the box waits for it (not ready) rather
// than exiting. It returns only when ctx is done.
func (a *App) waitJetStream(ctx context.Context) (*jetstream.AccountInfo, error) {
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ai, err := a.js.AccountInfo(actx)
		cancel()
		if err == nil {
			return ai, nil
		}
		a.notReady.Store("waiting for the cluster's JetStream")
		a.log.Warn("cluster: JetStream does not answer yet; waiting", "server", a.nc.ConnectedUrlRedacted(), "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: JetStream on %s: %w", a.nc.ConnectedUrlRedacted(), err)
		case <-time.After(wait):
		}
	}
}

// clusterPlan is the site's jsplan.Plan with every stream at cluster.replicas;
// the consumers follow their stream's replica count.
func (a *App) clusterPlan() jsplan.Plan {
	p := jsplan.SitePlan(a.cfg, a.site)
	for i := range p.Streams {
		p.Streams[i].Replicas = a.replicas()
	}
	return p
}

// replicas is the replica count of what the box creates: cluster.replicas
// in cluster mode, else 1 (an embedded server is one node).
func (a *App) replicas() int {
	if a.cfg.Cluster.Enabled() {
		return a.cfg.Cluster.Replicas
	}
	return 1
}

// newProbe is the storage probe of the box's data dir, and of its
// JetStream store when the box embeds its server: on a cluster the data
// dir holds only the box's lock, and the servers watch their own stores.
func (a *App) newProbe() (*storageProbe, error) {
	if a.cfg.Cluster.Enabled() {
		return probeDirs(a.cfg.DataDir)
	}
	return newStorageProbe(a.cfg.DataDir)
}

// ClusterClientOptions are the NATS client options of a cluster config:
// its credentials file and TLS files.
func ClusterClientOptions(c topology.ClusterConfig) []nats.Option {
	var opts []nats.Option
	if c.CredentialsFile != "" {
		opts = append(opts, nats.UserCredentials(c.CredentialsFile))
	}
	if c.TLS.CAFile != "" {
		opts = append(opts, nats.RootCAs(c.TLS.CAFile))
	}
	if c.TLS.CertFile != "" {
		opts = append(opts, nats.ClientCert(c.TLS.CertFile, c.TLS.KeyFile))
	}
	return opts
}
