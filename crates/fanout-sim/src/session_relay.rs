//! Session relays for hierarchy (TCP-SMO §V.D): a node that is a member of an
//! upstream session and the sender of a downstream session, forwarding bytes as
//! they arrive through a bounded buffer.
//!
//! ```toml
//! [[flow]]
//! kind = "session"
//! from = "s:5000"
//! group = "239.1.1.1:7000"         # the relays are this group's members
//! relays = [{ node = "x1", group = "239.2.1.1:7000" }]
//! relay_buffer = "4MiB"            # optional, default 4 MiB
//! ```
//!
//! Each relay node must be a member of the upstream `[[group]]`; its
//! downstream session multicasts to `group`, whose `[[group]]` members get
//! ordinary session members connecting to the relay's address (the relay's
//! one socket, the upstream group's port, serves both sessions). The
//! downstream session has the upstream session's policies.
//!
//! Back-pressure: the relay reads from its upstream member only while its
//! buffer has room, so a slow downstream session closes the relay's
//! receive window and the upstream session (window = min) slows with it.

use crate::app::{AppProbe, SimApp};
use fanout_core::{Engine, Instant, Transmit};
use fanout_transport::session::{SessionConfig, SessionSender};
use fanout_transport::Receiver;
use serde::Deserialize;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// Default relay buffer, bytes.
pub const DEFAULT_RELAY_BUFFER: u64 = 4 << 20;

/// `{ node = "x1", group = "239.2.1.1:7000" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySpec {
    /// Relay node (a member of the upstream group).
    pub node: String,
    /// Downstream group and port.
    pub group: String,
}

/// A relay: the upstream member and the downstream session on one socket.
#[derive(Debug)]
pub struct RelayApp {
    upstream: SocketAddr,
    member: Receiver,
    session: SessionSender,
    pending: VecDeque<u8>,
    capacity: usize,
    scratch: Vec<u8>,
    finished: bool,
}

impl RelayApp {
    /// A relay joining the session sent from `upstream` with `member_config`
    /// and forwarding into a session configured by `downstream`, through a
    /// buffer of `capacity` bytes.
    pub fn new(
        upstream: SocketAddr,
        downstream: SessionConfig,
        session_id: u64,
        capacity: usize,
    ) -> Self {
        RelayApp {
            member: Receiver::join(downstream.transport.clone(), upstream, Instant::ZERO),
            session: SessionSender::new(downstream, session_id, Instant::ZERO),
            upstream,
            pending: VecDeque::with_capacity(capacity.min(16 << 20)),
            capacity: capacity.max(1),
            scratch: vec![0; 64 << 10],
            finished: false,
        }
    }

    /// The downstream session.
    pub fn session(&self) -> &SessionSender {
        &self.session
    }

    /// The upstream member.
    pub fn member(&self) -> &Receiver {
        &self.member
    }

    /// Moves bytes upstream member → buffer → downstream session.
    fn forward(&mut self) {
        loop {
            let (a, b) = self.pending.as_slices();
            let first = if a.is_empty() { b } else { a };
            let len = first.len();
            if len == 0 {
                break;
            }
            let n = self.session.write(first);
            self.pending.drain(..n);
            if n < len {
                break;
            }
        }
        loop {
            let room = self.capacity.saturating_sub(self.pending.len());
            if room == 0 {
                break;
            }
            let want = room.min(self.scratch.len());
            let n = self.member.read(&mut self.scratch[..want]);
            if n == 0 {
                break;
            }
            self.pending.extend(&self.scratch[..n]);
            let taken = {
                let (a, _) = self.pending.as_slices();
                self.session.write(a)
            };
            self.pending.drain(..taken);
        }
        if !self.finished && self.pending.is_empty() && self.member.is_finished() {
            self.finished = true;
            self.session.finish();
        }
    }
}

impl Engine for RelayApp {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if from == self.upstream {
            self.member.handle_datagram(now, from, datagram);
        } else {
            self.session.handle_datagram(now, from, datagram);
            while self.session.poll_event().is_some() {}
        }
        self.forward();
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.forward();
        match self.member.poll_transmit(now, buf) {
            Some(t) => Some(t),
            None => self.session.poll_transmit(now, buf),
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        [self.member.poll_timeout(), self.session.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.member.poll_timeout().is_some_and(|t| t <= now) {
            self.member.handle_timeout(now);
        }
        if self.session.poll_timeout().is_some_and(|t| t <= now) {
            self.session.handle_timeout(now);
            while self.session.poll_event().is_some() {}
        }
        self.forward();
    }
}

impl SimApp for RelayApp {
    fn probe(&self) -> AppProbe {
        AppProbe {
            delivered_bytes: self.member.bytes_read(),
            cwnd_bytes: Some(self.session.cwnd()),
            srtt: None,
            rate_bps: None,
        }
    }
}
