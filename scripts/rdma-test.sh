#!/usr/bin/env bash
# Runs the module's RDMA tests over a real RDMA stack: Soft-RoCE in a
# throw-away virtual machine (scripts/rdmavm.sh), so they need no RDMA
# hardware and no RDMA support in the host's kernel:
#
#   scripts/rdma-test.sh [-run REGEX] [-race]
#
# It compiles the tests of each package in pkgs on the host (go test -c, with
# -race if asked), then boots one machine and runs each test binary there
# from its package's directory, with RUBIN_RDMA_ADDR set to the Soft-RoCE
# device's address and RUBIN_RDMA_REQUIRED=1, so an RDMA test fails rather
# than skips when it finds no device. -run selects tests as go test -run
# does. The exit status is nonzero if a package fails, and also if the
# machine does not boot or does not finish in time: the RDMA tests never
# turn into a skip.
#
# Settings (environment), besides scripts/rdmavm.sh's RDMAVM_*:
#   RDMA_TEST_PKGS="./a ./b=R" the packages to test instead of pkgs below
#   RDMA_TEST_EXTRA='cmd'     a shell command to run in the same machine after
#                             the tests, from the repository root; it counts
#                             as one more result
# and these defaults, which the tests need: RDMAVM_MEM=2048 (hundreds of
# connections register memory), RDMAVM_CMD_TIMEOUT=1500, RDMAVM_TIMEOUT=1800
# (emulation is slow), RDMAVM_STATS=1.
set -euo pipefail

# pkgs are the packages whose tests talk RDMA when RUBIN_RDMA_ADDR is set.
# PATH=REGEX runs only that package's tests that match REGEX: its other
# tests run on the host, and would only be slow under emulation.
pkgs=(./transport/rdma . ./cmd/echo ./cmd/bft=RDMA ./bft/node=RDMA ./coord/gateway=RDMA ./order/server=RDMA)

# testflags go to every test binary.
testflags=(-test.v -test.count=1 -test.timeout=15m)

usage() {
	echo "usage: $0 [-run REGEX] [-race]" >&2
	exit 2
}

# in_vm runs in the guest: it runs the test binaries listed in $1/plan (one
# "import path, directory, binary, -run regex" line per package,
# tab-separated), then RDMA_TEST_EXTRA if set, prints a line per result and
# fails if any failed. $2, if not empty, is the -run regular expression,
# which overrides the plan's.
in_vm() {
	local plan=$1/plan run=$2 pkg dir bin pkgrun start rc status=0 results=() flags
	while IFS=$'\t' read -r pkg dir bin pkgrun; do
		flags=("${testflags[@]}")
		pkgrun=${run:-$pkgrun}
		[[ -z $pkgrun ]] || flags+=("-test.run=$pkgrun")
		printf '\n==> %s (RDMA, in the VM)\n' "$pkg"
		start=$SECONDS
		rc=0
		(cd "$dir" && RUBIN_RDMA_ADDR=$RDMAVM_RXE_IP RUBIN_RDMA_REQUIRED=1 "$bin" "${flags[@]}") </dev/null || rc=$?
		if [[ $rc -eq 0 ]]; then
			results+=("PASS  $pkg ($((SECONDS - start))s)")
		else
			results+=("FAIL  $pkg ($((SECONDS - start))s, exit status $rc)")
			status=1
		fi
	done <"$plan"
	if [[ -n ${RDMA_TEST_EXTRA:-} ]]; then
		printf '\n==> RDMA_TEST_EXTRA: %s\n' "$RDMA_TEST_EXTRA"
		start=$SECONDS
		rc=0
		bash -c "$RDMA_TEST_EXTRA" </dev/null || rc=$?
		if [[ $rc -eq 0 ]]; then
			results+=("PASS  RDMA_TEST_EXTRA ($((SECONDS - start))s)")
		else
			results+=("FAIL  RDMA_TEST_EXTRA ($((SECONDS - start))s, exit status $rc)")
			status=1
		fi
	fi
	printf '\n==> RDMA test results\n'
	printf '%s\n' "${results[@]}"
	# 1, never the 124 or 125 with which scripts/rdmavm.sh reports its own
	# failures.
	return $status
}

if [[ ${1:-} == --in-vm ]]; then
	[[ $# -eq 3 && ${RDMAVM:-} == 1 ]] || { echo "$0 --in-vm is for scripts/rdmavm.sh's guest" >&2; exit 2; }
	in_vm "$2" "$3"
	exit
fi

run=""
race=()
while [[ $# -gt 0 ]]; do
	case $1 in
	-run | --run)
		[[ $# -ge 2 ]] || usage
		run=$2
		shift 2
		;;
	-race | --race)
		race=(-race)
		shift
		;;
	*) usage ;;
	esac
done
if [[ -n ${RDMA_TEST_PKGS:-} ]]; then
	read -ra pkgs <<<"$RDMA_TEST_PKGS"
fi

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
setup

export RDMAVM_MEM=${RDMAVM_MEM:-2048}
export RDMAVM_CMD_TIMEOUT=${RDMAVM_CMD_TIMEOUT:-1500}
export RDMAVM_TIMEOUT=${RDMAVM_TIMEOUT:-1800}
export RDMAVM_STATS=${RDMAVM_STATS:-1}

work=$(mktemp -d /tmp/rubin-rdma-test.XXXXXX)
trap 'rm -rf "$work"' EXIT

section "build the RDMA tests${race:+ with -race}"
: >"$work/plan"
for p in "${pkgs[@]}"; do
	pkgrun=""
	if [[ $p == *=* ]]; then
		pkgrun=${p#*=}
		p=${p%%=*}
	fi
	info=$(go list -f $'{{.ImportPath}}\t{{.Dir}}\t{{len .TestGoFiles}}\t{{len .XTestGoFiles}}' "$p") ||
		die "cannot list the package $p"
	while IFS=$'\t' read -r pkg dir ntest nxtest; do
		if [[ $((ntest + nxtest)) -eq 0 ]]; then
			echo "no test files: $pkg"
			continue
		fi
		bin=$work/${pkg//\//_}.test
		go test -c "${race[@]}" -o "$bin" "$pkg" || die "cannot build the tests of $pkg"
		[[ -x $bin ]] || die "go test -c wrote no test binary for $pkg"
		echo "built: $pkg"
		printf '%s\t%s\t%s\t%s\n' "$pkg" "$dir" "$bin" "$pkgrun" >>"$work/plan"
	done <<<"$info"
done
[[ -s $work/plan ]] || die "no RDMA tests to run in: ${pkgs[*]}"

section "run the RDMA tests in a Soft-RoCE VM"
rc=0
bash scripts/rdmavm.sh "bash $(printf '%q' "$repo_root/scripts/rdma-test.sh") --in-vm $(printf '%q' "$work") $(printf '%q' "$run")" || rc=$?
case $rc in
0) ;;
124) die "the RDMA tests did not finish within RDMAVM_CMD_TIMEOUT=${RDMAVM_CMD_TIMEOUT}s" ;;
125) die "the Soft-RoCE VM failed (see above): the RDMA tests did not run, or did not finish" ;;
*) die "RDMA tests failed" ;;
esac
