//! Overlay delivery where IP multicast does not reach, after ROMA (Kwon
//! and Byers, "ROMA: Reliable Overlay Multicast with Loosely Coupled TCP
//! Connections"): hosts joined by ordinary TCP connections into a tree,
//! each relay forwarding what its downstream connections can take.
//!
//! - [`chain`]: the chain model (ROMA §V, equations 1–3): a hop's TCP
//!   rate from its round trip and loss, and a host's rate as the least
//!   over the hops above it, beside the older aggregate-path model;
//! - [`symbol`]: a symbol's frame on a hop's byte stream, authenticated
//!   by a keyed BLAKE3 tag;
//! - [`fountain`]: the object's layout in RaptorQ blocks (RFC 6330, the
//!   `raptorq` crate), the source's endless symbols and the receiver's
//!   decoder, which checks every symbol before decoding and the object's
//!   BLAKE3 after, inline or handing the expensive work out as
//!   [`jobs`] to run off the event loop;
//! - [`hop`]: what a hop carries: the child's hello, the parent's sealed
//!   manifest, then frames;
//! - [`relay`]: forward-when-feasible — a circular buffer of frames and a
//!   cursor per downstream connection, which takes what it can now and
//!   skips what it could not;
//! - [`sent`]: which source symbols each child was given, so a host that
//!   decoded serves its children those it lacks itself;
//! - [`children`], [`source::OverlaySource`], [`node::OverlayNode`]: the
//!   hosts, sans IO: the source feeds its children the fountain; a node
//!   reads its parent's stream, decodes, and relays to its own children;
//! - [`redirect`]: joins that follow the plan: the source's authenticated
//!   suggestion to a child that its planned parent listens elsewhere;
//! - [`probe`]: throughput probes between hosts, streamed only to holders
//!   of the key, the measurements the tree is built from;
//! - [`tree`]: the widest-path tree (ROMA §VI-C), Dijkstra maximising the
//!   least hop rate to every host, with an optional bound on each host's
//!   children so the source is no hot spot.

mod block;
pub mod chain;
pub mod children;
pub mod fountain;
pub mod hop;
pub mod jobs;
pub mod node;
pub mod probe;
pub mod redirect;
pub mod relay;
pub mod sent;
mod slots;
pub mod source;
pub mod symbol;
pub mod tree;

pub use chain::{aggregate_path_rate, min_hop_rate, Hop};
pub use children::{ChildId, Children, Greeting};
pub use jobs::{Job, JobDone, JobKind};
pub use node::{NodeError, OverlayNode};
pub use redirect::Redirects;
pub use source::OverlaySource;
pub use symbol::SymbolKey;
pub use tree::{widest_path_tree, Tree};
