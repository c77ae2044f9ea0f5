#!/usr/bin/env bash
# Loopback benchmark: fanout send/recv vs. iperf3 UDP (raw UDP limit) and
# iperf3 TCP (kernel TCP), side by side in one invocation, repeated R times.
#
#   tools/bench/loopback.sh [-r RUNS] [--json FILE] [--size-mib N]
#                           [--iperf-seconds S] [--dir DIR] [--no-build]
#                           [--fanout-only] [--bin PATH]
#                           [-- EXTRA FANOUT TRANSPORT FLAGS]
#
# --fanout-only skips both iperf3 tests (and installing iperf3); --bin runs
# that fanout binary instead of $CARGO_TARGET_DIR/release/fanout, unbuilt.
#
# Per run (sequentially, never concurrently, so they do not compete):
#   1. iperf3 UDP  : server `iperf3 -s -1 -p P --json`, client
#                    `iperf3 -u -b 0 -l 1400 -t S -c 127.0.0.1 -p P --json`.
#                    The rate reported is the RECEIVER's (server-side end.sum:
#                    bytes that arrived / time), with its loss %, because the
#                    sender-side UDP rate counts datagrams the kernel dropped.
#   2. iperf3 TCP  : default 128 KiB writes, `-t S`; receiver rate
#                    (end.sum_received), MSS recorded.
#   3. fanout      : a random file (1 GiB by default, generated once) sent by
#                    `fanout send` to `fanout recv`, both under
#                    `/usr/bin/time -v`; checks verified=true, equal BLAKE3 on
#                    both sides and `cmp` of the bytes; records goodput (the
#                    receiver's JSON), wall time, peak RSS (JSON VmHWM and
#                    time -v), user+sys CPU of both, transport counters.
#
# Machine noise: nproc, /proc/loadavg before each run, one `top -bn1` snapshot.
# Every process runs under `timeout 120`; the EXIT trap kills only PIDs this
# script started. Ports are chosen fresh per run and checked free with `ss`.
#
# The files live in DIR (default: a fresh directory under /dev/shm when it has
# room, so the benchmark measures the transport and not the disk; otherwise
# under /tmp). The directory is removed at the end.
set -euo pipefail

RUNS=3
JSON_OUT=""
SIZE_MIB=1024
IPERF_SECS=10
BASE_DIR=""
BUILD=1
IPERF=1
FANOUT_EXTRA=()
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/work/tgt/bench}"
FANOUT="$CARGO_TARGET_DIR/release/fanout"
TMO=120

usage() { sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    -r|--runs) RUNS="$2"; shift 2 ;;
    --json) JSON_OUT="$2"; shift 2 ;;
    --size-mib) SIZE_MIB="$2"; shift 2 ;;
    --iperf-seconds) IPERF_SECS="$2"; shift 2 ;;
    --dir) BASE_DIR="$2"; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --fanout-only) IPERF=0; shift ;;
    --bin) FANOUT="$2"; BUILD=0; shift 2 ;;
    -h|--help) usage 0 ;;
    --) shift; FANOUT_EXTRA=("$@"); break ;;
    *) echo "unknown argument: $1" >&2; usage 2 ;;
  esac
done
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "--runs must be a positive integer" >&2; exit 2; }

log() { echo "[loopback] $*" >&2; }

# ---------------------------------------------------------------- cleanup
PIDS=()
WORK=""
cleanup() {
  local rc=$?
  for p in "${PIDS[@]:-}"; do
    [[ -n "$p" ]] && kill "$p" 2>/dev/null || true
  done
  for p in "${PIDS[@]:-}"; do
    [[ -n "$p" ]] && wait "$p" 2>/dev/null || true
  done
  [[ -n "$WORK" && -d "$WORK" ]] && rm -rf -- "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits for a PID we started, then drops it from PIDS; returns its status.
reap() {
  local pid=$1 rc=0
  wait "$pid" || rc=$?
  local keep=()
  for p in "${PIDS[@]:-}"; do [[ "$p" != "$pid" && -n "$p" ]] && keep+=("$p"); done
  PIDS=("${keep[@]:-}")
  return "$rc"
}

# ---------------------------------------------------------------- prerequisites
if [[ $IPERF -eq 1 ]] && ! command -v iperf3 >/dev/null 2>&1; then
  log "installing iperf3"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update >/dev/null
  apt-get install -y iperf3 >/dev/null
fi
for t in jq python3 ss /usr/bin/time timeout cmp; do
  command -v "$t" >/dev/null 2>&1 || { echo "missing tool: $t" >&2; exit 1; }
done
if [[ $BUILD -eq 1 ]]; then
  log "building fanout (release) into $CARGO_TARGET_DIR"
  (cd "$REPO" && cargo build --release -p fanout >&2)
fi
[[ -x "$FANOUT" ]] || { echo "no fanout binary at $FANOUT" >&2; exit 1; }

# ---------------------------------------------------------------- work dir
need_kib=$(( SIZE_MIB * 1024 * 2 + 262144 ))
if [[ -z "$BASE_DIR" ]]; then
  if [[ -d /dev/shm ]] && (( $(df -Pk /dev/shm | awk 'NR==2{print $4}') > need_kib )); then
    BASE_DIR=/dev/shm
  else
    BASE_DIR=/tmp
  fi
fi
WORK="$(mktemp -d "$BASE_DIR/fanout-loopback.XXXXXX")"
SRC="$WORK/payload.bin"
log "generating ${SIZE_MIB} MiB random file in $WORK"
head -c "$(( SIZE_MIB * 1024 * 1024 ))" /dev/urandom > "$SRC"

# ---------------------------------------------------------------- ports
USED_PORTS=" "
port_free() {
  local p=$1
  [[ "$USED_PORTS" == *" $p "* ]] && return 1
  ! ss -Htuan "( sport = :$p )" 2>/dev/null | grep -q .
}
# Sets P to a port no socket uses and this script has not used yet.
fresh_port() {
  local p
  for _ in $(seq 1 200); do
    p=$(( 20000 + RANDOM % 40000 ))
    if port_free "$p"; then USED_PORTS+="$p "; P=$p; return 0; fi
  done
  echo "no free port found" >&2; return 1
}
# Waits until something listens on PORT (udp or tcp), up to ~10 s.
wait_listen() {
  local proto=$1 port=$2
  for _ in $(seq 1 200); do
    if ss -Hln"${proto}" "( sport = :$port )" 2>/dev/null | grep -q .; then return 0; fi
    sleep 0.05
  done
  echo "nothing listens on $proto/$port" >&2; return 1
}

# ---------------------------------------------------------------- machine notes
GIT_REV="$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
GIT_STATUS="$(git -C "$REPO" status --porcelain 2>/dev/null || true)"
if [[ -n "$GIT_STATUS" ]]; then GIT_DIRTY=true; else GIT_DIRTY=false; fi
NPROC="$(nproc)"
KERNEL="$(uname -r)"
CPU_MODEL="$(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)"
IPERF_VERSION="(iperf3 not run)"
if [[ $IPERF -eq 1 ]]; then IPERF_VERSION="$(iperf3 --version 2>/dev/null | head -1)"; fi
TOP_SNAPSHOT="$(top -bn1 | head -15)"
FANOUT_VERSION="$("$FANOUT" --version 2>/dev/null || true)"
log "commit $GIT_REV (dirty=$GIT_DIRTY), nproc $NPROC, kernel $KERNEL"
echo "$TOP_SNAPSHOT" >&2

RESULTS="$WORK/results.jsonl"
: > "$RESULTS"


for run in $(seq 1 "$RUNS"); do
  R="$WORK/run$run"; mkdir -p "$R"
  LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
  log "run $run/$RUNS  loadavg before: $LOAD_BEFORE"

  if [[ $IPERF -eq 1 ]]; then
  # ---- 1. iperf3 UDP
  fresh_port
  timeout "$TMO" iperf3 -s -1 -p "$P" --json > "$R/udp_server.json" 2>"$R/udp_server.err" &
  SPID=$!; PIDS+=("$SPID")
  wait_listen t "$P"
  timeout "$TMO" iperf3 -u -b 0 -l 1400 -t "$IPERF_SECS" -c 127.0.0.1 -p "$P" --json \
    > "$R/udp_client.json" 2>"$R/udp_client.err" &
  CPID=$!; PIDS+=("$CPID")
  reap "$CPID" || log "iperf3 UDP client failed (see $R/udp_client.*)"
  reap "$SPID" || log "iperf3 UDP server failed"

  # ---- 2. iperf3 TCP
  fresh_port
  timeout "$TMO" iperf3 -s -1 -p "$P" --json > "$R/tcp_server.json" 2>"$R/tcp_server.err" &
  SPID=$!; PIDS+=("$SPID")
  wait_listen t "$P"
  timeout "$TMO" iperf3 -t "$IPERF_SECS" -c 127.0.0.1 -p "$P" --json \
    > "$R/tcp_client.json" 2>"$R/tcp_client.err" &
  CPID=$!; PIDS+=("$CPID")
  reap "$CPID" || log "iperf3 TCP client failed (see $R/tcp_client.*)"
  reap "$SPID" || log "iperf3 TCP server failed"
  fi

  # ---- 3. fanout
  fresh_port
  OUT="$R/received.bin"
  timeout "$TMO" /usr/bin/time -v -o "$R/recv.time" \
    "$FANOUT" recv --listen "127.0.0.1:$P" -o "$OUT" --json --wait 60 "${FANOUT_EXTRA[@]}" \
    > "$R/recv.json" 2>"$R/recv.err" &
  RPID=$!; PIDS+=("$RPID")
  wait_listen u "$P"
  t0=$(date +%s.%N)
  timeout "$TMO" /usr/bin/time -v -o "$R/send.time" \
    "$FANOUT" send "$SRC" --to "127.0.0.1:$P" --json "${FANOUT_EXTRA[@]}" \
    > "$R/send.json" 2>"$R/send.err" &
  SNDPID=$!; PIDS+=("$SNDPID")
  send_rc=0; reap "$SNDPID" || send_rc=$?
  recv_rc=0; reap "$RPID" || recv_rc=$?
  t1=$(date +%s.%N)
  WALL=$(python3 -c "print(round($t1 - $t0, 3))")
  [[ $send_rc -eq 0 ]] || { log "fanout send exited $send_rc:"; tail -5 "$R/send.err" >&2; }
  [[ $recv_rc -eq 0 ]] || { log "fanout recv exited $recv_rc:"; tail -5 "$R/recv.err" >&2; }
  CMP_OK=false
  if [[ -f "$OUT" ]] && cmp -s "$SRC" "$OUT"; then CMP_OK=true; fi
  rm -f -- "$OUT" "$OUT.part"

  # ---- collect this run into one JSON line
  python3 - "$R" "$run" "$LOAD_BEFORE" "$WALL" "$send_rc" "$recv_rc" "$CMP_OK" >> "$RESULTS" <<'PY'
import json, sys, os
R, run, load, wall, src, rrc, cmp_ok = sys.argv[1:]
def jl(name):
    try:
        with open(os.path.join(R, name)) as f:
            return json.load(f)
    except Exception:
        return None
def tv(name):
    out = {}
    try:
        for line in open(os.path.join(R, name)):
            k, _, v = line.strip().rpartition(": ")
            out[k] = v
    except Exception:
        return None
    def num(k):
        try: return float(out[k])
        except Exception: return None
    return {
        "user_s": num("User time (seconds)"),
        "sys_s": num("System time (seconds)"),
        "max_rss_kib": num("Maximum resident set size (kbytes)"),
        "voluntary_cs": num("Voluntary context switches"),
        "involuntary_cs": num("Involuntary context switches"),
        "elapsed": out.get("Elapsed (wall clock) time (h:mm:ss or m:ss)"),
    }
us, uc = jl("udp_server.json"), jl("udp_client.json")
ts, tc = jl("tcp_server.json"), jl("tcp_client.json")
udp = {}
# iperf3 >= 3.9 puts the receiver's view of a UDP test in end.sum_received
# (on both sides); the server-side end.sum has bytes=0 there. Prefer the
# server's own file, fall back to the client's copy.
for src_name, doc in (("server", us), ("client", uc)):
    try:
        s = doc["end"]["sum_received"]
        if not s.get("bytes"):
            continue
        udp = {"recv_bps": s["bits_per_second"], "lost_percent": s.get("lost_percent"),
               "lost_packets": s.get("lost_packets"), "packets": s.get("packets"),
               "recv_bytes": s.get("bytes"), "seconds": s.get("seconds"), "source": src_name}
        break
    except Exception as e:
        udp = {"error": "%s json: %r" % (src_name, e)}
try:
    udp["sender_bps"] = uc["end"]["sum_sent"]["bits_per_second"]
    udp["sender_packets"] = uc["end"]["sum_sent"].get("packets")
    udp["cpu_client"] = uc["end"].get("cpu_utilization_percent")
    udp["cpu_server"] = us["end"].get("cpu_utilization_percent")
except Exception:
    pass
tcp = {}
try:
    tcp = {"recv_bps": tc["end"]["sum_received"]["bits_per_second"],
           "sender_bps": tc["end"]["sum_sent"]["bits_per_second"],
           "retransmits": tc["end"]["sum_sent"].get("retransmits"),
           "mss": tc["start"].get("tcp_mss_default"),
           "cpu_client": tc["end"].get("cpu_utilization_percent")}
except Exception as e:
    tcp = {"error": "client json: %r" % (e,)}
snd, rcv = jl("send.json"), jl("recv.json")
fan = {"send_rc": int(src), "recv_rc": int(rrc), "cmp_identical": cmp_ok == "true",
       "wall_s": float(wall), "send": snd, "recv": rcv,
       "send_time": tv("send.time"), "recv_time": tv("recv.time")}
ok = bool(snd and rcv and rcv.get("verified") and snd.get("blake3") == rcv.get("blake3")
          and cmp_ok == "true" and int(src) == 0 and int(rrc) == 0)
fan["ok"] = ok
print(json.dumps({"run": int(run), "loadavg_before": load, "udp": udp, "tcp": tcp,
                  "fanout": fan}))
PY
  log "run $run done: $(tail -1 "$RESULTS" | jq -c '{udp: .udp.recv_bps, udp_loss: .udp.lost_percent, tcp: .tcp.recv_bps, fanout: .fanout.recv.goodput_bps, ok: .fanout.ok}')"
done

# ---------------------------------------------------------------- report
python3 - "$RESULTS" "$JSON_OUT" "$GIT_REV" "$GIT_DIRTY" "$NPROC" "$KERNEL" "$CPU_MODEL" \
  "$IPERF_VERSION" "$SIZE_MIB" "$IPERF_SECS" "$BASE_DIR" "$FANOUT_VERSION" "${FANOUT_EXTRA[*]:-}" \
  "$TOP_SNAPSHOT" "$GIT_STATUS" <<'PY'
import json, sys, statistics
(res_path, json_out, rev, dirty, nproc, kernel, cpu_model, iperf_v, size_mib, isecs, base,
 fver, extra, top, git_status) = sys.argv[1:]
runs = [json.loads(l) for l in open(res_path) if l.strip()]
def g(d, *ks):
    for k in ks:
        if not isinstance(d, dict) or d.get(k) is None: return None
        d = d[k]
    return d
rows = []
for r in runs:
    f = r["fanout"]
    udp = g(r, "udp", "recv_bps"); tcp = g(r, "tcp", "recv_bps")
    fan = g(f, "recv", "goodput_bps") if f["ok"] else None
    st, rt = f.get("send_time") or {}, f.get("recv_time") or {}
    def cpu(t):
        return (t["user_s"] + t["sys_s"]) if t.get("user_s") is not None and t.get("sys_s") is not None else None
    def mib(x): return x / 2**20 if x is not None else None
    rows.append({
        "run": r["run"], "load": r["loadavg_before"],
        "udp": udp / 1e9 if udp else None, "loss": g(r, "udp", "lost_percent"),
        "tcp": tcp / 1e9 if tcp else None,
        "fan": fan / 1e9 if fan else None,
        "r_udp": fan / udp if fan and udp else None,
        "r_tcp": fan / tcp if fan and tcp else None,
        "s_rss": mib(g(f, "send", "peak_rss_bytes")), "r_rss": mib(g(f, "recv", "peak_rss_bytes")),
        "s_rss_tv": st.get("max_rss_kib") / 1024 if st.get("max_rss_kib") else None,
        "r_rss_tv": rt.get("max_rss_kib") / 1024 if rt.get("max_rss_kib") else None,
        "s_cpu": cpu(st), "r_cpu": cpu(rt),
        "s_user": st.get("user_s"), "s_sys": st.get("sys_s"),
        "r_user": rt.get("user_s"), "r_sys": rt.get("sys_s"),
        "wall": f["wall_s"], "secs": g(f, "recv", "seconds"), "ok": f["ok"],
    })
cols = [("run", "run", "{}"), ("load", "loadavg(1/5/15) before", "{}"),
        ("udp", "iperf3 UDP Gbit/s", "{:.2f}"), ("loss", "UDP loss %", "{:.2f}"),
        ("tcp", "iperf3 TCP Gbit/s", "{:.2f}"), ("fan", "fanout Gbit/s", "{:.2f}"),
        ("r_udp", "fanout/UDP", "{:.2f}"), ("r_tcp", "fanout/TCP", "{:.3f}"),
        ("s_rss", "send RSS MiB", "{:.1f}"), ("r_rss", "recv RSS MiB", "{:.1f}"),
        ("s_cpu", "send CPU s", "{:.2f}"), ("r_cpu", "recv CPU s", "{:.2f}"),
        ("wall", "fanout wall s", "{:.2f}"), ("ok", "verified", "{}")]
def fmt(v, f):
    if v is None: return "-"
    return f.format(v)
med = {}
for k, _, _ in cols:
    vals = [r[k] for r in rows if isinstance(r[k], (int, float)) and not isinstance(r[k], bool)]
    med[k] = statistics.median(vals) if vals and k not in ("run",) else None
print()
print(f"fanout loopback benchmark — commit {rev} (dirty={dirty}), {nproc} CPUs ({cpu_model}), kernel {kernel}")
print(f"{iperf_v}; file {size_mib} MiB in {base}; iperf3 -t {isecs}; fanout extra flags: {extra or '(none)'}")
print()
print("| " + " | ".join(h for _, h, _ in cols) + " |")
print("|" + "|".join("---" for _ in cols) + "|")
for r in rows:
    print("| " + " | ".join(fmt(r[k], f) for k, _, f in cols) + " |")
print("| **median** | " + " | ".join(fmt(med[k], f) for k, _, f in cols[1:]) + " |")
print()
print("RSS cross-check (time -v MaxRSS MiB, send/recv): " +
      "; ".join(f"run {r['run']}: {fmt(r['s_rss_tv'],'{:.1f}')}/{fmt(r['r_rss_tv'],'{:.1f}')}" for r in rows))
print("CPU split (user+sys s): " +
      "; ".join(f"run {r['run']}: send {fmt(r['s_user'],'{:.2f}')}+{fmt(r['s_sys'],'{:.2f}')}, "
                f"recv {fmt(r['r_user'],'{:.2f}')}+{fmt(r['r_sys'],'{:.2f}')}" for r in rows))
for r in runs:
    f = r["fanout"]
    print(f"run {r['run']} transport: send {json.dumps(g(f,'send','transport'))}")
    print(f"run {r['run']} transport: recv {json.dumps(g(f,'recv','transport'))} drops {json.dumps(g(f,'recv','drops'))}")
    print(f"run {r['run']} tcp mss {g(r,'tcp','mss')} retransmits {g(r,'tcp','retransmits')}; "
          f"udp sender-side {fmt((g(r,'udp','sender_bps') or 0)/1e9,'{:.2f}')} Gbit/s")
if json_out:
    doc = {"commit": rev, "dirty": dirty == "true", "git_status": git_status.splitlines(), "nproc": int(nproc), "kernel": kernel,
           "cpu_model": cpu_model, "iperf3_version": iperf_v, "fanout_version": fver,
           "file_mib": int(size_mib), "iperf_seconds": int(isecs), "file_dir": base,
           "fanout_extra_flags": extra, "top_snapshot": top, "runs": runs,
           "summary_rows": rows, "median": med}
    with open(json_out, "w") as fo:
        json.dump(doc, fo, indent=2)
    print(f"\nraw results written to {json_out}")
if not all(r["ok"] for r in rows):
    print("WARNING: at least one fanout run failed verification or exited non-zero", file=sys.stderr)
    sys.exit(1)
PY
