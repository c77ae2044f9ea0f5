//! Per-datagram CPU cost of the sender engine in a transfer to one receiver
//! (a session of one member, offered to the listening receiver).
//!
//! One sender and one receiver in memory, lossless, a fixed 10 ms RTT and no
//! rate limit (a datagram arrives one one-way delay after it left), so the
//! engines, not a link, bound the transfer. Every call into the sender
//! (`write`/`finish`, `poll_transmit`, `handle_datagram`, `poll_timeout`,
//! `handle_timeout`) is timed with a wall clock, and only those times make
//! the sender figures: ns per DATA datagram sent (all sender time, so ACK
//! handling, timers and the copy into the send buffer are included), ns per
//! ACK datagram handled, sender seconds. One thread, so that is CPU time
//! unless the thread is preempted; each clock read (~20 ns) is included.
//! The receiver's calls are timed apart and printed, to show the split.
//! Virtual time makes every run the same workload (checked); the figures are
//! the median and the minimum over runs; every byte is checked on arrival.
//!
//! Before/after comparisons: builds before the session engine took over
//! unicast drove the separate unicast `Sender` here with the same data, RTT
//! and reports, so `tools/regress/compare.py` runs the same workload on both
//! sides.
//!
//! `cargo run --release -p fanout-transport --example datagram_cost -- [--mib 256] [--runs 5] [--json]`

use fanout_core::{Engine, Instant, Rng};
use fanout_transport::session::{SessionConfig, SessionSender};
use fanout_transport::wire::{decode_frames, Frame, Header};
use fanout_transport::{Receiver, TransportConfig};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

const ONE_WAY: Duration = Duration::from_millis(5);
/// Repeated payload; a length no segment size divides, so segments differ.
const PATTERN_LEN: usize = (1 << 20) + 7;

/// Runs `f`, adding its wall time to `acc`.
#[expect(clippy::disallowed_methods, reason = "benchmark timing, not an engine")]
fn timed<T>(acc: &mut Duration, f: impl FnOnce() -> T) -> T {
    let t0 = std::time::Instant::now();
    let r = f();
    *acc += t0.elapsed();
    r
}

fn is_data(datagram: &[u8]) -> bool {
    Header::decode(datagram)
        .is_ok_and(|(_, body)| decode_frames(body).any(|f| matches!(f, Ok(Frame::Data(_)))))
}

/// Time by call: `write`/`finish` (receiver: `read`), `poll_transmit`,
/// `handle_datagram`, timers (`poll_timeout`, `handle_timeout`).
const PARTS: [&str; 4] = ["write", "poll_transmit", "handle_datagram", "timers"];
const WRITE: usize = 0;
const TRANSMIT: usize = 1;
const INPUT: usize = 2;
const TIMERS: usize = 3;

/// Datagrams in flight: (arrival, towards the sender?, bytes). Arrival times
/// only grow (fixed delay, monotonic clock), so a FIFO is the wire.
type Wire = VecDeque<(Instant, bool, Vec<u8>)>;

/// Runs `e`'s due timers, then puts on `wire` all it may send now, timing
/// every call into `t`; returns how many of those datagrams carry DATA.
fn pump(
    e: &mut impl Engine,
    now: Instant,
    t: &mut [Duration; 4],
    up: bool,
    wire: &mut Wire,
) -> u64 {
    if timed(&mut t[TIMERS], || e.poll_timeout()).is_some_and(|d| d <= now) {
        timed(&mut t[TIMERS], || e.handle_timeout(now));
    }
    let (mut buf, mut data) = (Vec::with_capacity(2048), 0);
    loop {
        buf.clear();
        if timed(&mut t[TRANSMIT], || e.poll_transmit(now, &mut buf)).is_none() {
            return data;
        }
        data += u64::from(is_data(&buf));
        wire.push_back((now + ONE_WAY, up, buf.clone()));
    }
}

/// One run's figures.
struct Run {
    sender: [Duration; 4],
    receiver: [Duration; 4],
    data: u64,
    all: u64,
    acks: u64,
    delivered: u64,
}

/// Sends `total` bytes once; panics unless every byte arrives intact.
fn run(total: u64, pattern: &[u8]) -> Run {
    let (s_addr, r_addr): (SocketAddr, SocketAddr) = (
        "10.0.0.1:1000".parse().unwrap(),
        "10.0.0.2:2000".parse().unwrap(),
    );
    let mut now = Instant::ZERO;
    let config = SessionConfig::unicast(TransportConfig::default());
    let mut sender = SessionSender::new(config, 7, now);
    sender.offer(now, r_addr);
    let mut receiver = Receiver::listen(TransportConfig::default(), now);
    let mut wire = Wire::new();
    let (mut st, mut rt) = ([Duration::ZERO; 4], [Duration::ZERO; 4]);
    let (mut written, mut delivered, mut data, mut acks) = (0u64, 0u64, 0u64, 0u64);
    let mut chunk = vec![0u8; 64 << 10];
    let limit = Instant::ZERO + Duration::from_secs(600);
    while !(sender.close_reason().is_some() && receiver.is_closed()) {
        assert!(now < limit, "not finished after 600 s of virtual time");
        while written < total {
            let at = (written % PATTERN_LEN as u64) as usize;
            let end = PATTERN_LEN.min(at + (total - written) as usize);
            let n = timed(&mut st[WRITE], || sender.write(&pattern[at..end]));
            written += n as u64;
            if written == total {
                timed(&mut st[WRITE], || sender.finish());
            }
            if n == 0 {
                break;
            }
        }
        data += pump(&mut sender, now, &mut st, false, &mut wire);
        loop {
            let n = timed(&mut rt[WRITE], || receiver.read(&mut chunk));
            if n == 0 {
                break;
            }
            // n < PATTERN_LEN: the piece wraps around the pattern at most once.
            let at = (delivered % PATTERN_LEN as u64) as usize;
            let (head, tail) = chunk[..n].split_at(n.min(PATTERN_LEN - at));
            let intact = head == &pattern[at..at + head.len()] && tail == &pattern[..tail.len()];
            assert!(intact, "stream corrupted near byte {delivered}");
            delivered += n as u64;
        }
        pump(&mut receiver, now, &mut rt, true, &mut wire);
        let timers = [
            timed(&mut st[TIMERS], || sender.poll_timeout()),
            timed(&mut rt[TIMERS], || receiver.poll_timeout()),
        ];
        let next = timers
            .into_iter()
            .flatten()
            .chain(wire.front().map(|w| w.0));
        now = now.max(next.min().unwrap_or(limit));
        while wire.front().is_some_and(|w| w.0 <= now) {
            let (_, up, bytes) = wire.pop_front().unwrap();
            if up {
                acks += 1;
                timed(&mut st[INPUT], || {
                    sender.handle_datagram(now, r_addr, &bytes)
                });
            } else {
                timed(&mut rt[INPUT], || {
                    receiver.handle_datagram(now, s_addr, &bytes)
                });
            }
        }
    }
    assert_eq!(delivered, total, "not every byte was delivered");
    let all = sender.stats().datagrams_sent;
    Run {
        sender: st,
        receiver: rt,
        data,
        all,
        acks,
        delivered,
    }
}

/// (median, min) of `xs`.
fn median_min(mut xs: Vec<f64>) -> (f64, f64) {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    ((xs[(n - 1) / 2] + xs[n / 2]) / 2.0, xs[0])
}

fn main() {
    let (mut mib, mut runs, mut json) = (256u64, 5usize, false);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> u64 {
            let v = args.next().and_then(|v| v.parse().ok());
            v.unwrap_or_else(|| panic!("{name} takes a positive number"))
        };
        match a.as_str() {
            "--mib" => mib = num("--mib"),
            "--runs" => runs = num("--runs").max(1) as usize,
            "--json" => json = true,
            _ => panic!("usage: datagram_cost [--mib N] [--runs R] [--json]"),
        }
    }
    let total = mib << 20;
    let mut pattern = vec![0u8; PATTERN_LEN];
    Rng::new(1).fill(&mut pattern);
    let results: Vec<Run> = (0..runs).map(|_| run(total, &pattern)).collect();
    let Run {
        data,
        all,
        acks,
        delivered: bytes,
        ..
    } = results[0];
    let same = results.iter().all(|r| (r.data, r.acks) == (data, acks));
    assert!(same, "runs differ in datagrams or ACKs");
    let fig = |f: &dyn Fn(&Run) -> f64| median_min(results.iter().map(f).collect());
    let ns = |d: Duration, n: u64| d.as_nanos() as f64 / n.max(1) as f64;
    let sum = |t: &[Duration; 4]| t.iter().sum::<Duration>();
    let figures = [
        (
            "sender_ns_per_datagram",
            fig(&|r| ns(sum(&r.sender), r.data)),
        ),
        ("sender_ns_per_ack", fig(&|r| ns(r.sender[INPUT], r.acks))),
        ("sender_cpu_s", fig(&|r| sum(&r.sender).as_secs_f64())),
        ("receiver_cpu_s", fig(&|r| sum(&r.receiver).as_secs_f64())),
    ];
    let split = PARTS.iter().enumerate();
    let split = split.map(|(i, p)| (p, fig(&|r| ns(r.sender[i], r.data)).0));
    let rtt_ms = 2 * ONE_WAY.as_millis();
    if json {
        let mut out = format!(
            "{{\"mib\":{mib},\"rtt_ms\":{rtt_ms},\"runs\":{runs},\"data_datagrams\":{data},\
             \"datagrams_sent\":{all},\"acks\":{acks},\"delivered_bytes\":{bytes},\"verified\":true"
        );
        for (name, (m, n)) in figures {
            out += &format!(",\"{name}\":{{\"median\":{m:.6},\"min\":{n:.6}}}");
        }
        let split: Vec<String> = split.map(|(p, v)| format!("\"{p}\":{v:.3}")).collect();
        println!("{out},\"sender_split_median_ns\":{{{}}}}}", split.join(","));
        return;
    }
    println!("{mib} MiB, RTT {rtt_ms} ms, lossless, {runs} runs: {bytes} bytes delivered intact each run");
    println!("sender: {data} data datagrams ({all} in all), {acks} ACK datagrams handled");
    for (name, (m, n)) in figures {
        println!("  {name:<24} median {m:>10.3}  min {n:>10.3}");
    }
    let split: Vec<String> = split.map(|(p, v)| format!("{p} {v:.1}")).collect();
    println!(
        "  sender ns/datagram by call, medians: {}",
        split.join(", ")
    );
}
