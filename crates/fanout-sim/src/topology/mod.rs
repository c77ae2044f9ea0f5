//! Nodes, links and unicast routing state.

pub mod routing;

pub use routing::{Prefix, StaticRoute};
