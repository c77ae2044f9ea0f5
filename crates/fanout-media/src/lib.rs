//! fanout's single-rate multicast media rate control over RTP/RTCP
//! (`fanout_rtp`), sans-IO.
//!
//! [`asmp`]: the Adaptive Smooth Multicast Protocol as its paper describes
//! it (ASMP §3): each receiver computes a smooth TCP-friendly rate from its
//! reception statistics and reports it in an RTCP APP part; the sender
//! sends at the least of the latest reports.
//!
//! [`tfmcc`]: TFMCC (RFC 4654) and [`pgmcc`]: PGMCC (Rizzo, SIGCOMM
//! 2000), the baselines ASMP's authors compare with.
//!
//! [`control`]: the interface all three implement. [`MediaSender`] and
//! [`MediaReceiver`] run any of them as engines
//! ([`fanout_core::Engine`]) over RTP and RTCP on one port (RFC 5761),
//! driven by the real runtime or the simulator alike.

pub mod asmp;
pub mod control;
pub mod pgmcc;
pub mod receiver;
pub mod sender;
pub mod tfmcc;

pub use control::Controller;
pub use receiver::{MediaReceiver, MediaReceiverConfig, MediaReceiverStats};
pub use sender::{MediaSender, MediaSenderConfig, MediaSenderStats};
