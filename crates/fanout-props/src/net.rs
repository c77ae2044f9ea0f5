//! The in-memory network of the honest peers: every datagram arrives after
//! a fixed one-way delay, in sending order, unless the script asked to
//! drop it (a bounded number per destination, so repair is exercised but
//! a peer cannot be cut off for good).

use fanout_core::time::Instant;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// Most datagrams the script may drop on their way to one honest peer.
pub const MAX_DROPS_PER_PEER: u32 = 24;

/// Datagrams in flight.
#[derive(Debug)]
pub struct Wire {
    delay: Duration,
    /// (arrival, sequence) → (source, destination, bytes).
    queue: BTreeMap<(Instant, u64), (SocketAddr, SocketAddr, Vec<u8>)>,
    seq: u64,
    /// Datagrams still to drop, per destination.
    to_drop: BTreeMap<SocketAddr, u32>,
    /// Drops asked for so far (pending or done), per destination.
    asked: BTreeMap<SocketAddr, u32>,
    /// Datagrams dropped, per destination.
    dropped: BTreeMap<SocketAddr, u32>,
}

impl Wire {
    /// A wire delivering after `delay`.
    pub fn new(delay: Duration) -> Self {
        Wire {
            delay,
            queue: BTreeMap::new(),
            seq: 0,
            to_drop: BTreeMap::new(),
            asked: BTreeMap::new(),
            dropped: BTreeMap::new(),
        }
    }

    /// Sends `bytes` from → to at `now` (or drops it, if asked to).
    pub fn send(&mut self, now: Instant, from: SocketAddr, to: SocketAddr, bytes: Vec<u8>) {
        if let Some(n) = self.to_drop.get_mut(&to).filter(|n| **n > 0) {
            *n -= 1;
            *self.dropped.entry(to).or_default() += 1;
            return;
        }
        self.seq += 1;
        self.queue
            .insert((now + self.delay, self.seq), (from, to, bytes));
    }

    /// Drops the next `n` datagrams to `to`, within
    /// [`MAX_DROPS_PER_PEER`] in all.
    pub fn drop_next(&mut self, to: SocketAddr, n: u32) {
        let asked = self.asked.entry(to).or_default();
        let n = n.min(MAX_DROPS_PER_PEER - *asked);
        *asked += n;
        *self.to_drop.entry(to).or_default() += n;
    }

    /// Stops dropping (the attack is over).
    pub fn stop_dropping(&mut self) {
        self.to_drop.clear();
    }

    /// Datagrams dropped on their way to `to`.
    pub fn dropped(&self, to: SocketAddr) -> u32 {
        self.dropped.get(&to).copied().unwrap_or(0)
    }

    /// When the next datagram arrives.
    pub fn next_arrival(&self) -> Option<Instant> {
        self.queue.keys().next().map(|k| k.0)
    }

    /// The next datagram arrived by `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<(SocketAddr, SocketAddr, Vec<u8>)> {
        let e = self.queue.first_entry()?;
        if e.key().0 > now {
            return None;
        }
        Some(e.remove())
    }

    /// True when nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

/// A network of engines driven by [`run_until`].
pub trait Network {
    /// The network's clock.
    fn now(&self) -> Instant;
    /// Moves the clock (never backwards).
    fn set_now(&mut self, now: Instant);
    /// Runs every engine's due timers and drains its output onto the wire;
    /// returns the earliest engine timer and whether anything was sent.
    fn pump(&mut self) -> (Option<Instant>, bool);
    /// The wire.
    fn wire(&mut self) -> &mut Wire;
    /// Hands one arrived datagram to its destination.
    fn deliver(&mut self, from: SocketAddr, to: SocketAddr, bytes: Vec<u8>);
}

/// Most consecutive rounds in which no datagram moves and the clock stands
/// still: an engine whose timer stays due without doing anything would
/// spin its driver forever.
const MAX_IDLE_ROUNDS: u32 = 1000;

/// Runs `net` until `end` (or until `done` holds): timers and arrivals in
/// time order. Panics if an engine keeps its driver busy at one instant
/// without sending anything.
pub fn run_until<N: Network>(net: &mut N, end: Instant, done: impl Fn(&N) -> bool) {
    let mut idle = 0u32;
    loop {
        let (timer, sent) = net.pump();
        if done(net) {
            return;
        }
        let arrival = net.wire().next_arrival();
        let next = [timer, arrival].into_iter().flatten().min();
        let Some(next) = next.filter(|&t| t <= end) else {
            net.set_now(end.max(net.now()));
            return;
        };
        let moved = next > net.now();
        if moved {
            net.set_now(next);
        }
        let now = net.now();
        let mut delivered = false;
        while let Some((from, to, bytes)) = net.wire().pop_due(now) {
            net.deliver(from, to, bytes);
            delivered = true;
        }
        idle = if moved || sent || delivered {
            0
        } else {
            idle + 1
        };
        assert!(
            idle < MAX_IDLE_ROUNDS,
            "an engine's timer stays due at {now:?} without any effect (driver livelock)"
        );
    }
}
