//! Undoing a congestion response that proved spurious (RFC 3522's
//! detection by timing, RFC 4015's response; Linux undoes the same way
//! on DSACKs): a path that reorders delivers a segment after the ones
//! sent behind it, RACK calls it lost before reordering is known, and the
//! window is cut for a loss that never happened. Once every repair sent
//! in that episode proves to have been acknowledged for the first copy,
//! the controller goes back to its state before the cut.

use fanout_core::cc::CongestionController;
use fanout_core::time::Instant;

/// The state to go back to while the latest recovery episode may still
/// prove spurious: it does once every byte deemed lost in it is known to
/// have arrived in its first sending (late, or before a repair of it
/// could have).
#[derive(Debug)]
pub(super) struct UndoPoint {
    /// The controller as it was before the episode's congestion response.
    pub(super) before: Box<dyn CongestionController>,
    /// `episode_start_edge` before the episode began.
    pub(super) edge_before: u64,
    /// When the episode began: repairs sent since are its own.
    since: Instant,
    /// Bytes deemed lost since the episode began.
    lost: u64,
    /// Of those, bytes known to have arrived in their first sending.
    proven: u64,
}

impl UndoPoint {
    /// Armed at the start of an episode.
    pub(super) fn new(
        before: Box<dyn CongestionController>,
        edge_before: u64,
        since: Instant,
    ) -> Self {
        UndoPoint {
            before,
            edge_before,
            since,
            lost: 0,
            proven: 0,
        }
    }

    /// `bytes` more were deemed lost in the episode.
    pub(super) fn on_deemed_lost(&mut self, bytes: u64) {
        self.lost += bytes;
    }

    /// `bytes` deemed lost arrived in their first sending: late, with no
    /// repair sent yet, or before the repair sent at `repair_sent_at`
    /// could have. True once all the episode's lost bytes have.
    pub(super) fn on_proven(&mut self, bytes: u64, repair_sent_at: Option<Instant>) -> bool {
        if repair_sent_at.is_none_or(|t| t >= self.since) {
            self.proven += bytes;
        }
        self.lost > 0 && self.proven >= self.lost
    }
}
