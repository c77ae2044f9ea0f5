#!/usr/bin/env python3
"""Per-flow throughput cross-check of fanout-sim against ns-3 (tools/ns3/two_flow).

For two equal-RTT flows the per-flow split of a single run depends on where the
loss epochs happen to fall, which the second flow's start offset (and, for RED,
the seed) moves around. So a single run is no target. This script runs both
simulators over the same set of start offsets (and seeds for RED), averages
each flow's goodput over that set, and compares the means per flow, plus the
total and the Jain index of the means. It also shows the spread (min-max).

Flow 0 starts at 0 s, flow 1 at the offset.

    tools/ns3/compare.py                 # full run (8 offsets; RED x 3 seeds)
    tools/ns3/compare.py --quick         # 3 offsets, RED seed 1 only
    tools/ns3/compare.py --markdown      # the tables as markdown
    tools/ns3/compare.py --runs          # also every single run

Builds both simulators first: tools/ns3/build.sh (binary in target/ns3, or
$OUT) and `cargo build --release -p fanout` (target dir $CARGO_TARGET_DIR, or
<repo>/target); `--fanout-bin PATH` runs that fanout binary instead, without
building. Runs at most 2 simulations at a time (--jobs).

TCP variant mapping. fanout's NewReno counts acknowledged bytes (RFC 3465):
about 1 MSS per RTT in congestion avoidance whatever the ACK ratio. ns-3's
ns3::TcpNewReno adds MSS^2/cwnd per ACK, so with delayed ACKs (2 segments per
ACK) it grows about 1/2 MSS per RTT; ns3::TcpLinuxReno counts per segment like
Linux, about 1 MSS per RTT. For the NewReno scenarios both ns-3 variants are
run and shown; TcpLinuxReno is the closer model of fanout's NewReno.

Python 3 standard library only.
"""

import argparse
import concurrent.futures
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

DEFAULT_OFFSETS = [0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0]
QUICK_OFFSETS = [0.1, 0.3, 0.7]
DEFAULT_RED_SEEDS = [1, 2, 3]
QUICK_RED_SEEDS = [1]
TOLERANCE = 0.10

# name -> (our scenario file, ns-3 --scenario, ns-3 --tcp variants, randomised?)
SCENARIOS = {
    "droptail-newreno": ("scenarios/fairness-droptail-newreno.toml", "droptail",
                         ["newreno", "linuxreno"], False),
    "droptail-cubic": ("scenarios/fairness-droptail-cubic.toml", "droptail",
                       ["cubic"], False),
    "red-newreno": ("scenarios/red-4m5.toml", "red", ["newreno", "linuxreno"], True),
}

NS3_TYPE = {"newreno": "TcpNewReno", "linuxreno": "TcpLinuxReno", "cubic": "TcpCubic"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- building

def build_ns3():
    out = subprocess.run([os.path.join(HERE, "build.sh")], cwd=REPO, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    lines = [l for l in out.splitlines() if l.strip()]
    if not lines:
        raise SystemExit("build.sh printed no binary path")
    return lines[-1].strip()


def build_fanout():
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    env = dict(os.environ, CARGO_TARGET_DIR=target)
    subprocess.run(["cargo", "build", "--release", "-p", "fanout"], cwd=REPO, env=env,
                   check=True, stdout=sys.stderr)
    return os.path.join(target, "release", "fanout")


# ---------------------------------------------------------------- one run

def offset_literal(offset_s):
    """TOML duration for `offset_s` seconds, in whole microseconds."""
    us = round(offset_s * 1e6)
    if us % 1000 == 0:
        return f"{us // 1000}ms"
    return f"{us}us"


START_RE = re.compile(r'^(\s*start\s*=\s*)"[^"]*"', re.MULTILINE)


def toml_with_offset(path, offset_s):
    """Scenario text with the second flow's `start` replaced by the offset."""
    with open(path) as f:
        text = f.read()
    starts = list(START_RE.finditer(text))
    if len(starts) != 2:
        raise SystemExit(f"{path}: expected 2 `start =` lines, found {len(starts)}")
    m = starts[1]
    return text[:m.start()] + f'{m.group(1)}"{offset_literal(offset_s)}"' + text[m.end():]


def run_ns3(binary, scen, tcp, offset, seed, args):
    cmd = [binary, f"--scenario={scen}", f"--tcp={tcp}", f"--seed={seed}",
           f"--stagger={offset}", f"--duration={args.duration}", f"--warmup={args.warmup}",
           f"--minRtoMs={args.min_rto_ms}", f"--delAckMs={args.delack_ms}"]
    t0 = time.monotonic()
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    j = json.loads(out.strip().splitlines()[-1])
    if abs(j["stagger_s"] - offset) > 1e-9 or j["seed"] != seed:
        raise RuntimeError(f"ns-3 echoed stagger {j['stagger_s']} seed {j['seed']}")
    return {
        "goodput": [float(x) for x in j["goodput_bps"]],
        "util": j["link_utilisation"],
        "drops": sum(j["bottleneck_drops"].values()),
        "wall": time.monotonic() - t0,
    }


def run_fanout(binary, toml, offset, seed, args):
    text = toml_with_offset(os.path.join(REPO, toml), offset)
    with tempfile.NamedTemporaryFile("w", suffix=".toml", prefix="cmp-", delete=False) as f:
        f.write(text)
        tmp = f.name
    try:
        cmd = [binary, "sim", tmp, "--json", "--seed", str(seed), "--warmup", str(args.warmup)]
        t0 = time.monotonic()
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    finally:
        os.unlink(tmp)
    j = json.loads(out)
    flows = j["flows"]
    if len(flows) != 2:
        raise RuntimeError(f"fanout: expected 2 flows, got {len(flows)}")
    bn = [l for l in j.get("links", []) if l.get("label") == "r1->r2"]
    return {
        "goodput": [float(fl["goodput_bps"]) for fl in flows],
        "util": bn[0]["utilisation"] if bn else None,
        "drops": None,
        "rto": sum(int(fl.get("rto_events", 0)) for fl in flows),
        "wall": time.monotonic() - t0,
    }


# ---------------------------------------------------------------- statistics

def jain(xs):
    s, q = sum(xs), sum(x * x for x in xs)
    return s * s / (len(xs) * q) if q else 1.0


def summarise(runs):
    """runs: list of result dicts -> per-flow/total mean/min/max, Jain of means."""
    out = {}
    for key, pick in (("flow 0", lambda r: r["goodput"][0]),
                      ("flow 1", lambda r: r["goodput"][1]),
                      ("total", lambda r: sum(r["goodput"]))):
        xs = [pick(r) for r in runs]
        out[key] = (statistics.fmean(xs), min(xs), max(xs))
    out["jain_of_means"] = jain([out["flow 0"][0], out["flow 1"][0]])
    out["mean_jain"] = statistics.fmean(jain(r["goodput"]) for r in runs)
    return out


def mbit(x):
    return f"{x / 1e6:.2f}"


def spread(t):
    return f"{mbit(t[0])} ({mbit(t[1])}–{mbit(t[2])})"


# ---------------------------------------------------------------- output

def render(rows, markdown):
    if markdown:
        head = rows[0]
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*rows[0]), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r) for r in rows[1:]]
    return "\n".join(lines)


def summary_rows(results, scen_names, tol):
    rows = [["scenario", "ns-3 TCP", "flow", "ns-3 mean (min–max) Mbit/s",
             "fanout mean (min–max) Mbit/s", "fanout/ns-3", f"within {tol:.0%}?"]]
    for name in scen_names:
        _, _, variants, _ = SCENARIOS[name]
        ours = summarise(results[(name, "fanout")])
        for tcp in variants:
            ref = summarise(results[(name, tcp)])
            for key in ("flow 0", "flow 1", "total"):
                ratio = ours[key][0] / ref[key][0]
                ok = "yes" if abs(ratio - 1.0) <= tol else "**no**"
                rows.append([name, NS3_TYPE[tcp], key, spread(ref[key]), spread(ours[key]),
                             f"{ratio:.3f}", ok])
            rows.append([name, NS3_TYPE[tcp], "Jain of means (mean per-run Jain)",
                         f"{ref['jain_of_means']:.4f} ({ref['mean_jain']:.4f})",
                         f"{ours['jain_of_means']:.4f} ({ours['mean_jain']:.4f})",
                         f"{ours['jain_of_means'] / ref['jain_of_means']:.3f}", ""])
    return rows


def run_rows(results, scen_names, plan):
    rows = [["scenario", "offset s", "seed", "simulator", "flow 0", "flow 1", "total",
             "Jain", "bottleneck wire util.", "fanout RTOs"]]
    for name in scen_names:
        _, _, variants, _ = SCENARIOS[name]
        for sim in variants + ["fanout"]:
            for (off, seed), r in zip(plan[name], results[(name, sim)]):
                label = "fanout" if sim == "fanout" else NS3_TYPE[sim]
                util = "" if r["util"] is None else f"{r['util']:.3f}"
                rows.append([name, f"{off:g}", str(seed), label, mbit(r["goodput"][0]),
                             mbit(r["goodput"][1]), mbit(sum(r["goodput"])),
                             f"{jain(r['goodput']):.3f}", util,
                             "" if r.get("rto") is None else str(r["rto"])])
    return rows


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 offsets, RED seed 1 only")
    ap.add_argument("--markdown", action="store_true", help="print markdown tables")
    ap.add_argument("--runs", action="store_true", help="also print every single run")
    ap.add_argument("--offsets", help="comma-separated start offsets of flow 1, seconds")
    ap.add_argument("--seeds", help="comma-separated seeds for RED (DropTail uses seed 1)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help="comma-separated subset of " + ", ".join(SCENARIOS))
    ap.add_argument("--duration", type=float, default=65.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--min-rto-ms", type=float, default=200.0,
                    help="ns-3 MinRto (fanout's RtoConfig::min is 200 ms)")
    ap.add_argument("--delack-ms", type=float, default=25.0,
                    help="ns-3 DelAckTimeout (fanout's AckPolicy::max_delay is 25 ms; "
                         "ns-3's default 200 ms together with MinRto 200 ms stalls flows "
                         "in repeated spurious RTOs)")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE)
    ap.add_argument("--jobs", type=int, default=2, help="parallel runs (capped at 2)")
    ap.add_argument("--json-out", help="write every run's raw result here")
    ap.add_argument("--fanout-bin", help="run this fanout binary (no cargo build)")
    args = ap.parse_args()

    offsets = ([float(x) for x in args.offsets.split(",")] if args.offsets
               else QUICK_OFFSETS if args.quick else DEFAULT_OFFSETS)
    red_seeds = ([int(x) for x in args.seeds.split(",")] if args.seeds
                 else QUICK_RED_SEEDS if args.quick else DEFAULT_RED_SEEDS)
    scen_names = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    for s in scen_names:
        if s not in SCENARIOS:
            ap.error(f"unknown scenario {s}")
    jobs = max(1, min(args.jobs, 2))

    log("building ns-3 two_flow ...")
    ns3 = build_ns3()
    if args.fanout_bin:
        fanout = os.path.abspath(args.fanout_bin)
    else:
        log("building fanout ...")
        fanout = build_fanout()

    # plan[name] = [(offset, seed), ...]; the same list for every simulator
    plan = {}
    tasks = []  # (key, index, callable args)
    for name in scen_names:
        toml, scen, variants, randomised = SCENARIOS[name]
        plan[name] = [(o, s) for o in offsets for s in (red_seeds if randomised else [1])]
        for i, (off, seed) in enumerate(plan[name]):
            for tcp in variants:
                tasks.append(((name, tcp), i, run_ns3, (ns3, scen, tcp, off, seed, args)))
            tasks.append(((name, "fanout"), i, run_fanout, (fanout, toml, off, seed, args)))

    results = {}
    for key, i, _, _ in tasks:
        results.setdefault(key, [None] * len(plan[key[0]]))
    log(f"{len(tasks)} runs, {jobs} at a time")
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {pool.submit(fn, *fargs): (key, i) for key, i, fn, fargs in tasks}
        done = 0
        for fut in concurrent.futures.as_completed(futs):
            key, i = futs[fut]
            r = fut.result()
            results[key][i] = r
            done += 1
            off, seed = plan[key[0]][i]
            log(f"[{done}/{len(tasks)} {time.monotonic() - t0:6.0f}s] {key[0]} {key[1]} "
                f"offset {off:g} seed {seed}: {mbit(r['goodput'][0])}/{mbit(r['goodput'][1])} "
                f"Mbit/s ({r['wall']:.1f}s)")

    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({f"{k[0]}|{k[1]}": [dict(r, offset=plan[k[0]][i][0], seed=plan[k[0]][i][1])
                                           for i, r in enumerate(v)]
                       for k, v in results.items()}, f, indent=1)

    md = args.markdown
    print(render(summary_rows(results, scen_names, args.tolerance), md))
    print()
    desc = (f"offsets {','.join(f'{o:g}' for o in offsets)} s; RED seeds "
            f"{','.join(map(str, red_seeds))}; {args.duration:g} s simulated, goodput over "
            f"[{args.warmup:g}, {args.duration:g}] s; ns-3 MinRto {args.min_rto_ms:g} ms, "
            f"DelAckTimeout {args.delack_ms:g} ms; "
            f"{len(tasks)} runs in {time.monotonic() - t0:.0f} s")
    print(desc)
    if args.runs:
        print()
        print(render(run_rows(results, scen_names, plan), md))


if __name__ == "__main__":
    main()
