#!/usr/bin/env bash
# Runs the example topology in configs/ as separate `leafline run` processes
# (l1, hub, edge1, edge2) on this machine, publishes events at L1, waits
# until L1 has recorded a completion from both edges for every event, then
# stops everything. Exit status 0 means nothing was lost.
#
#   scripts/three-sites.sh [EVENTS]      (default 200)
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-200}
work=$(mktemp -d /tmp/leafline-three.XXXXXX)
bin=$work/leafline
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf /tmp/leafline/l1 /tmp/leafline/hub /tmp/leafline/edge1 /tmp/leafline/edge2
	echo "logs were in $work (removed)"; rm -rf "$work"
}
trap cleanup EXIT

go build -o "$bin" ./cmd/leafline
rm -rf /tmp/leafline/l1 /tmp/leafline/hub /tmp/leafline/edge1 /tmp/leafline/edge2
# A secured copy of configs/: a private CA, a certificate per site, an nkey
# per dialling site, mutual TLS and per-link permissions on every link.
"$bin" topology certs --topology configs/topology.json --dir "$work/secure" configs/{l1,hub,edge1,edge2}.json >/dev/null
cfgdir=$work/secure
for site in l1 hub edge1 edge2; do
	"$bin" check --config "$cfgdir/$site.json" | grep -v ': warning: ' || true
done
for site in l1 hub edge1 edge2; do
	"$bin" run --config "$cfgdir/$site.json" >"$work/$site.log" 2>&1 &
	pids+=($!)
	# wait for the box's /readyz before starting the next one
	port=$(grep -o '"listen": *"127.0.0.1:18[0-9]*"' "configs/$site.json" | grep -o '18[0-9]*' | head -1)
	for _ in $(seq 1 100); do
		curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
		sleep 0.1
	done
	echo "started $site (ops http://127.0.0.1:$port)"
done

"$bin" publish --config "$cfgdir/l1.json" --count "$events" >"$work/published.txt"
mapfile -t ids < <(sed -n 's/^published event_id=\([^ ]*\) .*/\1/p' "$work/published.txt")
echo "published ${#ids[@]} events at l1"

deadline=$((SECONDS + 120))
remaining=("${ids[@]}")
while [ ${#remaining[@]} -gt 0 ] && [ $SECONDS -lt $deadline ]; do
	next=()
	for id in "${remaining[@]}"; do
		out=$("$bin" status --config "$cfgdir/l1.json" "$id" 2>/dev/null || true)
		n=$(grep -c '"status": "processed"' <<<"$out" || true)
		[ "$n" -ge 2 ] || next+=("$id")
	done
	remaining=("${next[@]}")
	[ ${#remaining[@]} -eq 0 ] || sleep 1
done
completed=$(( ${#ids[@]} - ${#remaining[@]} ))
echo "three-sites published=${#ids[@]} completed_by_both_edges=$completed lost=${#remaining[@]}"
[ ${#remaining[@]} -eq 0 ]
