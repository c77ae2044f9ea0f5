//! A directed link: a queue in front of a serializer at a fixed rate, then a
//! constant propagation delay, a random loss model and optional reordering.
//!
//! A packet occupies the link for `wire_bytes·8 / rate` seconds (rounded up to
//! whole nanoseconds), then arrives `delay` later (plus the reordering's
//! extra delay, for the packets it holds) unless the loss model drops it. A propagating packet travels inside its arrival event; the link only
//! counts it.

use crate::ids::{LinkId, NodeId};
use crate::loss::{LossModel, LossSpec};
use crate::packet::Packet;
use crate::queue::{Queue, QueueConfig, WireSize};
use crate::reorder::ReorderSpec;
use crate::stats::{LinkStats, NetDrop};
use fanout_core::time::duration_nanos;
use fanout_core::{Instant, Rng};
use std::time::Duration;

/// Parameters of one directed link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Serialization rate in bits per second (> 0).
    pub rate_bps: u64,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Random loss applied after serialization.
    pub loss: LossSpec,
    /// Queue discipline in front of the serializer.
    pub queue: QueueConfig,
    /// Packets held back after the propagation delay (default none).
    pub reorder: ReorderSpec,
}

impl LinkConfig {
    /// A loss-free link with the default DropTail queue.
    pub fn new(rate_bps: u64, delay: Duration) -> Self {
        LinkConfig {
            rate_bps,
            delay,
            loss: LossSpec::None,
            queue: QueueConfig::default(),
            reorder: ReorderSpec::NONE,
        }
    }

    /// Builder: sets the reordering.
    pub fn with_reorder(mut self, reorder: ReorderSpec) -> Self {
        self.reorder = reorder;
        self
    }

    /// Builder: sets the loss model.
    pub fn with_loss(mut self, loss: LossSpec) -> Self {
        self.loss = loss;
        self
    }

    /// Builder: sets the queue discipline.
    pub fn with_queue(mut self, queue: QueueConfig) -> Self {
        self.queue = queue;
        self
    }

    /// Serialization time of `wire_bytes` bytes, rounded up to whole ns.
    pub fn tx_time(&self, wire_bytes: u32) -> Duration {
        let bits_ns = u128::from(wire_bytes) * 8 * 1_000_000_000;
        let rate = u128::from(self.rate_bps.max(1));
        Duration::from_nanos(u64::try_from(bits_ns.div_ceil(rate)).unwrap_or(u64::MAX))
    }
}

/// What happened to a packet offered to a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// The link was idle: serialization started and ends at this instant.
    Started(Instant),
    /// Waiting in the queue.
    Queued,
    /// Dropped by the queue.
    Dropped(NetDrop),
}

/// What the end of a serialization produced.
#[derive(Debug)]
pub struct TxDone<P> {
    /// The packet that finished serializing.
    pub packet: P,
    /// When it reaches the far end; `None`: the loss model lost it.
    pub arrival: Option<Instant>,
    /// Wire bytes of the packet that finished.
    pub wire_bytes: u32,
    /// The next packet's serialization ends at this instant.
    pub next_done: Option<Instant>,
}

/// The model of one directed link — queue, serializer, propagation delay
/// and loss — as a state machine driven by a clock it does not own.
///
/// The caller offers packets ([`LinkModel::offer`]), calls
/// [`LinkModel::finish_tx`] at each instant the model returned as the end
/// of a serialization, and [`LinkModel::arrived`] when a propagating packet
/// reaches the far end. The simulator passes virtual time; `fanout-lab`'s
/// emulator passes the real clock's scheduled instants: one implementation,
/// two clocks. Times handed in must not decrease.
#[derive(Debug)]
pub struct LinkModel<P> {
    config: LinkConfig,
    queue: Queue<P>,
    loss: LossModel,
    rng: Rng,
    on_wire: Option<P>,
    /// Packets in propagation.
    in_flight: usize,
    stats: LinkStats,
}

impl<P: WireSize> LinkModel<P> {
    /// An idle, empty link drawing its randomness (loss, RED) from `rng`.
    pub fn new(config: LinkConfig, rng: Rng) -> Self {
        LinkModel {
            queue: Queue::new(config.queue),
            loss: LossModel::new(config.loss),
            config,
            rng,
            on_wire: None,
            in_flight: 0,
            stats: LinkStats::default(),
        }
    }

    /// Parameters.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Packets waiting in the queue (excluding the one on the wire).
    pub fn queue_packets(&self) -> usize {
        self.queue.len_packets()
    }

    /// Wire bytes waiting in the queue (excluding the one on the wire).
    pub fn queue_bytes(&self) -> u64 {
        self.queue.len_bytes()
    }

    /// RED's average queue, if the queue is RED.
    pub fn red_avg(&self) -> Option<f64> {
        self.queue.red_avg()
    }

    /// Packets in propagation (serialized, not yet arrived).
    pub fn in_flight_packets(&self) -> usize {
        self.in_flight
    }

    /// Whether a packet is being serialized.
    pub fn busy(&self) -> bool {
        self.on_wire.is_some()
    }

    /// Offers a packet at `now`.
    pub fn offer(&mut self, packet: P, now: Instant) -> Offer {
        self.stats.offered_packets += 1;
        if self.on_wire.is_none() {
            // Idle link: RED still sees the arrival (avg decays over idle time).
            debug_assert_eq!(self.queue.len_packets(), 0);
            if let Err(reason) =
                self.queue
                    .enqueue(packet, now, self.config.rate_bps, &mut self.rng)
            {
                self.stats.drops[reason] += 1;
                return Offer::Dropped(reason);
            }
            return Offer::Started(self.start_next(now).expect("just enqueued"));
        }
        match self
            .queue
            .enqueue(packet, now, self.config.rate_bps, &mut self.rng)
        {
            Ok(()) => Offer::Queued,
            Err(reason) => {
                self.stats.drops[reason] += 1;
                Offer::Dropped(reason)
            }
        }
    }

    fn start_next(&mut self, now: Instant) -> Option<Instant> {
        let p = self.queue.dequeue()?;
        let done = now + self.config.tx_time(p.wire_size());
        self.on_wire = Some(p);
        Some(done)
    }

    /// The packet on the wire finished serializing at `now`.
    ///
    /// # Panics
    ///
    /// If no packet is being serialized (the caller's schedule is wrong).
    pub fn finish_tx(&mut self, now: Instant) -> TxDone<P> {
        let packet = self.on_wire.take().expect("finish_tx with an idle link");
        let wire_bytes = packet.wire_size();
        self.stats.tx_packets += 1;
        self.stats.tx_bytes += u64::from(wire_bytes);
        let arrival = if self.loss.lose(&mut self.rng) {
            self.stats.drops[NetDrop::RandomLoss] += 1;
            None
        } else {
            self.in_flight += 1;
            Some(now + self.config.delay + self.config.reorder.draw(&mut self.rng))
        };
        let next_done = self.start_next(now);
        if next_done.is_none() {
            self.queue.on_idle(now);
        }
        TxDone {
            packet,
            arrival,
            wire_bytes,
            next_done,
        }
    }

    /// An in-flight packet reached the far end.
    pub fn arrived(&mut self) {
        self.stats.delivered_packets += 1;
        self.in_flight -= 1;
    }
}

/// A directed link of the simulated network and its state.
#[derive(Debug)]
pub struct Link {
    id: LinkId,
    from: NodeId,
    to: NodeId,
    model: LinkModel<Packet>,
}

impl Link {
    pub(crate) fn new(id: LinkId, from: NodeId, to: NodeId, config: LinkConfig, rng: Rng) -> Self {
        Link {
            id,
            from,
            to,
            model: LinkModel::new(config, rng),
        }
    }

    /// This link's id.
    pub fn id(&self) -> LinkId {
        self.id
    }

    /// Sending node.
    pub fn from(&self) -> NodeId {
        self.from
    }

    /// Receiving node.
    pub fn to(&self) -> NodeId {
        self.to
    }

    /// Parameters.
    pub fn config(&self) -> &LinkConfig {
        self.model.config()
    }

    /// Counters.
    pub fn stats(&self) -> &LinkStats {
        self.model.stats()
    }

    /// Packets waiting in the queue (excluding the one on the wire).
    pub fn queue_packets(&self) -> usize {
        self.model.queue_packets()
    }

    /// Wire bytes waiting in the queue (excluding the one on the wire).
    pub fn queue_bytes(&self) -> u64 {
        self.model.queue_bytes()
    }

    /// RED's average queue, if the queue is RED.
    pub fn red_avg(&self) -> Option<f64> {
        self.model.red_avg()
    }

    /// Packets in propagation (serialized, not yet arrived).
    pub fn in_flight_packets(&self) -> usize {
        self.model.in_flight_packets()
    }

    /// Offers a packet at `now`.
    pub(crate) fn offer(&mut self, packet: Packet, now: Instant) -> Offer {
        self.model.offer(packet, now)
    }

    /// The packet on the wire finished serializing at `now`.
    pub(crate) fn finish_tx(&mut self, now: Instant) -> TxDone<Packet> {
        self.model.finish_tx(now)
    }

    /// An in-flight packet reached the far end.
    pub(crate) fn arrived(&mut self) {
        self.model.arrived();
    }

    /// Nanoseconds of propagation delay.
    pub fn delay_nanos(&self) -> u64 {
        duration_nanos(self.model.config().delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_time_is_exact_and_rounds_up() {
        let c = LinkConfig::new(10_000_000, Duration::ZERO);
        assert_eq!(c.tx_time(1250), Duration::from_millis(1));
        let c = LinkConfig::new(3, Duration::ZERO);
        // 8 bits at 3 bit/s = 2.666… s → rounded up.
        assert_eq!(c.tx_time(1), Duration::from_nanos(2_666_666_667));
    }
}
