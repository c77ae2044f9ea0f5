//! The user-space link emulator: [`Core`] (the network model, no I/O) and
//! [`Emulator`] (a thread moving datagrams between TUN devices and the core
//! on the real clock).

mod core;
mod lateness;
mod offload;
mod packet;
mod runner;

pub use self::core::{Core, CoreCounters};
pub use lateness::{Lateness, LatenessSummary};
pub use offload::OffloadCounters;
pub use packet::{classify, Classified, EmuPacket};
pub use runner::{EmuReport, Emulator, LinkReport, Snapshot};
