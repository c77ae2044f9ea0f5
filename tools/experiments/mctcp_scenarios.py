#!/usr/bin/env python3
"""Writes the MCTCP scenario files (scenarios/mctcp/*.toml).

seed-*.toml: the Emulab topology of MCTCP §VI (Mullins et al.): one sender,
18 receivers, merge daemons M0-M8 on three levels, every link 100 Mbit/s.
The paper's Fig. 6 is not in the text we have; the tree is
reconstructed as M0 = the sender (level 0), M1-M2 (level 1), M3-M8 (level 2),
three receivers under each level-2 node (1 + 2 + 6 = 9 mergers, 6 x 3 = 18).
Variants: merging at the sender only ("l0"), at levels 0-1 ("l01"), at
levels 0-2 ("l012"); ACKs like the paper's (every 2 segments, no adaptive
thinning, no feedback budget, as its Linux TCP) and, for sender-only merging,
fanout's default feedback thinning ("l0-thinned").

n1000-*.toml: 1000 receivers under routers of fan-out at most 8 (sender ->
8 -> 16 -> 128 routers -> 1000 receivers, 7-8 each), every link 100 Mbit/s;
"flat" (no mergers, fanout's default thinning) and "merged" (a merger on
every router); 10 s runs (measure after a 3 s warm-up: `--warmup 3`).

Every merging node (the sender and each merger) has the same processing
capacity: 40 000 packets/s (25 us per received packet), a 256-packet input
queue. Usage: python3 tools/experiments/mctcp_scenarios.py [--n N] [--out DIR]
(--n: only nN-flat/merged.toml with N receivers under ceil(N / 128) level-1
routers, e.g. a quicker N = 100; the default writes every file, N = 1000).
"""

import argparse
import os

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "scenarios", "mctcp")
CPU = 'cpu = { pps = 40000, queue = 256 }'
LINK = 'rate = "100Mbit"\ndelay = "1ms"\nduplex = true\nqueue = { kind = "drop_tail", packets = 100 }'


def node(name, ip, cpu=False):
    s = f'[[node]]\nname = "{name}"\nip = "{ip}"\n'
    if cpu:
        s += CPU + "\n"
    return s + "\n"


def link(a, b):
    return f'[[link]]\nfrom = "{a}"\nto = "{b}"\n{LINK}\n\n'


def write(name, header, nodes, links, receivers, flow, duration="20s"):
    text = header + f"seed = 1\nduration = \"{duration}\"\nsample_interval = \"100ms\"\n\n"
    text += "".join(nodes) + "".join(links)
    text += '[[group]]\naddr = "239.1.1.1"\nmembers = [' + ", ".join(
        f'"{r}"' for r in receivers) + "]\n\n"
    text += flow
    with open(os.path.join(OUT, name), "w") as f:
        f.write(text)


SEED_ACKS = 'ack_every = 2\nadaptive_acks = false\nfeedback_budget = 0\n'


def seed_topology():
    nodes = [node("s", "10.0.0.1", cpu=True)]
    links = []
    for m in range(1, 9):
        nodes.append(node(f"m{m}", f"10.0.1.{m}", cpu=True))
    for m in (1, 2):
        links.append(link("s", f"m{m}"))
    for i, m in enumerate(range(3, 9)):
        links.append(link("m1" if m <= 5 else "m2", f"m{m}"))
        for k in range(3):
            r = 3 * i + k
            nodes.append(node(f"r{r}", f"10.0.2.{r + 1}"))
            links.append(link(f"m{m}", f"r{r}"))
    receivers = [f"r{r}" for r in range(18)]
    head = ("# MCTCP, the topology of MCTCP §VI (see tools/experiments/mctcp_scenarios.py):\n"
            "# 18 receivers, mergers M1-M8 on the routers, 100 Mbit/s links, merging at\n")
    base = 'window = "1MiB"\n'
    for tag, levels, mergers, acks in [
        ("l0", "the sender only (level 0)", [], SEED_ACKS),
        ("l0-thinned", "the sender only, fanout's default ACK thinning", [], ""),
        ("l01", "levels 0-1", ["m1", "m2"], SEED_ACKS),
        ("l012", "levels 0-2", [f"m{m}" for m in range(1, 9)], SEED_ACKS),
    ]:
        flow = '[[flow]]\nkind = "session"\nfrom = "s:5000"\ngroup = "239.1.1.1:7000"\n' + base + acks
        if mergers:
            flow += "mergers = [" + ", ".join(f'"{m}"' for m in mergers) + "]\n"
        write(f"seed-{tag}.toml", head + f"# {levels}.\n", nodes, links, receivers, flow)


def n1000(n=1000):
    nodes = [node("s", "10.0.0.1", cpu=True)]
    links = []
    routers = []
    for a in range(-(-n // 128)):
        an = f"a{a}"
        nodes.append(node(an, f"10.1.0.{a + 1}", cpu=True))
        links.append(link("s", an))
        routers.append(an)
        for b in range(2):
            bn = f"b{2 * a + b}"
            nodes.append(node(bn, f"10.2.0.{2 * a + b + 1}", cpu=True))
            links.append(link(an, bn))
            routers.append(bn)
            for c in range(8):
                ci = 16 * a + 8 * b + c
                cn = f"c{ci}"
                nodes.append(node(cn, f"10.3.0.{ci + 1}", cpu=True))
                links.append(link(bn, cn))
                routers.append(cn)
    leaves = [r for r in routers if r.startswith("c")]
    receivers = []
    for i in range(n):
        rn = f"r{i}"
        leaf = leaves[i % len(leaves)]
        nodes.append(node(rn, f"10.{4 + i // 250}.0.{i % 250 + 1}"))
        links.append(link(leaf, rn))
        receivers.append(rn)
    a = len([r for r in routers if r.startswith("a")])
    head = (f"# MCTCP at N = {n} (see tools/experiments/mctcp_scenarios.py):\n"
            f"# routers of fan-out <= 8 ({a} -> {2 * a} -> {16 * a}), every link 100 Mbit/s, ")
    base = '[[flow]]\nkind = "session"\nfrom = "s:5000"\ngroup = "239.1.1.1:7000"\nwindow = "1MiB"\n'
    write(f"n{n}-flat.toml", head + "no mergers\n# (fanout's default ACK thinning).\n",
          nodes, links, receivers, base, duration="10s")
    write(f"n{n}-merged.toml", head + "a merger on every router.\n", nodes, links, receivers,
          base + "mergers = [" + ", ".join(f'"{r}"' for r in routers) + "]\n", duration="10s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, help="write only nN-flat/merged.toml with N receivers")
    ap.add_argument("--out", default=OUT, help="directory (default: scenarios/mctcp)")
    args = ap.parse_args()
    OUT = args.out
    os.makedirs(OUT, exist_ok=True)
    if args.n is None:
        seed_topology()
        n1000()
    else:
        n1000(args.n)
