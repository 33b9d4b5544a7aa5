#!/usr/bin/env bash
# Measures the coordination service (cmd/coord: four replicas and a
# gateway over TCP) against Apache ZooKeeper, a three-server ensemble and a
# standalone server from the Debian package zookeeper, with
# benchmarks/coordbench, on this machine's loopback:
#
#   scripts/coord-bench.sh [-quick] [-write] [-- coordbench flags]
#
# With -write it writes the report and plot into docs/ (the names are
# below). -quick is the small run for CI. Flags after -- go to coordbench,
# for instance -- -rounds 5 -duration 20s.
set -euo pipefail

# Where -write puts the report and plot, from the repository root.
md=docs/benchmarks-coord.md
svg=docs/coord-throughput.svg

usage() {
	echo "usage: $0 [-quick] [-write] [-- coordbench flags]" >&2
	exit 2
}

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

quick=""
write=""
extra=()
while [[ $# -gt 0 ]]; do
	case $1 in
	-quick | --quick) quick=-quick ;;
	-write | --write) write=-write ;;
	--)
		shift
		extra=("$@")
		break
		;;
	*) usage ;;
	esac
	shift
done

setup build tools

work=$(mktemp -d /tmp/rubin-coord-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

section "build the coord command and coordbench"
go build -o "$work/coord" ./cmd/coord || die "cannot build ./cmd/coord"
go build -o "$work/coordbench" ./benchmarks/coordbench || die "cannot build ./benchmarks/coordbench"

generated="scripts/coord-bench.sh${quick:+ $quick} -write"
[[ ${#extra[@]} -eq 0 ]] || generated+=" -- ${extra[*]}"
args=(${quick:+"$quick"})
if [[ -n $write ]]; then
	args+=(-md "$md" -svg "$svg" -generated-by "$generated")
fi
args+=("${extra[@]}")

section "coordbench on this machine: coord, a ZooKeeper ensemble and a standalone ZooKeeper over loopback${quick:+ (quick)}"
"$work/coordbench" -coord "$work/coord" "${args[@]}" || die "coordbench failed"
