//! Re-attachment to the next ancestor when a feedback parent (an MCTCP merger)
//! dies (`docs/mctcp.md`, "Crashed mergers").
//!
//! A receiver or merger reporting to a merger knows an ordered **fallback
//! chain** of ancestors (e.g. its merger's parent, then the session sender).
//! Mergers send their admitted children a keep-alive at least every
//! `MergerConfig::keepalive` (250 ms by default), so a parent **not the last
//! of the chain** that stays silent for `silence` (1 s by default, four
//! keep-alives) is taken for dead: the child sends a best-effort CLOSE to it
//! and a **resume CONNECT** to the next ancestor — a CONNECT whose header
//! names the session and whose `start_offset` is the child's position (it
//! holds `[0, start_offset)`), repeated with back-off until ACCEPT or
//! RESET. A RESET (the ancestor cannot take it from there) moves on to the
//! next one. The last ancestor (normally the session sender, which sends no
//! keep-alives) is never abandoned. [`ParentChain`] is that bookkeeping,
//! shared by [`crate::Receiver`] and [`crate::merge::Merger`].

use fanout_core::time::Instant;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

/// Default silence after which a non-final parent is taken for dead: four
/// merger keep-alives (`MergerConfig::keepalive`, 250 ms).
pub const DEFAULT_PARENT_SILENCE: Duration = Duration::from_secs(1);

/// Most ancestors a fallback chain holds (configuration, not peer input;
/// the bound keeps a mistaken list from growing a retry loop).
pub const MAX_FALLBACK: usize = 8;

/// A resume CONNECT under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejoin {
    /// The ancestor asked to take over.
    pub target: SocketAddr,
    /// CONNECTs sent to it so far.
    pub attempts: u32,
    /// When the next CONNECT is due.
    pub next_try: Instant,
    /// Give up on this ancestor (and try the next) at this time.
    pub deadline: Instant,
}

/// The fallback chain of one child and its re-attachment state.
#[derive(Debug, Clone)]
pub struct ParentChain {
    fallback: VecDeque<SocketAddr>,
    silence: Duration,
    heard: Instant,
    rejoin: Option<Rejoin>,
    /// The abandoned parent, to be told (best effort) with a CLOSE.
    leave: Option<SocketAddr>,
    /// Re-attachments started.
    pub reattaches: u64,
}

impl ParentChain {
    /// A chain of `fallback` ancestors (in order, at most
    /// [`MAX_FALLBACK`]) watched with `silence`; the parent was heard at
    /// `now`.
    pub fn new(fallback: &[SocketAddr], silence: Duration, now: Instant) -> Self {
        ParentChain {
            fallback: fallback.iter().copied().take(MAX_FALLBACK).collect(),
            silence: silence.max(Duration::from_millis(1)),
            heard: now,
            rejoin: None,
            leave: None,
            reattaches: 0,
        }
    }

    /// True while the current parent is watched for silence: some ancestor
    /// is left to fall back to.
    pub fn watching(&self) -> bool {
        !self.fallback.is_empty() && self.rejoin.is_none()
    }

    /// The current parent was heard at `now`.
    pub fn heard(&mut self, now: Instant) {
        self.heard = now;
    }

    /// The re-attachment under way, if any.
    pub fn rejoin(&self) -> Option<&Rejoin> {
        self.rejoin.as_ref()
    }

    /// The next time [`ParentChain::on_timeout`] has something to do.
    pub fn deadline(&self) -> Option<Instant> {
        match &self.rejoin {
            Some(r) => Some(r.next_try.min(r.deadline)),
            None if self.watching() => Some(self.heard + self.silence),
            None => None,
        }
    }

    /// Starts a re-attachment to the next ancestor, abandoning `current`;
    /// false when none is left.
    fn next(&mut self, now: Instant, current: SocketAddr, handshake: Duration) -> bool {
        let Some(target) = self.fallback.pop_front() else {
            self.rejoin = None;
            return false;
        };
        self.leave = Some(current);
        self.reattaches += 1;
        self.rejoin = Some(Rejoin {
            target,
            attempts: 0,
            next_try: now,
            deadline: now + handshake,
        });
        true
    }

    /// Timers: starts a re-attachment when the parent `current` has been
    /// silent too long, or moves on when an ancestor never answered.
    /// Returns false when a re-attachment failed with no ancestor left.
    pub fn on_timeout(&mut self, now: Instant, current: SocketAddr, handshake: Duration) -> bool {
        match self.rejoin {
            Some(r) if now >= r.deadline => self.next(now, r.target, handshake),
            None if self.watching() && now >= self.heard + self.silence => {
                self.next(now, current, handshake)
            }
            _ => true,
        }
    }

    /// The ancestor being asked refused (RESET): try the next one. False
    /// when none is left.
    pub fn refused(&mut self, now: Instant, handshake: Duration) -> bool {
        match self.rejoin {
            Some(r) => self.next(now, r.target, handshake),
            None => true,
        }
    }

    /// The target of a resume CONNECT due now (the back-off advanced), if
    /// any: retries wait `initial_rto · 2^attempts` (at most 2^6).
    pub fn due_connect(&mut self, now: Instant, initial_rto: Duration) -> Option<SocketAddr> {
        let r = self.rejoin.as_mut()?;
        if r.next_try > now {
            return None;
        }
        r.next_try = now + initial_rto.saturating_mul(1 << r.attempts.min(6));
        r.attempts += 1;
        Some(r.target)
    }

    /// The next ancestor, taken off the chain without a re-attachment (a
    /// first join whose parent never answered or refused).
    pub fn skip(&mut self) -> Option<SocketAddr> {
        self.fallback.pop_front()
    }

    /// The abandoned parent to send a CLOSE to, once.
    pub fn take_leave(&mut self) -> Option<SocketAddr> {
        self.leave.take()
    }

    /// The ancestor being asked accepted at `now`: it is the parent now.
    pub fn accepted(&mut self, now: Instant) -> Option<SocketAddr> {
        let r = self.rejoin.take()?;
        self.heard = now;
        Some(r.target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, i], 6000))
    }

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn silence_moves_down_the_chain_and_the_last_is_kept() {
        let hs = Duration::from_secs(2);
        let mut c = ParentChain::new(&[a(2), a(3)], Duration::from_secs(1), at(0));
        assert_eq!(c.deadline(), Some(at(1000)));
        c.heard(at(500));
        assert!(c.on_timeout(at(1000), a(1), hs));
        assert!(c.rejoin().is_none(), "heard recently");
        assert!(c.on_timeout(at(1500), a(1), hs));
        assert_eq!(c.rejoin().map(|r| r.target), Some(a(2)));
        assert_eq!(c.take_leave(), Some(a(1)));
        assert_eq!(c.take_leave(), None);
        assert_eq!(c.due_connect(at(1500), Duration::from_secs(1)), Some(a(2)));
        assert_eq!(c.due_connect(at(1600), Duration::from_secs(1)), None);
        assert_eq!(c.due_connect(at(2500), Duration::from_secs(1)), Some(a(2)));
        // a(2) never answers: a(3) is asked.
        assert!(c.on_timeout(at(3500), a(1), hs));
        assert_eq!(c.rejoin().map(|r| r.target), Some(a(3)));
        assert_eq!(c.accepted(at(3600)), Some(a(3)));
        // The last ancestor is never abandoned.
        assert!(!c.watching());
        assert_eq!(c.deadline(), None);
        assert_eq!(c.reattaches, 2);
    }

    #[test]
    fn a_refusal_tries_the_next_and_fails_at_the_end() {
        let hs = Duration::from_secs(2);
        let mut c = ParentChain::new(&[a(2)], Duration::from_secs(1), at(0));
        assert!(c.on_timeout(at(1000), a(1), hs));
        assert!(!c.refused(at(1100), hs), "no ancestor left");
        assert!(c.rejoin().is_none());
    }
}
