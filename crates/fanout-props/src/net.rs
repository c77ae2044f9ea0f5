//! The in-memory network of the honest peers: every datagram arrives after
//! a fixed one-way delay, in sending order, unless the script asked to
//! drop it (a bounded number per destination, so repair is exercised but
//! a peer cannot be cut off for good).

use crate::attack::Attackers;
use crate::script::{steps, Step};
use fanout_core::time::Instant;
use fanout_core::{drain, Engine};
use fanout_transport::Receiver;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// The session sender's address in every harness.
pub fn sender_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], 5000))
}

/// The session's multicast group in every harness.
pub fn group() -> SocketAddr {
    SocketAddr::from(([239, 1, 1, 1], 7000))
}

/// Honest receiver `i` (a member of the sender, or a child of the merger).
pub fn receiver_addr(i: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 1, i as u8 + 1], 7000))
}

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

/// Runs one honest engine as its application and driver would: reads what
/// it has for the application into `got` (if it reads; `read` returns 0
/// when nothing is ready), then drains what it sends onto `wire` from
/// `from`. Returns its next timer and whether it sent anything.
pub fn pump_peer<E: Engine>(
    engine: &mut E,
    mut read: impl FnMut(&mut E, &mut [u8]) -> usize,
    got: &mut Vec<u8>,
    now: Instant,
    from: SocketAddr,
    wire: &mut Wire,
    buf: &mut Vec<u8>,
) -> (Option<Instant>, bool) {
    let mut chunk = [0u8; 16384];
    loop {
        let n = read(engine, &mut chunk);
        if n == 0 {
            break;
        }
        got.extend_from_slice(&chunk[..n]);
    }
    let mut out = Vec::new();
    let next = drain(engine, now, buf, 64, |t, b| {
        out.push((t.destination, b.to_vec()))
    });
    let sent = !out.is_empty();
    for (to, bytes) in out {
        wire.send(now, from, to, bytes);
    }
    (next, sent)
}

/// [`pump_peer`] for honest receivers `i` at `addr(i)` reading into
/// `got[i]`, then `check(i, start, got[i])` of what each read. Returns
/// their earliest timer and whether any sent anything.
pub fn pump_receivers(
    receivers: &mut [Receiver],
    got: &mut [Vec<u8>],
    addr: impl Fn(usize) -> SocketAddr,
    check: impl Fn(usize, u64, &[u8]),
    now: Instant,
    wire: &mut Wire,
    buf: &mut Vec<u8>,
) -> (Option<Instant>, bool) {
    let mut next = None;
    let mut sent = false;
    for (i, r) in receivers.iter_mut().enumerate() {
        let (t, s) = pump_peer(r, Receiver::read, &mut got[i], now, addr(i), wire, buf);
        check(i, r.start_offset(), &got[i]);
        sent |= s;
        next = [next, t].into_iter().flatten().min();
    }
    (next, sent)
}

/// The attack: each step of `script` at its time (never after
/// `attack_end`), `step` carrying it out, then whatever it set off, then
/// `check` of the bounds.
pub fn attack<N: Network>(
    net: &mut N,
    script: &[u8],
    attack_end: Instant,
    mut step: impl FnMut(&mut N, &Step<'_>, &mut Attackers),
    mut check: impl FnMut(&mut N),
) {
    let mut attackers = Attackers::default();
    for s in steps(script) {
        let until = (net.now() + s.advance).min(attack_end);
        run_until(net, until, |_| false);
        step(net, &s, &mut attackers);
        let (_, _) = net.pump();
        check(net);
    }
}
