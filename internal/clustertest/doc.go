// Package clustertest holds the system test of leafline on NATS clusters:
// L1 and the hub each on a three-node R3 cluster of stock nats-server
// processes rendered by `leafline topology render`, two l1 boxes and a
// hub box as clients of them, and two edges whose links fail over between
// the hub's nodes. Its test binary also runs each box as a process of its
// own (see TestMain), so that a box can be killed with SIGKILL.
package clustertest
