#!/usr/bin/env bash
# Runs a command inside a throw-away QEMU virtual machine that has a
# Soft-RoCE RDMA device, so that the RDMA transport meets the real rdma-core
# stack on machines with no RDMA NIC and no RDMA support in their kernel:
#
#   scripts/rdmavm.sh 'shell command'
#
# The guest boots the host's Debian kernel (package linux-image-amd64), whose
# rdma_rxe module is Soft-RoCE: RoCEv2 in software, wire-compatible with
# hardware RoCE NICs. It sees the host's whole file tree read-only over
# virtio-9p, under a tmpfs overlay: every path is writable in the guest, and
# every write is gone when it powers off. The command runs under bash, as
# root, in the host's working directory and with the host's exported
# environment; its stdout and stderr stream back.
#
# The guest has no network to the outside. Inside it, a veth pair rxev0
# (192.0.2.1/24) <-> rxev1 (192.0.2.2/24), addresses from TEST-NET-1 (RFC
# 5737), carries the Soft-RoCE device rxe0 on rxev0. Processes reach each
# other over RDMA through rxe0 at 192.0.2.1, with or without rdma_cm. (A
# second rxe device would not help: the 6.1 driver keeps traffic between two
# rxe devices of one kernel inside it, and it never arrives.) The command also
# gets RDMAVM=1 and RDMAVM_RXE_IP=192.0.2.1 in its environment.
#
# Exit status: the command's; 124 if it did not finish within
# RDMAVM_CMD_TIMEOUT; 125 if the machine could not be set up, did not boot, or
# did not finish within RDMAVM_TIMEOUT (the reason is on stderr).
#
# Without KVM, qemu emulates the CPU (TCG): a trivial command takes about 9 s
# end to end (about 4.5 s to a guest shell, 2.5 s to set up rxe0), and
# programs run many times slower than natively. With a usable /dev/kvm it is
# much faster. Reading many small files over 9p is slow: build on the host
# (go test -c) and only run the binaries in the guest.
#
# The guest's kernel is told to trust the TSC (tsc=reliable), as it does on
# any x86 server of the last fifteen years. Under TCG it would otherwise
# fall back to the HPET, which the vDSO cannot read: every clock reading
# (Go's time.Now) became a system call and an emulated device access, about
# 5 us against 0.56 us with the TSC, while perftest reads the TSC directly
# and paid nothing of it.
#
# Settings (environment):
#   RDMAVM_MEM=1024          guest RAM, MiB; files the command writes count too
#   RDMAVM_CPUS=2            vCPUs (at most the host's)
#   RDMAVM_TIMEOUT=900       wall-clock limit for the whole machine, s
#   RDMAVM_BOOT_TIMEOUT=180  limit for the guest to come up, s
#   RDMAVM_CMD_TIMEOUT=600   limit for the command, s
#   RDMAVM_MTU=1500          veth MTU (9000 gives rxe0 an active MTU of 4096)
#   RDMAVM_ACCEL=auto        kvm, tcg, or auto: KVM if /dev/kvm is usable, else TCG
#   RDMAVM_STATS=1           print one line of timings and qemu's peak memory
#   RDMAVM_VERBOSE=1         also print the guest's console and setup log
#   RDMAVM_KEEP=1            keep the run's work directory
#   RDMAVM_CACHE=DIR         where the uncompressed kernel is kept between runs
#   RDMAVM_KERNEL=VERSION    boot this installed kernel (a name in /lib/modules)
#                            rather than the newest one with Soft-RoCE
#
# The Debian packages it needs are in scripts/lib.sh; scripts/test.sh and
# scripts/demo.sh install them.

# No -e: the script watches background processes and handles every failure
# itself. No pipefail: grep -q ends pipelines early on purpose.
set -u

prog=${0##*/}
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin"

packages="qemu-system-x86 linux-image-amd64 busybox-static kmod iproute2 cpio xz-utils procps rdma-core ibverbs-utils ibverbs-providers"
install_hint="apt-get update && apt-get install -y --no-install-recommends $packages (scripts/test.sh installs them)"

# fail reports a failure of the harness itself and exits 125.
fail() {
	echo "$prog: error: $*" >&2
	exit 125
}

verbose() {
	[[ ${RDMAVM_VERBOSE:-0} == 1 ]] && echo "[rdmavm] $*" >&2
	return 0
}

# since prints the seconds from EPOCHREALTIME value $1 to $2 (default: now).
since() {
	local a=$1 b=${2:-$EPOCHREALTIME}
	awk -v a="${a/,/.}" -v b="${b/,/.}" 'BEGIN { printf "%.2f", b - a }'
}

case ${1:-} in
-h | --help)
	sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
	;;
--)
	shift
	;;
esac
[[ $# -gt 0 ]] || fail "usage: $prog 'shell command'"
cmd="$*"
t0=$EPOCHREALTIME

# ---------------------------------------------------------------- host checks

# kver is the installed kernel that RDMAVM_KERNEL names, or else the newest
# that has both an image to boot and rdma_rxe.ko.
kver=""
usable=""
for dir in /lib/modules/*; do
	k=${dir##*/}
	[[ -e /boot/vmlinuz-$k ]] || continue
	compgen -G "$dir/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko*" >/dev/null || continue
	usable="$usable $k"
	if [[ -n ${RDMAVM_KERNEL:-} ]]; then
		[[ $k == "$RDMAVM_KERNEL" ]] && kver=$k
	elif [[ -z $kver ]] || [[ $(printf '%s\n%s\n' "$kver" "$k" | sort -V | tail -n 1) == "$k" ]]; then
		kver=$k
	fi
done
if [[ -n ${RDMAVM_KERNEL:-} && -z $kver ]]; then
	fail "RDMAVM_KERNEL=$RDMAVM_KERNEL: no such kernel with Soft-RoCE installed (/boot/vmlinuz-$RDMAVM_KERNEL and rdma_rxe.ko in /lib/modules/$RDMAVM_KERNEL); installed with Soft-RoCE:${usable:- none}"
fi
[[ -n $kver ]] || fail "no kernel with Soft-RoCE (/boot/vmlinuz-* and rdma_rxe.ko in /lib/modules). Install the package linux-image-amd64: $install_hint"
kernel=/boot/vmlinuz-$kver
[[ -r $kernel ]] || fail "cannot read $kernel (run as root, or make it readable)"

missing=""
for c in qemu-system-x86_64:qemu-system-x86 busybox:busybox-static modprobe:kmod ip:iproute2 rdma:iproute2 \
	cpio:cpio xz:xz-utils pgrep:procps ibv_devices:ibverbs-utils; do
	command -v "${c%%:*}" >/dev/null 2>&1 || missing="$missing ${c#*:}"
done
compgen -G "/usr/lib/*/libibverbs/librxe-rdmav*.so" >/dev/null || missing="$missing ibverbs-providers"
[[ -z $missing ]] || fail "missing packages:$missing. Install them: $install_hint"
busybox=$(command -v busybox)
case $(ldd "$busybox" 2>&1) in
*"not a dynamic executable"*) ;;
*) fail "$busybox is not statically linked: install the package busybox-static" ;;
esac

# Booting the uncompressed kernel (an ELF with a PVH entry point) skips the
# firmware's bzImage loader and the decompression in the guest, about 2 s
# under TCG. It is extracted once and cached; if that fails, boot the bzImage.
cache=${RDMAVM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/rubin/rdmavm}/$kver
bootimg=$cache/vmlinux
if [[ ! -s $bootimg || $bootimg -ot $kernel ]]; then
	bootimg=$kernel
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$kernel" 2>/dev/null | head -n 1 | cut -d: -f1)
	if [[ -n $off ]] && mkdir -p "$cache" 2>/dev/null && tmp=$(mktemp "$cache/vmlinux.XXXXXX"); then
		if tail -c +$((off + 1)) "$kernel" | xz -dc --single-stream >"$tmp" 2>/dev/null &&
			[[ $(head -c 4 "$tmp" | od -An -c | tr -d ' ') == '177ELF' ]] && mv "$tmp" "$cache/vmlinux"; then
			bootimg=$cache/vmlinux
		else
			rm -f "$tmp"
		fi
	fi
	[[ $bootimg == "$kernel" ]] && verbose "cannot extract an uncompressed kernel from $kernel into $cache; booting the bzImage"
fi

# KVM if /dev/kvm is usable, except under kvm_pvm: that paravirtual nested
# hypervisor exposes /dev/kvm but cannot run a stock kernel (the guest crawls,
# then qemu stops with "KVM internal error ... emulation failure").
accel=${RDMAVM_ACCEL:-auto}
case $accel in
auto)
	accel=tcg
	if [[ -r /dev/kvm && -w /dev/kvm && ! -d /sys/module/kvm_pvm ]]; then
		accel=kvm
	fi
	verbose "accelerator: $accel"
	;;
kvm)
	[[ -r /dev/kvm && -w /dev/kvm ]] || fail "/dev/kvm is missing or not read/writable by $(id -un) (RDMAVM_ACCEL=tcg emulates, slowly)"
	;;
tcg) ;;
*) fail "RDMAVM_ACCEL must be auto, kvm or tcg, not $accel" ;;
esac

nproc=$(nproc)
cpus=${RDMAVM_CPUS:-$((nproc < 2 ? nproc : 2))}
mem=${RDMAVM_MEM:-1024}
vm_timeout=${RDMAVM_TIMEOUT:-900}
boot_timeout=${RDMAVM_BOOT_TIMEOUT:-180}
cmd_timeout=${RDMAVM_CMD_TIMEOUT:-600}
mtu=${RDMAVM_MTU:-1500}
for v in CPUS:cpus MEM:mem TIMEOUT:vm_timeout BOOT_TIMEOUT:boot_timeout CMD_TIMEOUT:cmd_timeout MTU:mtu; do
	val=${v#*:}
	[[ ${!val} =~ ^[1-9][0-9]*$ ]] || fail "RDMAVM_${v%%:*} must be a positive integer, not '${!val}'"
done
cwd=$(pwd -P)

# ---------------------------------------------------------------- work directory

# w holds the initramfs, the io directory shared with the guest (the command,
# its environment, the guest's stage-2 script, status files written back) and
# the files qemu writes the guest's console, stdout and stderr to.
w=$(mktemp -d "${TMPDIR:-/tmp}/rdmavm.XXXXXX") || fail "mktemp failed"
qpid=""
tails=""
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	[[ -n $qpid ]] && kill "$qpid" 2>/dev/null
	for p in $tails; do kill "$p" 2>/dev/null; done
	if [[ ${RDMAVM_KEEP:-0} == 1 ]]; then
		echo "[rdmavm] kept $w" >&2
	else
		rm -rf "$w"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$w/io" "$w/initrd/bin" "$w/initrd/lib/modules" "$w/initrd/proc" "$w/initrd/sys" \
	"$w/initrd/dev" "$w/initrd/lower" "$w/initrd/rw" "$w/initrd/newroot"

# ---------------------------------------------------------------- initramfs

# Stage 1 (the initramfs, busybox): load the modules for 9p and virtio, mount
# the host's / read-only with a tmpfs overlay on top, and switch to it.
cp "$busybox" "$w/initrd/bin/busybox"
: >"$w/initrd/modules.list"
for m in virtio_pci 9pnet_virtio 9p overlay virtio_console; do
	modprobe -S "$kver" --show-depends "$m" 2>/dev/null | awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' | while read -r ko; do
	b=${ko##*/}
	case $ko in # busybox insmod wants an uncompressed .ko
	*.ko.xz) b=${b%.xz} && xz -dc "$ko" >"$w/initrd/lib/modules/$b" ;;
	*.ko.zst) b=${b%.zst} && zstd -qdc "$ko" >"$w/initrd/lib/modules/$b" ;;
	*.ko.gz) b=${b%.gz} && gzip -dc "$ko" >"$w/initrd/lib/modules/$b" ;;
	*) cp "$ko" "$w/initrd/lib/modules/$b" ;;
	esac && echo "$b" >>"$w/initrd/modules.list"
done
[[ -s $w/initrd/modules.list ]] || fail "cannot resolve the guest's modules for $kver (modprobe -S $kver --show-depends failed; install kmod)"

cat >"$w/initrd/init" <<'EOF'
#!/bin/busybox sh
B=/bin/busybox
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
$B mount -t devtmpfs devtmpfs /dev
for ko in $($B cat /modules.list); do
	$B insmod /lib/modules/$ko 2>/dev/null || echo "rdmavm-init: insmod $ko failed"
done
fail() { echo "rdmavm-init: FATAL: $*"; $B sleep 1; $B poweroff -f; }
$B mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose,ro hostroot /lower || fail "mount hostroot"
$B mount -t tmpfs -o mode=0755 rwlayer /rw || fail "mount tmpfs"
$B mkdir -p /rw/upper /rw/work
$B mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work rootov /newroot || fail "mount overlay"
$B mount -t tmpfs -o mode=0755 run /newroot/run
$B mkdir -p /newroot/run/rdmavm
$B mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 rdmavmio /newroot/run/rdmavm || fail "mount io"
$B mount --move /dev /newroot/dev
$B mount --move /proc /newroot/proc
$B mount --move /sys /newroot/sys
exec $B switch_root /newroot /bin/bash /run/rdmavm/stage2.sh
fail "switch_root"
EOF
chmod +x "$w/initrd/init"
(cd "$w/initrd" && find . | cpio -o -H newc --quiet >"$w/initrd.cpio") || fail "cannot build the initramfs (install cpio)"

# ---------------------------------------------------------------- stage 2

printf '%s\n' "$cwd" >"$w/io/cwd"
printf '%s' "$cmd" >"$w/io/cmd"
{
	for n in $(compgen -e); do
		case $n in PWD | OLDPWD | SHLVL | _ | TERM | DISPLAY | SSH_* | XDG_* | DBUS_* | TMPDIR) continue ;; esac
		printf 'export %s=%q\n' "$n" "${!n}"
	done
	printf 'export RDMAVM_CMD_TIMEOUT=%q RDMAVM_MTU=%q\n' "$cmd_timeout" "$mtu"
} >"$w/io/env"

# Stage 2 runs as PID 1 in the guest, with the host's bash, after
# switch_root: it sets up rxe0, runs the command, writes its exit status to
# the io directory and powers off.
cat >"$w/io/stage2.sh" <<'EOF'
IO=/run/rdmavm
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
exec </dev/null
mkdir -p /dev/pts /dev/shm /run/lock
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
[ -d /sys/kernel/config ] && mount -t configfs configfs /sys/kernel/config 2>/dev/null
# tracefs stays unmounted, so the echo client does not count system calls
# here (internal/cost): with it, this guest's kernel (6.1, emulated) has
# locked both CPUs up in a test process that opened and closed its perf
# counters many times over.
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
hostname rdmavm
ip link set lo up
# port prints the device of the virtio serial port named $1.
port() {
	local d
	for d in /sys/class/virtio-ports/*; do
		[ "$(cat "$d/name" 2>/dev/null)" = "$1" ] && { echo "/dev/${d##*/}"; return; }
	done
	echo /dev/console
}
OUT=$(port out)
ERR=$(port err)
read -r up _ </proc/uptime
echo "$up" >$IO/ready
. $IO/env
poweroff() { sync; /bin/busybox poweroff -f; }
# setup_failed reports a failed setup step with its log and stops with 125.
setup_failed() {
	{ echo "rdmavm: guest setup failed: $*"; cat $IO/setup.log; } >>"$ERR"
	echo 125 >$IO/rc
	poweroff
}
run() {
	echo "+ $*" >>$IO/setup.log
	"$@" >>$IO/setup.log 2>&1 || setup_failed "$*"
}
run modprobe ib_uverbs
run modprobe rdma_ucm
run modprobe rdma_rxe
run ip link add rxev0 type veth peer name rxev1
run ip link set rxev0 mtu "$RDMAVM_MTU"
run ip link set rxev1 mtu "$RDMAVM_MTU"
run ip addr add 192.0.2.1/24 dev rxev0
run ip addr add 192.0.2.2/24 dev rxev1
run ip link set rxev0 up
run ip link set rxev1 up
run rdma link add rxe0 type rxe netdev rxev0
export RDMAVM=1 RDMAVM_RXE_IP=192.0.2.1
read -r up _ </proc/uptime
echo "$up" >$IO/setup_done
cwd=$(cat $IO/cwd)
cd "$cwd" 2>>"$ERR" || setup_failed "cannot cd to $cwd (/proc, /sys, /dev and /run are the guest's own)"
timeout -k 10 "$RDMAVM_CMD_TIMEOUT" bash -c "$(cat $IO/cmd)" >"$OUT" 2>"$ERR"
rc=$?
read -r end _ </proc/uptime
# timeout exits 124, or 137 if the command also needed the KILL signal.
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
	awk -v a="$up" -v b="$end" -v t="$RDMAVM_CMD_TIMEOUT" 'BEGIN { exit !(b - a >= t) }' && {
		rc=124
		: >$IO/timed_out
	}
fi
free -m >$IO/free 2>&1
echo "$end" >$IO/cmd_done
echo "$rc" >$IO/rc
poweroff
EOF

# ---------------------------------------------------------------- qemu

# boot runs qemu with accelerator $1 until the guest powers off, streaming
# the command's stdout and stderr. It sets qrc (qemu's exit status, or
# timeout's), stopped (why it stopped qemu early, if it did), t_qemu,
# t_ready, t_end and the peak RSS hwm (KiB).
boot() {
	local accel_args
	if [[ $1 == kvm ]]; then
		accel_args=(-accel kvm -cpu host)
	else
		# tb-size bounds the translation cache, most of qemu's memory.
		accel_args=(-accel "tcg,thread=multi,tb-size=256" -cpu max)
	fi
	rm -f "$w"/io/{ready,setup_done,cmd_done,rc,timed_out,setup.log,free}
	: >"$w/out"
	: >"$w/err"
	: >"$w/console.log"
	t_qemu=$EPOCHREALTIME
	timeout -k 5 "$vm_timeout" qemu-system-x86_64 -name rdmavm -nodefaults -no-user-config -no-reboot \
		-machine q35 "${accel_args[@]}" -smp "$cpus" -m "$mem" \
		-display none -monitor none -nic none \
		-chardev "file,id=con,path=$w/console.log" -serial chardev:con \
		-kernel "$bootimg" -initrd "$w/initrd.cpio" \
		-append "console=ttyS0 rdinit=/init panic=-1 quiet loglevel=3 mitigations=off tsc=reliable" \
		-fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap" \
		-device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
		-fsdev "local,id=io,path=$w/io,security_model=none" \
		-device virtio-9p-pci,fsdev=io,mount_tag=rdmavmio \
		-device virtio-serial-pci \
		-chardev "file,id=out,path=$w/out" -device virtserialport,chardev=out,name=out \
		-chardev "file,id=err,path=$w/err" -device virtserialport,chardev=err,name=err \
		>"$w/qemu.log" 2>&1 &
	qpid=$!
	tail -n +1 -f --pid="$qpid" "$w/out" &
	tails=$!
	tail -n +1 -f --pid="$qpid" "$w/err" >&2 &
	tails="$tails $!"
	hwm=0
	t_ready=""
	stopped=""
	local start=$SECONDS h q
	while kill -0 "$qpid" 2>/dev/null; do
		if [[ -n ${RDMAVM_STATS:-} || ${RDMAVM_VERBOSE:-0} == 1 ]]; then
			q=$(pgrep -P "$qpid" qemu-system-x86 2>/dev/null | head -n 1)
			h=$([[ -n $q ]] && awk '/^VmHWM/ { print $2 }' "/proc/$q/status" 2>/dev/null)
			[[ -n $h ]] && ((h > hwm)) && hwm=$h
		fi
		if [[ -z $t_ready ]]; then
			if [[ -e $w/io/ready ]]; then
				t_ready=$EPOCHREALTIME
			elif ((SECONDS - start >= boot_timeout)); then
				stopped="the guest was not up after RDMAVM_BOOT_TIMEOUT=${boot_timeout}s ($1)"
				kill "$qpid" 2>/dev/null
			fi
		fi
		if [[ -z $stopped ]] && grep -q -E 'KVM internal error|emulation failure' "$w/qemu.log" 2>/dev/null; then
			stopped="qemu: $(grep -m 1 -E 'KVM internal error|emulation failure' "$w/qemu.log")"
			kill "$qpid" 2>/dev/null
		fi
		sleep 0.1
	done
	wait "$qpid"
	qrc=$?
	qpid=""
	for p in $tails; do wait "$p" 2>/dev/null; done
	tails=""
	t_end=$EPOCHREALTIME
}

boot "$accel"
if [[ $accel == kvm && ! -e $w/io/ready && ${RDMAVM_ACCEL:-auto} == auto ]]; then
	echo "$prog: warning: the guest did not boot with KVM (${stopped:-qemu exit status $qrc}); trying again with TCG (slow)" >&2
	accel=tcg
	boot tcg
fi

# ---------------------------------------------------------------- result

diagnostics() {
	echo "---- qemu log ----" >&2
	head -n 30 "$w/qemu.log" >&2
	echo "---- guest console (end) ----" >&2
	tail -n 40 "$w/console.log" >&2
	if [[ -e $w/io/setup.log ]]; then
		echo "---- guest setup log ----" >&2
		tail -n 40 "$w/io/setup.log" >&2
	fi
}
if [[ ${RDMAVM_VERBOSE:-0} == 1 ]]; then
	echo "---- guest console ----" >&2
	cat "$w/console.log" >&2
	if [[ -e $w/io/setup.log ]]; then
		echo "---- guest setup log ----" >&2
		cat "$w/io/setup.log" >&2
	fi
	if [[ -e $w/io/free ]]; then
		echo "---- guest free -m, after the command ----" >&2
		cat "$w/io/free" >&2
	fi
fi

if [[ ! -e $w/io/rc ]]; then
	if [[ -n $stopped ]]; then
		echo "$prog: error: $stopped" >&2
	elif [[ $qrc == 124 || $qrc == 137 ]]; then
		echo "$prog: error: the machine did not finish within RDMAVM_TIMEOUT=${vm_timeout}s" >&2
	elif [[ ! -e $w/io/ready ]]; then
		echo "$prog: error: the guest did not boot (qemu exit status $qrc)" >&2
	else
		echo "$prog: error: the guest stopped before the command finished (qemu exit status $qrc)" >&2
	fi
	diagnostics
	exit 125
fi
rc=$(cat "$w/io/rc")
if [[ -e $w/io/timed_out ]]; then
	echo "$prog: error: the command did not finish within RDMAVM_CMD_TIMEOUT=${cmd_timeout}s" >&2
fi
if [[ -n ${RDMAVM_STATS:-} || ${RDMAVM_VERBOSE:-0} == 1 ]]; then
	up=$(cat "$w/io/ready")
	set_up=$(cat "$w/io/setup_done" 2>/dev/null || echo "$up")
	done_=$(cat "$w/io/cmd_done" 2>/dev/null || echo "$set_up")
	echo "[rdmavm] accel=$accel cpus=$cpus mem=${mem}M kernel=$kver" \
		"boot=$(since "$t_qemu" "$t_ready")s rxe-setup=$(since "$up" "$set_up")s" \
		"command=$(since "$set_up" "$done_")s vm=$(since "$t_qemu" "$t_end")s" \
		"total=$(since "$t0" "$t_end")s qemu-peak-rss=$((hwm / 1024))MiB rc=$rc" >&2
fi
exit "$rc"
