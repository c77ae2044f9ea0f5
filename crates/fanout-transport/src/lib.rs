//! fanout's TCP-like transport engines over UDP.
//!
//! * [`wire`] — wire format v1 (`docs/wire.md`).
//! * [`Sender`] / [`Receiver`] — a reliable, congestion-controlled byte
//!   stream from one sender to one receiver; sans-IO
//!   ([`fanout_core::Engine`]), so the same code runs over real sockets
//!   (`fanout-io`) and in the simulator (`fanout-sim`).

pub mod config;
pub mod event;
pub mod fec;
pub mod merge;
pub mod reattach;
pub mod receiver;
pub mod recv_buffer;
pub mod scoreboard;
pub mod send_buffer;
pub mod sender;
pub mod session;
pub mod stats;
pub mod upstream;
pub mod wire;

pub use config::TransportConfig;
pub use event::{CloseReason, Event};
pub use receiver::Receiver;
pub use sender::Sender;
pub use stats::{ReceiverStats, SenderStats};
pub use upstream::{UpstreamSendStats, UpstreamStatus};
