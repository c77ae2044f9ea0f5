//! The session's datagram size, fitted to its members' paths before data
//! flows: a joiner whose CONNECT accepts smaller payloads than the session
//! sends (its route's MTU, or what the sender's path probes showed it,
//! `crate::wire::path_probe`) makes every datagram of the session that
//! small, if no data went out yet and the size is at least
//! [`SMALLEST_PATH`] — a hostile joiner can cost the session at most that
//! much per datagram. After data went out, segments keep their size (the
//! log, coded blocks and signed lists hold them); such a joiner is told
//! the session's size in its ACCEPT and leaves, saying why.

use super::{SessionEvent, SessionSender};
use crate::wire::path_probe::SMALLEST_PATH;
use std::net::SocketAddr;

impl SessionSender {
    /// The largest datagram the session sends, bytes of UDP payload.
    pub fn max_datagram(&self) -> usize {
        self.config.transport.max_datagram
    }

    /// Makes the session's datagrams small enough for the payloads of
    /// `max_payload` bytes the joiner at `from` accepts, if they are
    /// larger, no data went out yet and the size that fits is at least
    /// [`SMALLEST_PATH`]. Tells the application
    /// ([`SessionEvent::DatagramsFitted`]).
    pub(super) fn fit_datagrams_to(&mut self, from: SocketAddr, max_payload: u64) {
        if max_payload >= self.mss || self.data_open || self.stats.data_segments > 0 {
            return;
        }
        let deadline_room = self.config.transport.max_payload() - self.mss;
        let mut t = self.config.transport.clone();
        // One byte of datagram is one of payload, but at the length
        // varint's size steps: step down until the payload fits.
        t.max_datagram = t
            .max_datagram
            .saturating_sub((self.mss - max_payload) as usize);
        while t.max_datagram >= SMALLEST_PATH && t.max_payload() - deadline_room > max_payload {
            t.max_datagram -= 1;
        }
        if t.max_datagram < SMALLEST_PATH {
            return;
        }
        self.mss = t.max_payload() - deadline_room;
        self.config.transport.max_datagram = t.max_datagram;
        self.pacer = super::pacer_for(&self.config.transport, self.mss);
        self.controller.set_segment_size(self.mss);
        let cc = self.config.transport.cc;
        let (mss, ids) = (
            self.mss,
            self.members.iter().map(|m| m.id()).collect::<Vec<_>>(),
        );
        for id in ids {
            self.members
                .update(id, self.snd_nxt, |m| m.replace_cc(cc.build(mss)));
        }
        if let Some(k) = self.keys.as_mut() {
            k.set_max_datagram(t.max_datagram);
        }
        self.update_pacing_rate();
        tracing::info!(
            session = self.session_id,
            %from,
            max_datagram = t.max_datagram,
            "datagrams fitted to a joiner's path"
        );
        self.events.push_back(SessionEvent::DatagramsFitted {
            addr: from,
            max_datagram: t.max_datagram,
        });
    }
}
