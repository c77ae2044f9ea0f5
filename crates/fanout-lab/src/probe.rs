//! A UDP probe between two hosts of a lab: one-way delay and loss as the
//! emulated path delivers them (the lab's self-check).
//!
//! Both hosts share this machine's monotonic clock, so the one-way delay is
//! exact: each probe carries its send time (ns on a [`Clock`] shared by the
//! sending and receiving threads) and the receiver subtracts it.

use crate::error::LabError;
use crate::lab::Lab;
use fanout_core::time::duration_nanos;
use fanout_io::Clock;
use serde::Serialize;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Most probes one run may send (the receiver keeps one sample each).
pub const MAX_PROBES: u32 = 2_000_000;
/// Probe header: sequence number and send time, 8 bytes each.
const HEADER: usize = 16;
/// Receive buffer of the probe socket, bytes.
const RCVBUF: usize = 16 << 20;
/// IPv4 + UDP header bytes, for wire sizes.
pub const IP_UDP_OVERHEAD: u32 = 28;
/// After the last send, the probe ends once no probe has arrived for this
/// long: longer than any configured path delay, and than the pauses a
/// shared VM's scheduler sometimes gives the emulator.
const STRAGGLER_QUIET: Duration = Duration::from_secs(2);
/// Longest wait for stragglers after the last send.
const STRAGGLER_CAP: Duration = Duration::from_secs(10);
/// How often the sending thread looks at the receiver's progress.
const STRAGGLER_POLL: Duration = Duration::from_millis(10);

/// What to send.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeConfig {
    /// Sending host's name.
    pub from: String,
    /// Receiving host's name.
    pub to: String,
    /// Datagrams to send (≤ [`MAX_PROBES`]).
    pub count: u32,
    /// Time between sends.
    pub interval: Duration,
    /// UDP payload bytes (16 to 1400).
    pub payload: usize,
    /// UDP port used on both hosts.
    pub port: u16,
}

/// What arrived.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeReport {
    /// Datagrams sent.
    pub sent: u64,
    /// Distinct datagrams received.
    pub received: u64,
    /// Datagrams received more than once.
    pub duplicates: u64,
    /// `1 - received / sent`.
    pub loss: f64,
    /// One-way delay, smallest, ms.
    pub delay_min_ms: f64,
    /// Median, ms.
    pub delay_p50_ms: f64,
    /// 99th percentile, ms.
    pub delay_p99_ms: f64,
    /// Largest, ms.
    pub delay_max_ms: f64,
    /// Bytes per datagram on the wire (payload + IPv4/UDP headers).
    pub wire_bytes: u32,
}

impl Lab {
    /// Sends `config.count` UDP datagrams from one host to another, paced
    /// at `config.interval`, and reports delay and loss. After the last
    /// send it waits for stragglers until every probe has arrived, or none
    /// has for 2 s (`STRAGGLER_QUIET`), or 10 s (`STRAGGLER_CAP`) have passed.
    pub fn probe(&self, config: &ProbeConfig) -> Result<ProbeReport, LabError> {
        if config.count == 0 || config.count > MAX_PROBES {
            return Err(invalid(format!(
                "probe count {}: want 1 to {MAX_PROBES}",
                config.count
            )));
        }
        if !(HEADER..=1400).contains(&config.payload) {
            return Err(invalid(format!(
                "probe payload {}: want {HEADER} to 1400 bytes",
                config.payload
            )));
        }
        let host = |name: &str| {
            self.host(name)
                .ok_or_else(|| invalid(format!("no host named {name:?}")))
        };
        let (src, dst) = (host(&config.from)?, host(&config.to)?);
        let dst_addr = SocketAddr::from((dst.ip(), config.port));
        let rx = dst
            .netns()
            .run_in(|| UdpSocket::bind(dst_addr))?
            .map_err(|e| LabError::io(format!("binding {dst_addr} in {}", dst.name()), e))?;
        rx.set_read_timeout(Some(Duration::from_millis(50)))
            .map_err(|e| LabError::io("probe socket timeout", e))?;
        // A receiving thread descheduled for a while must not lose probes
        // in its socket buffer: 16 MiB holds seconds of them (root only:
        // SO_RCVBUFFORCE passes net.core.rmem_max).
        nix::sys::socket::setsockopt(&rx, nix::sys::socket::sockopt::RcvBufForce, &RCVBUF)
            .map_err(|e| LabError::io("probe socket SO_RCVBUFFORCE", e.into()))?;
        let src_addr = SocketAddr::from((src.ip(), config.port));
        let tx = src
            .netns()
            .run_in(|| UdpSocket::bind(src_addr))?
            .map_err(|e| LabError::io(format!("binding {src_addr} in {}", src.name()), e))?;
        let clock = Clock::new();
        let progress = Progress::default();
        let count = config.count;
        let (samples, duplicates) = std::thread::scope(|scope| {
            let receiver = scope.spawn(|| receive(&rx, &clock, count, &progress));
            let sent = send(&tx, dst_addr, &clock, config);
            progress.await_stragglers(&clock, count);
            let got = receiver.join().unwrap_or_default();
            sent.map(|()| got)
        })
        .map_err(|e| LabError::io("sending probes", e))?;
        Ok(summarize(config, samples, duplicates))
    }
}

fn invalid(message: String) -> LabError {
    LabError::Netns(fanout_netns::NetnsError::Invalid(message))
}

fn send(
    tx: &UdpSocket,
    to: SocketAddr,
    clock: &Clock,
    config: &ProbeConfig,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; config.payload];
    let start = clock.now();
    for seq in 0..u64::from(config.count) {
        let due = start + config.interval * u32::try_from(seq).unwrap_or(u32::MAX);
        loop {
            let now = clock.now();
            if now >= due {
                break;
            }
            std::thread::sleep(due - now);
        }
        buf[..8].copy_from_slice(&seq.to_be_bytes());
        buf[8..16].copy_from_slice(&clock.now().as_nanos().to_be_bytes());
        tx.send_to(&buf, to)?;
    }
    Ok(())
}

/// What the receiving thread has collected so far, shared with the
/// sending thread that decides when the probe is over.
#[derive(Debug, Default)]
struct Progress {
    /// Distinct probes received.
    received: AtomicU64,
    /// Clock time of the latest arrival, ns.
    last_arrival_ns: AtomicU64,
    /// Set when the receiver should stop.
    done: AtomicBool,
}

impl Progress {
    /// Called after the last send: returns (and tells the receiver to stop)
    /// once all `count` probes arrived, or none arrived for
    /// [`STRAGGLER_QUIET`], or [`STRAGGLER_CAP`] passed.
    fn await_stragglers(&self, clock: &Clock, count: u32) {
        let sent_all = clock.now();
        loop {
            let now = clock.now();
            let last = self.last_arrival_ns.load(Ordering::Relaxed);
            let quiet_since = sent_all.max(fanout_core::Instant::from_nanos(last));
            if self.received.load(Ordering::Relaxed) >= u64::from(count)
                || now.saturating_duration_since(quiet_since) >= STRAGGLER_QUIET
                || now.saturating_duration_since(sent_all) >= STRAGGLER_CAP
            {
                break;
            }
            std::thread::sleep(STRAGGLER_POLL);
        }
        self.done.store(true, Ordering::Relaxed);
    }
}

/// Collects one-way delays (ns) by sequence number until told to stop.
fn receive(rx: &UdpSocket, clock: &Clock, count: u32, progress: &Progress) -> (Vec<u64>, u64) {
    let mut seen = vec![false; count as usize];
    let mut delays = Vec::with_capacity(count as usize);
    let mut duplicates = 0;
    let mut buf = [0u8; 2048];
    while !progress.done.load(Ordering::Relaxed) {
        let Ok(n) = rx.recv(&mut buf) else {
            continue;
        };
        let now = clock.now().as_nanos();
        if n < HEADER {
            continue;
        }
        let field = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[at..at + 8]);
            u64::from_be_bytes(b)
        };
        let (seq, sent) = (field(0), field(8));
        let Some(slot) = usize::try_from(seq).ok().and_then(|s| seen.get_mut(s)) else {
            continue;
        };
        if std::mem::replace(slot, true) {
            duplicates += 1;
        } else {
            delays.push(now.saturating_sub(sent));
            progress.received.fetch_add(1, Ordering::Relaxed);
        }
        progress.last_arrival_ns.store(now, Ordering::Relaxed);
    }
    (delays, duplicates)
}

fn summarize(config: &ProbeConfig, mut delays: Vec<u64>, duplicates: u64) -> ProbeReport {
    delays.sort_unstable();
    let ms = |q: f64| {
        if delays.is_empty() {
            return f64::NAN;
        }
        let i = ((q * delays.len() as f64).ceil() as usize).clamp(1, delays.len()) - 1;
        delays[i] as f64 / 1e6
    };
    let sent = u64::from(config.count);
    let received = delays.len() as u64;
    ProbeReport {
        sent,
        received,
        duplicates,
        loss: 1.0 - received as f64 / sent as f64,
        delay_min_ms: ms(0.0),
        delay_p50_ms: ms(0.5),
        delay_p99_ms: ms(0.99),
        delay_max_ms: ms(1.0),
        wire_bytes: u32::try_from(config.payload).unwrap_or(u32::MAX) + IP_UDP_OVERHEAD,
    }
}

/// The one-way delay the topology's model gives a `wire_bytes` datagram
/// from host `from` to host `to` on an idle path: the sum over the route's
/// links of serialization plus propagation time. `None` if unreachable.
pub fn expected_one_way(
    topo: &crate::Topology,
    from: usize,
    to: usize,
    wire_bytes: u32,
) -> Option<Duration> {
    let routes = crate::Routes::new(topo.hosts.len(), topo.node_count(), &topo.links);
    let mut node = from;
    let mut total = 0u64;
    for _ in 0..topo.links.len() {
        if node == to {
            return Some(Duration::from_nanos(total));
        }
        let l = &topo.links[routes.next_hop(node, to)?];
        total += duration_nanos(l.config.delay) + duration_nanos(l.config.tx_time(wire_bytes));
        node = l.to;
    }
    (node == to).then(|| Duration::from_nanos(total))
}
