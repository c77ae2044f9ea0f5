//! Throughput check: one CBR multicast source, a hub, N receivers, for T
//! simulated seconds. Time it from the shell:
//! `time cargo run --release -p fanout-sim --example perf_multicast -- 1000 100000000 1`
//! (receivers, bit/s, seconds).

use fanout_core::Instant;
use fanout_sim::apps::{CbrSource, CountingSink};
use fanout_sim::{LinkConfig, SimConfig, Simulator};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

fn ip(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let receivers = args.first().copied().unwrap_or(1000) as u32;
    let rate = args.get(1).copied().unwrap_or(100_000_000);
    let secs = args.get(2).copied().unwrap_or(1);
    let mut sim = Simulator::new(SimConfig::with_seed(1));
    let src = sim.add_node("src", ip(1)).unwrap();
    let hub = sim.add_node("hub", ip(2)).unwrap();
    sim.add_duplex(
        src,
        hub,
        LinkConfig::new(10_000_000_000, Duration::from_millis(1)),
    )
    .unwrap();
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
    }
    let end = Instant::ZERO + Duration::from_secs(secs);
    let cbr = CbrSource::new(SocketAddr::new(group, 6000), rate, 1200, Instant::ZERO, end);
    sim.add_app(SocketAddr::new(ip(1), 5000), Box::new(cbr))
        .unwrap();
    sim.run_until(end + Duration::from_millis(100));
    let delivered: u64 = sim
        .nodes()
        .iter()
        .map(|n| n.stats().delivered_packets)
        .sum();
    println!(
        "receivers {receivers} events {} deliveries {delivered}",
        sim.events_processed()
    );
}
