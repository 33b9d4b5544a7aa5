# shellcheck shell=bash
# Setup shared by scripts/test.sh and scripts/demo.sh, sourced by both.
#
# setup makes a fresh Debian machine ready to build and test the module:
# it installs the Debian packages the checks need (as root, or through sudo)
# unless they are installed already, and puts a Go at least as new as go.mod
# asks for on PATH. Once a machine is set up it does nothing and needs no
# network. It also cds to the repository root.

repo_root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)

# Debian packages: a C compiler and libc headers for go test -race (cgo),
# taskset (util-linux) for pinned benchmarks, CA certificates for the Go
# module proxy. iproute2, listed below for the RDMA VM, also gives the
# Jepsen-style test (cmd/bft, internal/netns) its ip command.
apt_packages=(gcc libc6-dev util-linux ca-certificates)
# RDMA: the rdma-core headers and libraries the RDMA transport links through
# cgo, which every build of the module needs; and what scripts/rdmavm.sh
# needs to run the RDMA tests in a virtual machine with a Soft-RoCE device,
# on machines without RDMA hardware or kernel support: qemu, a Debian kernel
# with rdma_rxe, a static busybox for its initramfs, the tools it sets the
# device up with, rdma-core's userspace and its rxe provider, and the verbs,
# perftest and rdma_cm tools to look at the device or measure it by hand.
apt_packages+=(libibverbs-dev librdmacm-dev
	qemu-system-x86 linux-image-amd64 busybox-static kmod iproute2 cpio xz-utils procps
	rdma-core ibverbs-utils ibverbs-providers perftest rdmacm-utils)

# section prints a header for the next step.
section() {
	printf '\n==> %s\n' "$*"
}

# die prints an error and exits.
die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

# as_root runs a command as root, directly or through sudo; it fails if
# neither is possible.
as_root() {
	if [[ $EUID -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		echo "not root, and sudo is not installed: cannot run $*" >&2
		return 1
	fi
}

# ensure_packages installs those of apt_packages that are missing.
ensure_packages() {
	if ! command -v dpkg-query >/dev/null 2>&1; then
		echo "not a Debian system: install the equivalents of these Debian packages: ${apt_packages[*]}"
		return 0
	fi
	local missing=() pkg
	for pkg in "${apt_packages[@]}"; do
		if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("$pkg")
		fi
	done
	if [[ ${#missing[@]} -eq 0 ]]; then
		echo "installed already: ${apt_packages[*]}"
		return 0
	fi
	echo "installing: ${missing[*]}"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq ||
		die "apt-get update failed; install these packages by hand: ${missing[*]}"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
		die "apt-get install failed; install these packages by hand: ${missing[*]}"
}

# version_ge reports whether version $1 is at least $2 (dotted numbers).
version_ge() {
	[[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" == "$2" ]]
}

# go_version prints the version of Go that the go command on PATH runs for
# this module (a newer toolchain, if GOTOOLCHAIN lets it switch), without
# "go" and without any suffix such as "rc1".
go_version() {
	local v
	v=$(cd "$repo_root" && go env GOVERSION 2>/dev/null) || return 1
	v=${v#go}
	printf '%s\n' "${v%%[^0-9.]*}"
}

# ensure_go puts a go command at least as new as go.mod's go line on PATH.
ensure_go() {
	local want have
	want=$(awk '$1 == "go" { print $2; exit }' "$repo_root/go.mod")
	[[ -n $want ]] || die "no go line in $repo_root/go.mod"
	if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
		export PATH="/usr/local/go/bin:$PATH"
	fi
	if ! command -v go >/dev/null 2>&1; then
		die "Go is not installed. This module needs Go $want or newer: download it from
  https://go.dev/dl/ and unpack it with
    sudo tar -C /usr/local -xzf go$want.linux-amd64.tar.gz
  (or a newer go1.x.y archive), then run this script again."
	fi
	have=$(go_version) || die "$(command -v go) does not report its version"
	if version_ge "$have" "$want"; then
		echo "go $have at $(command -v go) (go.mod needs $want)"
		return 0
	fi
	if ! version_ge "$have" 1.21; then
		die "go $have at $(command -v go) is older than $want, and too old (before 1.21)
  to fetch a newer toolchain itself. Install Go $want or newer from https://go.dev/dl/."
	fi
	# Go 1.21 and later download the toolchain go.mod asks for through the
	# module proxy when GOTOOLCHAIN allows it.
	echo "go $have at $(command -v go) is older than $want; fetching go$want through the module proxy"
	export GOTOOLCHAIN=auto
	(cd "$repo_root" && go version) || die "could not fetch go$want; install it from https://go.dev/dl/"
	have=$(go_version)
	version_ge "$have" "$want" || die "still go $have after GOTOOLCHAIN=auto; install Go $want from https://go.dev/dl/"
}

# Files from the Soft-RoCE guest. Its own writes vanish when it powers off
# (its file system is an overlay in memory), so a command in the guest
# prints the files it made, base64-encoded, between marker lines on its
# standard output, and the host takes them from there.
vm_begin_marker="==> rdmavm: begin file"
vm_end_marker="==> rdmavm: end file"

# vm_print_files, in the guest, prints every file of directory $1 between
# markers.
vm_print_files() {
	local f
	for f in "$1"/*; do
		[[ -e $f ]] || continue
		printf '%s %s\n' "$vm_begin_marker" "${f##*/}"
		base64 -w 76 "$f"
		printf '%s %s\n' "$vm_end_marker" "${f##*/}"
	done
}

# vm_hide_files copies standard input to standard output without the
# files' lines, for the terminal.
vm_hide_files() {
	awk -v b="$vm_begin_marker" -v e="$vm_end_marker" 'index($0, b) == 1 { skip = 1 } !skip { print } index($0, e) == 1 { skip = 0 }'
}

# vm_extract_file prints file $2, decoded, from the guest's output saved
# in file $1.
vm_extract_file() {
	awk -v b="$vm_begin_marker $2" -v e="$vm_end_marker $2" '$0 == e { on = 0 } on { print } $0 == b { on = 1 }' "$1" |
		tr -d '\r' | base64 -d
}

# other_vms prints how many qemu processes run on this host that this
# script did not start.
other_vms() {
	local n=0 pid p
	for pid in $(pgrep -f '^qemu-system' || true); do
		p=$pid
		while [[ $p -gt 1 && $p -ne $$ ]]; do
			p=$(awk '{ print $4 }' "/proc/$p/stat" 2>/dev/null) || break
		done
		[[ $p -eq $$ ]] || n=$((n + 1))
	done
	echo "$n"
}

# wait_for_other_vms waits, for up to ten minutes, until no other virtual
# machine runs on this host: they take CPU time from an emulated one, and
# distort what it measures.
wait_for_other_vms() {
	local waited=0
	while [[ $(other_vms) -gt 0 && $waited -lt 600 ]]; do
		((waited == 0)) && echo "waiting (at most 10 minutes) for other virtual machines on this host to finish"
		sleep 5
		waited=$((waited + 5))
	done
}

# setup prepares the machine and moves to the repository root.
setup() {
	section "setup"
	ensure_packages
	ensure_go
	cd "$repo_root" || die "cannot cd to $repo_root"
}
