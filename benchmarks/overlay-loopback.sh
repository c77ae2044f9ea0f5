#!/usr/bin/env bash
# The overlay's cost on loopback: a source, one relay and one leaf on this
# machine (kernel TCP on 127.0.0.1), a file of SIZE_MIB in WORK_ROOT
# (/var/tmp: files go through the page cache as on any disk; tmpfs would
# charge the writers for clearing every page), twice
# a round: the relay also a receiver (it decodes and writes the file),
# then a relay that only relays (`--relay-only`). GNU time measures the
# relay's and the leaf's CPU and peak RSS; their --json summaries give
# the bytes.
#
#   cargo build --release -p fanout
#   benchmarks/overlay-loopback.sh                  # 512 MiB, 2 rounds
#   SIZE_MIB=1024 ROUNDS=3 benchmarks/overlay-loopback.sh
#
# Figures, medians over the rounds:
# - the relay-only host's forwarding per CPU-second: bytes written to its
#   child over its user + system time, against RELAY_TARGET Gbit/s (1.0),
#   and its peak RSS against its buffer (BUFFER_MIB, 1) plus OVERHEAD_MIB
#   (16: the process's own code, stacks and allocator);
# - the same for the decoding relay, reported (its own decoding counts:
#   a relay that is also a receiver holds the object);
# - the leaf's file bytes per CPU-second (reading, checking and decoding),
#   against DECODE_TARGET MiB/s (100);
# - bytes read per file byte at the leaf, against PER_BYTE_TARGET (1.01);
# - peak RSS of the leaf, reported.
# Exits 1 when a target is missed, 2 when it could not measure. Three
# processes share the machine's cores: note its count and load.
set -euo pipefail

SIZE_MIB=${SIZE_MIB:-512}
ROUNDS=${ROUNDS:-2}
RELAY_TARGET=${RELAY_TARGET:-1.0}
DECODE_TARGET=${DECODE_TARGET:-100}
PER_BYTE_TARGET=${PER_BYTE_TARGET:-1.01}
FANOUT=${FANOUT:-$(dirname "$0")/../target/release/fanout}
PORT=${PORT:-47100}
BUFFER_MIB=${BUFFER_MIB:-1}
BUFFER="${BUFFER_MIB}MiB"
# A process's own memory (code, stacks, allocator, socket buffers in user
# space) on top of the relay buffer: the relay-only host's RSS target is
# the buffer plus this.
OVERHEAD_MIB=${OVERHEAD_MIB:-16}

die() { echo "overlay-loopback: $*" >&2; exit 2; }
[ -x "$FANOUT" ] || die "no fanout binary at $FANOUT (cargo build --release -p fanout)"
[ -x /usr/bin/time ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null ||
    die "needs GNU time (apt-get install time)"
command -v python3 >/dev/null || die "needs python3"

WORK=$(mktemp -d "${WORK_ROOT:-/var/tmp}/fanout-overlay-bench.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
head -c $((SIZE_MIB << 20)) /dev/urandom > "$WORK/file.bin"
"$FANOUT" keygen --psk "$WORK/k.psk" >/dev/null
echo "overlay-loopback: ${SIZE_MIB} MiB, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# One chain source -> relay -> leaf into directory $1, ports from $2;
# $3 = "decode" (the relay is also a receiver) or "relay-only".
chain() {
    local R=$1 src=$2 mode=$3 rel=$(($2 + 1)) relay_out
    mkdir -p "$R/relay" "$R/leaf"
    "$FANOUT" overlay source "$WORK/file.bin" --listen "127.0.0.1:$src" \
        --psk-file "$WORK/k.psk" --children 1 --json > "$R/source.json" 2> "$R/source.err" &
    PIDS+=($!); local S=$!
    # The source reads the file before it listens.
    for _ in $(seq 1 600); do grep -q " on " "$R/source.err" 2>/dev/null && break; sleep 0.1; done
    grep -q " on " "$R/source.err" || die "the source did not start: $(cat "$R/source.err")"
    if [ "$mode" = relay-only ]; then relay_out=(--relay-only); else relay_out=(-o "$R/relay"); fi
    /usr/bin/time -f '%U %S %M' -o "$R/relay.time" "$FANOUT" overlay node \
        --join "127.0.0.1:$src" --psk-file "$WORK/k.psk" "${relay_out[@]}" \
        --listen "127.0.0.1:$rel" --children 1 --buffer "$BUFFER" --json > "$R/relay.json" 2> "$R/relay.err" &
    PIDS+=($!); local RL=$!
    for _ in $(seq 1 100); do grep -q "relaying on" "$R/relay.err" 2>/dev/null && break; sleep 0.05; done
    /usr/bin/time -f '%U %S %M' -o "$R/leaf.time" "$FANOUT" overlay node \
        --join "127.0.0.1:$rel" --psk-file "$WORK/k.psk" -o "$R/leaf" --json \
        > "$R/leaf.json" 2> "$R/leaf.err" &
    PIDS+=($!); local L=$!
    wait "$L" || die "$R: the leaf failed: $(tail -2 "$R/leaf.err")"
    wait "$RL" || die "$R: the relay failed: $(tail -2 "$R/relay.err")"
    wait "$S" || die "$R: the source failed: $(tail -2 "$R/source.err")"
    cmp -s "$WORK/file.bin" "$R/leaf/file.bin" || die "$R: the leaf's file differs"
    rm -f "$R/leaf/file.bin" "$R/relay/file.bin"
}

for round in $(seq 1 "$ROUNDS"); do
    chain "$WORK/r$round" $((PORT + 4 * round)) decode
    chain "$WORK/o$round" $((PORT + 4 * round + 2)) relay-only
done

python3 - "$WORK" "$ROUNDS" "$SIZE_MIB" "$RELAY_TARGET" "$DECODE_TARGET" "$PER_BYTE_TARGET" \
    "$((BUFFER_MIB + OVERHEAD_MIB))" <<'PY'
import json, statistics, sys
work, rounds, size_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
relay_t, decode_t, per_byte_t, rss_t = map(float, sys.argv[4:8])
rows = []
for r in range(1, rounds + 1):
    d = f"{work}/r{r}"
    relay, leaf = (json.load(open(f"{d}/{n}.json")) for n in ("relay", "leaf"))
    ru, rs, rm = open(f"{d}/relay.time").read().split()
    lu, ls, lm = open(f"{d}/leaf.time").read().split()
    rcpu, lcpu = float(ru) + float(rs), float(lu) + float(ls)
    rows.append(dict(
        relay_gbps_per_cpu=relay["bytes_to_children"] * 8 / rcpu / 1e9,
        relay_cpu_s=rcpu, relay_rss_mib=int(rm) / 1024,
        leaf_mibps_per_cpu=leaf["bytes"] / lcpu / 2**20,
        leaf_cpu_s=lcpu, leaf_rss_mib=int(lm) / 1024,
        leaf_gbps=leaf["goodput_bps"] / 1e9, per_byte=leaf["received_per_byte"]))
    o = f"{work}/o{r}"
    only = json.load(open(f"{o}/relay.json"))
    ou, os_, om = open(f"{o}/relay.time").read().split()
    ocpu = float(ou) + float(os_)
    rows[-1].update(
        relay_only_gbps_per_cpu=only["bytes_to_children"] * 8 / ocpu / 1e9,
        relay_only_cpu_s=ocpu, relay_only_rss_mib=int(om) / 1024)
    print(f"round {r}: " + ", ".join(f"{k} {v:.3f}" for k, v in rows[-1].items()))
med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
print("median: " + ", ".join(f"{k} {v:.3f}" for k, v in med.items()))
missed = []
if med["relay_only_gbps_per_cpu"] < relay_t:
    missed.append(f"relay-only {med['relay_only_gbps_per_cpu']:.2f} Gbit/s per CPU-second < {relay_t}")
if med["relay_only_rss_mib"] > rss_t:
    missed.append(f"relay-only peak RSS {med['relay_only_rss_mib']:.1f} MiB > {rss_t:.0f} (buffer + overhead)")
if med["leaf_mibps_per_cpu"] < decode_t:
    missed.append(f"leaf {med['leaf_mibps_per_cpu']:.0f} MiB/s per CPU-second < {decode_t}")
if med["per_byte"] > per_byte_t:
    missed.append(f"{med['per_byte']:.4f} bytes read per file byte > {per_byte_t}")
for m in missed:
    print("MISSED: " + m)
sys.exit(1 if missed else 0)
PY
