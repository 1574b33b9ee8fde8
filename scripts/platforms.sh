#!/usr/bin/env bash
# platforms.sh: the platforms leafline's edge box runs on, checked.
#
#   1. Cross-builds ./cmd/leafline (CGO_ENABLED=0) for linux/amd64,
#      linux/arm64, linux/arm (GOARM=7), windows/amd64 and darwin/arm64, and
#      type-checks every package and its tests (go vet) for windows/amd64
#      and darwin/arm64, but cmd/leafline-chaos. Any failure fails the script.
#   2. Runs the edge role's own tests on linux/arm64 and linux/arm under
#      qemu user-mode emulation (go test -exec): the outbox, the store and
#      file sinks' conformance, the sink runner's contract tests, a
#      `leafline demo --events 200` run, and `leafline check`, which on
#      32-bit ARM must warn about the outbox's address-space limit.
#      qemu-user-static is installed with apt-get when missing; where it
#      cannot be, this part is skipped with a message, and only this part.
#
# Run from anywhere: bash scripts/platforms.sh. Every step is bounded
# (go test -timeout, timeout(1)); the script prints what ran where and how
# long each step took.
set -euo pipefail

cd "$(dirname "$0")/.."
start=$SECONDS
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

step() {
	local t0=$SECONDS
	printf '== %s\n' "$1"
	shift
	"$@"
	printf '   %ds\n' $((SECONDS - t0))
}

# 1. Cross-builds.
for target in linux/amd64 linux/arm64 linux/arm/7 windows/amd64 darwin/arm64; do
	IFS=/ read -r os arch arm <<<"$target"
	ext=""
	[[ $os == windows ]] && ext=.exe
	step "build ./cmd/leafline for $target" \
		env GOOS="$os" GOARCH="$arch" GOARM="${arm:-}" CGO_ENABLED=0 \
		go build -o "$out/leafline-$os-$arch$ext" ./cmd/leafline
done
# Every package's code and tests must build on every platform, except
# cmd/leafline-chaos, a Linux fault-injection driver (process groups, mounts,
# SIGSTOP). Files that cannot build for the target carry build tags.
for target in windows/amd64 darwin/arm64; do
	IFS=/ read -r os arch <<<"$target"
	mapfile -t pkgs < <(GOOS=$os GOARCH=$arch go list ./... | grep -v /cmd/leafline-chaos)
	step "vet (code and tests) for $target" env GOOS="$os" GOARCH="$arch" go vet "${pkgs[@]}"
done

# 2. Emulated tests.
need_qemu() {
	command -v qemu-aarch64-static >/dev/null && command -v qemu-arm-static >/dev/null && return 0
	if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
		return 1
	fi
	echo "== installing qemu-user-static with apt-get"
	timeout 300 apt-get update -qq >/dev/null 2>&1 || return 1
	DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq qemu-user-static >/dev/null 2>&1 || return 1
	command -v qemu-aarch64-static >/dev/null && command -v qemu-arm-static >/dev/null
}
if ! need_qemu; then
	echo "SKIPPED: the emulated linux/arm64 and linux/arm tests: qemu-user-static is not installed and could not be installed (needs root and apt-get); the cross-builds above passed"
	echo "platforms: done in $((SECONDS - start))s"
	exit 0
fi

for target in arm64:qemu-aarch64-static arm:qemu-arm-static; do
	IFS=: read -r arch qemu <<<"$target"
	export GOOS=linux GOARCH=$arch GOARM=7 CGO_ENABLED=0
	where="linux/$arch under $qemu"
	test_exec=(go test -exec "$qemu" -count=1 -timeout 5m)
	step "outbox tests, $where" "${test_exec[@]}" ./outbox
	step "store and file sink conformance, $where" "${test_exec[@]}" -run 'Store|File' ./sink
	step "sink runner contract tests, $where" "${test_exec[@]}" -run '^TestContract' ./edge
	bin=$out/leafline-linux-$arch
	step "leafline demo --events 200, $where" timeout 240 "$qemu" "$bin" demo --events 200
	check=$(timeout 60 "$qemu" "$bin" check --config configs/edge1.json)
	if [[ $arch == arm ]] && ! grep -q "32-bit platform" <<<"$check"; then
		printf '%s\n' "$check"
		echo "FAIL: leafline check on linux/arm does not warn about the outbox's 32-bit address-space limit"
		exit 1
	fi
	echo "== leafline check, $where: ok ($(grep -c "32-bit" <<<"$check" || true) 32-bit warnings)"
	unset GOOS GOARCH GOARM CGO_ENABLED
done

echo "platforms: done in $((SECONDS - start))s"
