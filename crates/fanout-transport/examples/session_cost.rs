//! CPU cost of the session sender with and without packet protection, side
//! by side: one multicast session to N members in memory, each behind its
//! own link of a fixed rate (serialisation, then a fixed one-way delay),
//! lossless, as in the lab's scenario (b). Every call into the sender is
//! timed with a wall clock (one thread: CPU time unless preempted), the
//! members' calls are not. Virtual time makes every run the same workload,
//! so `valgrind --tool=callgrind` on it attributes the sender's work
//! exactly (`--protected only` runs one side).
//!
//! With `--queue-ms MS` each member's link drops what would wait longer
//! than that in its queue (a drop-tail queue of that many milliseconds of
//! the link's rate), so the congestion control meets losses as it does on
//! a real bottleneck; the members' retransmission timeouts, recovery
//! episodes and repaired bytes are printed.
//!
//! `cargo run --release -p fanout-transport --example session_cost -- [--mib 64] [--members 4] [--runs 3] [--mbit 100] [--one-way-ms 5] [--queue-ms MS] [--protected both|only|none]`

use fanout_core::{drain, Engine, Instant, Rng};
use fanout_transport::protection::{Credentials, Protection};
use fanout_transport::session::{SessionConfig, SessionSender};
use fanout_transport::{Receiver, TransportConfig};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

const GROUP: &str = "239.1.1.1:7000";
const SENDER: &str = "10.0.0.1:5000";
const PSK: [u8; 32] = [7; 32];

fn member_addr(i: usize) -> SocketAddr {
    format!("10.0.1.{}:7000", i + 1).parse().expect("literal")
}

/// Runs `f`, adding its wall time to `acc` (not inlined, so that
/// `valgrind --tool=callgrind --toggle-collect='session_cost::timed*'`
/// counts the sender's work alone).
#[expect(clippy::disallowed_methods, reason = "benchmark timing, not an engine")]
#[inline(never)]
fn timed<T>(acc: &mut Duration, f: impl FnOnce() -> T) -> T {
    let t0 = std::time::Instant::now();
    let r = f();
    *acc += t0.elapsed();
    r
}

fn transport(protected: bool, seed: u8) -> TransportConfig {
    TransportConfig {
        protection: protected.then(|| Protection::new(Credentials::with_psk(PSK), [seed; 32])),
        ..TransportConfig::default()
    }
}

/// One run's figures.
struct Run {
    sender: Duration,
    datagrams: u64,
    bytes_sent: u64,
    /// Summed over members: RTOs, recovery episodes, repaired bytes.
    rtos: u64,
    episodes: u64,
    repaired: u64,
    /// Datagrams the links' queues dropped.
    dropped: u64,
    /// Virtual time the transfer took.
    took: Duration,
}

/// Sends `data` to `n` members; panics unless every member gets it intact.
/// The path of every member.
#[derive(Clone, Copy)]
struct Path {
    rate_bps: u64,
    one_way: Duration,
    /// Drop what would wait longer in the link's queue.
    queue: Option<Duration>,
}

fn run(data: &[u8], n: usize, path: Path, protected: bool) -> Run {
    let Path {
        rate_bps,
        one_way,
        queue,
    } = path;
    let mut now = Instant::ZERO;
    let config = SessionConfig {
        group: Some(GROUP.parse().expect("literal")),
        wait_for_members: n,
        transport: transport(protected, 200),
        ..SessionConfig::default()
    };
    let mut sender = SessionSender::new(config, 42, now);
    let sender_addr: SocketAddr = SENDER.parse().expect("literal");
    let group: SocketAddr = GROUP.parse().expect("literal");
    let mut members: Vec<Receiver> = (0..n)
        .map(|i| Receiver::join(transport(protected, i as u8), sender_addr, now))
        .collect();
    let mut got = vec![0usize; n];
    // (arrival, sequence) -> (member, towards the sender?, bytes)
    let mut wire: BTreeMap<(Instant, u64), (usize, bool, Vec<u8>)> = BTreeMap::new();
    let mut link_free = vec![Instant::ZERO; n];
    let (mut seq, mut written, mut spent) = (0u64, 0usize, Duration::ZERO);
    let (mut datagrams, mut bytes_sent, mut dropped) = (0u64, 0u64, 0u64);
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = vec![0u8; 64 << 10];
    let limit = Instant::ZERO + Duration::from_secs(3600);
    let mut last_rto = [0u64; 8];
    loop {
        assert!(now < limit, "not finished after an hour of virtual time");
        if written < data.len() {
            written += timed(&mut spent, || sender.write(&data[written..]));
            if written == data.len() {
                timed(&mut spent, || sender.finish());
            }
        }
        let mut out = Vec::new();
        let mut next = timed(&mut spent, || {
            drain(&mut sender, now, &mut buf, 256, |t, b| {
                out.push((t.destination, b.to_vec()))
            })
        });
        for (dest, bytes) in out {
            datagrams += 1;
            bytes_sent += bytes.len() as u64;
            for i in (0..n).filter(|&i| dest == group || dest == member_addr(i)) {
                // The member's link serialises at `rate_bps`.
                let tx = Duration::from_nanos(bytes.len() as u64 * 8_000_000_000 / rate_bps);
                if queue.is_some_and(|q| link_free[i] > now + q) {
                    dropped += 1;
                    continue;
                }
                link_free[i] = link_free[i].max(now) + tx;
                seq += 1;
                wire.insert((link_free[i] + one_way, seq), (i, false, bytes.clone()));
            }
        }
        for (i, m) in members.iter_mut().enumerate() {
            loop {
                let k = m.read(&mut chunk);
                if k == 0 {
                    break;
                }
                assert!(
                    chunk[..k] == data[got[i]..got[i] + k],
                    "member {i}: corrupted"
                );
                got[i] += k;
            }
            let mut up = Vec::new();
            let t = drain(m, now, &mut buf, 64, |_, b| up.push(b.to_vec()));
            for bytes in up {
                seq += 1;
                wire.insert((now + one_way, seq), (i, true, bytes));
            }
            next = [next, t].into_iter().flatten().min();
        }
        if sender.close_reason().is_some() && wire.is_empty() {
            break;
        }
        if std::env::var_os("TRACE_RTO").is_some() {
            for m in sender.member_snapshots() {
                if m.rtos > 0 && m.rtos != last_rto[m.id.0 as usize % 8] {
                    last_rto[m.id.0 as usize % 8] = m.rtos;
                    eprintln!(
                        "t={:?} member {} rto#{} cum {} snd_nxt {} cwnd {} srtt {:?}",
                        now - Instant::ZERO,
                        m.id.0,
                        m.rtos,
                        m.cumulative,
                        sender.snd_nxt(),
                        m.cwnd,
                        m.srtt
                    );
                }
            }
        }
        let at = wire.keys().next().map(|k| k.0);
        now = now.max([next, at].into_iter().flatten().min().unwrap_or(limit));
        while let Some(e) = wire.first_entry() {
            if e.key().0 > now {
                break;
            }
            let (i, up, bytes) = e.remove();
            if up {
                timed(&mut spent, || {
                    sender.handle_datagram(now, member_addr(i), &bytes)
                });
            } else {
                members[i].handle_datagram(now, sender_addr, &bytes);
            }
        }
    }
    assert!(
        got.iter().all(|&g| g == data.len()),
        "not every member got it all: {got:?}"
    );
    if std::env::var_os("SESSION_COST_STATS").is_some() {
        eprintln!("{:?}", sender.stats());
    }
    let (mut rtos, mut episodes, mut repaired) = (0, 0, 0);
    for m in sender.member_snapshots() {
        rtos += m.rtos;
        episodes += m.recovery_episodes;
        repaired += m.repaired_bytes;
    }
    Run {
        sender: spent,
        datagrams,
        bytes_sent,
        rtos,
        episodes,
        repaired,
        dropped,
        took: now - Instant::ZERO,
    }
}

fn main() {
    let (mut mib, mut n, mut runs, mut mbit) = (64u64, 4usize, 3usize, 100u64);
    let mut queue = None;
    let mut one_way = Duration::from_millis(5);
    let mut sides = vec![false, true];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{a} takes a value"));
        match a.as_str() {
            "--mib" => mib = value().parse().expect("--mib N"),
            "--members" => n = value().parse().expect("--members N"),
            "--runs" => runs = value().parse::<usize>().expect("--runs N").max(1),
            "--mbit" => mbit = value().parse().expect("--mbit N"),
            "--one-way-ms" => {
                one_way = Duration::from_millis(value().parse().expect("--one-way-ms MS"))
            }
            "--queue-ms" => {
                queue = Some(Duration::from_millis(value().parse().expect("--queue-ms MS")))
            }
            "--protected" => {
                sides = match value().as_str() {
                    "both" => vec![false, true],
                    "only" => vec![true],
                    "none" => vec![false],
                    v => panic!("--protected both|only|none, not {v}"),
                }
            }
            _ => panic!(
                "usage: session_cost [--mib N] [--members N] [--runs R] [--mbit N] [--one-way-ms MS] [--queue-ms MS] [--protected both|only|none]"
            ),
        }
    }
    let mut data = vec![0u8; (mib << 20) as usize];
    Rng::new(1).fill(&mut data);
    let path = Path {
        rate_bps: mbit * 1_000_000,
        one_way,
        queue,
    };
    let q = queue.map_or("unbounded queues".to_string(), |q| format!("{q:?} queues"));
    println!("{mib} MiB to {n} members behind {mbit} Mbit/s each, one-way {one_way:?}, {q}");
    let mut medians = Vec::new();
    for &protected in &sides {
        let mut cpu: Vec<f64> = Vec::new();
        for _ in 0..runs {
            let r = run(&data, n, path, protected);
            cpu.push(r.sender.as_secs_f64());
            println!(
                "  {:<11} sender {:.3} s ({:.2} ns per byte), {} datagrams, {:.4} bytes sent per byte",
                if protected { "protected" } else { "unprotected" },
                r.sender.as_secs_f64(),
                r.sender.as_nanos() as f64 / data.len() as f64,
                r.datagrams,
                r.bytes_sent as f64 / data.len() as f64
            );
            if queue.is_some() {
                println!(
                    "              {:.2} s, {} dropped, RTOs {}, recovery episodes {}, repaired {} B",
                    r.took.as_secs_f64(),
                    r.dropped,
                    r.rtos,
                    r.episodes,
                    r.repaired
                );
            }
        }
        cpu.sort_by(f64::total_cmp);
        medians.push(cpu[cpu.len() / 2]);
    }
    if let [u, p] = medians[..] {
        println!(
            "sender CPU protected/unprotected (medians): {p:.3}/{u:.3} s = {:.2}x",
            p / u
        );
    }
}
