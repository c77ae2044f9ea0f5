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

pub mod config;
pub mod event;
pub mod fec;
pub mod handshake;
pub mod merge;
pub mod packet;
pub mod reattach;
pub mod receiver;
pub mod recovery;
pub mod recv_buffer;
pub mod segment_log;
pub mod send_buffer;
pub mod session;
pub mod stats;
pub mod upstream;
pub mod wire;

pub use config::TransportConfig;
pub use event::{CloseReason, Event};
pub use receiver::Receiver;
pub use recovery::Recovery;
pub use segment_log::SegmentLog;
pub use stats::ReceiverStats;
pub use upstream::{UpstreamSendStats, UpstreamStatus};
