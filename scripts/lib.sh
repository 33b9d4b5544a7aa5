# shellcheck shell=bash
# Setup shared by the scripts in this folder, sourced by them.
#
# setup makes a fresh Debian machine ready to build and test the module:
# it installs the Debian packages of the sets it is given (all of them by
# default; see below) as root, or through sudo, unless they are installed
# already, and puts the Go that go.mod asks for on PATH (see ensure_go).
# Once a machine is set up it does nothing and needs no network. It also
# cds to the repository root.

repo_root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)

# Debian packages, in the sets that setup and ensure_packages take by name.
#
# build: what building the module and its commands on this machine needs:
# a C compiler and libc headers for cgo (go test -race, and the RDMA
# transport, which the commands import), the rdma-core headers and
# libraries that transport links, and CA certificates for the Go module
# proxy.
build_packages=(gcc libc6-dev libibverbs-dev librdmacm-dev ca-certificates)
# vm: what scripts/rdmavm.sh needs to run a virtual machine with a
# Soft-RoCE device, on machines without RDMA hardware or kernel support:
# qemu, a Debian kernel with rdma_rxe, a static busybox for its initramfs,
# the tools it sets the device up with, and rdma-core's userspace and its
# rxe provider. iproute2 also gives the Jepsen-style test (cmd/bft,
# internal/netns) its ip command.
vm_packages=(qemu-system-x86 linux-image-amd64 busybox-static kmod iproute2 cpio xz-utils procps
	rdma-core ibverbs-utils ibverbs-providers)
# tools: what the checks and benchmarks use besides: taskset (util-linux)
# for pinned benchmarks, perftest, which scripts/rdma-bench.sh measures
# against, the rdma_cm tools to look at a device by hand, and Apache
# ZooKeeper, whose server and zkCli.sh the coordination service's tests
# run beside ours.
tools_packages=(util-linux perftest rdmacm-utils zookeeper)

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

# is_debian reports whether this machine installs Debian packages.
is_debian() {
	command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1
}

# apt_install installs those of the Debian packages given that are
# missing. It fails, saying why, if it cannot.
apt_install() {
	local missing=() pkg
	if ! is_debian; then
		echo "not a Debian system: cannot install the Debian packages $*" >&2
		return 1
	fi
	for pkg in "$@"; do
		if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("$pkg")
		fi
	done
	if [[ ${#missing[@]} -eq 0 ]]; then
		echo "installed already: $*"
		return 0
	fi
	echo "installing: ${missing[*]}"
	if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq; then
		echo "apt-get update failed; install these packages by hand: ${missing[*]}" >&2
		return 1
	fi
	if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
		echo "apt-get install failed; install these packages by hand: ${missing[*]}" >&2
		return 1
	fi
}

# package_set prints the packages of the named sets (build, vm, tools),
# one a line.
package_set() {
	local set
	for set in "$@"; do
		case $set in
		build) printf '%s\n' "${build_packages[@]}" ;;
		vm) printf '%s\n' "${vm_packages[@]}" ;;
		tools) printf '%s\n' "${tools_packages[@]}" ;;
		*) die "unknown package set $set (build, vm, tools)" ;;
		esac
	done
}

# ensure_packages installs what is missing of the named package sets. On
# a system that is not Debian it only names them.
ensure_packages() {
	local list pkgs
	list=$(package_set "$@") || exit 1
	mapfile -t pkgs <<<"$list"
	if ! is_debian; then
		echo "not a Debian system: install the equivalents of these Debian packages: ${pkgs[*]}"
		return 0
	fi
	apt_install "${pkgs[@]}" || die "cannot install the packages the ${*} set(s) need"
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

# go_wanted prints the Go release go.mod asks for: its toolchain line if
# it has one, else its go line, as a release (1.26 is 1.26.0 since 1.21).
go_wanted() {
	local v
	v=$(awk '$1 == "toolchain" { sub(/^go/, "", $2); print $2; exit }' "$repo_root/go.mod")
	[[ -n $v ]] || v=$(awk '$1 == "go" { print $2; exit }' "$repo_root/go.mod")
	[[ -n $v ]] || return 1
	if [[ $v =~ ^1\.([0-9]+)$ ]] && ((BASH_REMATCH[1] >= 21)); then
		v=$v.0
	fi
	printf '%s\n' "$v"
}

# go_toolchain_dir prints where the module cache keeps the Go release $1
# for this machine, as module golang.org/toolchain: where the go command
# of Go 1.21 and later puts the toolchains it switches to. It needs a go
# command on PATH, of any version.
go_toolchain_dir() {
	local modcache goos goarch
	# Outside the module, where a go command of 1.21 or later would
	# otherwise switch to go.mod's toolchain before answering.
	modcache=$(cd / && go env GOMODCACHE 2>/dev/null)
	[[ -n $modcache ]] || modcache=$(cd / && go env GOPATH 2>/dev/null | cut -d: -f1)/pkg/mod
	goos=$(cd / && go env GOHOSTOS) && goarch=$(cd / && go env GOHOSTARCH) || return 1
	printf '%s/golang.org/toolchain@v0.0.1-go%s.%s-%s\n' "$modcache" "$1" "$goos" "$goarch"
}

# fetch_go_toolchain downloads Go release $1 from the Go module proxy, as
# module golang.org/toolchain, with the go command on PATH, which may be
# older than 1.21 and know nothing of toolchains: it is an ordinary module
# download, checked against the checksum database. Module zips keep no file
# modes, so it then makes the commands executable, as the go command does
# when it switches to a toolchain: bin/go last, so that an executable
# bin/go means a complete toolchain.
fetch_go_toolchain() {
	local dir
	dir=$(go_toolchain_dir "$1") || return 1
	(cd / && GOFLAGS='' GOWORK=off GOTOOLCHAIN=local GO111MODULE=on \
		go mod download "golang.org/toolchain@${dir##*/toolchain@}") || return 1
	[[ -f $dir/bin/go ]] || return 1
	find "$dir/pkg/tool" -type f -exec chmod a+x {} + &&
		find "$dir/lib" -type f -name 'go_?*_?*_exec' -exec chmod a+x {} + &&
		chmod a+x "$dir/bin/gofmt" &&
		find "$dir/bin" -type f -exec chmod a+x {} +
}

# ensure_go puts the go command of the Go release go.mod asks for, or of a
# newer one, first on PATH. On a machine without Go it first installs
# Debian's (package golang-go; bookworm's is 1.19). If the go command found
# is older than go.mod asks for, it downloads that release once through the
# Go module proxy (fetch_go_toolchain) and puts its bin on PATH; later runs
# find it in the module cache and need no network.
ensure_go() {
	local want have dir
	want=$(go_wanted) || die "no go line in $repo_root/go.mod"
	if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
		export PATH="/usr/local/go/bin:$PATH"
	fi
	if ! command -v go >/dev/null 2>&1; then
		echo "no go command: installing Debian's, to fetch go$want with"
		apt_install golang-go || die "cannot install Go. This module needs Go $want or newer: download it
  from https://go.dev/dl/, unpack it with
    sudo tar -C /usr/local -xzf go$want.linux-amd64.tar.gz
  (or a newer go1.x.y archive), and run this script again."
		hash -r
	fi
	have=$(go_version) || die "$(command -v go) does not report its version"
	if version_ge "$have" "$want"; then
		echo "go $have at $(command -v go) (go.mod needs $want)"
		return 0
	fi
	dir=$(go_toolchain_dir "$want") || die "$(command -v go) does not report its module cache or platform"
	if [[ ! -x $dir/bin/go ]]; then
		echo "go $have at $(command -v go) is older than $want: fetching go$want through the Go module proxy"
		fetch_go_toolchain "$want" || die "cannot fetch go$want through the Go module proxy; install Go $want or newer from https://go.dev/dl/"
	fi
	export PATH="$dir/bin:$PATH"
	hash -r
	have=$(go_version) || die "$dir/bin/go does not run"
	version_ge "$have" "$want" || die "$dir/bin/go is go $have, not $want"
	echo "go $have at $dir/bin/go (go.mod needs $want)"
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

# bench_options parses the options the benchmark scripts share: -quick,
# -write, -wait, and flags after -- for the benchmark program. It sets
# quick, write and wait (each its option, or empty) and the array extra,
# and calls the script's usage function on anything else.
# shellcheck disable=SC2034 # they are the calling script's
bench_options() {
	quick="" write="" wait=""
	extra=()
	while [[ $# -gt 0 ]]; do
		case $1 in
		-quick | --quick) quick=-quick ;;
		-write | --write) write=-write ;;
		-wait | --wait) wait=-wait ;;
		--)
			shift
			extra=("$@")
			break
			;;
		*) usage ;;
		esac
		shift
	done
}

# vm_bench runs "script --in-vm args..." ($2 and what follows $3) in a
# Soft-RoCE VM (scripts/rdmavm.sh): the guest's output goes to the terminal
# without the files' lines, and whole to $3/vm.out for vm_write_files. It
# dies, naming the benchmark $1, unless the command succeeded.
vm_bench() {
	local name=$1 script=$2 work=$3 rc
	shift 3
	set +e
	bash "$repo_root/scripts/rdmavm.sh" "bash $(printf '%q' "$script") --in-vm $(printf '%q ' "$work" "$@")" |
		tee "$work/vm.out" | vm_hide_files
	rc=${PIPESTATUS[0]}
	set -e
	case $rc in
	0) ;;
	124) die "$name did not finish within RDMAVM_CMD_TIMEOUT=${RDMAVM_CMD_TIMEOUT:-600}s" ;;
	125) die "the Soft-RoCE VM failed (see above): $name did not run, or did not finish" ;;
	*) die "$name failed in the VM (exit status $rc)" ;;
	esac
}

# vm_write_files writes each of the paths after $1 from the guest's files
# that vm_bench saved in $1/vm.out, by base name.
vm_write_files() {
	local work=$1 path
	shift
	for path in "$@"; do
		vm_extract_file "$work/vm.out" "${path##*/}" >"$path" || die "cannot decode ${path##*/} from the guest's output"
		[[ -s $path ]] || die "the guest printed no ${path##*/}"
		echo "wrote $path"
	done
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

# setup prepares the machine and moves to the repository root. Its
# arguments name the package sets to install (see above); with none, all.
setup() {
	section "setup"
	if [[ $# -eq 0 ]]; then
		set -- build vm tools
	fi
	ensure_packages "$@"
	ensure_go
	cd "$repo_root" || die "cannot cd to $repo_root"
}
