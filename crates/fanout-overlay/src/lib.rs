//! Overlay delivery where IP multicast does not reach, after ROMA (Kwon
//! and Byers, "ROMA: Reliable Overlay Multicast with Loosely Coupled TCP
//! Connections"): hosts joined by ordinary TCP connections into a tree,
//! each relay forwarding what its downstream connections can take.
//!
//! - [`chain`]: the chain model (ROMA §V, equations 1–3): a hop's TCP
//!   rate from its round trip and loss, and a host's rate as the least
//!   over the hops above it, beside the older aggregate-path model;
//! - [`tree`]: the widest-path tree (ROMA §VI-C), Dijkstra maximising the
//!   least hop rate to every host, with an optional bound on each host's
//!   children so the source is no hot spot.

pub mod chain;
pub mod tree;

pub use chain::{aggregate_path_rate, min_hop_rate, Hop};
pub use tree::{widest_path_tree, Tree};
