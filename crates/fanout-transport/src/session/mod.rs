//! TCP-SMO one-to-many sessions: one sender, one send buffer and sequence
//! space (the master block), a TCP-like child control block per member,
//! each data segment multicast once. A unicast transfer is a session of
//! one member.
//!
//! * [`SessionSender`] — admits members (receiver-initiated CONNECT, or a
//!   listener answering the sender's OFFER), sends new data within its
//!   [`SessionController`]'s limit, repairs losses by multicast when more
//!   than a threshold fraction of members miss a segment and by unicast
//!   otherwise, releases the buffer at the slowest member, evicts stalled
//!   and silent members.
//! * Members run the ordinary [`crate::Receiver`].
//!
//! Per-ACK work is O(log N) in the number of members: the session's send
//! limit, release point and timers are ordered indexes over members
//! (the member set), and a multicast send touches no member at all (the
//! shared [`crate::SegmentLog`]).

mod addr_index;
#[cfg(feature = "bench")]
pub mod bench_support;
mod coded_repair;
mod config;
mod controller;
mod eviction;
mod fanout_run;
mod feedback;
mod member;
mod member_timers;
mod member_token;
mod members;
mod ordered;
mod policy;
mod rank;
mod repair_queue;
mod resume;
mod retry_gate;
mod roster;
mod sender;
mod slots;
mod snapshot;
mod timers;
mod tournament;
mod upstream;

pub use coded_repair::DEFAULT_BLOCK_SEGMENTS;
pub use config::{JoinPolicy, ReleasePolicy, SessionConfig, DEFAULT_MAX_MEMBERS};
pub use controller::{
    AckerWindow, EquationRate, EssentiallyFair, MinimumWindow, SessionController,
};
pub use eviction::OutlierEviction;
pub use fanout_run::FANOUT_RUN_SEGMENTS;
pub use feedback::{
    ack_interval_us, budget_for_link, segments_per_ack, ACK_WIRE_BYTES,
    DEFAULT_FEEDBACK_BUDGET_PPS, FEEDBACK_LINK_SHARE,
};
pub use member::{Member, MemberTimer};
pub use member_token::TokenKey;
pub use members::{IndexSpec, MemberKey, MemberView};
pub use policy::{rank_at, FairScaling, RepairPolicy, RttPolicy, WindowPolicy};
pub use repair_queue::MAX_QUEUED_REPAIRS;
pub use retry_gate::{RetryGate, RETRIES_PER_SECOND, RETRY_BURST};
pub use roster::{ReceiverProgress, MAX_SESSION_ROSTER_ENTRIES};
pub use sender::{
    Departure, RealtimeStats, SessionEvent, SessionSender, SessionStats, MAX_OFFERS,
    MAX_PENDING_CONTROL,
};
pub use snapshot::MemberSnapshot;
pub use upstream::{UpstreamStats, MAX_UPSTREAM_BUFFERS, MAX_UPSTREAM_RANGES, MAX_UPSTREAM_WINDOW};

/// A member's id within one session (assigned at admission, never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberId(pub u64);
