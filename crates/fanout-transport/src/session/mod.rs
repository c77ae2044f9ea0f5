//! TCP-SMO one-to-many sessions (`shared/SEEDS-DIGEST.md` §1): one sender,
//! one send buffer and sequence space (the master block), a TCP-like child
//! control block per member, each data segment multicast once.
//!
//! * [`SessionSender`] — admits members (receiver-initiated CONNECT),
//!   multicasts new data within the minimum of the members' windows,
//!   repairs losses by multicast when more than a threshold fraction of
//!   members miss a segment and by unicast otherwise, releases the buffer
//!   at the slowest member, evicts stalled members.
//! * Members run the ordinary [`crate::Receiver`], created with
//!   [`crate::Receiver::join`].
//!
//! Per-ACK work is O(log N) in the number of members: the session's send
//! edge, release point and timers are ordered indexes over members, and a
//! multicast send touches no member at all ([`segment_log`]).

mod addr_index;
pub mod bench_support;
pub mod coded_repair;
mod config;
pub mod eviction;
mod fanout_run;
pub mod feedback;
mod member;
mod member_timers;
mod ordered;
pub mod policy;
mod rank;
mod resume;
pub mod roster;
pub mod segment_log;
mod sender;
mod slots;
mod snapshot;
mod tournament;
pub mod upstream;

pub use config::{JoinPolicy, ReleasePolicy, SessionConfig, DEFAULT_MAX_MEMBERS};
pub use eviction::OutlierEviction;
pub use fanout_run::FANOUT_RUN_SEGMENTS;
pub use member::{MAX_MEMBER_SACK_RANGES, MAX_REPAIRS_IN_FLIGHT};
pub use roster::{ReceiverProgress, MAX_SESSION_ROSTER_ENTRIES};
pub use sender::{SessionEvent, SessionSender, SessionStats};
pub use snapshot::MemberSnapshot;
pub use upstream::{UpstreamStats, MAX_UPSTREAM_BUFFERS, MAX_UPSTREAM_WINDOW};

/// A member's id within one session (assigned at admission, never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberId(pub u64);
