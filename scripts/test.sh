#!/usr/bin/env bash
# Runs every check of the module, the way CI does, on a fresh Debian machine
# or an already set-up one:
#
#   scripts/test.sh [-fuzztime COUNTx|DURATION]
#
# It installs what it needs (see scripts/lib.sh), then runs: go mod download,
# a go.mod tidiness check, gofmt, go vet, builds without cgo and for darwin
# and freebsd, staticcheck, go test -race, the Jepsen-style test in network
# namespaces (cmd/bft's TestJepsen, which must not skip), the
# crash-under-load test without the race detector (cmd/bft's
# TestCrashUnderLoad, which asserts replicas' peak memory), the RDMA tests
# in a throw-away virtual machine with a Soft-RoCE device
# (scripts/rdma-test.sh; no RDMA hardware needed), a short fuzz pass over
# every Fuzz target, and quick passes of the benchmark runners: echo, RDMA
# (scripts/rdma-bench.sh, in another VM), BFT (scripts/bft-bench.sh, on
# the host and in a third VM, and scripts/bft-profile.sh, the CPU a
# request costs by kind) and the coordination service
# (scripts/coord-bench.sh, against Apache ZooKeeper on the host, over RDMA
# and TCP in a fourth VM), so that none rots.
# Every check runs even if an earlier one fails; the exit status is
# nonzero if any failed.
set -euo pipefail

# staticcheck_version is the staticcheck release used; v0.8.x supports Go 1.26.
staticcheck_version=v0.8.2
# fuzztime bounds each fuzz target by executions, not by time: a duration
# makes Go 1.26's fuzz coordinator fail at random when the deadline races a
# worker (go.dev/issue/75804, fixed in Go 1.27), and a count is as long on
# a slow machine as on a fast one in what it explores.
fuzztime=30000x

while [[ $# -gt 0 ]]; do
	case $1 in
	-fuzztime | --fuzztime)
		[[ $# -ge 2 ]] || { echo "usage: $0 [-fuzztime COUNTx|DURATION]" >&2; exit 2; }
		fuzztime=$2
		shift 2
		;;
	*)
		echo "usage: $0 [-fuzztime COUNTx|DURATION]" >&2
		exit 2
		;;
	esac
done

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
setup

failed=()

# check runs a named check and records its failure instead of stopping.
check() {
	local name=$1
	shift
	section "$name"
	if "$@"; then
		echo "ok: $name"
	else
		echo "FAILED: $name"
		failed+=("$name")
	fi
}

gofmt_check() {
	local files file
	files=$(gofmt -l .)
	if [[ -n $files ]]; then
		echo "these files need gofmt -w:"
		while IFS= read -r file; do
			printf '  %s\n' "$file"
		done <<<"$files"
		return 1
	fi
}

tidy_check() {
	if ! go mod tidy -diff; then
		echo "go.mod or go.sum is not tidy: run go mod tidy"
		return 1
	fi
}

# fuzz runs each Fuzz target of the module for $fuzztime.
fuzz() {
	local dirs dir pkg target targets status=0
	dirs=$(grep -rlE --include='*_test.go' '^func Fuzz[A-Z0-9_]' . | xargs -r -n 1 dirname | sort -u)
	if [[ -z $dirs ]]; then
		echo "no fuzz targets"
		return 0
	fi
	for dir in $dirs; do
		pkg=$(go list "$dir") || { status=1; continue; }
		targets=$(go test -list '^Fuzz' -run '^$' "$dir" | grep '^Fuzz') || { status=1; continue; }
		for target in $targets; do
			echo "--- $pkg $target ($fuzztime)"
			go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$dir" || status=1
		done
	done
	return $status
}

# jepsen runs cmd/bft's TestJepsen (replicas killed, paused, restarted and
# cut off in network namespaces, the history checked for linearizability)
# and fails if it was skipped: CI runs as root, where it must run.
jepsen() {
	local out status=0
	out=$(go test -race -count=1 -run '^TestJepsen$' -v ./cmd/bft 2>&1) || status=1
	printf '%s\n' "$out" | grep -E '^(=== RUN|--- |\s+jepsen|ok|FAIL|PASS)|operations' || true
	[[ $status -eq 0 ]] || { printf '%s\n' "$out" | tail -n 200; return 1; }
	if grep -q -- '--- SKIP' <<<"$out"; then
		echo "TestJepsen was skipped"
		return 1
	fi
}

# crash_under_load runs cmd/bft's TestCrashUnderLoad (64 clients with 8 KiB
# puts, the primary killed, every replica's peak memory asserted) without
# the race detector, which skips it because it multiplies memory use; it
# fails if the test was skipped.
crash_under_load() {
	local out status=0
	out=$(go test -count=1 -run '^TestCrashUnderLoad$' -v ./cmd/bft 2>&1) || status=1
	printf '%s\n' "$out" | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|crash_test' || true
	[[ $status -eq 0 ]] || { printf '%s\n' "$out" | tail -n 200; return 1; }
	if grep -q -- '--- SKIP' <<<"$out"; then
		echo "TestCrashUnderLoad was skipped"
		return 1
	fi
}

# cross_build builds and vets the module without cgo and for systems
# without epoll: a program that imports it must compile anywhere, and the
# NIO packages say ErrNotSupported there at run time.
cross_build() {
	local status=0 target
	for target in "linux CGO_ENABLED=0" "darwin" "freebsd"; do
		set -- $target
		echo "--- GOOS=$1 ${2:-}"
		env GOOS="$1" ${2:-} go build ./... || status=1
		env GOOS="$1" ${2:-} go vet ./... || status=1
	done
	return $status
}

check "go mod download" go mod download
check "go mod tidy" tidy_check
check "gofmt" gofmt_check
check "go vet" go vet ./...
check "builds without cgo, for darwin and freebsd" cross_build
check "staticcheck $staticcheck_version" go run "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version" ./...
check "go test -race" go test -race -count=1 -skip '^TestJepsen$' ./...
check "Jepsen-style test in network namespaces" jepsen
check "crash under load, real processes, without -race" crash_under_load
check "RDMA tests in a Soft-RoCE VM" bash scripts/rdma-test.sh
check "fuzz ($fuzztime per target)" fuzz
check "echo benchmark, quick" go run ./benchmarks/echobench -quick
check "RDMA benchmark in a Soft-RoCE VM, quick" bash scripts/rdma-bench.sh -quick
check "BFT benchmark on the host and in a Soft-RoCE VM, quick" bash scripts/bft-bench.sh -quick
check "BFT per-request budget, quick" bash scripts/bft-profile.sh -seconds 1
check "coordination service against Apache ZooKeeper, quick" bash scripts/coord-bench.sh -quick

section "summary"
if [[ ${#failed[@]} -gt 0 ]]; then
	printf 'FAILED: %s\n' "${failed[@]}"
	exit 1
fi
echo "all checks passed"
