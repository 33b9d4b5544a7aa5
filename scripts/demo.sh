#!/usr/bin/env bash
# Runs the echo demo: a server and a client of each api in one process,
# for a few message sizes, printing a table of round-trip times and rates.
#
#   scripts/demo.sh [-tcp]
#   scripts/demo.sh ECHO-ARGUMENTS...
#
# First it installs what it needs on a fresh Debian machine (see
# scripts/lib.sh): the packages that building needs, and the Go that go.mod
# asks for. Then it prints the table over TCP on 127.0.0.1 of this machine.
#
# Then, unless -tcp is given, it runs the same demo with RDMA beside TCP:
# it installs the packages of the Soft-RoCE virtual machine
# (scripts/rdmavm.sh) and runs the demo there once (cmd/echo's "echo demo
# -rdma"), so that the RDMA and TCP rows come from one boot. Soft-RoCE is
# RDMA emulated in software by the guest kernel, and without KVM qemu
# emulates the CPUs too: the rows compare with each other, not with RDMA
# hardware nor with the first table. Where that machine cannot run (not
# Debian, no root or sudo, its packages not installable), the script says
# so in one line and stops after the first table, with status 0.
#
# With other arguments it runs the echo command with them on this machine,
# and nothing else (see go doc ./cmd/echo).
#
# Settings (environment): scripts/rdmavm.sh's RDMAVM_*, with
# RDMAVM_MEM=2048 by default (RDMA connections register memory).
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

# in_vm runs in the guest: a line on the machine, then the demo with RDMA
# on the Soft-RoCE device, with the echo command $1, with a tenth of the
# messages: under emulation the whole demo would take minutes.
in_vm() {
	local cpu
	cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
	echo "machine: Soft-RoCE emulation (the kernel's rdma_rxe driver, RDMA in software; no RDMA hardware) on $(rdma link show | awk '{ print $2, "over", $NF; exit }'), $(nproc) CPUs: $cpu"
	echo
	"$1" demo -quick -rdma "$RDMAVM_RXE_IP"
}

if [[ ${1:-} == --in-vm ]]; then
	[[ $# -eq 2 && ${RDMAVM:-} == 1 ]] || { echo "$0 --in-vm is for scripts/rdmavm.sh's guest" >&2; exit 2; }
	in_vm "$2"
	exit
fi

tcp_only=""
case ${1:-} in
-tcp | --tcp)
	[[ $# -eq 1 ]] || { echo "usage: $0 [-tcp] | $0 ECHO-ARGUMENTS..." >&2; exit 2; }
	tcp_only=1
	;;
"") ;;
*)
	setup build
	section "echo $*"
	exec go run ./cmd/echo "$@"
	;;
esac

setup build

work=$(mktemp -d /tmp/rubin-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
go build -o "$work/echo" ./cmd/echo || die "cannot build ./cmd/echo"

section "echo demo over TCP on this machine"
"$work/echo" demo

[[ -z $tcp_only ]] || exit 0

section "echo demo with RDMA beside TCP, in a Soft-RoCE virtual machine"
# cannot_run says why the virtual machine cannot run here, and stops.
cannot_run() {
	echo "no RDMA part: $*; the table above is the demo"
	exit 0
}
is_debian || cannot_run "the Soft-RoCE virtual machine needs Debian's packages, and this is not Debian"
if [[ $EUID -ne 0 ]] && ! command -v sudo >/dev/null 2>&1; then
	cannot_run "not root, and no sudo to install the Soft-RoCE virtual machine's packages with"
fi
echo "the virtual machine's packages: ${vm_packages[*]}"
if ! apt_install "${vm_packages[@]}" >"$work/apt.log" 2>&1; then
	cannot_run "they do not install here ($(grep -m 1 '^E:' "$work/apt.log" || tail -n 1 "$work/apt.log"))"
fi
grep -E '^(installing|installed already):' "$work/apt.log" | cut -d: -f1

others=$(other_vms)
if [[ $others -gt 0 ]]; then
	echo "warning: $others other virtual machine(s) run on this host and take CPU time from this one: the figures may be distorted" >&2
fi
export RDMAVM_MEM=${RDMAVM_MEM:-2048}
echo "booting; where qemu emulates the CPUs, this takes a minute or two"
rc=0
bash scripts/rdmavm.sh "bash $(printf '%q' "$repo_root/scripts/demo.sh") --in-vm $(printf '%q' "$work/echo")" || rc=$?
case $rc in
0) ;;
124) die "the demo did not finish within RDMAVM_CMD_TIMEOUT=${RDMAVM_CMD_TIMEOUT:-600}s" ;;
125) die "the Soft-RoCE virtual machine failed (see above)" ;;
*) die "the demo failed in the Soft-RoCE virtual machine (exit status $rc)" ;;
esac
