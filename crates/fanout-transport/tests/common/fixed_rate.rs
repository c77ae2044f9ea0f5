//! A third session controller, to show how one plugs in: this file, and
//! [`fanout_transport::session::SessionSender::with_controller`] as its
//! registration. It sends at a fixed rate within every member's receive
//! window, whatever the congestion windows say (a test double, not a
//! shipped policy: it is not TCP-friendly).

use fanout_transport::session::{IndexSpec, MemberKey, MemberView, SessionController};

/// Sends at `bytes_per_sec`, within the members' receive windows.
#[derive(Debug)]
pub struct FixedRate {
    /// The rate, bytes per second.
    pub bytes_per_sec: u64,
}

impl SessionController for FixedRate {
    fn indexes(&self) -> Vec<IndexSpec> {
        vec![IndexSpec {
            key: MemberKey::WindowEnd,
            ranked: false,
        }]
    }

    /// Large enough that the rate cap, not the window, paces.
    fn window(&self, _members: &MemberView<'_>) -> u64 {
        1 << 40
    }

    fn send_limit(&self, members: &MemberView<'_>, _window: u64) -> u64 {
        members.min(MemberKey::WindowEnd).unwrap_or(0)
    }

    fn rate_cap(&self) -> Option<u64> {
        Some(self.bytes_per_sec)
    }
}
