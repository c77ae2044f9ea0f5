//! Built-in test applications: a constant-bit-rate UDP source and a counting
//! sink. Payload: 8-byte big-endian sequence number, 8-byte big-endian send
//! time (ns), zero padding.

use crate::app::{AppProbe, SimApp};
use fanout_core::time::duration_nanos;
use fanout_core::{Engine, Instant, Transmit};
use std::net::SocketAddr;
use std::time::Duration;

/// Smallest CBR payload: sequence number and timestamp.
pub const CBR_HEADER_BYTES: usize = 16;

/// Sends `payload_bytes`-byte datagrams to `destination` at `rate_bps`
/// (payload bits, excluding IP/UDP headers) from `start` until `stop`.
#[derive(Debug, Clone)]
pub struct CbrSource {
    destination: SocketAddr,
    payload_bytes: usize,
    interval_ns: u64,
    next: Instant,
    stop: Instant,
    seq: u64,
    sent_bytes: u64,
}

impl CbrSource {
    /// A source sending to `destination`; `payload_bytes` is raised to
    /// [`CBR_HEADER_BYTES`] if smaller.
    pub fn new(
        destination: SocketAddr,
        rate_bps: u64,
        payload_bytes: usize,
        start: Instant,
        stop: Instant,
    ) -> Self {
        let payload_bytes = payload_bytes.max(CBR_HEADER_BYTES);
        let interval_ns =
            (payload_bytes as u128 * 8 * 1_000_000_000 / u128::from(rate_bps.max(1))).max(1) as u64;
        CbrSource {
            destination,
            payload_bytes,
            interval_ns,
            next: start,
            stop,
            seq: 0,
            sent_bytes: 0,
        }
    }

    /// Datagrams sent so far.
    pub fn sent_packets(&self) -> u64 {
        self.seq
    }

    /// Payload bytes sent so far.
    pub fn sent_bytes(&self) -> u64 {
        self.sent_bytes
    }

    /// Time between datagrams.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns)
    }
}

impl Engine for CbrSource {
    fn handle_datagram(&mut self, _now: Instant, _from: SocketAddr, _datagram: &[u8]) {}

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.seq == 0 && self.next < now {
            // Added after its start time: begin now rather than burst.
            self.next = now;
        }
        if self.next > now || self.next >= self.stop {
            return None;
        }
        buf.extend_from_slice(&self.seq.to_be_bytes());
        buf.extend_from_slice(&now.as_nanos().to_be_bytes());
        buf.resize(self.payload_bytes, 0);
        self.seq += 1;
        self.sent_bytes += self.payload_bytes as u64;
        self.next = Instant::from_nanos(self.next.as_nanos() + self.interval_ns);
        Some(Transmit {
            destination: self.destination,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (self.next < self.stop).then_some(self.next)
    }

    fn handle_timeout(&mut self, _now: Instant) {}
}

impl SimApp for CbrSource {
    fn probe(&self) -> AppProbe {
        AppProbe {
            rate_bps: Some(self.payload_bytes as u64 * 8 * 1_000_000_000 / self.interval_ns),
            ..AppProbe::default()
        }
    }
}

/// Counts what arrives; for CBR streams also tracks sequence gaps and
/// one-way delay (assumes a single CBR source).
#[derive(Debug, Clone, Default)]
pub struct CountingSink {
    packets: u64,
    bytes: u64,
    highest_seq: Option<u64>,
    first_arrival: Option<Instant>,
    last_arrival: Option<Instant>,
    delay_sum_ns: u128,
    delay_max_ns: u64,
}

impl CountingSink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// Datagrams received.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Payload bytes received.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Arrival time of the first datagram.
    pub fn first_arrival(&self) -> Option<Instant> {
        self.first_arrival
    }

    /// Arrival time of the latest datagram.
    pub fn last_arrival(&self) -> Option<Instant> {
        self.last_arrival
    }

    /// CBR datagrams missing below the highest sequence number seen.
    pub fn missing(&self) -> u64 {
        self.highest_seq
            .map_or(0, |h| (h + 1).saturating_sub(self.packets))
    }

    /// Mean one-way delay of CBR datagrams.
    pub fn mean_delay(&self) -> Option<Duration> {
        (self.packets > 0)
            .then(|| Duration::from_nanos((self.delay_sum_ns / u128::from(self.packets)) as u64))
    }

    /// Largest one-way delay seen.
    pub fn max_delay(&self) -> Duration {
        Duration::from_nanos(self.delay_max_ns)
    }
}

impl Engine for CountingSink {
    fn handle_datagram(&mut self, now: Instant, _from: SocketAddr, datagram: &[u8]) {
        self.packets += 1;
        self.bytes += datagram.len() as u64;
        self.first_arrival.get_or_insert(now);
        self.last_arrival = Some(now);
        if let (Some(seq), Some(sent)) = (datagram.get(0..8), datagram.get(8..16)) {
            let seq = u64::from_be_bytes(seq.try_into().expect("8 bytes"));
            let sent = u64::from_be_bytes(sent.try_into().expect("8 bytes"));
            self.highest_seq = Some(self.highest_seq.map_or(seq, |h| h.max(seq)));
            let d = duration_nanos(now - Instant::from_nanos(sent));
            self.delay_sum_ns += u128::from(d);
            self.delay_max_ns = self.delay_max_ns.max(d);
        }
    }

    fn poll_transmit(&mut self, _now: Instant, _buf: &mut Vec<u8>) -> Option<Transmit> {
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant) {}
}

impl SimApp for CountingSink {
    fn probe(&self) -> AppProbe {
        AppProbe {
            delivered_bytes: self.bytes,
            ..AppProbe::default()
        }
    }
}
