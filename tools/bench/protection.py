#!/usr/bin/env python3
"""The cost of packet protection, measured side by side in one run.

    tools/bench/protection.py [--runs N] [--skip-lab] [--skip-loopback]
                              [--skip-micro] [--json FILE] [--bin PATH]

Three measurements, each protected against unprotected with everything
else equal, the two alternated run by run (A B A B ...) so that machine
noise falls on both:

1. lab scenario (b) of benchmarks/suite.toml (200 MiB to 4 receivers, each
   behind its own 100 Mbit/s link, `fanout lab bench`, needs root): tools
   `fanout` and `fanout-psk` (the same with `--psk-file`: the Noise
   handshake, AES-128-GCM on every datagram, signed lists of the multicast
   datagrams). Targets: protected wall time (median) <= 18.0 s, protected
   sender CPU (median) <= 1.3x the unprotected median.
2. 1 GiB over loopback (tools/bench/loopback.sh --fanout-only, `send --to`
   to `recv --listen`), with and without `--psk-file`. Target: protected
   goodput (median) >= 0.8x the unprotected median.
3. per-datagram costs (`cargo bench -p fanout-transport --bench
   protection`): sealing, opening, hashing, signing and verifying a list,
   a whole handshake. Reported, no target.

Prints a table per measurement and the load average before each run;
exits 1 if a target is missed, 2 if a run failed.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sh(cmd, **kw):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, **kw)


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def lab(binary, runs, tmp):
    rows = {"fanout": [], "fanout-psk": []}
    for rep in range(runs):
        for tool in rows:
            out = os.path.join(tmp, f"lab-{tool}-{rep}.json")
            before = load()
            sh([binary, "lab", "bench", os.path.join(ROOT, "benchmarks/suite.toml"), "--only", "b",
                "--tools", tool, "--runs", "1", "--out", out], cwd=ROOT, timeout=1200)
            with open(out) as f:
                r = [x for x in json.load(f)["results"] if x["tool"] == tool][0]
            rows[tool].append({"load": before, "ok": bool(r["ok"] and r["valid"]),
                               "wall_s": r["wall_s"], "sender_cpu_s": r["sender_cpu_s"],
                               "receiver_cpu_s": r["receiver_cpu_s"], "error": r["error"]})
    return rows


def loopback(binary, runs, tmp, psk):
    rows = {"unprotected": [], "protected": []}
    for rep in range(runs):
        for name in rows:
            out = os.path.join(tmp, f"loop-{name}-{rep}.json")
            before = load()
            extra = ["--", "--psk-file", psk] if name == "protected" else []
            sh(["bash", os.path.join(ROOT, "tools/bench/loopback.sh"), "--fanout-only", "-r", "1",
                "--bin", binary, "--json", out] + extra, cwd=ROOT, timeout=600,
               stdout=subprocess.DEVNULL)
            with open(out) as f:
                row = json.load(f)["summary_rows"][0]
            rows[name].append({"load": before, "ok": row["ok"], "gbps": row["fan"],
                               "send_cpu_s": row["s_cpu"], "recv_cpu_s": row["r_cpu"]})
    return rows


def micro():
    out = subprocess.run(["cargo", "bench", "-p", "fanout-transport", "--bench", "protection",
                          "--", "--noplot"], cwd=ROOT, check=True, capture_output=True,
                         text=True, timeout=1200).stdout
    found = {}
    for m in re.finditer(r"^(\S+/\S+)\s+time:\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", out, re.M):
        found[m.group(1)] = f"{m.group(2)} {m.group(3)}"
    return found


def median(rows, key):
    vals = [r[key] for r in rows if r["ok"] and r[key] is not None]
    return statistics.median(vals) if vals else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip-lab", action="store_true")
    ap.add_argument("--skip-loopback", action="store_true")
    ap.add_argument("--skip-micro", action="store_true")
    ap.add_argument("--json", help="write every run here")
    ap.add_argument("--bin", help="fanout binary (default: build target/release/fanout)")
    a = ap.parse_args()
    binary = a.bin
    if not binary:
        sh(["cargo", "build", "--release", "-p", "fanout"], cwd=ROOT)
        binary = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                              "release", "fanout")
    print(f"machine: {os.cpu_count()} cores, load {load()}")
    doc, failed, missed = {}, False, []
    with tempfile.TemporaryDirectory(prefix="fanout-protection-") as tmp:
        psk = os.path.join(tmp, "bench.psk")
        sh([binary, "keygen", "--psk", psk], stdout=subprocess.DEVNULL)
        if not a.skip_lab:
            rows = lab(binary, a.runs, tmp)
            doc["lab_b"] = rows
            print("\nlab scenario (b): 200 MiB to 4 receivers behind 100 Mbit/s each")
            print("tool        run  load-before     ok  wall s  sender CPU s  receivers CPU s")
            for tool, rs in rows.items():
                for i, r in enumerate(rs):
                    print(f"{tool:<11} {i:>3}  {r['load']:<14} {str(r['ok']):<4} {r['wall_s'] or 0:>7.2f}"
                          f"  {r['sender_cpu_s'] or 0:>12.2f}  {r['receiver_cpu_s'] or 0:>15.2f}")
            failed |= not all(r["ok"] for rs in rows.values() for r in rs)
            wall = median(rows["fanout-psk"], "wall_s")
            cpu_p, cpu_u = median(rows["fanout-psk"], "sender_cpu_s"), median(rows["fanout"], "sender_cpu_s")
            ratio = cpu_p / cpu_u if cpu_p and cpu_u else None
            print(f"protected wall (median) {wall:.2f} s, target <= 18.0 s"
                  if wall else "protected wall: no valid run")
            print(f"sender CPU protected/unprotected (medians) {cpu_p:.2f}/{cpu_u:.2f} s = {ratio:.2f}x,"
                  f" target <= 1.3x" if ratio else "sender CPU: no valid run")
            if not wall or wall > 18.0:
                missed.append("lab (b) wall")
            if not ratio or ratio > 1.3:
                missed.append("lab (b) sender CPU")
        if not a.skip_loopback:
            rows = loopback(binary, a.runs, tmp, psk)
            doc["loopback"] = rows
            print("\n1 GiB over loopback (send --to, recv --listen)")
            print("build        run  load-before     ok  Gbit/s  send CPU s  recv CPU s")
            for name, rs in rows.items():
                for i, r in enumerate(rs):
                    print(f"{name:<12} {i:>3}  {r['load']:<14} {str(r['ok']):<4} {r['gbps'] or 0:>6.2f}"
                          f"  {r['send_cpu_s'] or 0:>10.2f}  {r['recv_cpu_s'] or 0:>10.2f}")
            failed |= not all(r["ok"] for rs in rows.values() for r in rs)
            p, u = median(rows["protected"], "gbps"), median(rows["unprotected"], "gbps")
            ratio = p / u if p and u else None
            print(f"goodput protected/unprotected (medians) {p:.2f}/{u:.2f} Gbit/s = {ratio:.2f}x,"
                  f" target >= 0.8x" if ratio else "loopback: no valid run")
            if not ratio or ratio < 0.8:
                missed.append("loopback goodput")
        if not a.skip_micro:
            costs = micro()
            doc["per_datagram"] = costs
            print("\nper-datagram costs (criterion, median time)")
            for k, v in costs.items():
                print(f"  {k:<34} {v}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)
    if failed:
        print("\nFAILED: a run did not complete or verify")
        return 2
    if missed:
        print("\nTARGET MISSED: " + ", ".join(missed))
        return 1
    print("\nall targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
