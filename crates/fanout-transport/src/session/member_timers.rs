//! One deadline per member (RTO, RACK or stall, whichever is first), the
//! earliest found in O(1) and changed in O(log N), over dense slot numbers.
//! Expired deadlines pop in `(deadline, member id)` order.

use super::tournament::{Tournament, EMPTY};
use super::MemberId;
use fanout_core::time::Instant;
use std::cell::RefCell;

/// Members' next deadlines: a [`Tournament`] of `deadline << 64 | id`
/// (unique, ordered by deadline then id). In a cell so that
/// [`MemberTimers::next_deadline`] (`&self`, for `poll_timeout`) can apply
/// deferred updates; never borrowed across a call, so borrowing cannot fail.
#[derive(Debug, Default)]
pub struct MemberTimers {
    by_deadline: RefCell<Tournament>,
}

impl MemberTimers {
    /// Sets the deadline of member `id` in `slot` (`None` cancels it).
    pub fn set(&mut self, slot: u32, id: MemberId, deadline: Option<Instant>) {
        let key = deadline.map_or(EMPTY, |t| {
            (u128::from(t.as_nanos()) << 64) | u128::from(id.0)
        });
        let tree = self.by_deadline.get_mut();
        if tree.leaf(slot as usize) != key {
            tree.set(slot as usize, key);
        }
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        let mut tree = self.by_deadline.borrow_mut();
        tree.flush();
        let t = tree.winner();
        (t != EMPTY).then(|| Instant::from_nanos((t >> 64) as u64))
    }

    /// Removes and returns a member whose deadline is at or before `now`,
    /// earliest first (ties: smallest id).
    pub fn pop_expired(&mut self, now: Instant) -> Option<MemberId> {
        let t = self.next_deadline()?;
        if t > now {
            return None;
        }
        let tree = self.by_deadline.get_mut();
        let slot = tree.winner_slot()?;
        let id = MemberId(tree.winner() as u64);
        tree.set(slot, EMPTY);
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn one_deadline_per_member_popped_in_order() {
        let mut t = MemberTimers::default();
        t.set(0, MemberId(1), Some(at(30)));
        t.set(1, MemberId(2), Some(at(10)));
        t.set(2, MemberId(3), Some(at(20)));
        t.set(3, MemberId(4), Some(at(10)));
        t.set(0, MemberId(1), Some(at(5))); // re-arm replaces
        t.set(2, MemberId(3), None); // cancel
        assert_eq!(t.next_deadline(), Some(at(5)));
        assert_eq!(t.pop_expired(at(4)), None);
        assert_eq!(t.pop_expired(at(10)), Some(MemberId(1)));
        assert_eq!(t.pop_expired(at(10)), Some(MemberId(2)));
        assert_eq!(t.pop_expired(at(10)), Some(MemberId(4)));
        assert_eq!(t.pop_expired(at(100)), None);
        assert_eq!(t.next_deadline(), None);
    }
}
