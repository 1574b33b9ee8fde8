#!/usr/bin/env bash
# The cluster variant of three-sites.sh: runs configs/cluster/ on this
# machine. L1 and the hub each on a three-node JetStream cluster of stock
# nats-server processes (configurations rendered by `leafline topology
# render`, nodes on 127.0.0.11-13 and 127.0.0.21-23), two l1 boxes and a hub
# box as clients of them, and two edges that list every hub node. It
# publishes events at L1, SIGKILLs one L1 node, one hub node and the second
# l1 box and starts them again, waits until both l1 boxes report every event
# complete, then stops everything. Exit status 0 means nothing was lost.
#
#   scripts/three-sites-cluster.sh [EVENTS]      (default 1000)
#
# With ROLLING=1 it restarts every node of both clusters instead, one at a
# time (SIGTERM, start, 10 s), while the events are published, and checks
# that no box exited.
#
# It keeps its data dirs and logs in a directory of its own under /tmp,
# removed after a run that lost nothing and kept (and named) after a
# failure. LEAFLINE_BIN and LEAFLINE_NATS_SERVER name binaries to use
# instead of building them (nats-server is built from the module cache at
# the version go.mod pins).
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-1000}
case $events in '' | *[!0-9]*) echo "three-sites-cluster: EVENTS must be a number, got '$events'" >&2; exit 2 ;; esac

work=$(mktemp -d /tmp/leafline-cluster.XXXXXX)
declare -A pids
ok=false
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if $ok; then rm -rf "$work"; else echo "three-sites-cluster: FAILED; logs and data kept in $work" >&2; fi
}
trap cleanup EXIT

bin=${LEAFLINE_BIN:-$work/leafline}
[ -n "${LEAFLINE_BIN:-}" ] || go build -o "$bin" ./cmd/leafline
nats=${LEAFLINE_NATS_SERVER:-$work/nats-server}
[ -n "${LEAFLINE_NATS_SERVER:-}" ] || go build -o "$nats" github.com/nats-io/nats-server/v2

# A copy of configs/cluster/ whose data dirs are inside the work dir.
mkdir -p "$work/cfg"
for f in configs/cluster/*.json; do
	sed "s#\"/tmp/leafline-cluster/#\"$work/data/#g" "$f" >"$work/cfg/$(basename "$f")"
done
for site in l1 l1-b hub edge1 edge2; do
	"$bin" check --config "$work/cfg/$site.json" | grep -v ': warning: ' || exit 1
done
"$bin" topology render --config "$work/cfg/l1.json" --out "$work/conf" >/dev/null
"$bin" topology render --config "$work/cfg/hub.json" --out "$work/conf" >/dev/null

node() { # node NAME: start one nats-server from its rendered configuration
	"$nats" -c "$work/conf/$1.conf" >>"$work/$1.log" 2>&1 &
	pids[$1]=$!
}
box() { # box NAME CONFIG: start a leafline box and wait for its /readyz
	"$bin" run --config "$work/cfg/$2.json" >>"$work/$1.log" 2>&1 &
	pids[$1]=$!
	port=$(grep -o '"listen": *"127.0.0.1:18[0-9]*"' "$work/cfg/$2.json" | grep -o '18[0-9]*' | head -1)
	for _ in $(seq 1 600); do
		if curl -fsS "http://127.0.0.1:$port/readyz" 2>/dev/null | grep -q '"ready": true'; then return; fi
		kill -0 "${pids[$1]}" 2>/dev/null || break
		sleep 0.1
	done
	echo "three-sites-cluster: $1 did not become ready; the end of its log:" >&2
	tail -n 20 "$work/$1.log" >&2
	exit 1
}
for n in l1-n1 l1-n2 l1-n3 hub-n1 hub-n2 hub-n3; do node "$n"; done
box l1-a l1
box l1-b l1-b
box hub-a hub
box edge1 edge1
box edge2 edge2
echo "started 6 nats-server nodes and 5 boxes; logs in $work"

summary() { curl -fsS "http://127.0.0.1:$1/v1/summary" 2>/dev/null || echo '{}'; }
complete() { summary "$1" | grep -o '"complete": *[0-9]*' | grep -o '[0-9]*$' || echo 0; }

if [ "${ROLLING:-}" = 1 ]; then
	# A rolling restart while events flow: each node of both clusters in
	# turn is stopped (SIGTERM), started again, and given 10 s to catch
	# up before the next, while the events are published 1,000 at a time.
	(
		left=$events
		while [ "$left" -gt 0 ]; do
			n=$((left < 1000 ? left : 1000))
			"$bin" publish --config "$work/cfg/l1.json" --count "$n" >/dev/null || exit 1
			left=$((left - n))
		done
	) &
	publisher=$!
	for n in l1-n1 l1-n2 l1-n3 hub-n1 hub-n2 hub-n3; do
		sleep 5
		kill -TERM "${pids[$n]}"
		wait "${pids[$n]}" 2>/dev/null || true
		node "$n"
		echo "restarted $n"
		sleep 10
	done
	wait "$publisher" || { echo "three-sites-cluster: leafline publish failed during the rolling restart" >&2; exit 1; }
	echo "published $events events through a rolling restart of every node"
	for b in l1-a l1-b hub-a edge1 edge2; do
		kill -0 "${pids[$b]}" 2>/dev/null || { echo "three-sites-cluster: box $b exited during the rolling restart; the end of its log:" >&2; tail -n 20 "$work/$b.log" >&2; exit 1; }
	done
else
	half=$((events / 2))
	"$bin" publish --config "$work/cfg/l1.json" --count "$half" >/dev/null
	echo "published $half events; SIGKILL l1-n2, hub-n1 and l1-b"
	kill -KILL "${pids[l1-n2]}" "${pids[hub-n1]}" "${pids[l1-b]}"
	"$bin" publish --config "$work/cfg/l1.json" --count $((events - half)) >/dev/null
	sleep 2
	node l1-n2
	node hub-n1
	box l1-b l1-b
	echo "restarted l1-n2, hub-n1 and l1-b"
fi

deadline=$((SECONDS + 300))
while [ "$(complete 18231)" -lt "$events" ] && [ $SECONDS -lt $deadline ]; do sleep 1; done
a=$(summary 18231 | grep -E '"(events|pending|complete|conflict|dead_lettered)"' | tr -d ' \n')
b=$(summary 18232 | grep -E '"(events|pending|complete|conflict|dead_lettered)"' | tr -d ' \n')
echo "l1-a: $a"
echo "l1-b: $b"
[ "$a" = "$b" ] || { echo "three-sites-cluster: the two l1 boxes answer differently" >&2; exit 1; }
done_=$(complete 18231)
echo "three-sites-cluster published=$events complete=$done_ lost=$((events - done_))"
[ "$done_" -eq "$events" ]
ok=true
