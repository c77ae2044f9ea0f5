//! The minimum window (TCP-SMO §II default `G = min`): new data goes out
//! only within every member's own window — its congestion window beyond
//! what it holds in flight, and its receive window — so the session is
//! strictly TCP-fair on every member's path and runs at the pace of the
//! slowest member.

use super::SessionController;
use crate::session::members::{IndexSpec, MemberKey, MemberView};

/// `G = min` over members.
#[derive(Debug, Clone, Copy, Default)]
pub struct MinimumWindow;

impl SessionController for MinimumWindow {
    fn indexes(&self) -> Vec<IndexSpec> {
        [MemberKey::SendEdge, MemberKey::Cwnd]
            .map(|key| IndexSpec { key, ranked: false })
            .to_vec()
    }

    fn window(&self, members: &MemberView<'_>) -> u64 {
        members.min(MemberKey::Cwnd).unwrap_or(0)
    }

    fn send_limit(&self, members: &MemberView<'_>, _window: u64) -> u64 {
        members.min(MemberKey::SendEdge).unwrap_or(0)
    }
}
