package l1

import (
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
)

func TestDirectConsumerProblems(t *testing.T) {
	edge := &topology.Site{Name: "edge1", Role: topology.RoleEdge, Filter: "events.a.>", DeliveryMode: topology.DeliveryDirect}
	good := jsplan.DirectConsumer(&topology.Topology{Events: topology.Events{Subjects: []string{"events.>"}}}, edge)
	if p, _, _ := directConsumerProblems(good, good); len(p) != 0 {
		t.Fatalf("L1's own shape: %v", p)
	}
	push := good
	push.DeliverSubject, push.InactiveThreshold = "elsewhere", time.Second
	p, fixed, repairable := directConsumerProblems(push, good)
	if len(p) != 2 || !repairable || fixed.InactiveThreshold != 0 || !strings.Contains(p[1], "cannot be changed in place") {
		t.Fatalf("problems %q, repairable %v", p, repairable)
	}
}
