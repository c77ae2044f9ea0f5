#!/usr/bin/env python3
"""Regenerates the simulator tables of docs/experiments/smo.md (TCP-SMO).

Each experiment runs `fanout sim --json` on a scenario of scenarios/smo/, with
keys appended to its (last) [[flow]] table for the variants, and prints a
markdown table.

    python3 tools/experiments/smo.py [--only vs-n,shared,ack,repair] [--n 1,10,100]
    python3 tools/experiments/smo.py --only repair --lossy-n 500 --policies fair-0,fair-coded

N = 1000 runs take 3-6 minutes of one core and ~2 GB each.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sim(binary, scenario, extra="", edit=None):
    """Runs scenarios/smo/SCENARIO, EDIT applied to its text and EXTRA appended; returns (figures, wall s)."""
    with open(os.path.join(ROOT, "scenarios", "smo", scenario)) as f:
        text = f.read()
    text = (edit(text) if edit else text) + extra
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as t:
        t.write(text)
    t0 = time.time()
    try:
        out = subprocess.run([binary, "sim", t.name, "--json"], check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(t.name)
    return json.loads(out), time.time() - t0


def row(label, fig, wall):
    s = fig["sessions"][0]
    mb = lambda b: f"{b / 1e6:.2f}"
    repairs = f"{s['multicast_repairs']} / {s['unicast_repairs']}"
    if s.get("coded_repairs"):
        repairs += f" + {s['coded_repairs']} coded ({s['coded_blocks']} blocks)"
    return (f"| {label} | {mb(s['min_goodput_bps'])} / {mb(s['median_goodput_bps'])} / {mb(s['max_goodput_bps'])} "
            f"| {s['members_left']} | {repairs} | {s['recovery_episodes']} "
            f"| {s['rto_events']} | {s['feedback_pps']:,.0f} | {s['feedback_bps'] / 1e6:.1f} "
            f"| {s['sender_link_bytes_per_delivered_byte']:.3f} | {wall:.0f} s |")


HEAD = ("| {} | goodput min / median / max (Mbit/s) | evicted | repairs multicast / unicast | recoveries | RTOs "
        "| feedback at sender (pkt/s) | feedback (Mbit/s) | sender-link B per delivered B | wall |\n"
        "|---|---|---|---|---|---|---|---|---|---|")


def table(binary, title, label, runs, edit=None):
    print(f"\n### {title}\n")
    print(HEAD.format(label))
    for name, scenario, extra in runs:
        fig, wall = sim(binary, scenario, extra, edit)
        print(row(name, fig, wall), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="vs-n,shared,ack,repair")
    ap.add_argument("--n", default="1,10,100,200,500,1000")
    ap.add_argument("--lossy-n", type=int, default=1000,
                    help="repair: members in all (40%% of them lossy), e.g. 200 or 500 for quicker runs")
    ap.add_argument("--policies", default="all",
                    help="repair: 'all', or comma-separated names: min-0,min-1,min-5,min-20,min-cost,fair-0,fair-cost,fair-coded")
    ap.add_argument("--bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "fanout"))
    a = ap.parse_args()
    if not os.path.exists(a.bin):
        subprocess.run(["cargo", "build", "--release", "-p", "fanout"], cwd=ROOT, check=True)
    only = set(a.only.split(","))
    ns = a.n.split(",")
    if "vs-n" in only:
        table(a.bin, "Throughput vs N, sender on 1 Gbit/s (scenarios/smo/star-N.toml)", "N",
              [(n, f"star-{n}.toml", "") for n in ns])
    if "shared" in only:
        table(a.bin, "Throughput vs N, sender on 100 Mbit/s: all feedback shares it (scenarios/smo/shared-N.toml)", "N",
              [(n, f"shared-{n}.toml", "") for n in ns])
    if "ack" in only:
        table(a.bin, "ACK every 2 vs every 4, N = 100, fixed (scenarios/smo/ack-every-K.toml)", "ACK every",
              [(k, f"ack-every-{k}.toml", "") for k in ("2", "4")])
    if "repair" in only:
        runs = [(f"min-{t}", f"window min, threshold {t}%", f"repair_threshold = {t / 100}\n") for t in (0, 1, 5, 20)]
        runs.append(("min-cost", "window min, cost rule (uplink ratio 1)", "repair_cost_ratio = 1.0\n"))
        fair = 'window_policy = "fair"\nfair = { scaling = "sqrt" }\n'
        runs.append(("fair-0", "essentially fair (median, b = 1, f = √N), threshold 0%", "repair_threshold = 0.0\n" + fair))
        runs.append(("fair-cost", "essentially fair (median, b = 1, f = √N), cost rule", "repair_cost_ratio = 1.0\n" + fair))
        runs.append(("fair-coded", "essentially fair (median, b = 1, f = √N), coded repair (k = 32, cost-rule fallback)",
                     'repair = "coded"\nrepair_block = 32\n' + fair))
        if a.policies != "all":
            keep = a.policies.split(",")
            runs = [r for r in runs if r[0] in keep]
        n = a.lossy_n
        edit = None
        if n != 1000:
            edit = lambda t: t.replace("leaves = 1000", f"leaves = {n}").replace("lossy_leaves = 400", f"lossy_leaves = {n * 2 // 5}")
        table(a.bin, f"N = {n}, {n * 2 // 5} members with independent 2% loss (scenarios/smo/lossy400.toml)", "repair policy",
              [(label, "lossy400.toml", extra) for _, label, extra in runs], edit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
