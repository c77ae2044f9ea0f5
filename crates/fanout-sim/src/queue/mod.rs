//! Link queues: the packets waiting while the link serializes another one,
//! under a discipline (DropTail or RED) that decides what to drop.

mod droptail;
mod red;

pub use droptail::QueueLimit;
pub use red::{Red, RedConfig, RedRegion};

use crate::packet::Packet;
use crate::stats::NetDrop;
use fanout_core::{Instant, Rng};
use serde::Deserialize;
use std::collections::VecDeque;

/// Queue discipline configuration. In scenario files a `queue` table with
/// `kind = "drop_tail"` (and `packets` or `bytes`) or `kind = "red"` (see
/// [`RedConfig`] for the keys).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "QueueSpec")]
pub enum QueueConfig {
    /// Tail drop at a fixed limit.
    DropTail {
        /// Capacity in packets or bytes.
        limit: QueueLimit,
    },
    /// Random Early Detection (Floyd & Jacobson 1993).
    Red(RedConfig),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum QueueKind {
    DropTail,
    Red,
}

/// The flat TOML form of a queue; validated into [`QueueConfig`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueSpec {
    kind: QueueKind,
    packets: Option<u32>,
    bytes: Option<crate::units::Bytes>,
    min_th: Option<f64>,
    max_th: Option<f64>,
    max_p: Option<f64>,
    w_q: Option<f64>,
    gentle: Option<bool>,
    byte_mode: Option<bool>,
    mean_packet: Option<crate::units::Bytes>,
}

impl TryFrom<QueueSpec> for QueueConfig {
    type Error = String;
    fn try_from(s: QueueSpec) -> Result<Self, String> {
        let limit = match (s.packets, s.bytes) {
            (Some(p), None) => QueueLimit::Packets(p),
            (None, Some(b)) => QueueLimit::Bytes(b),
            (None, None) => {
                return Err("queue: give a limit as `packets = N` or `bytes = \"64KB\"`".into())
            }
            (Some(_), Some(_)) => {
                return Err("queue: give only one of `packets` and `bytes`".into())
            }
        };
        let config = match s.kind {
            QueueKind::DropTail => {
                let red_keys = [
                    s.min_th.is_some(),
                    s.max_th.is_some(),
                    s.max_p.is_some(),
                    s.w_q.is_some(),
                    s.gentle.is_some(),
                    s.byte_mode.is_some(),
                    s.mean_packet.is_some(),
                ];
                if red_keys.iter().any(|&k| k) {
                    return Err("queue: RED keys (min_th, max_th, max_p, w_q, gentle, byte_mode, mean_packet) need kind = \"red\"".into());
                }
                QueueConfig::DropTail { limit }
            }
            QueueKind::Red => {
                let d = RedConfig::default();
                QueueConfig::Red(RedConfig {
                    min_th: s.min_th.ok_or("queue: RED needs `min_th`")?,
                    max_th: s.max_th.ok_or("queue: RED needs `max_th`")?,
                    max_p: s.max_p.unwrap_or(d.max_p),
                    w_q: s.w_q.unwrap_or(d.w_q),
                    gentle: s.gentle.unwrap_or(d.gentle),
                    byte_mode: s.byte_mode.unwrap_or(d.byte_mode),
                    mean_packet_bytes: s.mean_packet.map_or(d.mean_packet_bytes, |b| b.0),
                    limit,
                })
            }
        };
        config.validate().map_err(|e| format!("queue: {e}"))?;
        Ok(config)
    }
}

impl Default for QueueConfig {
    /// DropTail with 100 packets (ns-2's default limit is 50; 100 is a
    /// common testbed choice).
    fn default() -> Self {
        QueueConfig::DropTail {
            limit: QueueLimit::Packets(100),
        }
    }
}

impl QueueConfig {
    /// Checks the parameters; the error names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            QueueConfig::DropTail { .. } => Ok(()),
            QueueConfig::Red(c) => c.validate(),
        }
    }
}

/// What a queue and a link need to know about a packet: its size on the
/// wire. The simulator queues [`Packet`]s; `fanout-lab`'s emulator queues
/// real IP datagrams through the same code.
pub trait WireSize {
    /// Bytes the packet occupies on the wire (headers included).
    fn wire_size(&self) -> u32;
}

impl WireSize for Packet {
    fn wire_size(&self) -> u32 {
        self.wire_bytes
    }
}

#[derive(Debug, Clone)]
enum Discipline {
    DropTail(QueueLimit),
    Red(Red),
}

/// A FIFO of waiting packets with its discipline. The packet being
/// serialized is not in the queue and does not count against the limit.
#[derive(Debug, Clone)]
pub struct Queue<P = Packet> {
    packets: VecDeque<P>,
    bytes: u64,
    discipline: Discipline,
}

impl<P: WireSize> Queue<P> {
    /// An empty queue with the given discipline.
    pub fn new(config: QueueConfig) -> Self {
        let discipline = match config {
            QueueConfig::DropTail { limit } => Discipline::DropTail(limit),
            QueueConfig::Red(c) => Discipline::Red(Red::new(c)),
        };
        Queue {
            packets: VecDeque::new(),
            bytes: 0,
            discipline,
        }
    }

    /// Waiting packets.
    pub fn len_packets(&self) -> usize {
        self.packets.len()
    }

    /// Waiting wire bytes.
    pub fn len_bytes(&self) -> u64 {
        self.bytes
    }

    /// RED's average queue size (packets, or bytes in byte mode), if RED.
    pub fn red_avg(&self) -> Option<f64> {
        match &self.discipline {
            Discipline::Red(r) => Some(r.avg()),
            Discipline::DropTail(_) => None,
        }
    }

    /// Offers a packet arriving at `now`; `link_rate_bps` drives RED's idle
    /// decay. On `Err` the packet has been dropped for that reason.
    pub fn enqueue(
        &mut self,
        packet: P,
        now: Instant,
        link_rate_bps: u64,
        rng: &mut Rng,
    ) -> Result<(), NetDrop> {
        let size = u64::from(packet.wire_size());
        let limit = match &mut self.discipline {
            Discipline::DropTail(limit) => *limit,
            Discipline::Red(red) => {
                let q = red.measure(self.packets.len(), self.bytes);
                if let Some(reason) = red.on_arrival(now, q, size, link_rate_bps, rng) {
                    return Err(reason);
                }
                red.config().limit
            }
        };
        if limit.would_overflow(self.packets.len(), self.bytes, size) {
            return Err(NetDrop::QueueOverflow);
        }
        self.bytes += size;
        self.packets.push_back(packet);
        Ok(())
    }

    /// Takes the head packet for transmission.
    pub fn dequeue(&mut self) -> Option<P> {
        let p = self.packets.pop_front()?;
        self.bytes -= u64::from(p.wire_size());
        Some(p)
    }

    /// The link went idle (queue empty, nothing serializing) at `now`.
    pub fn on_idle(&mut self, now: Instant) {
        if let Discipline::Red(red) = &mut self.discipline {
            red.on_idle(now);
        }
    }
}
