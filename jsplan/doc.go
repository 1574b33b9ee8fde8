// Package jsplan is what a leafline site holds in JetStream, derived from
// the topology: the streams it owns and the durable consumers it creates on
// them for the sites that take from it (SitePlan), how each link takes a
// stream (TakenLinks: by the relay, package hop, or by stream sourcing),
// and what each stream may lose once every taker has it (TrimPlans).
//
// A running box and the commands for a stock nats-server use the same
// plan: Reconcile creates or updates the streams and consumers in place and
// never deletes or recreates one (a change that would need it is
// ErrIncompatible); Provision does so for a server leafline does not run;
// Trim deletes, once, what every taker has ACKed; the lints (PlanWarnings,
// LiveWarnings, ServerConfigWarnings) say where a plan or a live server
// falls short of what leafline needs.
//
// It imports no box: nothing here starts a server or runs a loop.
package jsplan
