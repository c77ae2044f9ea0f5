//! fanout's TCP-like transport engines over UDP.
//!
//! * [`wire`] — wire format v2 (`docs/wire.md`).
//! * [`session::SessionSender`] — the sending end of every transfer: a
//!   TCP-SMO session of many members over multicast (or unicast fan-out),
//!   or of one member (a unicast transfer, [`session::SessionSender::offer`]).
//! * [`Receiver`] — the receiving end, as a listener, a session member, or
//!   a member reporting through an ACK merger.
//! * [`merge::Merger`] — the MCTCP ACK merger.
//!
//! Every engine is sans-IO ([`fanout_core::Engine`]), so the same code runs
//! over real sockets (`fanout-io`) and in the simulator (`fanout-sim`).

pub mod address_budget;
mod config;
mod event;
pub mod fec;
pub mod handshake;
mod join_budget;
pub mod merge;
mod packet;
pub mod protection;
pub mod realtime;
mod reattach;
mod receiver;
mod recovery;
mod recv_buffer;
mod segment_log;
mod send_buffer;
pub mod session;
mod stats;
mod upstream;
pub mod wire;

pub use config::{TransportConfig, DATA_FRAME_FIXED_OVERHEAD, DEFAULT_MAX_DATAGRAM};
pub use event::{CloseReason, Event};
pub use packet::{PacketBuilder, PacketNumbers};
pub use reattach::{DEFAULT_PARENT_SILENCE, MAX_FALLBACK};
pub use receiver::coded::{CodedRx, MAX_HELD_REPAIR_BYTES, MAX_PARTIAL_BLOCKS};
pub use receiver::{AllowedSenders, Receiver};
pub use recovery::{
    AckOutcome, Recovery, TimeoutOutcome, MAX_REPAIRS_IN_FLIGHT, MAX_SACK_RANGES_KEPT,
};
pub use segment_log::{LoggedSegment, SegmentLog};
pub use stats::ReceiverStats;
pub use upstream::{
    UpstreamSendStats, UpstreamStatus, MAX_UPSTREAM_RTO_BACKOFFS, UPSTREAM_INITIAL_WINDOW,
    UPSTREAM_SEND_BUFFER,
};
