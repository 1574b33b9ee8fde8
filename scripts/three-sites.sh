#!/usr/bin/env bash
# Runs the example topology in configs/ as separate `leafline run` processes
# (l1, hub, edge1, edge2) on this machine, publishes events at L1, waits
# until L1 has recorded a completion from both edges for every event, then
# stops everything. Exit status 0 means nothing was lost.
#
#   scripts/three-sites.sh [EVENTS]      (default 200)
#
# Settings, from the environment:
#   TRANSPORT=relay|sourcing   every link's transport (default: the topology's)
#   EDGE2_SINK=store           edge2's sink (default: the file sink of configs/)
#   MEASURE=1                  publish in batches and report end to end: events/s,
#                              CPU-s per 1k events (the four boxes, and each) and
#                              disk flushes per event (the disk under /tmp); it
#                              waits on `leafline summary` instead of each event's
#                              status
#   PPROF=1                    serve /debug/pprof/ on each box's ops port
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
# The configs as the settings ask, then a secured copy of them: a private
# CA, a certificate per site, an nkey per dialling site, mutual TLS and
# per-link permissions on every link.
mkdir -p "$work/configs"
cp configs/topology.json configs/{l1,hub,edge1,edge2}.json "$work/configs/"
case ${TRANSPORT:-} in
'') ;;
relay | sourcing) sed -i "0,/{/s//{\n  \"transport\": \"$TRANSPORT\",/" "$work/configs/topology.json" ;;
*) echo "three-sites: TRANSPORT must be relay or sourcing, got '$TRANSPORT'" >&2; exit 2 ;;
esac
if [ "${PPROF:-}" = 1 ]; then
	for site in l1 hub edge1 edge2; do
		sed -i 's#"ops": {#"ops": {"pprof": true,#' "$work/configs/$site.json"
	done
fi
case ${EDGE2_SINK:-} in
'') ;;
store) sed -i 's#"sink": {"type": "file", "dir": "/tmp/leafline/edge2/sink"}#"sink": {"type": "store"}#' "$work/configs/edge2.json" ;;
*) echo "three-sites: EDGE2_SINK must be store, got '$EDGE2_SINK'" >&2; exit 2 ;;
esac
"$bin" topology certs --topology "$work/configs/topology.json" --dir "$work/secure" "$work"/configs/{l1,hub,edge1,edge2}.json >/dev/null
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

if [ "${MEASURE:-}" = 1 ]; then
	# CPU (user+system ticks) of the four boxes, and the flushes the disk
	# under /tmp has completed (/proc/diskstats field 18; anything else
	# writing to that disk counts too).
	ticks() { local t=0; for p in "${pids[@]}"; do t=$((t + $(boxticks "$p"))); done; echo "$t"; }
	boxticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
	each0=(); for p in "${pids[@]}"; do each0+=("$(boxticks "$p")"); done
	disk=$(lsblk -no PKNAME "$(df --output=source /tmp | tail -1)" 2>/dev/null || true)
	[ -n "$disk" ] || disk=$(basename "$(df --output=source /tmp | tail -1)")
	flushes() { awk -v d="$disk" '$3 == d {print $20}' /proc/diskstats; }
	load=$(cut -d' ' -f1-3 /proc/loadavg)
	t0=$(date +%s.%N) c0=$(ticks) f0=$(flushes)
	"$bin" publish --config "$cfgdir/l1.json" --count "$events" --batch 1000 >"$work/published.txt"
	deadline=$((SECONDS + 3600))
	while :; do
		done_n=$("$bin" summary --config "$cfgdir/l1.json" 2>/dev/null | sed -n 's/.*complete \([0-9]*\).*/\1/p')
		[ "${done_n:-0}" -ge "$events" ] && break
		if [ $SECONDS -ge $deadline ]; then echo "three-sites: $done_n of $events complete after an hour" >&2; exit 1; fi
		sleep 0.2
	done
	t1=$(date +%s.%N) c1=$(ticks) f1=$(flushes)
	boxes=""
	i=0
	for site in l1 hub edge1 edge2; do
		boxes+=" ${site}_cpu_s_per_1k=$(awk -v c="$(($(boxticks "${pids[$i]}") - each0[i]))" -v hz="$(getconf CLK_TCK)" -v n="$events" 'BEGIN {printf "%.3f", c / hz / n * 1000}')"
		i=$((i + 1))
	done
	awk -v n="$events" -v t0="$t0" -v t1="$t1" -v c="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" -v f0="${f0:-0}" -v f1="${f1:-0}" -v load="$load" \
		-v tr="${TRANSPORT:-topology}" -v s2="${EDGE2_SINK:-file}" 'BEGIN {
		printf "three-sites measure transport=%s edge2_sink=%s events=%d seconds=%.1f e2e_eps=%.0f cpu_s_per_1k=%.3f flushes_per_event=%.3f loadavg_at_start=%s",
			tr, s2, n, t1 - t0, n / (t1 - t0), c / hz / n * 1000, (f1 - f0) / n, load }'
	echo "$boxes"
	ok=true
	exit 0
fi
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
