#!/usr/bin/env bash
# Measures the coordination service (cmd/coord: four replicas and a
# gateway) with benchmarks/coordbench: first over TCP against Apache
# ZooKeeper, a three-server ensemble and a standalone server from the
# Debian package zookeeper, on this machine's loopback; then coord over
# RDMA and TCP side by side in one boot of the Soft-RoCE virtual machine
# (scripts/rdmavm.sh), so it needs no RDMA hardware:
#
#   scripts/coord-bench.sh [-quick] [-write] [-wait] [-- coordbench flags]
#
# With -write it writes the reports and plot into docs/ (the names are
# below). -quick is the small run for CI. -wait first waits, for up to ten
# minutes, until no other virtual machine runs on the host. Flags after --
# go to both coordbench runs, for instance -- -rounds 5 -duration 20s.
#
# Settings (environment), besides scripts/rdmavm.sh's RDMAVM_*, with these
# defaults: RDMAVM_MEM=2048, RDMAVM_CMD_TIMEOUT=1500, RDMAVM_TIMEOUT=1600.
set -euo pipefail

# Where -write puts the reports and plots, from the repository root.
md=docs/benchmarks-coord.md
svg=docs/coord-throughput.svg
vm_md=docs/benchmarks-coord-vm.md
vm_svg=docs/coord-throughput-vm.svg

usage() {
	echo "usage: $0 [-quick] [-write] [-wait] [-- coordbench flags]" >&2
	exit 2
}

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

# in_vm runs in the guest: coordbench, built in $1, with coord over tcp
# and rdma on the RDMA device's address, and the flags that follow; it
# prints the files it wrote into its out directory between markers (see
# lib.sh).
#
# No ZooKeeper: JVMs under emulation would say nothing about ZooKeeper, so
# coord over RDMA compares with coord over TCP. Emulation makes every
# operation many times slower, so each point runs for less time than on
# the host, and with at most 16 clients: those already saturate the
# emulated replicas (tens of operations a second), and 64 overload the
# emulated machine until their sessions' pings time out ("zk: connection
# closed") or their sessions take minutes to open. Pinning four
# replicas and a gateway to one emulated CPU starves them (a sleeping
# emulated CPU takes about a millisecond to wake): the guest leaves
# placement to its scheduler.
#
# The quick pass (CI's) checks that both transports serve concurrent
# sessions end to end, with 1 and 4 clients: on a slow emulating host 16
# clients sometimes stall a cluster for over a minute (view changes that
# take longer than the emulated timeouts), which says nothing about the
# code under test.
in_vm() {
	local work=$1 out=/tmp/coord-bench-out clients=1,16
	shift
	mkdir -p "$out"
	[[ " $* " != *" -quick "* ]] || clients=1,4
	"$work/coordbench" -coord "$work/coord" -systems coord,coord-rdma -host "$RDMAVM_RXE_IP" -pin=false \
		-clients "$clients" -warmup 2s -duration 5s "$@"
	vm_print_files "$out"
}

if [[ ${1:-} == --in-vm ]]; then
	[[ $# -ge 2 && ${RDMAVM:-} == 1 ]] || { echo "$0 --in-vm is for scripts/rdmavm.sh's guest" >&2; exit 2; }
	shift
	in_vm "$@"
	exit
fi

bench_options "$@"

setup

export RDMAVM_MEM=${RDMAVM_MEM:-2048}
export RDMAVM_CMD_TIMEOUT=${RDMAVM_CMD_TIMEOUT:-1500}
export RDMAVM_TIMEOUT=${RDMAVM_TIMEOUT:-1600}

work=$(mktemp -d /tmp/rubin-coord-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

section "build the coord command and coordbench"
go build -o "$work/coord" ./cmd/coord || die "cannot build ./cmd/coord"
go build -o "$work/coordbench" ./benchmarks/coordbench || die "cannot build ./benchmarks/coordbench"

generated="scripts/coord-bench.sh${quick:+ $quick} -write"
[[ ${#extra[@]} -eq 0 ]] || generated+=" -- ${extra[*]}"
args=(${quick:+"$quick"})
vm_args=(${quick:+"$quick"})
if [[ -n $write ]]; then
	args+=(-md "$md" -svg "$svg" -generated-by "$generated")
	vm_args+=(-md /tmp/coord-bench-out/"${vm_md##*/}" -svg /tmp/coord-bench-out/"${vm_svg##*/}" -generated-by "$generated")
fi
args+=("${extra[@]}")
vm_args+=("${extra[@]}")

[[ -z $wait ]] || wait_for_other_vms

section "coordbench on this machine: coord, a ZooKeeper ensemble and a standalone ZooKeeper over loopback${quick:+ (quick)}"
"$work/coordbench" -coord "$work/coord" "${args[@]}" || die "coordbench failed on the host"

section "coordbench in a Soft-RoCE VM: coord over rdma and tcp${quick:+ (quick)}"
vm_bench coordbench "$repo_root/scripts/coord-bench.sh" "$work" "${vm_args[@]}"

[[ -n $write ]] || exit 0
section "write the VM's report"
vm_write_files "$work" "$vm_md" "$vm_svg"
