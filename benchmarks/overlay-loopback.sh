#!/usr/bin/env bash
# The overlay's cost on loopback: a source, one relay and one leaf on this
# machine (kernel TCP on 127.0.0.1), a file of SIZE_MIB in /dev/shm. GNU
# time measures the relay's and the leaf's CPU and peak RSS; their --json
# summaries give the bytes.
#
#   cargo build --release -p fanout
#   benchmarks/overlay-loopback.sh                  # 512 MiB, 2 rounds
#   SIZE_MIB=1024 ROUNDS=3 benchmarks/overlay-loopback.sh
#
# Figures, medians over the rounds:
# - the relay's forwarding per CPU-second: bytes written to its child
#   over its user + system time (its own decoding included: a relay is
#   also a receiver), against RELAY_TARGET Gbit/s (1.0);
# - the leaf's file bytes per CPU-second (reading, checking and decoding),
#   against DECODE_TARGET MiB/s (100);
# - bytes read per file byte at the leaf, against PER_BYTE_TARGET (1.01);
# - peak RSS of both, reported (the relay's buffer is --buffer, 1 MiB).
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

die() { echo "overlay-loopback: $*" >&2; exit 2; }
[ -x "$FANOUT" ] || die "no fanout binary at $FANOUT (cargo build --release -p fanout)"
[ -x /usr/bin/time ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null ||
    die "needs GNU time (apt-get install time)"
command -v python3 >/dev/null || die "needs python3"

WORK=$(mktemp -d /dev/shm/fanout-overlay-bench.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
head -c $((SIZE_MIB << 20)) /dev/urandom > "$WORK/file.bin"
"$FANOUT" keygen --psk "$WORK/k.psk" >/dev/null
echo "overlay-loopback: ${SIZE_MIB} MiB, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

for round in $(seq 1 "$ROUNDS"); do
    R="$WORK/r$round"
    mkdir -p "$R/relay" "$R/leaf"
    src=$((PORT + 2 * round)); rel=$((src + 1))
    "$FANOUT" overlay source "$WORK/file.bin" --listen "127.0.0.1:$src" \
        --psk-file "$WORK/k.psk" --children 1 --json > "$R/source.json" 2> "$R/source.err" &
    PIDS+=($!); S=$!
    # The source codes the file before it listens.
    for _ in $(seq 1 600); do grep -q " on " "$R/source.err" 2>/dev/null && break; sleep 0.1; done
    grep -q " on " "$R/source.err" || die "the source did not start: $(cat "$R/source.err")"
    /usr/bin/time -f '%U %S %M' -o "$R/relay.time" "$FANOUT" overlay node \
        --join "127.0.0.1:$src" --psk-file "$WORK/k.psk" -o "$R/relay" \
        --listen "127.0.0.1:$rel" --children 1 --json > "$R/relay.json" 2> "$R/relay.err" &
    PIDS+=($!); RL=$!
    for _ in $(seq 1 100); do grep -q "relaying on" "$R/relay.err" 2>/dev/null && break; sleep 0.05; done
    /usr/bin/time -f '%U %S %M' -o "$R/leaf.time" "$FANOUT" overlay node \
        --join "127.0.0.1:$rel" --psk-file "$WORK/k.psk" -o "$R/leaf" --json \
        > "$R/leaf.json" 2> "$R/leaf.err" &
    PIDS+=($!); L=$!
    wait "$L" || die "round $round: the leaf failed: $(tail -2 "$R/leaf.err")"
    wait "$RL" || die "round $round: the relay failed: $(tail -2 "$R/relay.err")"
    wait "$S" || die "round $round: the source failed: $(tail -2 "$R/source.err")"
    cmp -s "$WORK/file.bin" "$R/leaf/file.bin" || die "round $round: the leaf's file differs"
    rm -f "$R/leaf/file.bin" "$R/relay/file.bin"
done

python3 - "$WORK" "$ROUNDS" "$SIZE_MIB" "$RELAY_TARGET" "$DECODE_TARGET" "$PER_BYTE_TARGET" <<'PY'
import json, statistics, sys
work, rounds, size_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
relay_t, decode_t, per_byte_t = map(float, sys.argv[4:7])
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
    print(f"round {r}: " + ", ".join(f"{k} {v:.3f}" for k, v in rows[-1].items()))
med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
print("median: " + ", ".join(f"{k} {v:.3f}" for k, v in med.items()))
missed = []
if med["relay_gbps_per_cpu"] < relay_t:
    missed.append(f"relay {med['relay_gbps_per_cpu']:.2f} Gbit/s per CPU-second < {relay_t}")
if med["leaf_mibps_per_cpu"] < decode_t:
    missed.append(f"leaf {med['leaf_mibps_per_cpu']:.0f} MiB/s per CPU-second < {decode_t}")
if med["per_byte"] > per_byte_t:
    missed.append(f"{med['per_byte']:.4f} bytes read per file byte > {per_byte_t}")
for m in missed:
    print("MISSED: " + m)
sys.exit(1 if missed else 0)
PY
