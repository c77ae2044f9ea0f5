//! Late joiners of a session flow: a member that joins the group and
//! connects at a given time and, once the session admits it past offset 0
//! (`join = "catch_up"`), fetches the prefix it missed exactly as
//! `fanout recv` does — with `fanout_app`'s [`CatchUpClient`] on a socket
//! of its own (the group port + 1 here), from the session's
//! `fanout_app::catch_up::CatchUpServer` (around the sender's session, as
//! `fanout send` runs it; see [`crate::session_flow::BulkSession`]).
//!
//! ```toml
//! [[flow]]
//! kind = "session"
//! # ...
//! join = "catch_up"                       # "from_start" (default) | "live" | "catch_up"
//! late = [{ node = "j1", at = "5s" }]     # joins the group and connects at 5 s
//! catch_up_share = 32                     # optional: session bytes per catch-up byte
//! ```
//!
//! A late node must not be a member of the group's `[[group]]` (the flow
//! joins it at `at`). The joiner has completed once it holds both parts:
//! `[0, S)` by catch-up and `[S, end)` by the session.
//!
//! The two engines of a joiner run as two apps on its node (the simulator
//! gives an app one address): the member app hands the catch-up app what
//! the CLI's `recv` hands its catch-up thread — the sender, the session,
//! the member id and the start offset — through a shared cell.

use crate::app::{AppProbe, SimApp};
use crate::transfer::SinkReceiver;
use crate::units::HumanDuration;
use fanout_app::catch_up::CatchUpClient;
use fanout_core::{Engine, Instant, Transmit};
use fanout_transport::{Receiver, TransportConfig};
use serde::Deserialize;
use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

/// How often the catch-up app looks whether its member was admitted
/// (virtual time; a handful of looks per join).
const PLAN_CHECK: Duration = Duration::from_millis(10);

/// `{ node = "j1", at = "5s" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LateSpec {
    /// Node joining.
    pub node: String,
    /// When it joins the group and connects.
    pub at: HumanDuration,
}

/// The catch-up socket's port: the group port + 1.
pub fn catch_up_port(group_port: u16) -> u16 {
    group_port.wrapping_add(1)
}

/// What the catch-up needs from the member's admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUpPlan {
    /// The session sender (the data source).
    pub sender: SocketAddr,
    /// What proves the member (`Receiver::catch_up_credential`).
    pub credential: u64,
    /// The member's id in it.
    pub member_id: u64,
    /// End of the missed prefix: the member's start offset.
    pub end: u64,
}

/// The cell a late member publishes its [`CatchUpPlan`] in.
pub type PlanCell = Rc<Cell<Option<CatchUpPlan>>>;

/// A member that joins at `at`: until then it sends nothing.
#[derive(Debug)]
pub struct LateMember {
    config: TransportConfig,
    sender: SocketAddr,
    at: Instant,
    inner: Option<SinkReceiver>,
    plan: PlanCell,
}

impl LateMember {
    /// A member of the session sent from `sender`, connecting at `at`,
    /// publishing its catch-up plan in `plan` once admitted past 0.
    pub fn new(config: TransportConfig, sender: SocketAddr, at: Instant, plan: PlanCell) -> Self {
        LateMember {
            config,
            sender,
            at,
            inner: None,
            plan,
        }
    }

    /// Its receiver, once it connected.
    pub fn receiver(&self) -> Option<&Receiver> {
        self.inner.as_ref().map(|s| s.receiver())
    }

    /// Publishes the catch-up plan once admitted past offset 0.
    fn publish(&self) {
        let Some(r) = self.receiver() else {
            return;
        };
        if self.plan.get().is_some() || r.start_offset() == 0 {
            return;
        }
        if let (Some(sender), Some(credential)) = (r.data_source(), r.catch_up_credential()) {
            self.plan.set(Some(CatchUpPlan {
                sender,
                credential,
                member_id: r.member_id(),
                end: r.start_offset(),
            }));
        }
    }
}

impl Engine for LateMember {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if let Some(r) = self.inner.as_mut() {
            r.handle_datagram(now, from, datagram);
        }
        self.publish();
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

/// A late member's catch-up socket: runs the CLI's [`CatchUpClient`] once
/// the member published its plan, reading (and discarding) the prefix.
pub struct LateCatchUp {
    config: TransportConfig,
    plan: PlanCell,
    client: Option<CatchUpClient>,
    /// Next look at the plan, while there is none (`None`: gave up).
    next_check: Option<Instant>,
    /// Stop looking after this (the member's join would have timed out).
    give_up: Instant,
    scratch: Vec<u8>,
    read: u64,
}

impl std::fmt::Debug for LateCatchUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LateCatchUp")
            .field("plan", &self.plan.get())
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

impl LateCatchUp {
    /// The catch-up socket of a member joining at `at`.
    pub fn new(config: TransportConfig, at: Instant, plan: PlanCell) -> Self {
        LateCatchUp {
            give_up: at + config.handshake_timeout * 2,
            config,
            plan,
            client: None,
            next_check: Some(at),
            scratch: vec![0; 64 << 10],
            read: 0,
        }
    }

    /// Prefix bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.read
    }

    /// True once the whole prefix arrived.
    pub fn is_finished(&self) -> bool {
        let Some(plan) = self.plan.get() else {
            return false;
        };
        self.client.as_ref().is_some_and(|c| {
            c.receiver().is_finished() && c.receiver().stream_len() == Some(plan.end)
        })
    }

    /// Starts the client once the plan is there.
    fn start(&mut self, now: Instant) {
        if self.client.is_some() {
            return;
        }
        match self.plan.get() {
            Some(p) => {
                self.next_check = None;
                self.client = Some(CatchUpClient::new(
                    self.config.clone(),
                    p.sender,
                    p.credential,
                    p.member_id,
                    0..p.end,
                    now,
                ));
            }
            None if now >= self.give_up => self.next_check = None,
            None => self.next_check = Some(now + PLAN_CHECK),
        }
    }

    fn read_all(&mut self) {
        if let Some(c) = self.client.as_mut() {
            loop {
                let n = c.receiver_mut().read(&mut self.scratch);
                if n == 0 {
                    break;
                }
                self.read += n as u64;
            }
        }
    }
}

impl Engine for LateCatchUp {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if let Some(c) = self.client.as_mut() {
            c.handle_datagram(now, from, datagram);
        }
        self.read_all();
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.start(now);
        self.client.as_mut()?.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match &self.client {
            Some(c) => c.poll_timeout(),
            None => self.next_check,
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.start(now);
        if let Some(c) = self.client.as_mut() {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
        }
        self.read_all();
    }
}

impl SimApp for LateCatchUp {
    fn probe(&self) -> AppProbe {
        AppProbe {
            delivered_bytes: self.read,
            ..AppProbe::default()
        }
    }
}
