package jsplan

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/topology"
)

// DirectMaxRequestBatch is the largest pull request a direct consumer
// takes: the bound of an edge's delivery.backlog_batch_size.
const DirectMaxRequestBatch = 1000

// DirectConsumer is the durable pull consumer that L1 creates for a
// direct-mode edge on the origin stream: the name the link permissions
// allow, the edge's filters (EdgeFilters), explicit ACK from the first event, no inactive
// threshold, and the topology's Site.DirectConsumer settings. L1 and the
// edge derive it from the same topology: L1 to create it, the edge to know
// it before L1 answers.
func DirectConsumer(t *topology.Topology, site *topology.Site) jetstream.ConsumerConfig {
	dc := site.DirectConsumerSettings()
	c := jetstream.ConsumerConfig{
		Durable:         topology.DirectConsumerName(site.Name),
		Description:     "leafline direct sink for " + site.Name,
		DeliverPolicy:   jetstream.DeliverAllPolicy,
		AckPolicy:       jetstream.AckExplicitPolicy,
		AckWait:         dc.AckWait.D(),
		MaxAckPending:   dc.MaxAckPending,
		MaxDeliver:      -1,
		MaxRequestBatch: DirectMaxRequestBatch,
	}
	setFilters(&c, EdgeFilters(t, site))
	if dc.MaxDeliver > 0 {
		c.MaxDeliver = dc.MaxDeliver
	}
	return c
}
