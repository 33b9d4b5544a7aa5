#!/usr/bin/env bash
# Measures rubin's RDMA transport against perftest and against its TCP
# transport, over a real RDMA stack: Soft-RoCE in a throw-away virtual
# machine (scripts/rdmavm.sh), so it needs no RDMA hardware:
#
#   scripts/rdma-bench.sh [-quick] [-write] [-wait] [-- rdmabench flags]
#
# It builds cmd/echo and benchmarks/rdmabench on the host, boots one
# machine and runs rdmabench there (see its package comment for what it
# measures and how), which prints its tables. With -write it also writes
# the report to docs/benchmarks-rdma.md and the plot to
# docs/latency-vs-size-rdma.svg; it keeps what the old report had after
# the marker line keep_marker (below), which was written by hand. The
# whole run takes several minutes here (software emulation); -quick is
# the small run for CI, under a minute.
# -wait first waits, for up to ten minutes, until no other virtual machine
# runs on the host. Flags after -- go to rdmabench, for instance
# -- -contenders perftest,tcp-channel -rounds 5.
#
# The guest's own writes vanish when it powers off (its file system is an
# overlay in memory), so rdmabench writes the report inside the guest and
# this script prints it, base64-encoded, between marker lines on the
# guest's standard output, from which the host takes it.
#
# Under emulation only ratios measured side by side in one run mean
# anything, and even those move when the host's CPUs are busy elsewhere:
# the script warns, and notes it in the report, when other virtual
# machines run beside this one.
#
# Settings (environment), besides scripts/rdmavm.sh's RDMAVM_*, with these
# defaults: RDMAVM_MEM=2048 (every connection registers memory),
# RDMAVM_CMD_TIMEOUT=900, RDMAVM_TIMEOUT=1000, RDMAVM_STATS=1.
set -euo pipefail

# Where -write puts the report and the plot, from the repository root.
md_out=docs/benchmarks-rdma.md
svg_out=docs/latency-vs-size-rdma.svg
# The line after which -write keeps the old report's text.
keep_marker='<!-- written by hand: scripts/rdma-bench.sh -write keeps what follows -->'

usage() {
	echo "usage: $0 [-quick] [-write] [-wait] [-- rdmabench flags]" >&2
	exit 2
}

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

# in_vm runs in the guest: rdmabench, built in $1, with the flags that
# follow; if they ask for a report (-md, -svg into $1's guest-side out
# directory), it prints the files between markers (see lib.sh).
in_vm() {
	local work=$1 out=/tmp/rdma-bench-out
	shift
	mkdir -p "$out"
	"$work/rdmabench" -echo "$work/echo" "$@"
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
export RDMAVM_CMD_TIMEOUT=${RDMAVM_CMD_TIMEOUT:-900}
export RDMAVM_TIMEOUT=${RDMAVM_TIMEOUT:-1000}
export RDMAVM_STATS=${RDMAVM_STATS:-1}

work=$(mktemp -d /tmp/rubin-rdma-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

section "build the echo command and rdmabench"
go build -o "$work/echo" ./cmd/echo || die "cannot build ./cmd/echo"
go build -o "$work/rdmabench" ./benchmarks/rdmabench || die "cannot build ./benchmarks/rdmabench"

args=()
[[ -z $quick ]] || args+=(-quick)
if [[ -n $write ]]; then
	generated="scripts/rdma-bench.sh${quick:+ $quick} -write"
	[[ ${#extra[@]} -eq 0 ]] || generated+=" -- ${extra[*]}"
	args+=(-md /tmp/rdma-bench-out/"${md_out##*/}" -svg /tmp/rdma-bench-out/"${svg_out##*/}" -generated-by "$generated")
fi

# Other virtual machines on this host take CPU time from this one's, and
# emulated CPUs that lose time distort the ratios: wait for them to end if
# asked to, and watch for them during the run.
[[ -z $wait ]] || wait_for_other_vms
others=$(other_vms)
if [[ $others -gt 0 ]]; then
	echo "warning: $others other virtual machine(s) run on this host: the figures may be distorted (-wait waits for them)" >&2
fi
(
	while sleep 2; do
		n=$(other_vms)
		[[ $n -eq 0 ]] || echo "$n" >>"$work/contention"
	done
) &
watcher=$!
trap 'kill "$watcher" 2>/dev/null || true; rm -rf "$work"' EXIT
args+=("${extra[@]}")

section "run rdmabench in a Soft-RoCE VM${quick:+ (quick)}"
# The guest's standard output goes to the terminal without the files'
# base64 lines, and whole to vm.out for extract below.
set +e
bash scripts/rdmavm.sh "bash $(printf '%q' "$repo_root/scripts/rdma-bench.sh") --in-vm $(printf '%q ' "$work" "${args[@]}")" |
	tee "$work/vm.out" |
	vm_hide_files
rc=${PIPESTATUS[0]}
set -e
kill "$watcher" 2>/dev/null || true
case $rc in
0) ;;
124) die "rdmabench did not finish within RDMAVM_CMD_TIMEOUT=${RDMAVM_CMD_TIMEOUT}s" ;;
125) die "the Soft-RoCE VM failed (see above): rdmabench did not run, or did not finish" ;;
*) die "rdmabench failed (exit status $rc)" ;;
esac
contention=""
if [[ -s $work/contention ]]; then
	contention="other virtual machines (up to $(sort -n "$work/contention" | tail -n 1)) ran on the host during about $(($(wc -l <"$work/contention") * 2))s of this run, taking CPU time from it: the figures are distorted; rerun on a quiet host"
	echo "warning: $contention" >&2
fi

[[ -n $write ]] || exit 0
section "write the report"
for path in "$md_out" "$svg_out"; do
	vm_extract_file "$work/vm.out" "${path##*/}" >"$work/${path##*/}" || die "cannot decode ${path##*/} from the guest's output"
	[[ -s $work/${path##*/} ]] || die "the guest printed no ${path##*/}"
done
if [[ -n $contention ]]; then
	# The guest could not see it: add it to the report's notes.
	awk -v note="- **host:** $contention" '{ print } !done && /^- \*\*duration:\*\*/ { print note; done = 1 }' \
		"$work/${md_out##*/}" >"$work/md.tmp" && mv "$work/md.tmp" "$work/${md_out##*/}"
fi
# What follows the marker line in the old report was written by hand
# (findings, with the commands that show them): the new report keeps it.
if [[ -f $md_out ]]; then
	awk -v m="$keep_marker" 'index($0, m) == 1 { on = 1 } on' "$md_out" >"$work/kept.md"
	if [[ -s $work/kept.md ]]; then
		{ echo; cat "$work/kept.md"; } >>"$work/${md_out##*/}"
	fi
fi
for path in "$md_out" "$svg_out"; do
	cp "$work/${path##*/}" "$path"
	echo "wrote $path"
done
