//! Late joiners of a session flow (issue 3 §2): a member that joins the
//! group and connects at a given time, and the unicast catch-up of the
//! prefix it missed.
//!
//! ```toml
//! [[flow]]
//! kind = "session"
//! # ...
//! join = "catch_up"                       # "from_start" (default) | "live" | "catch_up"
//! late = [{ node = "j1", at = "5s" }]     # joins the group and connects at 5 s
//! catch_up = "at_join"                    # or "after_session"
//! ```
//!
//! A late node must not be a member of the group's `[[group]]` (the flow
//! joins it at `at`). With `join = "catch_up"` the session admits it at the
//! current send position `S` (`JoinPolicy::CatchUp`), and the sender's
//! application opens an ordinary unicast transfer ([`BulkSender`], the
//! TCP-like engine validated against ns-3) of the `S`-byte prefix to the
//! joiner's group port + 1, as the real CLI's catch-up does. The joiner has
//! completed once it holds both parts: `[0, S)` by unicast and `[S, end)`
//! by the session.
//!
//! `catch_up = "at_join"` (default) starts the prefix transfer at once, as
//! the CLI does; it then shares the joiner's link with the session, and with
//! the session window = the minimum over members the joiner's smaller
//! window holds every member back while it lasts. `"after_session"` starts
//! every prefix transfer once the session finished (the others are not
//! slowed at all; the joiner completes later).

use crate::app::{AppProbe, SimApp};
use crate::transfer::{BulkSender, SinkReceiver};
use crate::units::HumanDuration;
use fanout_core::{Engine, Instant, Transmit};
use fanout_transport::{Receiver, TransportConfig};
use serde::Deserialize;
use std::net::SocketAddr;

/// Most catch-up transfers one session runs (joins come from the scenario's
/// own `late` list, so this only guards against typos).
pub const MAX_CATCH_UPS: usize = 1024;

/// `{ node = "j1", at = "5s" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LateSpec {
    /// Node joining.
    pub node: String,
    /// When it joins the group and connects.
    pub at: HumanDuration,
}

/// The catch-up receiver's port: the group port + 1.
pub fn catch_up_port(group_port: u16) -> u16 {
    group_port.wrapping_add(1)
}

/// A member that joins at `at`: until then it sends nothing.
#[derive(Debug)]
pub struct LateMember {
    config: TransportConfig,
    sender: SocketAddr,
    at: Instant,
    inner: Option<SinkReceiver>,
}

impl LateMember {
    /// A member of the session sent from `sender`, connecting at `at`.
    pub fn new(config: TransportConfig, sender: SocketAddr, at: Instant) -> Self {
        LateMember {
            config,
            sender,
            at,
            inner: None,
        }
    }

    /// Its receiver, once it connected.
    pub fn receiver(&self) -> Option<&Receiver> {
        self.inner.as_ref().map(|s| s.receiver())
    }
}

impl Engine for LateMember {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if let Some(r) = self.inner.as_mut() {
            r.handle_datagram(now, from, datagram);
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.inner.is_none() && now >= self.at {
            let r = Receiver::join(self.config.clone(), self.sender, now);
            self.inner = Some(SinkReceiver::with(r));
        }
        self.inner.as_mut()?.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match &self.inner {
            None => Some(self.at),
            Some(r) => r.poll_timeout(),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some(r) = self.inner.as_mut() {
            r.handle_timeout(now);
        }
    }
}

impl SimApp for LateMember {
    fn probe(&self) -> AppProbe {
        self.inner
            .as_ref()
            .map_or_else(AppProbe::default, |r| r.probe())
    }
}

/// The sender side's catch-up transfers, one per late joiner, multiplexed
/// on the session's socket and told apart by the peer address.
#[derive(Debug)]
pub struct CatchUps {
    config: TransportConfig,
    session_id: u64,
    flows: Vec<(SocketAddr, BulkSender)>,
    next: usize,
    /// Prefixes waiting for the session's end (`after_session`): joiner
    /// address and prefix length.
    deferred: Option<Vec<(SocketAddr, u64)>>,
}

impl CatchUps {
    /// No transfers yet; each will use `config`. With `after_session`,
    /// transfers wait for [`CatchUps::on_session_finished`].
    pub fn new(config: TransportConfig, session_id: u64, after_session: bool) -> Self {
        CatchUps {
            config,
            session_id,
            flows: Vec::new(),
            next: 0,
            deferred: after_session.then(Vec::new),
        }
    }

    /// A member at `addr` was admitted at `start`: if it missed a prefix,
    /// send `[0, start)` to its catch-up port (now, or once the session
    /// finished).
    pub fn on_joined(&mut self, now: Instant, addr: SocketAddr, start: u64) {
        match self.deferred.as_mut() {
            Some(d) if d.len() < MAX_CATCH_UPS => d.push((addr, start)),
            Some(_) => {}
            None => self.start(now, addr, start),
        }
    }

    /// The session finished: deferred prefix transfers start now.
    pub fn on_session_finished(&mut self, now: Instant) {
        for (addr, start) in self.deferred.take().unwrap_or_default() {
            self.start(now, addr, start);
        }
    }

    fn start(&mut self, now: Instant, addr: SocketAddr, start: u64) {
        if start == 0 || self.flows.len() >= MAX_CATCH_UPS {
            return;
        }
        let peer = SocketAddr::new(addr.ip(), catch_up_port(addr.port()));
        let id = self.session_id ^ (0xCA7C_0000 + self.flows.len() as u64);
        let config = fanout_transport::session::SessionConfig::unicast(self.config.clone());
        let s = BulkSender::new(config, peer, id, now, Some(start));
        self.flows.push((peer, s));
    }

    /// Hands a datagram from `from` to its transfer; false if none is from there.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) -> bool {
        match self.flows.iter_mut().find(|(p, _)| *p == from) {
            Some((_, s)) => {
                s.handle_datagram(now, from, datagram);
                true
            }
            None => false,
        }
    }

    /// The next datagram of any transfer (round robin).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let n = self.flows.len();
        for i in 0..n {
            let k = (self.next + i) % n;
            if let Some(t) = self.flows[k].1.poll_transmit(now, buf) {
                self.next = (k + 1) % n;
                return Some(t);
            }
        }
        None
    }

    /// Earliest deadline of any transfer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.flows
            .iter()
            .filter_map(|(_, s)| s.poll_timeout())
            .min()
    }

    /// Runs the transfers' expired timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        for (_, s) in &mut self.flows {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
        }
    }
}
