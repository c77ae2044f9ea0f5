//! The session sender's roster (`docs/mctcp.md`): which receivers are in the
//! session and how far each got, also behind ACK mergers. A merger is one
//! member (MCTCP §V.B) whose merged ACK hides its subtree; its ROSTER pages
//! (`docs/wire.md` §4.8) tell the sender how many receivers it stands for (its
//! **weight** in the repair threshold and the session's receiver count), the
//! largest fan-in below it (the feedback budget), and each receiver's
//! cumulative ACK. A member that never sent a page is a receiver of weight 1.
//!
//! Bounded ([`MAX_SESSION_ROSTER_ENTRIES`], claims clamped,
//! [`crate::merge::RosterStore`]) and informational only: the release of
//! the send buffer follows the members' cumulative ACKs, never the roster,
//! so a merger lying in its pages cannot make the sender free data a
//! genuine receiver lacks.

use super::MemberId;
use crate::merge::{RosterStats, RosterStore};
use crate::wire::RosterFrame;
use fanout_core::time::Instant;
use std::net::SocketAddr;

/// Most roster entries (receivers behind mergers) the sender keeps: about
/// 1.5 MiB.
pub const MAX_SESSION_ROSTER_ENTRIES: usize = 16_384;

/// One receiver of the session as the sender knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiverProgress {
    /// The receiver's address (a direct member's, or as its merger sees
    /// it).
    pub addr: SocketAddr,
    /// Its cumulative ACK: every stream offset below was received.
    pub cumulative: u64,
    /// The member it reports through, when that is a merger: (member id,
    /// the merger's address). `None`: a member of its own.
    pub via: Option<(MemberId, SocketAddr)>,
    /// When the merger's page listing it arrived (`None` for a member of
    /// its own, whose figure is current).
    pub reported: Option<Instant>,
}

/// Members' roster pages and what the policies read from them.
#[derive(Debug)]
pub struct SessionRoster {
    store: RosterStore<MemberId>,
    /// Largest fan-in any member reported (0: none), kept so the ACK path
    /// reads it in O(1).
    max_fan_in: u64,
}

impl Default for SessionRoster {
    fn default() -> Self {
        SessionRoster {
            store: RosterStore::new(MAX_SESSION_ROSTER_ENTRIES),
            max_fan_in: 0,
        }
    }
}

impl SessionRoster {
    /// A page from member `id`.
    pub fn on_page(&mut self, id: MemberId, f: &RosterFrame, now: Instant) {
        self.store.on_page(id, f, now);
        self.max_fan_in = self.store.max_fan_in();
    }

    /// Member `id` left.
    pub fn remove(&mut self, id: MemberId) {
        if self.store.is_reporting(&id) {
            self.store.remove(&id);
            self.max_fan_in = self.store.max_fan_in();
        }
    }

    /// Receivers member `id` stands for (1 unless it is a merger).
    pub fn weight(&self, id: &MemberId) -> u64 {
        self.store.receivers_of(id)
    }

    /// True if no member reported a roster (every member weighs 1).
    pub fn is_flat(&self) -> bool {
        self.store.extra() == 0 && self.max_fan_in == 0
    }

    /// Receivers in a session of `members` members. O(1).
    pub fn receivers(&self, members: usize) -> u64 {
        members as u64 + self.store.extra()
    }

    /// ACK streams arriving at the busiest feedback node: the sender's own
    /// `members`, or a merger's children if some merger has more. O(1).
    pub fn feedback_sources(&self, members: usize) -> usize {
        members.max(self.max_fan_in as usize)
    }

    /// True if member `id` sent a roster (it is a merger).
    pub fn is_merger(&self, id: &MemberId) -> bool {
        self.store.is_reporting(id)
    }

    /// Counters (pages, drops).
    pub fn stats(&self) -> RosterStats {
        self.store.stats()
    }

    /// Entries held (receivers listed behind mergers).
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// The receivers listed behind mergers: (merger member, receiver
    /// address, cumulative ACK, when reported).
    pub fn entries(&self) -> impl Iterator<Item = (MemberId, SocketAddr, u64, Instant)> + '_ {
        self.store
            .entries()
            .map(|(id, a, e)| (*id, *a, e.cumulative, e.heard))
    }
}
