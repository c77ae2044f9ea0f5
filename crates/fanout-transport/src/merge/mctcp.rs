//! The MCTCP merge specification for fanout's ACKs and CONNECTs (MCTCP
//! Fig. 5, adapted to the wire of `docs/wire.md`).
//!
//! * **Tag** (`getTag`): MCTCP tags a message with its TCP sequence
//!   number, which only changes between the handshake, data and teardown
//!   phases. Ours is the phase itself: [`MctcpTag::Join`] for CONNECT,
//!   [`MctcpTag::Ack`] for ACKs and for leaves (a leave may advance the
//!   merged ACK).
//! * **Join**: the children's CONNECT options are merged
//!   ([`ConnectSummary::meet`]: minimum MSS and window) and one CONNECT goes
//!   upstream once [`JoinMerge`] says so (by count, timer, or both).
//! * **Ack**: each child keeps its highest cumulative point (MCTCP Fig. 5: "if
//!   after(ack, old) then update, else retransmit = true"), its latest SACK
//!   ranges above it, the highest window right edge it announced and its
//!   latest timestamp echo. A merged ACK ([`AckSummary::meet`] over the
//!   admitted children) is built when
//!   1. **every child acknowledged data beyond the last merged cumulative
//!      point** — MCTCP's "new cumulative ack from all known senders",
//!      read relative to the merged point: read literally (each child beyond
//!      its own previous ACK) it deadlocks when a child that already holds
//!      everything sent has nothing new to acknowledge while the sender waits
//!      for the merged ACK to open its window;
//!   2. **a child sent a non-advancing (duplicate) ACK** — forwarded at once,
//!      so the loss signal (the SACK ranges above a hole) still reaches the
//!      sender's fast retransmit / RACK (MCTCP Fig. 5: `retransmit`); once per
//!      merged cumulative point: the siblings' duplicates for the same
//!      point are not forwarded again (a loss above the merger makes every
//!      child repeat its ACK; what their repeats add — ranges now held in
//!      common — goes up by rule 3);
//!   3. the children now hold in common a SACK range above the merged
//!      point that the last merged ACK did not report (our addition: the
//!      children's ACKs that complete such a range are usually advancing,
//!      not duplicates — a child at the hole sent its duplicate before its
//!      siblings acknowledged the data above it — so without this rule the
//!      sender's RACK never sees the SACKed data and every loss costs an
//!      RTO);
//!   4. the merged window right edge opened by at least a quarter of the
//!      last merged window (a window update, RFC 9293 §3.8.6.2.2; our
//!      addition: without it a sender blocked on the window could wait for
//!      its zero-window probe);
//!   5. the first time (nothing forwarded yet).
//!
//!   Leaves and soft-state expiries re-evaluate the rule (the slowest child
//!   leaving can advance the merged point).
//! * **Timestamp echo** (what MCTCP left open, §V.C): the merged ACK
//!   echoes what the ACK that made it due echoed — when the merged point
//!   advances, the ACK of the last child to cover it, so the sender's
//!   sample `now − echo` is the RTT of the data that completed the
//!   subtree's coverage, through its slowest path. After a leave, the
//!   freshest echo among the children at the new merged point.

use super::ack_meet::{older_timestamp, AckSummary};
use super::children::ChildTable;
use super::join::{ConnectSummary, JoinMerge};
use super::spec::MergeSpec;
use crate::wire::{AckFrame, WireTimestamp};
use fanout_core::time::Instant;
use std::net::SocketAddr;

/// A message from a child, as the specification sees it. The engine
/// ([`super::Merger`]) admits and authenticates children; the specification
/// only merges.
#[derive(Debug, Clone)]
pub enum ChildMsg {
    /// A new child asked to join with these CONNECT options.
    Join(ConnectSummary),
    /// An admitted child acknowledged.
    Ack {
        /// Who.
        child: SocketAddr,
        /// Its ACK.
        ack: AckFrame,
    },
    /// A child left, closed or expired (already removed from the table).
    Leave,
}

/// MCTCP's tags: the phase a message belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MctcpTag {
    /// Connection establishment (CONNECT merging).
    Join,
    /// Data transfer and teardown (ACK merging, leaves).
    Ack,
}

/// Join-phase merge state.
#[derive(Debug, Clone, Default)]
pub struct JoinState {
    /// When the first child asked.
    pub first: Option<Instant>,
    /// Children gathered.
    pub count: usize,
    /// Their merged options.
    pub merged: Option<ConnectSummary>,
    /// The merged CONNECT was built (later joins are admitted locally).
    pub sent: bool,
}

/// Ack-phase merge state.
#[derive(Debug, Clone, Default)]
pub struct AckState {
    /// The last merged ACK built.
    pub last: Option<AckSummary>,
    /// A child sent a duplicate since then (MCTCP Fig. 5: `retransmit`).
    pub retransmit: bool,
    /// Merged ACKs built because of a duplicate.
    pub duplicates_forwarded: u64,
    /// Merged cumulative point at which a duplicate was last forwarded:
    /// further duplicates at the same point are not forwarded again (their
    /// loss signal is already upstream; what they add, SACK ranges the
    /// children now hold in common, goes by rule 3).
    pub dup_point: Option<u64>,
    /// Children's duplicate ACKs not forwarded for that reason.
    pub duplicates_suppressed: u64,
    /// Timestamp echo of the ACK merged last and when it arrived (`None`
    /// after a leave): the message that made `done` true, whose echo the
    /// merged ACK carries.
    pub trigger_echo: Option<(WireTimestamp, Instant)>,
    /// When the echo of [`AckState::last`] arrived.
    pub last_echo_at: Option<Instant>,
}

/// Merge state of one tag.
#[derive(Debug, Clone)]
pub enum MctcpState {
    /// [`MctcpTag::Join`].
    Join(JoinState),
    /// [`MctcpTag::Ack`].
    Ack(AckState),
}

/// What goes upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// The subtree's merged CONNECT options.
    Connect(ConnectSummary),
    /// The subtree's merged acknowledgement.
    Ack(AckSummary),
}

/// The MCTCP specification and its flow state (the children).
#[derive(Debug)]
pub struct Mctcp {
    /// The children (soft state).
    pub children: ChildTable,
    /// When the merged CONNECT goes upstream.
    pub join: JoinMerge,
    /// The merger is a member upstream (ACCEPT received): ACKs may merge.
    pub established: bool,
}

impl Mctcp {
    /// A specification over `children`.
    pub fn new(children: ChildTable, join: JoinMerge) -> Self {
        Mctcp {
            children,
            join,
            established: false,
        }
    }

    /// Folds one ACK into a child's state; true if it did not advance the
    /// child's cumulative point (a duplicate).
    fn absorb(&mut self, child: &SocketAddr, frame: &AckFrame, now: Instant) -> bool {
        let Some(old) = self.children.get(child).and_then(|c| c.ack.clone()) else {
            return false;
        };
        let new = AckSummary::from_frame(frame);
        let duplicate = new.cumulative <= old.cumulative;
        let cumulative = old.cumulative.max(new.cumulative);
        let mut sack = new.sack;
        sack.remove_below(cumulative);
        let mut merged = AckSummary {
            cumulative,
            sack,
            window_end: old.window_end.max(new.window_end),
            timestamp_echo: new.timestamp_echo.or(old.timestamp_echo),
            ack_delay_us: new.ack_delay_us,
        };
        // A SACK range now touching the cumulative point moves it.
        if let Some(r) = merged.sack.range_containing(merged.cumulative) {
            merged.cumulative = r.end;
            merged.sack.remove_below(r.end);
        }
        merged.window_end = merged.window_end.max(merged.cumulative);
        self.children.set_ack(child, merged, now);
        duplicate
    }
}

impl Mctcp {
    /// True if the children now hold in common a range above a hole that
    /// the last merged ACK did not report (O(N · R): only computed while
    /// some child reports SACK ranges, i.e. during loss recovery).
    fn sack_grew(&self, last: &AckSummary) -> bool {
        let Some(m) = self.children.meet() else {
            return false;
        };
        let grew = m
            .sack
            .iter()
            .any(|r| !(r.end <= last.cumulative || last.sack.contains_range(r)));
        grew
    }

    /// The newest echo among the children whose cumulative point is
    /// `cumulative` (those defining the merged point), and when it arrived.
    fn echo_at(&self, cumulative: u64) -> Option<(WireTimestamp, Instant)> {
        self.children
            .iter()
            .filter_map(|(_, c)| Some((c.ack.as_ref()?, c.acked_at)))
            .filter(|(a, _)| a.cumulative == cumulative)
            .filter_map(|(a, at)| Some((a.timestamp_echo?, at)))
            .reduce(|x, y| {
                if older_timestamp(x.0, y.0) == x.0 {
                    y
                } else {
                    x
                }
            })
    }
}

impl MergeSpec for Mctcp {
    type Msg = ChildMsg;
    type Tag = MctcpTag;
    type State = MctcpState;
    type Out = Upstream;

    fn tag(&self, msg: &ChildMsg) -> MctcpTag {
        match msg {
            ChildMsg::Join(_) => MctcpTag::Join,
            ChildMsg::Ack { .. } | ChildMsg::Leave => MctcpTag::Ack,
        }
    }

    fn new_state(&self, tag: MctcpTag) -> MctcpState {
        match tag {
            MctcpTag::Join => MctcpState::Join(JoinState::default()),
            MctcpTag::Ack => MctcpState::Ack(AckState::default()),
        }
    }

    fn merge(&mut self, state: &mut MctcpState, msg: ChildMsg, now: Instant) {
        match (state, msg) {
            (MctcpState::Join(j), ChildMsg::Join(c)) => {
                j.first.get_or_insert(now);
                j.count += 1;
                j.merged = Some(j.merged.map_or(c, |m| m.meet(c)));
            }
            (MctcpState::Ack(a), ChildMsg::Ack { child, ack }) => {
                let duplicate = self.absorb(&child, &ack, now);
                // One prompt forward per merged point, not one per child:
                // when a loss upstream of the merger hits all N children,
                // each repeats its ACK for the same hole.
                if duplicate {
                    let point = self.children.min_cumulative();
                    if point.is_some() && point == a.dup_point {
                        a.duplicates_suppressed += 1;
                    } else {
                        a.retransmit = true;
                    }
                }
                a.trigger_echo = Some((ack.timestamp_echo, now));
            }
            (MctcpState::Ack(a), ChildMsg::Leave) => a.trigger_echo = None,
            _ => {}
        }
    }

    fn done(&self, state: &MctcpState, now: Instant) -> bool {
        match state {
            MctcpState::Join(j) => {
                !j.sent && j.first.is_some_and(|f| self.join.ready(j.count, f, now))
            }
            MctcpState::Ack(a) => {
                let (Some(cum), Some(wend)) = (
                    self.children.min_cumulative(),
                    self.children.min_window_end(),
                ) else {
                    return false;
                };
                if !self.established {
                    return false;
                }
                let Some(last) = &a.last else {
                    return true;
                };
                let last_window = last.window_end - last.cumulative;
                a.retransmit
                    || cum > last.cumulative
                    || wend >= last.window_end.saturating_add((last_window / 4).max(1))
                    || (self.children.any_sack() && self.sack_grew(last))
            }
        }
    }

    fn build(&mut self, state: &mut MctcpState, now: Instant) -> Option<Upstream> {
        match state {
            MctcpState::Join(j) => {
                j.sent = true;
                j.merged.map(Upstream::Connect)
            }
            MctcpState::Ack(a) => {
                let mut m = self.children.meet()?;
                // RTT through mergers (docs/mctcp.md): echo what the ACK
                // that completed the subtree's coverage echoed; after a
                // leave, the freshest echo among the children now at the
                // merged point; failing both, the last echo sent. The time
                // the echo waited here counts as ACK delay (RFC 9002
                // §13.2.5), so an echo held for seconds behind a silent
                // child is no RTT sample.
                let last_echo = a
                    .last
                    .as_ref()
                    .and_then(|l| Some((l.timestamp_echo?, a.last_echo_at?)));
                let echo = a
                    .trigger_echo
                    .or_else(|| self.echo_at(m.cumulative))
                    .or(last_echo)
                    .or(m.timestamp_echo.map(|e| (e, now)));
                if let Some((e, arrived)) = echo {
                    m.timestamp_echo = Some(e);
                    let held = now.saturating_duration_since(arrived).as_micros() as u64;
                    m.ack_delay_us = m.ack_delay_us.max(held);
                }
                a.last_echo_at = echo.map(|(_, at)| at);
                if a.retransmit {
                    a.duplicates_forwarded += 1;
                    a.dup_point = Some(m.cumulative);
                }
                a.retransmit = false;
                a.last = Some(m.clone());
                Some(Upstream::Ack(m))
            }
        }
    }

    fn deadline(&self, state: &MctcpState) -> Option<Instant> {
        match state {
            MctcpState::Join(j) if !j.sent => j.first.and_then(|f| self.join.deadline(f)),
            _ => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // one SACK block is the common case
mod tests {
    use super::*;
    use crate::merge::sent::SentLog;
    use crate::merge::spec::MergeTable;
    use std::ops::Range;
    use std::time::Duration;

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 1, i], 7000))
    }

    fn opts() -> ConnectSummary {
        ConnectSummary {
            max_payload: 1400,
            window: 1 << 20,
        }
    }

    fn ack(cum: u64, sack: &[Range<u64>]) -> AckFrame {
        AckFrame {
            cumulative: cum,
            window: 1 << 20,
            timestamp_echo: WireTimestamp(cum as u32),
            ack_delay_us: 0,
            sack: sack.to_vec(),
        }
    }

    /// A table with `n` admitted children at offset 0, established.
    fn table(n: u8) -> MergeTable<Mctcp> {
        let mut children = ChildTable::new(Duration::from_secs(30), 64);
        for i in 1..=n {
            children
                .insert(addr(i), opts(), WireTimestamp(0), Instant::ZERO)
                .unwrap();
            children.admit(&addr(i), 0, Instant::ZERO);
        }
        let mut spec = Mctcp::new(children, JoinMerge::Count(1));
        spec.established = true;
        MergeTable::new(spec)
    }

    fn send(t: &mut MergeTable<Mctcp>, child: u8, a: AckFrame) -> Option<AckSummary> {
        match t
            .process(
                ChildMsg::Ack {
                    child: addr(child),
                    ack: a,
                },
                Instant::ZERO,
            )
            .unwrap()
        {
            Some(Upstream::Ack(m)) => Some(m),
            Some(Upstream::Connect(_)) => panic!("connect from an ack"),
            None => None,
        }
    }

    #[test]
    fn forwards_once_every_child_passed_the_merged_point() {
        let mut t = table(3);
        // The first ACK ever goes up (the sender learns the subtree is live).
        assert_eq!(send(&mut t, 1, ack(1000, &[])).unwrap().cumulative, 0);
        assert!(send(&mut t, 2, ack(1000, &[])).is_none());
        assert!(
            send(&mut t, 1, ack(2000, &[])).is_none(),
            "child 3 still at 0"
        );
        let m = send(&mut t, 3, ack(500, &[])).expect("all beyond 0");
        assert_eq!(m.cumulative, 500);
        // Child 3 is the slowest; children 1, 2 already hold more, so its
        // next advance alone moves the merged point (no deadlock waiting for
        // the others to "advance again").
        let m = send(&mut t, 3, ack(900, &[])).expect("slowest advanced");
        assert_eq!(m.cumulative, 900);
    }

    #[test]
    fn a_duplicate_from_any_child_goes_at_once() {
        let mut t = table(2);
        send(&mut t, 1, ack(1000, &[]));
        send(&mut t, 2, ack(1000, &[]));
        assert_eq!(send(&mut t, 2, ack(1000, &[])).unwrap().cumulative, 1000);
        // Child 1 lost [1000, 1100): its duplicate ACK reports the hole, and
        // the merged ACK carries what everyone holds above it.
        send(&mut t, 2, ack(3000, &[]));
        let m = send(&mut t, 1, ack(1000, &[1100..2000])).expect("new SACK forwarded");
        assert_eq!(m.cumulative, 1000);
        assert_eq!(m.sack.iter().collect::<Vec<_>>(), vec![1100..2000]);
        let MctcpState::Ack(s) = t.state(MctcpTag::Ack).unwrap() else {
            unreachable!()
        };
        // The second duplicate at the same merged point went by rule 3
        // (the children now hold [1100, 2000) in common), not as a
        // duplicate.
        assert_eq!((s.duplicates_forwarded, s.duplicates_suppressed), (1, 1));
    }

    /// A loss above the merger: all 8 children miss [1000, 2000) and
    /// repeat their ACK, one after the other, for each later segment. The
    /// old rule forwarded all 8 repeats of every round; now the first goes
    /// at once (the loss signal) and then one per round, when the last
    /// child completes the range held in common.
    #[test]
    fn duplicates_for_the_same_hole_go_up_once_per_round() {
        let mut t = table(8);
        for c in 1..=8 {
            send(&mut t, c, ack(1000, &[]));
        }
        assert_eq!(send(&mut t, 1, ack(1000, &[])).unwrap().cumulative, 1000);
        let MctcpState::Ack(s) = t.state(MctcpTag::Ack).unwrap() else {
            unreachable!()
        };
        let before = s.duplicates_forwarded;
        let mut forwarded = 0;
        for round in 1..=4u64 {
            let above = 2000..2000 + round * 1000;
            for c in 1..=8 {
                if let Some(m) = send(&mut t, c, ack(1000, std::slice::from_ref(&above))) {
                    forwarded += 1;
                    assert_eq!(m.cumulative, 1000);
                    assert_eq!(
                        m.sack.iter().collect::<Vec<_>>(),
                        vec![above.clone()],
                        "round {round}"
                    );
                    assert_eq!(c, 8, "round {round}: only the last child's repeat goes up");
                }
            }
        }
        assert_eq!(forwarded, 4, "one per round, not 8");
        let MctcpState::Ack(s) = t.state(MctcpTag::Ack).unwrap() else {
            unreachable!()
        };
        assert_eq!(
            s.duplicates_forwarded, before,
            "the loss was signalled before"
        );
        assert_eq!(s.duplicates_suppressed, 32);
        // Once the merged point moves, a duplicate there goes at once again.
        for c in 1..=8 {
            send(&mut t, c, ack(6000, &[]));
        }
        assert!(send(&mut t, 3, ack(6000, &[])).is_some());
    }

    #[test]
    fn a_child_cannot_move_its_cumulative_point_back() {
        let mut t = table(1);
        send(&mut t, 1, ack(1000, &[]));
        let m = send(&mut t, 1, ack(10, &[])).expect("duplicate");
        assert_eq!(m.cumulative, 1000);
    }

    #[test]
    fn the_slowest_child_leaving_advances_the_merged_point() {
        let mut t = table(2);
        send(&mut t, 1, ack(5000, &[]));
        send(&mut t, 2, ack(100, &[]));
        assert!(send(&mut t, 1, ack(6000, &[])).is_none());
        t.spec.children.remove(&addr(2));
        match t.process(ChildMsg::Leave, Instant::ZERO).unwrap() {
            Some(Upstream::Ack(m)) => assert_eq!(m.cumulative, 6000),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_window_update_goes_up_without_new_data() {
        let mut t = table(1);
        let mut a = ack(1000, &[]);
        a.window = 400;
        send(&mut t, 1, a.clone());
        a.window = 450; // opened by less than a quarter
        assert!(
            send(&mut t, 1, AckFrame { ..a.clone() }).is_some(),
            "duplicate"
        );
        // Not a duplicate any more: the point advances by 1 and the window
        // opens a lot.
        let mut b = ack(1001, &[]);
        b.window = 10_000;
        assert!(send(&mut t, 1, b).is_some());
    }

    #[test]
    fn a_sack_range_all_children_hold_goes_up_without_a_duplicate() {
        let mut t = table(2);
        send(&mut t, 1, ack(1000, &[]));
        send(&mut t, 2, ack(1000, &[]));
        // Child 1 lost [1000, 1100) and says so before child 2 acknowledged
        // what lies above: nothing above the hole is common yet.
        let m = send(&mut t, 1, ack(1000, &[1100..2000])).expect("duplicate");
        assert!(m.sack.is_empty());
        // Child 2's advancing ACK completes [1100, 2000): the sender must
        // hear of it (RACK), although the merged point did not move.
        let m = send(&mut t, 2, ack(2000, &[])).expect("new common SACK range");
        assert_eq!(m.cumulative, 1000);
        assert_eq!(m.sack.iter().collect::<Vec<_>>(), vec![1100..2000]);
        // Nothing new: held.
        assert!(send(&mut t, 2, ack(2100, &[])).is_none());
    }

    #[test]
    fn the_echo_is_the_completing_acks() {
        let mut t = table(3);
        let echo = |cum: u64, ts: u32| AckFrame {
            timestamp_echo: WireTimestamp(ts),
            ..ack(cum, &[])
        };
        send(&mut t, 1, echo(1000, 900));
        send(&mut t, 2, echo(1000, 905));
        // Child 3 completes [0, 1000): its echo, not the older 900 of the
        // idle child 1, gives the sender its sample.
        let m = send(&mut t, 3, echo(1000, 950)).unwrap();
        assert_eq!(
            (m.cumulative, m.timestamp_echo),
            (1000, Some(WireTimestamp(950)))
        );
        send(&mut t, 1, echo(3000, 2900));
        send(&mut t, 2, echo(2000, 1990));
        assert!(send(&mut t, 1, echo(3500, 3400)).is_none());
        // Child 3 (behind) leaves: the point moves to child 2's 2000, with
        // the freshest echo among the children now defining it.
        t.spec.children.remove(&addr(3));
        match t.process(ChildMsg::Leave, Instant::ZERO).unwrap() {
            Some(Upstream::Ack(m)) => {
                assert_eq!(
                    (m.cumulative, m.timestamp_echo),
                    (2000, Some(WireTimestamp(1990)))
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn joins_merge_by_count() {
        let children = ChildTable::new(Duration::from_secs(30), 64);
        let mut t = MergeTable::new(Mctcp::new(children, JoinMerge::Count(3)));
        let small = ConnectSummary {
            max_payload: 1200,
            window: 1 << 16,
        };
        let now = Instant::ZERO;
        assert!(t.process(ChildMsg::Join(opts()), now).unwrap().is_none());
        assert!(t.process(ChildMsg::Join(small), now).unwrap().is_none());
        match t.process(ChildMsg::Join(opts()), now).unwrap() {
            Some(Upstream::Connect(c)) => assert_eq!(c, small),
            other => panic!("{other:?}"),
        }
        // Only once.
        assert!(t.process(ChildMsg::Join(opts()), now).unwrap().is_none());
        assert_eq!(t.deadline(), None);
    }

    #[test]
    fn joins_merge_by_timer() {
        let children = ChildTable::new(Duration::from_secs(30), 64);
        let hold = Duration::from_millis(300);
        let mut t = MergeTable::new(Mctcp::new(children, JoinMerge::Timer(hold)));
        let t0 = Instant::ZERO + Duration::from_secs(1);
        assert!(t.process(ChildMsg::Join(opts()), t0).unwrap().is_none());
        assert!(t
            .process(ChildMsg::Join(opts()), t0 + Duration::from_millis(100))
            .unwrap()
            .is_none());
        assert_eq!(t.deadline(), Some(t0 + hold));
        assert!(t.due(t0 + Duration::from_millis(299)).is_empty());
        assert!(t
            .poll(MctcpTag::Join, t0 + Duration::from_millis(299))
            .is_none());
        assert_eq!(t.due(t0 + hold), vec![MctcpTag::Join]);
        assert_eq!(
            t.poll(MctcpTag::Join, t0 + hold),
            Some(Upstream::Connect(opts()))
        );
        assert_eq!(t.deadline(), None, "sent: no timer left");
    }

    #[test]
    fn soft_state_expires_silent_children_only() {
        let mut c = ChildTable::new(Duration::from_secs(10), 64);
        let t0 = Instant::ZERO;
        c.insert(addr(1), opts(), WireTimestamp(0), t0).unwrap();
        c.insert(addr(2), opts(), WireTimestamp(0), t0).unwrap();
        c.touch(&addr(2), t0 + Duration::from_secs(8));
        assert_eq!(c.next_expiry(), Some(t0 + Duration::from_secs(10)));
        assert!(c.expire(t0 + Duration::from_secs(9)).is_empty());
        let gone = c.expire(t0 + Duration::from_secs(10));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].0, addr(1));
        assert_eq!(c.len(), 1);
        assert_eq!(c.next_expiry(), Some(t0 + Duration::from_secs(18)));
        assert_eq!(c.expire(t0 + Duration::from_secs(18)).len(), 1);
        assert!(c.is_empty());
    }

    #[test]
    fn a_child_stalled_behind_its_siblings_is_found() {
        let mut t = table(3);
        let at = |s: u64| Instant::ZERO + Duration::from_secs(s);
        let stall = Duration::from_secs(5);
        for (child, cum, when) in [(1, 1000, 1), (2, 1000, 1), (1, 2000, 4), (2, 2000, 4)] {
            t.process(
                ChildMsg::Ack {
                    child: addr(child),
                    ack: ack(cum, &[]),
                },
                at(when),
            )
            .unwrap();
        }
        let c = &t.spec.children;
        let mut sent = SentLog::default();
        sent.learn(2000, at(0));
        // Child 3 has not moved since it was admitted at 0.
        assert!(c.stalled(at(4), stall, &sent).is_empty());
        assert_eq!(c.stalled(at(5), stall, &sent), vec![addr(3)]);
        // Children 1 and 2 have not moved for 5 s either, but nobody is
        // ahead of them: an idle session evicts no one.
        assert_eq!(c.stalled(at(9), stall, &sent), vec![addr(3)]);
    }

    #[test]
    fn a_claim_beyond_what_was_sent_is_no_reason_to_evict() {
        let mut t = table(3);
        let at = |s: u64| Instant::ZERO + Duration::from_secs(s);
        let stall = Duration::from_secs(5);
        for (child, cum) in [(1, 1000), (2, 1000), (3, 1 << 40)] {
            let ack = ack(cum, &[]);
            t.process(
                ChildMsg::Ack {
                    child: addr(child),
                    ack,
                },
                at(1),
            )
            .unwrap();
        }
        let c = &t.spec.children;
        // The parent said it sent 1000: children 1 and 2 hold all of it.
        let mut sent = SentLog::default();
        sent.learn(1000, at(0));
        assert!(c.stalled(at(60), stall, &sent).is_empty());
        assert!(c.silent_behind(at(60), stall, &sent).is_empty());
        // It sent more at 58 s: they are behind their sibling since then,
        // and stalled only 5 s later.
        sent.learn(2000, at(58));
        assert!(c.stalled(at(62), stall, &sent).is_empty());
        assert_eq!(c.stalled(at(63), stall, &sent).len(), 2);
    }

    #[test]
    fn a_child_idle_before_the_stream_went_past_it_is_not_silent() {
        // Three children report at 1 s and then wait (nothing is sent
        // yet). At 60 s the parent sends; child 1 acknowledges at once.
        let mut t = table(3);
        let at = |ms: u64| Instant::ZERO + Duration::from_millis(ms);
        for child in 1..=3 {
            let ack = ack(0, &[]);
            t.process(
                ChildMsg::Ack {
                    child: addr(child),
                    ack,
                },
                at(1000),
            )
            .unwrap();
        }
        let mut sent = SentLog::default();
        sent.learn(14_000, at(60_000));
        let ack = ack(14_000, &[]);
        t.process(
            ChildMsg::Ack {
                child: addr(1),
                ack,
            },
            at(60_010),
        )
        .unwrap();
        let c = &t.spec.children;
        let silence = Duration::from_secs(2);
        // Behind a sibling and quiet for 59 s, but for 20 ms of that the
        // stream was sent past them: not silent.
        assert!(c.silent_behind(at(60_020), silence, &sent).is_empty());
        // Silent for 2 s after it was: evicted.
        assert_eq!(c.silent_behind(at(62_000), silence, &sent).len(), 2);
    }

    #[test]
    fn a_merged_ack_released_by_a_leave_reports_how_long_its_echo_waited() {
        let mut t = table(2);
        let at = |ms: u64| Instant::ZERO + Duration::from_millis(ms);
        for (child, cum, when) in [(1, 1000, 10), (2, 1000, 10), (1, 2000, 20)] {
            let ack = ack(cum, &[]);
            if let Some(out) = t
                .process(
                    ChildMsg::Ack {
                        child: addr(child),
                        ack,
                    },
                    at(when),
                )
                .unwrap()
            {
                assert!(matches!(out, Upstream::Ack(ref m) if m.ack_delay_us == 0));
            }
        }
        // Child 2 (at 1000) leaves 5 s later: the merged point jumps to
        // child 1's 2000, whose echo arrived at 20 ms.
        t.spec.children.remove(&addr(2));
        let Some(Upstream::Ack(m)) = t.process(ChildMsg::Leave, at(5_020)).unwrap() else {
            panic!("a merged ACK after the leave");
        };
        assert_eq!(m.cumulative, 2000);
        assert_eq!(m.ack_delay_us, 5_000_000);
    }

    #[test]
    fn the_table_is_bounded() {
        let mut c = ChildTable::new(Duration::from_secs(10), 2);
        assert!(c
            .insert(addr(1), opts(), WireTimestamp(0), Instant::ZERO)
            .is_some());
        assert!(
            c.insert(addr(1), opts(), WireTimestamp(0), Instant::ZERO)
                .is_none(),
            "known"
        );
        assert!(c
            .insert(addr(2), opts(), WireTimestamp(0), Instant::ZERO)
            .is_some());
        assert!(
            c.insert(addr(3), opts(), WireTimestamp(0), Instant::ZERO)
                .is_none(),
            "full"
        );
    }
}
