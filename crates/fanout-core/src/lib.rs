//! Sans-IO building blocks shared by every fanout engine.
//!
//! Nothing in this crate reads a clock, touches a socket or draws global
//! randomness: time ([`time::Instant`]) and randomness ([`rng::Rng`]) are
//! injected, so the same engines run under the real runtime (`fanout-io`) and
//! under the deterministic simulator (`fanout-sim`).

pub mod ack_policy;
pub mod cc;
pub mod codec;
pub mod engine;
pub mod histogram;
pub mod pacing;
pub mod rangeset;
pub mod rng;
pub mod rtt;
pub mod stats;
pub mod tfrc;
pub mod time;
pub mod timer;

pub use engine::{drain, Engine, Transmit};
pub use pacing::Pacer;
pub use rangeset::RangeSet;
pub use rng::Rng;
pub use time::Instant;
pub use timer::TimerTable;
