//! Helpers shared by the integration tests.

#![allow(dead_code)]

use fanout_core::{Engine, Instant, Transmit};
use fanout_sim::analysis::{figures, RunFigures};
use fanout_sim::apps::{CbrSource, CountingSink};
use fanout_sim::scenario::BuiltinFlows;
use fanout_sim::session_flow::SessionFlows;
use fanout_sim::transfer::TransferFlows;
use fanout_sim::units::HumanDuration;
use fanout_sim::{AppId, LinkConfig, NodeId, Scenario, SimApp, SimConfig, Simulator};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// `10.0.0.i`.
pub fn ip(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))
}

/// `10.0.x.y` for larger topologies.
pub fn ip16(i: u16) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, (i >> 8) as u8, i as u8))
}

pub fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

pub fn at(d: Duration) -> Instant {
    Instant::ZERO + d
}

/// Nodes `n0..n{count}` with addresses `10.0.0.{i+1}`.
pub fn nodes(sim: &mut Simulator, count: u8) -> Vec<NodeId> {
    (0..count)
        .map(|i| sim.add_node(&format!("n{i}"), ip(i + 1)).unwrap())
        .collect()
}

pub fn sim(seed: u64) -> Simulator {
    Simulator::new(SimConfig::with_seed(seed))
}

/// A CBR source at `from` to `to`.
pub fn cbr(
    sim: &mut Simulator,
    from: SocketAddr,
    to: SocketAddr,
    rate_bps: u64,
    payload: usize,
    stop: Duration,
) -> AppId {
    let src = CbrSource::new(to, rate_bps, payload, Instant::ZERO, at(stop));
    sim.add_app(from, Box::new(src)).unwrap()
}

pub fn sink(sim: &mut Simulator, addr: SocketAddr) -> AppId {
    sim.add_app(addr, Box::new(CountingSink::new())).unwrap()
}

pub fn sink_of(sim: &Simulator, id: AppId) -> &CountingSink {
    sim.app::<CountingSink>(id).expect("a CountingSink")
}

pub fn link(rate_bps: u64, delay: Duration) -> LinkConfig {
    LinkConfig::new(rate_bps, delay)
}

/// Emits `count` datagrams of `payload` bytes at time zero, all at once.
pub struct Burst {
    pub to: SocketAddr,
    pub count: usize,
    pub payload: usize,
}

impl Engine for Burst {
    fn handle_datagram(&mut self, _: Instant, _: SocketAddr, _: &[u8]) {}
    fn poll_transmit(&mut self, _: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.count == 0 {
            return None;
        }
        self.count -= 1;
        buf.resize(self.payload, 0);
        Some(Transmit {
            destination: self.to,
        })
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _: Instant) {}
}

impl SimApp for Burst {}

/// Loads `scenarios/DIR/NAME` of the repository.
pub fn load(dir: &str, name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(dir)
        .join(name);
    Scenario::load(&path).expect("scenario loads")
}

/// Runs `sc` for `secs` and measures from `warmup` seconds to the end.
pub fn run(mut sc: Scenario, secs: u64, warmup: u64) -> RunFigures {
    sc.duration = HumanDuration(Duration::from_secs(secs));
    let (mut t, mut s) = (TransferFlows::default(), SessionFlows::default());
    let (sim, report) = sc
        .run(None, &mut [&mut BuiltinFlows, &mut t, &mut s])
        .expect("runs");
    figures(
        &sim,
        &t,
        &s,
        report.trace_hash,
        Instant::ZERO + Duration::from_secs(warmup),
        Instant::ZERO + Duration::from_secs(secs),
    )
}
