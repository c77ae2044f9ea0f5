//! A deterministic discrete-event network simulator that drives fanout's
//! sans-IO engines with the same [`fanout_core::drain`] loop as the real
//! runtime.
//!
//! Virtual time is [`fanout_core::Instant`] (ns); events are ordered by
//! (time, sequence number); every random draw comes from a
//! [`fanout_core::Rng`] forked from the scenario seed, so a seed fixes the
//! whole run, and the optional trace hash proves it.
//!
//! Build a network with [`Simulator`] directly or from a TOML
//! [`scenario::Scenario`]; host engines implementing [`SimApp`]; read
//! [`metrics::Metrics`] and write CSV and SVG plots.

pub mod analysis;
pub mod app;
pub mod apps;
pub mod event;
pub mod ids;
pub mod link;
pub mod loss;
pub mod metrics;
pub mod multicast;
pub mod node;
pub mod packet;
pub mod plot;
pub mod queue;
pub mod reorder;
pub mod scenario;
pub mod scenario_star;
pub mod session_flow;
pub mod session_late;
pub mod session_live;
pub mod session_media;
pub mod session_merge;
pub mod session_overlay;
pub mod session_relay;
pub mod sim;
pub mod stats;
pub mod topology;
pub mod trace;
pub mod transfer;
pub mod units;

pub use app::{AppProbe, SimApp};
pub use ids::{AppId, GroupId, LinkId, NodeId};
pub use link::{LinkConfig, LinkModel, Offer, TxDone};
pub use loss::LossSpec;
pub use multicast::TreeMode;
pub use node::CpuModel;
pub use queue::{QueueConfig, QueueLimit, RedConfig, WireSize};
pub use reorder::ReorderSpec;
pub use scenario::{FlowFactory, FlowSpec, Scenario, ScenarioContext, ScenarioError};
pub use sim::{SimConfig, SimError, Simulator};
pub use stats::NetDrop;
pub use trace::TraceLevel;
