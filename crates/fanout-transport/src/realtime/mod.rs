//! Real-time delivery: messages that must arrive in time rather than
//! completely (TCP-CM; TCP-RTM of TCP-SMO §II).
//!
//! * The application writes messages that never block
//!   ([`crate::session::SessionSender::send_message`]) into a pushed queue
//!   ([`queue`], TCP-CM §3.1): P-FIFO or P-LIFO, dropping the oldest when
//!   full. A message shorter than a segment is never merged with another;
//!   a longer one is split into full segments and a remainder (TCP-CM
//!   §3.3).
//! * No stale retransmission: a lost segment of a message without a
//!   deadline is never sent again (TCP-CM §3.2); one with a deadline is
//!   repaired only while the repair can still arrive in time (TCP-RTM:
//!   deadline minus the way there, counted as the whole round trip,
//!   [`deadline::forward_delay`]). Instead of the data, the sender
//!   sends SKIP naming the lost messages; the receiver fills the hole and
//!   goes on. A repair that was lost once already goes twice when no
//!   later repair could follow it in time: on a path that loses often, the
//!   last chance is not left to one datagram.
//! * Receivers in real-time mode ([`crate::TransportConfig::realtime`])
//!   read whole messages ([`crate::Receiver::read_message`],
//!   [`reader`]); a message any of whose bytes were skipped is dropped and
//!   counted.
//!
//! Congestion control is the session's own: a loss still cuts the window
//! (TCP-CM §3.2). Messages with deadlines (TCP-RTM) need a rate that does
//! not dip below the stream's after every loss, so a session whose
//! messages carry deadlines takes the equation rate by default
//! ([`crate::session::WindowPolicy::Auto`]).

pub mod deadline;
pub mod delay;
pub mod outgoing;
pub mod queue;
pub mod reader;

pub use deadline::SenderClock;
pub use delay::DelayHistogram;
pub use outgoing::SentMessages;
pub use queue::{PushedQueue, QueueLimit, QueueOrder, QueueStats, QueuedMessage};
pub use reader::MessageBounds;

/// How much longer than its way there ([`deadline::forward_delay`]) a
/// message takes from the sender's decision to a receiver's reading, as
/// the sender counts it when
/// it decides whether a message (or its repair) can still arrive in time:
/// receivers read deadlines [`deadline::GUARD`] early, and read what
/// arrived after their event loop's wake-up delay (input coalescing, 1.5 ms
/// by default). A message sent later than this arrives only to be dropped
/// as late, spending rate the messages behind it need.
pub const ARRIVAL_MARGIN: std::time::Duration = std::time::Duration::from_millis(4);

/// A whole message [`crate::Receiver::read_message`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadMessage {
    /// Its deadline on the receiver's clock, if the sender named one
    /// (already early by the mapping's guard,
    /// [`deadline::SenderClock::local`]): a relay passes it on.
    pub deadline: Option<fanout_core::time::Instant>,
}

/// A session sender's real-time mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RealtimeSend {
    /// Which queued message goes next.
    pub order: QueueOrder,
    /// How long the queue may grow.
    pub limit: QueueLimit,
    /// The messages carry deadlines (TCP-RTM; without, TCP-CM's
    /// best-effort delivery): every DATA datagram names its message's
    /// deadline to the receivers (DEADLINE, 5 bytes of each datagram kept
    /// free for it), so they drop what completes too late; and the
    /// session's default rate is the equation rate. Deadlines given to
    /// `send_message` without this still decide repairs at the sender.
    pub deadlines: bool,
}

impl RealtimeSend {
    /// TCP-CM's defaults for datagrams of `max_datagram` bytes: P-FIFO,
    /// 100 datagrams' worth, no deadlines.
    pub fn with_defaults(max_datagram: usize) -> Self {
        RealtimeSend {
            order: QueueOrder::Fifo,
            limit: QueueLimit::Bytes(queue::DEFAULT_QUEUE_DATAGRAMS * max_datagram),
            deadlines: false,
        }
    }
}
