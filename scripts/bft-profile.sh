#!/usr/bin/env bash
# Writes down what one request costs a four-replica BFT cluster (cmd/bft)
# on this machine: the replicas pinned to CPU 1 and the bench client to
# CPU 0, as benchmarks/bftbench places them, TCP over loopback, 0 B
# operations. While the bench runs, perf samples CPU 1; the samples of the
# replica processes are sorted into what they were doing (signing,
# verifying, hashing, encoding, system calls by kind, allocation and
# garbage collection, scheduling), and each share is turned into
# microseconds of replica CPU per request:
#
#   scripts/bft-profile.sh [-durable] [-clients C] [-seconds S] [-bft BIN]
#
# -durable gives every replica a data directory (bft replica -data-dir).
# The figures are the whole cluster's (four replicas), per request the
# client completed while perf sampled. bftbench's cs/req and cpu us/req
# columns are the same quantities from /proc, without the split. A
# second window of the same length then records the replicas' context
# switches on CPU 1 with their call stacks and sorts them by why the
# thread left the CPU (the Go runtime's monitor thread, waiting for the
# network or the disk, the runtime parking a thread, preemption).
set -euo pipefail

usage() {
	echo "usage: $0 [-durable] [-clients C] [-seconds S] [-bft BIN]" >&2
	exit 2
}

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

durable="" clients=1 seconds=3 bin=""
while [[ $# -gt 0 ]]; do
	case $1 in
	-durable | --durable) durable=1 ;;
	-clients | --clients) [[ $# -ge 2 ]] || usage; clients=$2; shift ;;
	-seconds | --seconds) [[ $# -ge 2 ]] || usage; seconds=$2; shift ;;
	-bft | --bft) [[ $# -ge 2 ]] || usage; bin=$2; shift ;;
	*) usage ;;
	esac
	shift
done
[[ $clients =~ ^[1-9][0-9]*$ && $seconds =~ ^[1-9][0-9]*$ ]] || usage
[[ $(nproc) -ge 2 ]] || die "the placement needs two CPUs, this machine has $(nproc)"

setup build tools
command -v perf >/dev/null 2>&1 || apt_install linux-perf || die "cannot install perf (Debian package linux-perf)"

work=$(mktemp -d /tmp/rubin-bft-profile.XXXXXX)
pids=()
cleanup() {
	[[ ${#pids[@]} -eq 0 ]] || kill "${pids[@]}" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

if [[ -z $bin ]]; then
	section "build the bft command"
	go build -o "$work/bft" ./cmd/bft || die "cannot build ./cmd/bft"
	bin=$work/bft
fi

# executed prints the requests replica 0 executed so far, from its
# metrics: the requests completed while perf samples are what a share of
# the CPU is divided by.
metrics_port=7469
executed() {
	local line
	exec 3<>"/dev/tcp/127.0.0.1/$metrics_port" || die "cannot reach replica 0's metrics"
	printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
	line=$(grep '^rubin_bft_committed_requests_total' <&3 | awk '{ print $2 }')
	exec 3<&-
	[[ -n $line ]] || die "replica 0's metrics have no rubin_bft_committed_requests_total"
	printf '%.0f\n' "$line"
}

section "start four replicas on CPU 1${durable:+, each with a data directory}"
# Ports of their own, away from bftbench's and the tests'.
addrs=127.0.0.1:7461,127.0.0.1:7462,127.0.0.1:7463,127.0.0.1:7464
"$bin" keygen -addrs "$addrs" -clients 256 -out "$work/cluster.json" >/dev/null
for i in 0 1 2 3; do
	args=(replica -id "$i" -cluster "$work/cluster.json")
	[[ $i -ne 0 ]] || args+=(-metrics-addr "127.0.0.1:$metrics_port")
	[[ -z $durable ]] || args+=(-data-dir "$work/data$i")
	taskset -c 1 "$bin" "${args[@]}" 2>"$work/replica$i.log" &
	pids+=($!)
done
sleep 2
for i in 0 1 2 3; do
	kill -0 "${pids[$i]}" 2>/dev/null || die "replica $i exited: $(tail -n 3 "$work/replica$i.log")"
done

section "bench with $clients client(s); perf samples CPU 1 for ${seconds}s"
taskset -c 0 "$bin" bench -cluster "$work/cluster.json" -clients "$clients" -n 2000 >/dev/null 2>&1 ||
	die "the warm-up bench failed"
# Enough operations to outlast the sampling at any speed this machine
# reaches; the bench is stopped once perf is done.
taskset -c 0 "$bin" bench -cluster "$work/cluster.json" -clients "$clients" -n 100000000 -warmup 0 \
	>"$work/bench.out" 2>&1 &
bench=$!
pids+=("$bench")
sleep 1
executed0=$(executed) t0=$(date +%s.%N)
freq=2000
perf record -q -F "$freq" -a -C 1 -o "$work/perf.data" -- sleep "$seconds" >/dev/null 2>&1 ||
	die "perf record failed (kernel.perf_event_paranoid is $(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null))"

executed1=$(executed) t1=$(date +%s.%N)
# A second window of the same length records every context switch on
# CPU 1 with the call stack its thread left from.
perf record -q -e sched:sched_switch -g -a -C 1 -o "$work/switches.data" -- sleep "$seconds" >/dev/null 2>&1 ||
	die "perf record of the context switches failed"
executed2=$(executed)
kill "$bench" 2>/dev/null || true
wait "$bench" 2>/dev/null || true
rate=$(awk -v a="$executed0" -v b="$executed1" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%d", (b - a) / (t1 - t0) }')
[[ $rate -gt 0 ]] || die "replica 0 executed no request while perf sampled; the bench said: $(tail -n 3 "$work/bench.out")"

section "where the replicas' CPU went (bft processes on CPU 1; ${rate} req/s)"
comm=$(basename -- "$bin" | cut -c1-15) # the kernel's name of the replica processes
perf report -i "$work/perf.data" --comm "$comm" --no-children --sort symbol -g none --percent-limit 0 2>/dev/null |
	grep -E '^ +[0-9]' >"$work/symbols.txt" || die "perf report found no samples of the replicas"
total=$(perf report -i "$work/perf.data" --sort comm -g none 2>/dev/null | awk -v c="$comm" '$1 ~ /%$/ && $2 == c {sub("%", "", $1); print $1}')
[[ -n $total ]] || die "perf report found no samples of the replicas"
awk -v share="$total" -v rate="$rate" '
function cat(s) {
	if (s ~ /curve25519-voi/) return "Ed25519 (sign and verify)"
	if (s ~ /sha256|sha512|hmac/) return "SHA-2 (digests, request and link MACs)"
	if (s ~ /rubin\/bft\/wire/) return "wire encoding and decoding"
	if (s ~ /runtime\.(mallocgc|growslice|memclr|newobject|makeslice|nextFree)|mspan|mcache|heapBits|runtime\.(scan|gcDrain|markroot|greyobject|findObject|wbBuf|bulkBarrier|typePointers|tryDefer)|spanSet|gcBgMark|sweep|gcWork/) return "allocation and garbage collection"
	if (s ~ /runtime\.(schedule|findRunnable|park_m|mcall|gopark|goready|ready|runq|stealWork|checkTimers|netpoll|notewakeup|notesleep|futex|usleep|sysmon|mPark|stopm|startm|wakep|handoffp|exitsyscall|entersyscall|reentersyscall|casgstatus|execute|gogo|lock2|unlock2|resetspinning)/) return "Go scheduler (hand-offs)"
	if (s ~ /\[k\] .*(ext4|jbd2|blk_|bio|virtio|iowrite|vring|submit_bio|filemap|folio|writeback|fsync|mpage|bdev|mq_)/) return "kernel: disk (write, fdatasync)"
	if (s ~ /\[k\] (finish_task_switch|__schedule|schedule|_raw_spin_unlock_irqrestore|_raw_spin_unlock_irq|try_to_wake_up|dequeue|enqueue|pick_next|update_curr|psi_|__switch_to|switch_mm|select_task_rq|ttwu)/) return "kernel: context switches and wake-ups"
	if (s ~ /\[k\] .*(tcp|ip_|skb|sock|net_rx|loopback|__dev_queue|inet|softirq|napi|_copy_to_iter|_copy_from_iter|nf_|dst_|validate_xmit)/) return "kernel: TCP over loopback"
	if (s ~ /\[k\] .*(epoll|ep_|eventfd|futex|do_syscall|entry_SYSCALL|syscall_exit|exit_to_user|irqentry|__x64_sys|fdget|fput|__rseq|vfs_|ksys_)/) return "kernel: system call entry, epoll, futex"
	if (s ~ /\[k\]/) return "kernel: other"
	if (s ~ /rubin\/(selector|transport|channel|bufpool)/) return "rubin: selector and transport"
	if (s ~ /rubin\/bft\/(link|node)/) return "bft: links and event loop"
	if (s ~ /rubin\/bft/) return "bft: protocol core, store, authenticator"
	return "other user space (runtime, memmove, maps)"
}
{ p = $1; sub("%", "", p); sum[cat($0)] += p; all += p }
END {
	# share: the percentage of CPU 1 the replicas took, so a category takes
	# sum/all of it; one request takes 1e6/rate microseconds of wall time.
	printf "| what | share of replica CPU | CPU us per request |\n|:---|---:|---:|\n"
	n = 0
	for (c in sum) order[n++] = c
	for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (sum[order[j]] > sum[order[i]]) { t = order[i]; order[i] = order[j]; order[j] = t }
	for (i = 0; i < n; i++) {
		c = order[i]
		printf "| %s | %.1f%% | %.1f |\n", c, 100 * sum[c] / all, (share / 100) * (sum[c] / all) * 1e6 / rate
	}
	printf "| **all four replicas** | %.0f%% of CPU 1 | %.1f |\n", share, (share / 100) * 1e6 / rate
}' "$work/symbols.txt"

section "why the replicas' threads left CPU 1 (the second ${seconds}s)"
perf script -i "$work/switches.data" --comm "$comm" -F comm,ip,sym 2>/dev/null >"$work/switches.txt" ||
	die "perf script found no context switches of the replicas"
awk -v n="$((executed2 - executed1))" '
function cat(s) {
	if (s ~ /runtime\.sysmon/) return "the Go runtime monitor (sysmon) naps and sleeps"
	if (s ~ /io_schedule|fdatasync|fsync|blkdev_issue_flush|folio_wait|wait_on_bit/) return "waiting for the disk (write, fdatasync)"
	if (s ~ /runtime\.netpoll/) return "idle, waiting for the network (the runtime poller)"
	if (s ~ /runtime\.(stopm|notesleep|mPark)/) return "threads the runtime parks (processor hand-offs)"
	if (s ~ /exit_to_user_mode|irqentry|preempt/) return "preempted"
	return "other"
}
BEGIN { RS = "" }
{ c = cat($0); count[c]++; all++ }
END {
	if (n <= 0 || all == 0) { print "no requests or no switches in the window"; exit 1 }
	printf "| why | share of switches | switches per request |\n|:---|---:|---:|\n"
	k = 0
	for (c in count) order[k++] = c
	for (i = 0; i < k; i++) for (j = i + 1; j < k; j++) if (count[order[j]] > count[order[i]]) { t = order[i]; order[i] = order[j]; order[j] = t }
	for (i = 0; i < k; i++) printf "| %s | %.1f%% | %.2f |\n", order[i], 100 * count[order[i]] / all, count[order[i]] / n
	printf "| **all** | 100%% | %.2f |\n", all / n
}' "$work/switches.txt"
