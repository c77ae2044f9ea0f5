//! MCTCP ACK aggregation (MCTCP §IV–§V): mergers that combine their children's
//! feedback hop by hop, so a session sender's feedback load depends on its
//! fan-out, not on the number of receivers. Design notes and the merge rules
//! with their citations of the paper: `docs/mctcp.md`.
//!
//! * `spec` — the concast merge-specification abstraction ([`MergeSpec`]:
//!   tag / merge / done / build) and its per-message framework
//!   ([`MergeTable`], MCTCP Fig. 1).
//! * `ack_meet` — the ACK lattice: [`AckSummary::meet`] (min cumulative,
//!   common SACK ranges, min window right edge, oldest timestamp echo).
//! * `join` — CONNECT merging by count, timer or both ([`JoinMerge`]).
//! * `mctcp` — the MCTCP specification over fanout's wire ([`Mctcp`]).
//! * `children` — children as soft state ([`ChildTable`], bounded by
//!   [`MAX_CHILDREN`]).
//! * `relay` — what goes down: the parent's control frames to all
//!   children, its DATA only to those lacking it.
//! * [`Merger`] — the sans-IO engine ([`fanout_core::Engine`]).
//!
//! # The merger on the wire
//!
//! To its **children** (receivers created
//! with [`crate::Receiver::join`] pointed at the merger, or lower mergers)
//! it looks like a session sender: they CONNECT to it, it answers ACCEPT
//! (with the member id the parent gave the merger, so the subtree's ACK
//! schedules run in phase, and the start offset), and it relays
//! the parent's control frames (PING, ACK_FREQUENCY, SKIP, CLOSE, RESET)
//! and any DATA the parent sends it by unicast, DATA only to the children
//! that have not acknowledged it. To its **parent** (a
//! [`crate::session::SessionSender`] or a higher merger) it looks like one
//! member: one merged CONNECT for its subtree, then merged ACKs. Datagrams
//! from addresses that are neither the parent nor a child (except a
//! CONNECT) are dropped and counted (`unknown_children`); a child's ACK can
//! only lower the merged ACK (it is a meet), so a forged or inconsistent
//! child cannot make the sender release data a genuine child lacks.
//!
//! # The sender with mergers
//!
//! Today a [`crate::session::SessionSender`] already works with mergers
//! unchanged in unicast fan-out mode (no group): the merger is one member,
//! receives that member's copy of each segment and relays it to its children
//! (`tests/merge_tree.rs`). With IP multicast, the following is next:
//!
//! 1. **Data source ≠ feedback target at the receiver** (built): a
//!    receiver joined with [`crate::TransportConfig::feedback_via`] sends
//!    its CONNECT and ACKs to its merger and takes DATA and control from
//!    the session sender (its group) as well as from the merger; the
//!    sender's datagrams that beat the relayed ACCEPT are held (bounded)
//!    and replayed (`tests/merge_tree.rs`, multicast through two levels).
//! 2. **A member standing for a subtree.** The sender keeps treating a
//!    merger as one child block (its cwnd, RTT, RTO and loss recovery are
//!    the subtree's, exactly MCTCP's "unmodified TCP on the merged
//!    stream"), so the release, window and repair policies compose; merged
//!    and unmerged children coexist in the same member table (partial
//!    deployment: the sender's own merge is the meet over its members).
//!    What changes is **weight** (built): mergers page a ROSTER upstream
//!    (`roster`, `docs/wire.md` §4.8) with their subtree's receiver
//!    count, largest fan-in and each receiver's cumulative ACK; the sender
//!    counts receivers in the repair threshold and the session's receiver
//!    count, divides the feedback budget by the busiest node's fan-in, and
//!    lists every receiver with its progress
//!    ([`crate::session::SessionSender::receivers`]).
//! 3. **Repairs through the tree.** A unicast repair to a merger member is
//!    relayed only to the children lacking it (done here; a protected
//!    session with a group repairs a merger's subtree by multicast
//!    instead, see 5); a merger could
//!    also answer a child's loss from a small cache before the sender sees
//!    it (not in MCTCP; later).
//! 4. **Crashed mergers** (built): mergers send their
//!    children keep-alives; a child whose parent stays silent for 1 s
//!    re-attaches to the next ancestor of its fallback chain with a resume
//!    CONNECT naming its position, and continues from there; the sender
//!    evicts a dead merger member after its stall timeout
//!    (`docs/mctcp.md`, "Crashed mergers").
//! 5. **Protected hops** (built): with [`MergerConfig::protection`] a
//!    merger joins its parent in a handshake and answers its children's,
//!    every datagram of each hop sealed under that pair's keys; it hands
//!    down the group keys and the sender's source key, passes key updates
//!    down and REKEY up (`docs/wire.md` §4.12, "Mergers").

mod ack_meet;
mod children;
mod config;
mod engine;
mod join;
mod mctcp;
mod relay;
mod roster;
mod roster_store;
mod sent;
mod spec;

pub use ack_meet::{older_timestamp, AckSummary};
pub use children::{ChildTable, MAX_CHILDREN};
pub use config::{MergerConfig, MergerStats};
pub use engine::{Merger, MAX_QUEUED, MAX_QUEUED_RETRIES};
pub use join::{ConnectSummary, JoinMerge};
pub use mctcp::{ChildMsg, Mctcp, MctcpTag, Upstream};
pub use roster::{SubtreeRoster, MAX_MERGER_ROSTER_ENTRIES};
pub use roster_store::{RosterStats, RosterStore, MAX_SUBTREE_RECEIVERS};
pub use spec::{MergeSpec, MergeTable, MAX_TAGS};
