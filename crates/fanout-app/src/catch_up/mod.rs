//! Late joiners of a file session: a member admitted after the start of
//! the stream left the send buffer (`JoinPolicy::CatchUp`) gets the live
//! stream from its start offset `S` by the session, and the missed prefix
//! `[0, S)` by a separate transfer from the same sender — a session of one,
//! congestion-controlled like one TCP flow, outside the session's window.
//! While the session runs the catch-ups only get a small share of the
//! sender's link ([`CatchUpConfig::session_bytes_per_catch_up_byte`]), so
//! they barely slow it.
//!
//! - [`request`]: the request datagram (a CATCH_UP frame naming the member).
//! - [`server`]: the sender's composite engine on the session socket.
//! - [`prefix`]: re-produces the stream prefix from the file's bytes.
//! - [`client`]: the joiner's catch-up engine on its own socket.
//!
//! The design and its trade-offs: `docs/experiments/smo.md`, "Late joiners
//! of a file".

pub mod client;
pub mod prefix;
pub mod request;
pub mod server;

pub use client::CatchUpClient;
pub use prefix::{FileInMemory, PrefixFeed, PrefixSource, PrefixStream, RawPrefix, RepeatedByte};
pub use server::{CatchUpConfig, CatchUpServer, CatchUpStats, MAX_CATCH_UPS};
