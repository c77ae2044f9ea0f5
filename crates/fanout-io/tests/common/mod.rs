//! Tiny engines for exercising the driver over loopback: numbered datagrams
//! with a checkable payload, an echo, a sink and a periodic timer.

#![allow(dead_code)] // each test binary uses a subset

use fanout_core::{Engine, Instant, Transmit};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

/// Writes datagram `seq` of `size` bytes (at least 8): the sequence number,
/// then a pattern derived from it.
pub fn write_datagram(buf: &mut Vec<u8>, seq: u64, size: usize) {
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend((8..size.max(8)).map(|i| (seq as u8).wrapping_add(i as u8)));
}

/// The sequence number of a datagram if its pattern is intact.
pub fn check_datagram(d: &[u8]) -> Option<u64> {
    check_datagram_sampled(d, 1)
}

/// Like [`check_datagram`], looking at every `stride`-th pattern byte (and
/// the last one) to keep a benchmark's receiver cheap.
pub fn check_datagram_sampled(d: &[u8], stride: usize) -> Option<u64> {
    let seq = u64::from_le_bytes(d.get(..8)?.try_into().ok()?);
    let ok = |i: usize| d[i] == (seq as u8).wrapping_add(i as u8);
    let intact = (8..d.len()).step_by(stride.max(1)).all(ok) && (d.len() <= 8 || ok(d.len() - 1));
    intact.then_some(seq)
}

/// Sends `total` numbered datagrams to `peer`, at most `window` unanswered,
/// and records the round-trip time of each echo.
pub struct Pinger {
    pub peer: SocketAddr,
    pub total: u64,
    pub window: u64,
    pub size: usize,
    pub next: u64,
    pub answered: Vec<bool>,
    pub answered_count: u64,
    pub sent_at: Vec<Instant>,
    pub rtts: Vec<Duration>,
    pub corrupt: u64,
    /// Check every `check_stride`-th payload byte (1: all).
    pub check_stride: usize,
}

impl Pinger {
    pub fn new(peer: SocketAddr, total: u64, window: u64, size: usize) -> Self {
        Pinger {
            peer,
            total,
            window,
            size,
            next: 0,
            answered: vec![false; total as usize],
            answered_count: 0,
            sent_at: vec![Instant::ZERO; total as usize],
            rtts: Vec::new(),
            corrupt: 0,
            check_stride: 1,
        }
    }

    pub fn done(&self) -> bool {
        self.answered_count == self.total
    }
}

impl Engine for Pinger {
    fn handle_datagram(&mut self, now: Instant, _from: SocketAddr, datagram: &[u8]) {
        match check_datagram_sampled(datagram, self.check_stride).filter(|s| *s < self.total) {
            Some(seq) if !self.answered[seq as usize] => {
                self.answered[seq as usize] = true;
                self.answered_count += 1;
                self.rtts.push(now - self.sent_at[seq as usize]);
            }
            Some(_) => {}
            None => self.corrupt += 1,
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.next >= self.total || self.next - self.answered_count >= self.window {
            return None;
        }
        write_datagram(buf, self.next, self.size);
        self.sent_at[self.next as usize] = now;
        self.next += 1;
        Some(Transmit {
            destination: self.peer,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant) {}
}

/// Sends every datagram back to where it came from.
#[derive(Default)]
pub struct Echo {
    pub queue: VecDeque<(SocketAddr, Vec<u8>)>,
    pub echoed: u64,
}

impl Engine for Echo {
    fn handle_datagram(&mut self, _now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.queue.push_back((from, datagram.to_vec()));
    }

    fn poll_transmit(&mut self, _now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let (to, d) = self.queue.pop_front()?;
        buf.extend_from_slice(&d);
        self.echoed += 1;
        Some(Transmit { destination: to })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant) {}
}

/// Sends `total` numbered datagrams to `peer` as fast as the driver takes
/// them, or one per `interval` when it is non-zero (paced via poll_timeout).
pub struct Blaster {
    pub peer: SocketAddr,
    pub total: u64,
    pub size: usize,
    pub interval: Duration,
    pub next: u64,
    pub next_at: Instant,
}

impl Blaster {
    pub fn new(peer: SocketAddr, total: u64, size: usize) -> Self {
        Blaster {
            peer,
            total,
            size,
            interval: Duration::ZERO,
            next: 0,
            next_at: Instant::ZERO,
        }
    }

    pub fn done(&self) -> bool {
        self.next >= self.total
    }
}

impl Engine for Blaster {
    fn handle_datagram(&mut self, _now: Instant, _from: SocketAddr, _datagram: &[u8]) {}

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.done() || now < self.next_at {
            return None;
        }
        write_datagram(buf, self.next, self.size);
        self.next += 1;
        if !self.interval.is_zero() {
            // Late sends catch up by at most one datagram.
            self.next_at = (self.next_at + self.interval).max(now);
        }
        Some(Transmit {
            destination: self.peer,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (!self.done() && !self.interval.is_zero()).then_some(self.next_at)
    }

    fn handle_timeout(&mut self, _now: Instant) {}
}

/// Counts what arrives and checks every payload (every byte unless
/// `check_stride` is above 1).
#[derive(Default)]
pub struct Sink {
    pub check_stride: usize,
    pub received: u64,
    pub bytes: u64,
    pub corrupt: u64,
    pub max_seq: Option<u64>,
    pub first_at: Option<Instant>,
    pub last_at: Option<Instant>,
}

impl Engine for Sink {
    fn handle_datagram(&mut self, now: Instant, _from: SocketAddr, datagram: &[u8]) {
        self.received += 1;
        self.bytes += datagram.len() as u64;
        self.first_at.get_or_insert(now);
        self.last_at = Some(now);
        match check_datagram_sampled(datagram, self.check_stride) {
            Some(seq) => self.max_seq = Some(self.max_seq.map_or(seq, |m| m.max(seq))),
            None => self.corrupt += 1,
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
