#!/usr/bin/env python3
"""TCP-CM §5 in the simulator: two 1 Mbit/s media flows over a real-time
session (P-FIFO or P-LIFO, no stale retransmission) and 2, 3 or 4 NewReno
flows through a 4.5 Mbit/s RED bottleneck (buffer 60 KB, min 15 KB, max
45 KB, max_p 0.4), 30 simulated minutes, on a LAN (6 ms round trip) and
with a 400 ms round trip. Prints one row per run: the media flows' and the
TCP flows' mean rates, media loss, delay, jitter, reordering index.

    tools/realtime/tcp_cm.py [--queue-bytes 300KB] [--rtt 6,400] [--bin PATH]

Needs `cargo build --release -p fanout`. docs/experiments/realtime.md has
the table and the paper's beside it.
"""

import argparse
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def scenario(tcp, order, rtt_ms, duration, queue_bytes):
    """The scenario text: media on s1, s2; TCP on s3 ... (two 1 ms access
    links each way, the rest of the round trip on the bottleneck)."""
    one_way = rtt_ms / 2 - 2
    n = 2 + tcp
    out = [f'''# TCP-CM §5: two 1 Mbit/s media flows over TCP-CM ({order.upper()}) and {tcp} TCP flows
# through a 4.5 Mbit/s RED bottleneck (buffer 60 KB, min 15 KB, max 45 KB,
# max_p 0.4), round trip {rtt_ms:g} ms. Made by tools/realtime/tcp_cm.py.
seed = 1
duration = "{duration}"
sample_interval = "1s"
''', '[[node]]\nname = "r1"\nip = "10.0.0.1"\n\n[[node]]\nname = "r2"\nip = "10.0.0.2"\n']
    for i in range(1, n + 1):
        out.append(f'[[node]]\nname = "s{i}"\nip = "10.0.1.{i}"\n\n[[node]]\nname = "d{i}"\nip = "10.0.2.{i}"\n')
        out.append(f'[[link]]\nfrom = "s{i}"\nto = "r1"\nrate = "100Mbit"\ndelay = "1ms"\nduplex = true\n')
        out.append(f'[[link]]\nfrom = "r2"\nto = "d{i}"\nrate = "100Mbit"\ndelay = "1ms"\nduplex = true\n')
    out.append(f'''[[link]]
from = "r1"
to = "r2"
rate = "4.5Mbit"
delay = "{one_way:g}ms"
queue = {{ kind = "red", min_th = 15000, max_th = 45000, max_p = 0.4, w_q = 0.002, gentle = true, byte_mode = true, mean_packet = "1500B", bytes = "60KB" }}

[[link]]
from = "r2"
to = "r1"
rate = "4.5Mbit"
delay = "{one_way:g}ms"
queue = {{ kind = "drop_tail", packets = 1000 }}
''')
    # 1421-byte messages every 11.368 ms: 1 Mbit/s.
    for i in (1, 2):
        out.append(f'''[[flow]]
kind = "live"
from = "s{i}:5000"
to = "d{i}:6000"
interval = "11368us"
message = "1421B"
start = "1s"
queue = "{order}"
queue_bytes = "{queue_bytes}"
cc = "newreno"
''')
    for i in range(3, n + 1):
        out.append(f'''[[flow]]
kind = "transfer"
from = "s{i}:5000"
to = "d{i}:6000"
cc = "newreno"
''')
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queue-bytes", default="300KB")
    ap.add_argument("--rtt", default="6,400")
    ap.add_argument("--duration", default="1800s")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/fanout"))
    a = ap.parse_args()
    print("rtt  tcp order  media Mbit/s  tcp Mbit/s  ratio  media loss  delay mean / p50 / p99 s  jitter s  reordering")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cm.toml")
        for rtt in [float(x) for x in a.rtt.split(",")]:
            for tcp in (2, 3, 4):
                for order in ("fifo", "lifo"):
                    with open(path, "w") as f:
                        f.write(scenario(tcp, order, rtt, a.duration, a.queue_bytes))
                    out = subprocess.run([a.bin, "sim", path, "--json", "--warmup", "60"],
                                         check=True, capture_output=True, text=True).stdout
                    d = json.loads(out)
                    tcp_bps = sum(f["goodput_bps"] for f in d["flows"]) / len(d["flows"])
                    live = d["live"]
                    media = sum(x["delivered_bps"] for x in live) / len(live)
                    mean = lambda k: sum(x[k] for x in live) / len(live)
                    print(f"{rtt:>4g} {tcp:>3} {order:<5} {media / 1e6:>12.3f} {tcp_bps / 1e6:>11.3f} {media / tcp_bps:>6.2f}"
                          f" {100 * mean('mean_perceived_loss'):>10.1f}% {mean('delay_mean_ms') / 1000:>8.3f} / {mean('delay_p50_ms') / 1000:.3f} / {max(x['delay_p99_ms'] for x in live) / 1000:.3f}"
                          f" {mean('jitter_ms') / 1000:>9.4f} {mean('reordering_index'):>10.2f}", flush=True)


if __name__ == "__main__":
    main()
