//! fanout's application protocol over its transport, sans-IO: what the
//! CLI, the library API and the simulator all run, so the simulator tests
//! the code that ships.
//!
//! * [`manifest`] — how a file travels on a stream: a manifest message,
//!   the bytes, a BLAKE3 trailer.
//! * [`feed`] — feeds a file (any [`std::io::Read`]) into a stream,
//!   never blocking; [`intake`] takes it apart at the receiver and checks
//!   its hash.
//! * [`catch_up`] — late joiners of a file session fetch the prefix they
//!   missed from the session sender: the server (a composite engine on the
//!   session's socket) and the client.
//! * [`upstream_relay`] — the session relay: members' upstream lines
//!   echoed into the stream.
//!
//! Nothing here opens a socket, reads a clock or touches a file by name:
//! readers and outputs are the caller's.

pub mod catch_up;
pub mod feed;
pub mod intake;
pub mod manifest;
pub mod memory_sink;
mod sink;
pub mod upstream_relay;

pub use feed::FileFeed;
pub use intake::{FileIntake, IntakeError, Piece};
pub use manifest::{
    Entry, EntryKind, FileSpan, Manifest, ManifestError, MAX_MANIFEST_BYTES, TRAILER_LEN,
};
pub use memory_sink::MemorySink;
pub use sink::{StreamSink, UpstreamSink};
