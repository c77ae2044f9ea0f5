//! Stateless retry under a join flood (`docs/wire.md` §4.11), for every
//! engine that admits unprotected joins (a session sender, a merger): once
//! `RETRY_ABOVE_UNVALIDATED` (16) joiners are unvalidated, an unproven join is
//! answered with a RETRY carrying a token bound to its address and the
//! time window, and leaves no state; a joiner that comes back with the
//! token proved its address and is admitted validated.

use super::config::{RETRY_ABOVE_UNVALIDATED, RETRY_MODE_HOLD, RETRY_WINDOW};
use super::TokenKey;
use crate::join_budget::JoinBudget;
use fanout_core::time::Instant;
use std::net::SocketAddr;

/// RETRYs sent per second at most, on average; beyond, unproven joins are
/// dropped unanswered (honest joiners try again). A flood's joins come
/// from addresses no host may hold: each answer waits in the kernel for
/// address resolution, holding the socket's send buffer, and enough of
/// them would block what the engine sends its members.
pub const RETRIES_PER_SECOND: u32 = 1000;
/// RETRYs that may go out at once (a token bucket): a thousand receivers
/// started together all get theirs in the first round trip.
pub const RETRY_BURST: u32 = 1024;

/// When an engine answers joins with RETRYs, and its tokens.
#[derive(Debug, Clone, Copy)]
pub struct RetryGate {
    /// RETRYs go out until then (`RETRY_MODE_HOLD` (10 s) after the last
    /// unproven join that got one).
    until: Option<Instant>,
    /// RETRYs that may go out.
    budget: JoinBudget,
}

impl Default for RetryGate {
    fn default() -> Self {
        RetryGate {
            until: None,
            budget: JoinBudget::new(RETRIES_PER_SECOND, RETRY_BURST),
        }
    }
}

/// The RETRY window `now` falls in.
fn window(now: Instant) -> u64 {
    (now.saturating_duration_since(Instant::ZERO).as_millis() / RETRY_WINDOW.as_millis()) as u64
}

impl RetryGate {
    /// Whether an unproven join at `now` gets a RETRY, with `unvalidated`
    /// joiners admitted and not validated yet.
    pub fn under_flood(&self, now: Instant, unvalidated: usize) -> bool {
        unvalidated >= RETRY_ABOVE_UNVALIDATED || self.until.is_some_and(|t| now < t)
    }

    /// The token of a RETRY to `addr` at `now` (session `session_id`,
    /// secret `key`), or `None` when the budget ([`RETRIES_PER_SECOND`],
    /// [`RETRY_BURST`]) is spent (the join is then dropped unanswered); RETRYs keep going out for
    /// `RETRY_MODE_HOLD` (10 s).
    pub fn retry(
        &mut self,
        now: Instant,
        key: &TokenKey,
        session_id: u64,
        addr: SocketAddr,
    ) -> Option<u64> {
        self.until = Some(now + RETRY_MODE_HOLD);
        if !self.budget.take(now) {
            return None;
        }
        Some(key.token_for_retry(session_id, window(now), addr))
    }

    /// Whether `id` is a token a RETRY gave `addr` lately (in the window
    /// of `now` or the one before).
    pub fn is_token(
        now: Instant,
        key: &TokenKey,
        session_id: u64,
        addr: SocketAddr,
        id: u64,
    ) -> bool {
        if id == 0 || id == session_id {
            return false;
        }
        let w = window(now);
        [w, w.saturating_sub(1)]
            .iter()
            .any(|w| key.token_for_retry(session_id, *w, addr) == id)
    }
}
