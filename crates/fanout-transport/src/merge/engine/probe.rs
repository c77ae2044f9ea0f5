//! Probing silent children. A child is soft state, forgotten after
//! `child_timeout` of silence, and children are silent while no data flows.
//! The sender's keep-alive cannot be relied on to make them speak: it PINGs
//! a member only when the member is silent, and a merger never is (its
//! ROSTER pages go up every second). So the merger PINGs its own children:
//! one silent for a third of `child_timeout` gets a PING (a receiver
//! answers with an ACK), repeated every twelfth of it while the silence
//! lasts — eight probes before the child expires, so a few lost probes or
//! answers do not end a live child.

use super::{Merger, Up};
use crate::wire::Frame;
use fanout_core::time::Instant;
use std::net::SocketAddr;
use std::sync::Arc;

impl Merger {
    /// Time between probe rounds (a twelfth of `child_timeout`).
    fn probe_interval(&self) -> std::time::Duration {
        (self.config.child_timeout / 12).max(std::time::Duration::from_millis(1))
    }

    /// When the next probe round is due (while a member upstream).
    pub(super) fn probe_deadline(&self) -> Option<Instant> {
        (self.up == Up::Established).then_some(self.next_probe)
    }

    /// PINGs every admitted child silent for a third of `child_timeout`,
    /// when a probe round is due.
    pub(super) fn probe_due(&mut self, now: Instant) {
        if self.up != Up::Established || now < self.next_probe {
            return;
        }
        self.next_probe = now + self.probe_interval();
        let silence = self.config.child_timeout / 3;
        let to: Vec<SocketAddr> = self.table.spec.children.silent_for(now, silence).collect();
        if to.is_empty() {
            return;
        }
        let mut b = Vec::new();
        Frame::Ping.encode(&mut b);
        let body: Arc<[u8]> = b.into();
        for a in to {
            self.stats.probes += 1;
            self.queue(a, self.session_id, body.clone());
        }
    }
}
