//! Late joiners of a file session (issue 3 §2): a member admitted after the
//! start of the file left the send buffer (`JoinPolicy::CatchUp`) gets the
//! live stream from its start offset `S` by multicast, and the missed
//! prefix `[0, S)` by a separate unicast catch-up transfer from the same
//! sender — the ordinary unicast `Sender`/`Receiver` engines, so the
//! catch-up is congestion-controlled like one TCP flow and does not enter
//! the session's window (the minimum over members). While the session runs
//! the catch-ups only get a small share of the sender's link
//! ([`server::SESSION_BYTES_PER_CATCH_UP_BYTE`]), so they barely slow it.
//!
//! - [`request`]: the request datagram (a CONNECT naming the member).
//! - [`server`]: the sender's composite engine on the session socket.
//! - [`prefix`]: re-produces the stream prefix from the file on disk.
//! - [`client`]: the joiner's catch-up engine on its own socket.
//! - [`split_file`] and [`late_recv`]: the joiner writes both parts into
//!   `NAME.part` and verifies the whole file with BLAKE3.
//!
//! The design and its trade-offs: `docs/experiments/smo.md`, "Late joiners
//! of a file".

pub mod client;
pub mod late_recv;
pub mod prefix;
pub mod request;
pub mod server;
pub mod split_file;

pub use late_recv::receive_rest;
pub use server::CatchUpServer;
