//! The CLI's side of late joiners of a file session: the catch-up engines
//! (request, server, client, prefix) are `fanout_app::catch_up`'s; here are
//! what touches the disk — the prefix sources that read the file or a
//! relay's spool ([`files`]) and the joiner's output, both parts written
//! into `NAME.part` and verified with BLAKE3 ([`split_file`],
//! [`late_recv`]).
//!
//! The design and its trade-offs: `docs/experiments/smo.md`, "Late joiners
//! of a file".

pub mod files;
pub mod late_recv;
pub mod split_file;

pub use late_recv::receive_rest;
