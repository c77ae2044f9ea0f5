//! The joiner side of file catch-up: a [`Receiver`] listening on the
//! joiner's own catch-up socket for the session sender's OFFER, plus the
//! request (see [`super::request`]) that makes the sender offer, repeated
//! with back-off until it does.

use super::request::{encode_request, Request};
use fanout_core::time::Instant;
use fanout_core::{Engine, Transmit};
use fanout_transport::handshake::retry_wait;
use fanout_transport::PacketNumbers;
use fanout_transport::{Receiver, TransportConfig};
use std::net::SocketAddr;

/// Requests sent at most before giving up.
const MAX_REQUESTS: u32 = 8;

/// Fetches the prefix `[0, end)` of a session's stream from its sender (or
/// `[from, end)`, resuming).
pub struct CatchUpClient {
    receiver: Receiver,
    sender: SocketAddr,
    request: Request,
    numbers: PacketNumbers,
    requests_sent: u32,
    next_request: Instant,
    deadline: Instant,
    initial_rto: std::time::Duration,
    timed_out: bool,
    /// Datagrams from anyone but the session sender (ignored).
    pub strangers: u64,
}

impl CatchUpClient {
    /// Asks `sender` (where this host is member `member_id`, proving it
    /// with `credential`: `Receiver::catch_up_credential`) for the stream
    /// bytes `range` (not empty; from 0, or from what it holds). The
    /// transfer's stream offset 0 is the session stream's `range.start`.
    pub fn new(
        config: TransportConfig,
        sender: SocketAddr,
        credential: u64,
        member_id: u64,
        range: std::ops::Range<u64>,
        now: Instant,
    ) -> Self {
        let request = Request {
            credential,
            member_id,
            range,
        };
        CatchUpClient {
            deadline: now + config.handshake_timeout,
            initial_rto: config.rto.initial,
            receiver: Receiver::listen_to(config, sender, now),
            sender,
            request,
            numbers: PacketNumbers::default(),
            requests_sent: 0,
            next_request: now,
            timed_out: false,
            strangers: 0,
        }
    }

    /// The receiver of the prefix.
    pub fn receiver(&self) -> &Receiver {
        &self.receiver
    }

    /// The receiver of the prefix, to read it like any stream.
    pub fn receiver_mut(&mut self) -> &mut Receiver {
        &mut self.receiver
    }

    /// True once the prefix transfer ended (see [`Receiver::close_reason`])
    /// or the sender never answered.
    pub fn is_done(&self) -> bool {
        self.timed_out || self.receiver.is_closed()
    }

    /// True if the sender never connected back.
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    fn waiting(&self) -> bool {
        self.receiver.peer().is_none() && !self.timed_out
    }
}

impl Engine for CatchUpClient {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        // Only the session sender may connect to the catch-up socket: a
        // stranger cannot inject a prefix.
        if from != self.sender {
            self.strangers += 1;
            return;
        }
        self.receiver.handle_datagram(now, from, datagram);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.waiting() && now >= self.next_request && self.requests_sent < MAX_REQUESTS {
            encode_request(&self.request, &mut self.numbers, buf);
            let wait = retry_wait(self.requests_sent, self.initial_rto);
            self.requests_sent += 1;
            self.next_request = now + wait;
            return Some(Transmit {
                destination: self.sender,
            });
        }
        self.receiver.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let waiting = self
            .waiting()
            .then_some(self.next_request.min(self.deadline));
        [waiting, self.receiver.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    fn max_wake_delay(&self) -> Option<std::time::Duration> {
        self.receiver.max_wake_delay()
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.waiting() && now >= self.deadline {
            self.timed_out = true;
        }
        if self.receiver.poll_timeout().is_some_and(|t| t <= now) {
            self.receiver.handle_timeout(now);
        }
    }
}
