#!/usr/bin/env bash
# Measures a four-replica BFT cluster (cmd/bft) with benchmarks/bftbench:
# first over TCP on this machine's loopback, then over RDMA and TCP side by
# side in one boot of the Soft-RoCE virtual machine (scripts/rdmavm.sh), so
# it needs no RDMA hardware:
#
#   scripts/bft-bench.sh [-quick] [-write] [-wait] [-- bftbench flags]
#
# With -write it writes the reports and plots into docs/ (the names are
# below). -quick is the small run for CI. -wait first waits, for up to ten
# minutes, until no other virtual machine runs on the host. Flags after --
# go to both bftbench runs, for instance -- -rounds 5 -n 50000.
#
# Settings (environment), besides scripts/rdmavm.sh's RDMAVM_*, with these
# defaults: RDMAVM_MEM=2048, RDMAVM_CMD_TIMEOUT=1500, RDMAVM_TIMEOUT=1600.
set -euo pipefail

# Where -write puts the reports and plots, from the repository root.
host_md=docs/benchmarks-bft-host.md
host_svg=docs/bft-throughput-host.svg
vm_md=docs/benchmarks-bft-vm.md
vm_svg=docs/bft-throughput-vm.svg

usage() {
	echo "usage: $0 [-quick] [-write] [-wait] [-- bftbench flags]" >&2
	exit 2
}

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

# in_vm runs in the guest: bftbench, built in $1, over rdma and tcp on the
# RDMA device's address, with the flags that follow; it prints the files
# it wrote into its out directory between markers (see lib.sh).
#
# Under emulation every Ed25519 signature and verification costs
# milliseconds, so a request takes tens of them: 300 operations per run
# keep the whole run within minutes. The quick pass (CI's) only checks
# that both transports run end to end, with 30: on some hosts emulation
# is several times slower still, and in a fresh boot a run managed one
# request a second (RDMA links between replicas timing out, view
# changes). Pinning four replicas to one emulated
# CPU starves them (a sleeping emulated CPU takes about a millisecond to
# wake): the guest leaves placement to its scheduler. The targets are for
# the host, so the guest does not judge them.
in_vm() {
	local work=$1 out=/tmp/bft-bench-out n=300
	shift
	mkdir -p "$out"
	[[ " $* " != *" -quick "* ]] || n=30
	"$work/bftbench" -bft "$work/bft" -transports tcp,rdma -host "$RDMAVM_RXE_IP" -pin=false -targets=false -n "$n" "$@"
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

work=$(mktemp -d /tmp/rubin-bft-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

section "build the bft command and bftbench"
go build -o "$work/bft" ./cmd/bft || die "cannot build ./cmd/bft"
go build -o "$work/bftbench" ./benchmarks/bftbench || die "cannot build ./benchmarks/bftbench"

generated="scripts/bft-bench.sh${quick:+ $quick} -write"
[[ ${#extra[@]} -eq 0 ]] || generated+=" -- ${extra[*]}"
host_args=(${quick:+"$quick"})
vm_args=(${quick:+"$quick"})
if [[ -n $write ]]; then
	host_args+=(-md "$host_md" -svg "$host_svg" -generated-by "$generated")
	vm_args+=(-md /tmp/bft-bench-out/"${vm_md##*/}" -svg /tmp/bft-bench-out/"${vm_svg##*/}" -generated-by "$generated")
fi
host_args+=("${extra[@]}")
vm_args+=("${extra[@]}")

[[ -z $wait ]] || wait_for_other_vms

section "bftbench on this machine: tcp over loopback"
"$work/bftbench" -bft "$work/bft" "${host_args[@]}" || die "bftbench failed on the host"

section "bftbench in a Soft-RoCE VM: rdma and tcp${quick:+ (quick)}"
vm_bench bftbench "$repo_root/scripts/bft-bench.sh" "$work" "${vm_args[@]}"

[[ -n $write ]] || exit 0
section "write the VM's report"
vm_write_files "$work" "$vm_md" "$vm_svg"
