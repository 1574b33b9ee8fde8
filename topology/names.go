package topology

import (
	"github.com/leafline/leafline/topology/internal/syntax"
)

const (
	// maxSiteName bounds site names and domains in bytes.
	maxSiteName = 64
	// maxStreamName bounds stream names in bytes.
	maxStreamName = 32
	// maxConsumerName bounds consumer and bucket names in bytes.
	maxConsumerName = 64
)

// upstreamSchemes are the URL schemes a leafnode remote may use.
var upstreamSchemes = map[string]bool{"nats-leaf": true, "tls": true, "nats": true, "ws": true, "wss": true}

// sourceDeliverSpace holds every SourceDeliverSubject: no configured subject
// may overlap it, or a stream would capture another stream's sourcing traffic.
const sourceDeliverSpace = "leafline.src.>"

// directInboxSpace holds every DirectInboxPrefix: no configured subject may
// overlap it, or a stream would capture a direct-mode edge's deliveries.
const directInboxSpace = "leafline.direct.>"

// checkUpstreamURL reports why s is not a leafnode remote URL. The URL is
// never quoted back: it may carry credentials.
func checkUpstreamURL(s string) error {
	return syntax.ServerURL(s, upstreamSchemes, "nats-leaf, tls, nats, ws, wss", "leafnode.upstream_auth.password_file or password_env")
}
