//! Simulator throughput benchmark: one CBR multicast source behind a
//! 10 Gbit/s link to a hub, N receivers each behind its own 1 Gbit/s, 10 ms
//! link, for T simulated seconds (plus 100 ms to drain).
//!
//! ```text
//! cargo run --release -p fanout-sim --example perf_multicast -- 1000 100000000 1 [ACK_BPS] [SAMPLE_MS]
//! ```
//!
//! Arguments: receivers, multicast rate (bit/s), simulated seconds, optional
//! per-receiver reverse traffic (bit/s of 64-byte datagrams from every
//! receiver to the source, standing in for ACKs; default 0) and optional
//! metric sampling interval (ms; default 0 = off).
//!
//! Prints events, deliveries (packets handed to an engine), wall time and
//! the rates per wall second. Figures are in `crates/fanout-sim/README.md`.

use fanout_core::Instant;
use fanout_sim::apps::{CbrSource, CountingSink};
use fanout_sim::{LinkConfig, SimConfig, Simulator};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

fn ip(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
}

/// Wall-clock seconds since `start` (`None`: now). The benchmark's only
/// clock read: it measures the run and never feeds the simulation.
#[expect(
    clippy::disallowed_methods,
    reason = "a benchmark times the simulator from outside; virtual time is untouched"
)]
fn wall(start: Option<std::time::Instant>) -> (std::time::Instant, f64) {
    let now = std::time::Instant::now();
    (now, start.map_or(0.0, |s| (now - s).as_secs_f64()))
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let arg = |i: usize, default: u64| args.get(i).copied().unwrap_or(default);
    let receivers = u32::try_from(arg(0, 1000)).expect("receivers fit in u32");
    let rate = arg(1, 100_000_000);
    let secs = arg(2, 1);
    let ack_bps = arg(3, 0);
    let sample_ms = arg(4, 0);

    let mut cfg = SimConfig::with_seed(1);
    cfg.sample_interval = (sample_ms > 0).then(|| Duration::from_millis(sample_ms));
    let mut sim = Simulator::new(cfg);
    let src = sim.add_node("src", ip(1)).unwrap();
    let hub = sim.add_node("hub", ip(2)).unwrap();
    sim.add_duplex(
        src,
        hub,
        LinkConfig::new(10_000_000_000, Duration::from_millis(1)),
    )
    .unwrap();
    let end = Instant::ZERO + Duration::from_secs(secs);
    let group: IpAddr = "239.1.1.1".parse().unwrap();
    for i in 0..receivers {
        let r = sim.add_node(&format!("rx{i}"), ip(10 + i)).unwrap();
        sim.add_duplex(
            hub,
            r,
            LinkConfig::new(1_000_000_000, Duration::from_millis(10)),
        )
        .unwrap();
        sim.join(group, r).unwrap();
        sim.add_app(
            SocketAddr::new(ip(10 + i), 6000),
            Box::new(CountingSink::new()),
        )
        .unwrap();
        if ack_bps > 0 {
            let to_src = SocketAddr::new(ip(1), 7000);
            let acks = CbrSource::new(to_src, ack_bps, 64, Instant::ZERO, end);
            sim.add_app(SocketAddr::new(ip(10 + i), 7001), Box::new(acks))
                .unwrap();
        }
    }
    if ack_bps > 0 {
        sim.add_app(SocketAddr::new(ip(1), 7000), Box::new(CountingSink::new()))
            .unwrap();
    }
    let cbr = CbrSource::new(SocketAddr::new(group, 6000), rate, 1200, Instant::ZERO, end);
    sim.add_app(SocketAddr::new(ip(1), 5000), Box::new(cbr))
        .unwrap();

    let (start, _) = wall(None);
    sim.run_until(end + Duration::from_millis(100));
    let (_, elapsed) = wall(Some(start));

    let delivered: u64 = sim
        .nodes()
        .iter()
        .map(|n| n.stats().delivered_packets)
        .sum();
    let events = sim.events_processed();
    println!(
        "receivers {receivers} events {events} deliveries {delivered} wall {elapsed:.2} s \
         events/s {:.2}M deliveries/s {:.2}M ns/delivery {:.0}",
        events as f64 / elapsed / 1e6,
        delivered as f64 / elapsed / 1e6,
        elapsed * 1e9 / delivered.max(1) as f64,
    );
}
