#!/usr/bin/env bash
# Runs the example topology in configs/ as separate `leafline run` processes
# (l1, hub, edge1, edge2) on this machine, publishes events at L1, waits
# until L1 has recorded a completion from both edges for every event, then
# stops everything. Exit status 0 means nothing was lost.
#
#   scripts/three-sites.sh [EVENTS]      (default 200)
#
# It uses the ports of configs/*.json and fails at once, naming the port,
# when one is taken (the README's boxes, or another run of this script). It
# keeps its data dirs and logs in a directory of its own under /tmp, which
# it removes after a run that lost nothing and keeps (and names) after a
# failure; it never touches the configs' own data dirs. LEAFLINE_BIN names
# a leafline binary to use instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-200}
case $events in '' | *[!0-9]*) echo "three-sites: EVENTS must be a number, got '$events'" >&2; exit 2 ;; esac

# Every port the configs name must be free before anything starts.
busy=()
for f in configs/topology.json configs/{l1,hub,edge1,edge2}.json; do
	for port in $(grep -o '"127\.0\.0\.1:[0-9]*"' "$f" | grep -o '[0-9]*"$' | tr -d '"'); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then busy+=("$port ($f)"); fi
	done
done
if [ ${#busy[@]} -gt 0 ]; then
	echo "three-sites: port(s) in use: ${busy[*]}" >&2
	echo "three-sites: another leafline is running on this machine (the README's boxes, or another three-sites.sh); stop it first" >&2
	exit 1
fi

work=$(mktemp -d /tmp/leafline-three.XXXXXX)
pids=()
ok=false
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if $ok; then
		rm -rf "$work"
	else
		echo "three-sites: FAILED; logs and data kept in $work" >&2
	fi
}
trap cleanup EXIT

if [ -n "${LEAFLINE_BIN:-}" ]; then
	bin=$LEAFLINE_BIN
else
	bin=$work/leafline
	echo "building leafline (the first build compiles nats-server: a few minutes)"
	go build -o "$bin" ./cmd/leafline
fi
# A secured copy of configs/: a private CA, a certificate per site, an nkey
# per dialling site, mutual TLS and per-link permissions on every link.
"$bin" topology certs --topology configs/topology.json --dir "$work/secure" configs/{l1,hub,edge1,edge2}.json >/dev/null
cfgdir=$work/secure
# Data dirs (and edge2's sink dir) inside the work dir, never the configs'.
for site in l1 hub edge1 edge2; do
	sed "s#\"/tmp/leafline/#\"$work/data/#g" "$cfgdir/$site.json" >"$cfgdir/$site.json.tmp"
	mv "$cfgdir/$site.json.tmp" "$cfgdir/$site.json"
done
if grep -q '/tmp/leafline/' "$cfgdir"/*.json; then
	echo "three-sites: a secured config still names /tmp/leafline/" >&2
	exit 1
fi
for site in l1 hub edge1 edge2; do
	if ! out=$("$bin" check --config "$cfgdir/$site.json" 2>&1); then
		echo "$out" >&2
		echo "three-sites: the config of $site does not pass check" >&2
		exit 1
	fi
	grep -v ': warning: ' <<<"$out" || true
done
for site in l1 hub edge1 edge2; do
	"$bin" run --config "$cfgdir/$site.json" >"$work/$site.log" 2>&1 &
	pid=$!
	pids+=("$pid")
	# Wait for this box's /readyz, answered by this process for this site,
	# before starting the next one.
	port=$(grep -o '"listen": *"127.0.0.1:18[0-9]*"' "configs/$site.json" | grep -o '18[0-9]*' | head -1)
	ready=false
	for _ in $(seq 1 300); do
		if ! kill -0 "$pid" 2>/dev/null; then break; fi
		if curl -fsS "http://127.0.0.1:$port/readyz" 2>/dev/null | grep -q "\"site\": *\"$site\""; then
			ready=true
			break
		fi
		sleep 0.1
	done
	if ! $ready || ! kill -0 "$pid" 2>/dev/null; then
		echo "three-sites: $site did not become ready on ops port $port; the end of its log ($work/$site.log):" >&2
		tail -n 20 "$work/$site.log" >&2
		exit 1
	fi
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
ok=true
