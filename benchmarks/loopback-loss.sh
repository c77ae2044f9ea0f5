#!/usr/bin/env bash
# fanout against one kernel CUBIC flow on a lossy sub-millisecond path, side
# by side in one run: a network namespace of its own whose loopback drops a
# share of packets at random (nftables `numgen random` at prerouting, both
# directions, every packet: data, ACKs, handshakes), as `fanout demo` drops
# 1% at the receiver. Segmentation offloads are off on that loopback, so the
# rule sees and drops single packets of at most ~1.4 KB of payload, not
# 64 KB TSO/GSO bundles (with them, 1% of bundles costs TCP far less).
#
#   cargo build --release -p fanout
#   sudo benchmarks/loopback-loss.sh                 # 1% loss, 3 rounds
#   sudo LOSS_PERMILLE=20 ROUNDS=5 benchmarks/loopback-loss.sh
#
# Each round: fanout without loss (the sender's CPU per byte as the
# lossless figure), then with the loss rule one `iperf3 -C cubic -M 1400`
# flow (the reference: kernel CUBIC, the same segment size as fanout's
# ~1.4 KB datagrams) and one fanout transfer (`send --to`, defaults). The
# medians over the rounds are compared with the targets; the script exits
# 1 when one is missed, 2 when it could not measure.
#
# Targets (overridable): fanout's goodput at least RATE_TARGET (0.5) × the
# CUBIC flow's; its sender CPU per byte with loss at most CPU_TARGET (1.2) ×
# its own without. Needs root, iproute2, nftables, iperf3 (installed with
# apt-get when missing).
set -euo pipefail

LOSS_PERMILLE=${LOSS_PERMILLE:-10}
ROUNDS=${ROUNDS:-3}
SIZE_MIB=${SIZE_MIB:-256}
REF_SECONDS=${REF_SECONDS:-10}
RATE_TARGET=${RATE_TARGET:-0.5}
CPU_TARGET=${CPU_TARGET:-1.2}
FANOUT=${FANOUT:-$(dirname "$0")/../target/release/fanout}

die() { echo "loopback-loss: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, nftables)"
[ -x "$FANOUT" ] || die "no fanout binary at $FANOUT (cargo build --release -p fanout)"
for tool in ip nft iperf3 ethtool python3; do
    if ! command -v "$tool" >/dev/null; then
        case $tool in ip) pkg=iproute2 ;; nft) pkg=nftables ;; *) pkg=$tool ;; esac
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null || die "cannot install $pkg"
    fi
done

NS=fanout-lo-$$
WORK=$(mktemp -d /tmp/fanout-loopback-loss.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    ip netns del "$NS" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
ip netns add "$NS"
ip -n "$NS" link set lo up
in_ns() { ip netns exec "$NS" "$@"; }
in_ns ethtool -K lo tso off gso off tx-udp-segmentation off >/dev/null 2>&1 ||
    die "cannot turn segmentation offloads off on the namespace's loopback"

loss_on() {
    in_ns nft -f - <<EOF
table inet lossy {
    counter dropped {}
    chain in {
        type filter hook prerouting priority 0; policy accept;
        numgen random mod 1000 < $LOSS_PERMILLE counter name "dropped" drop
    }
}
EOF
}
loss_off() { in_ns nft delete table inet lossy 2>/dev/null || true; }

head -c "$((SIZE_MIB << 20))" /dev/urandom >"$WORK/file"
PORT=7700

# One fanout transfer in the namespace: prints "goodput_bps sender_cpu_s".
fanout_run() {
    rm -rf "$WORK/out" && mkdir "$WORK/out"
    in_ns "$FANOUT" recv --listen 127.0.0.1:$PORT --output "$WORK/out" --json -q \
        >"$WORK/recv.json" &
    local rp=$!
    PIDS+=("$rp")
    sleep 0.3
    local TIMEFORMAT='%U %S'
    { time in_ns "$FANOUT" send "$WORK/file" --to 127.0.0.1:$PORT --json -q \
        >"$WORK/send.json"; } 2>"$WORK/send.time"
    wait "$rp"
    python3 - "$WORK" <<'EOF'
import json, sys
w = sys.argv[1]
r = json.load(open(f"{w}/recv.json")); s = json.load(open(f"{w}/send.json"))
assert r["verified"] and r["blake3"] == s["blake3"], "transfer not verified"
user, sys_ = map(float, open(f"{w}/send.time").read().split()[-2:])
print(r["goodput_bps"], user + sys_)
EOF
}

# One kernel CUBIC flow in the namespace: prints its goodput, bit/s.
cubic_run() {
    in_ns iperf3 -s -1 -p $((PORT + 1)) >/dev/null 2>&1 &
    local sp=$!
    PIDS+=("$sp")
    sleep 0.3
    in_ns iperf3 -c 127.0.0.1 -p $((PORT + 1)) -C cubic -M 1400 -t "$REF_SECONDS" -J \
        >"$WORK/iperf.json"
    wait "$sp" || true
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"])' \
        "$WORK/iperf.json"
}

echo "loopback-loss: ${LOSS_PERMILLE}/1000 random loss on a namespace's loopback, $SIZE_MIB MiB, $ROUNDS rounds"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min), $(nproc) CPUs"
printf '%-6s %-16s %-16s %-16s %-14s %-14s\n' round "cubic Mbit/s" "fanout Mbit/s" "lossless Mbit/s" "CPU ns/B loss" "CPU ns/B clean"
: >"$WORK/rounds"
for round in $(seq 1 "$ROUNDS"); do
    loss_off
    read -r clean_bps clean_cpu < <(fanout_run)
    loss_on
    cubic_bps=$(cubic_run)
    read -r lossy_bps lossy_cpu < <(fanout_run)
    bytes=$((SIZE_MIB << 20))
    python3 - "$round" "$cubic_bps" "$lossy_bps" "$clean_bps" "$lossy_cpu" "$clean_cpu" "$bytes" <<'EOF' | tee -a "$WORK/rounds"
import sys
r, cubic, lossy, clean, lcpu, ccpu, n = sys.argv[1:]
n = float(n)
print(f"{r:<6} {float(cubic)/1e6:<16.0f} {float(lossy)/1e6:<16.0f} {float(clean)/1e6:<16.0f} "
      f"{float(lcpu)/n*1e9:<14.2f} {float(ccpu)/n*1e9:<14.2f}")
EOF
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$WORK/rounds" "$RATE_TARGET" "$CPU_TARGET" <<'EOF'
import statistics, sys
rows = [list(map(float, l.split()[1:])) for l in open(sys.argv[1]) if l.strip()]
rate_target, cpu_target = float(sys.argv[2]), float(sys.argv[3])
med = [statistics.median(c) for c in zip(*rows)]
cubic, lossy, clean, lcpu, ccpu = med
rate, cpu = lossy / cubic, lcpu / ccpu
ok_rate, ok_cpu = rate >= rate_target, cpu <= cpu_target
print(f"median: fanout {lossy:.0f} Mbit/s = {rate:.2f}x one CUBIC flow ({cubic:.0f} Mbit/s); "
      f"target >= {rate_target}: {'met' if ok_rate else 'MISSED'}")
print(f"median: sender CPU {lcpu:.2f} ns/B with loss, {ccpu:.2f} without = {cpu:.2f}x; "
      f"target <= {cpu_target}: {'met' if ok_cpu else 'MISSED'}")
sys.exit(0 if ok_rate and ok_cpu else 1)
EOF
