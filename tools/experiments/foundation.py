#!/usr/bin/env python3
"""Regenerates the simulator tables of docs/experiments/foundation.md.

Runs every foundation scenario with `fanout sim --json` over several seeds and
prints markdown: utilisation, the Padhye comparison, Jain indices, RED.

    python3 tools/experiments/foundation.py [--seeds 3] [--bin PATH]
"""
import argparse
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MSS = 1452 - 16 - 15  # datagram − header − DATA frame overhead (TransportConfig::max_payload)


def padhye_bps(mss, rtt, p, b=1.0, t0=0.2):
    """Padhye et al. 1998, eq. 32 without the window cap (bit/s)."""
    d = rtt * math.sqrt(2 * b * p / 3) + t0 * min(1, 3 * math.sqrt(3 * b * p / 8)) * p * (1 + 32 * p * p)
    return mss * 8 / d


def sim(binary, scenario, seed):
    out = subprocess.run([binary, "sim", os.path.join(ROOT, "scenarios", scenario), "--json", "--seed", str(seed)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def link(fig, label):
    return next(l for l in fig["links"] if l["label"] == label)


def mean(xs):
    return sum(xs) / len(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "fanout"))
    a = ap.parse_args()
    if not os.path.exists(a.bin):
        subprocess.run(["cargo", "build", "--release", "-p", "fanout"], cwd=ROOT, check=True)
    seeds = list(range(1, a.seeds + 1))

    print("### One flow, 10 Mbit/s, 50 ms RTT, DropTail = 1 BDP (scenarios/utilisation-10m.toml)\n")
    print("| seed | link utilisation | goodput (Mbit/s) | recoveries | RTOs |\n|---|---|---|---|---|")
    for s in seeds:
        f = sim(a.bin, "utilisation-10m.toml", s)
        fl = f["flows"][0]
        print(f"| {s} | {link(f, 'r1->r2')['utilisation']*100:.2f}% | {fl['goodput_bps']/1e6:.3f} | {fl['recovery_episodes']} | {fl['rto_events']} |")

    print("\n### Random loss vs the Padhye equation (100 Mbit/s, 50 ms RTT, NewReno)\n")
    print(f"Model: MSS {MSS} B, RTT 50 ms, b = 1 (byte counting), T0 = 200 ms (min RTO).\n")
    print("| loss | Padhye (Mbit/s) | fanout mean (Mbit/s) | per seed | ratio |\n|---|---|---|---|---|")
    for name, p in [("0.1", 0.001), ("1", 0.01), ("3", 0.03)]:
        model = padhye_bps(MSS, 0.050, p)
        got = [sim(a.bin, f"padhye-loss-{name}pct.toml", s)["flows"][0]["goodput_bps"] for s in seeds]
        per = ", ".join(f"{g/1e6:.2f}" for g in got)
        print(f"| {name}% | {model/1e6:.3f} | {mean(got)/1e6:.3f} | {per} | {mean(got)/model:.3f} |")

    print("\n### Two flows, shared bottleneck (60 s after a 5 s warm-up)\n")
    print("| scenario | flow 1 (Mbit/s) | flow 2 (Mbit/s) | Jain | bottleneck utilisation |\n|---|---|---|---|---|")
    for sc in ["fairness-droptail-newreno.toml", "fairness-droptail-cubic.toml", "red-4m5.toml"]:
        for s in seeds:
            f = sim(a.bin, sc, s)
            g = [x["goodput_bps"] / 1e6 for x in f["flows"]]
            print(f"| {sc} seed {s} | {g[0]:.3f} | {g[1]:.3f} | {f['jain_index']:.4f} | {link(f, 'r1->r2')['utilisation']*100:.2f}% |")


if __name__ == "__main__":
    sys.exit(main())
