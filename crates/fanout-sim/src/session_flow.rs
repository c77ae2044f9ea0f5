//! TCP-SMO sessions as scenario flows (`kind = "session"`): a
//! [`SessionSender`] multicasting to a group, and a member ([`Receiver::join`])
//! on every node that is ever a member of the group.
//!
//! ```toml
//! [[flow]]
//! kind = "session"
//! from = "s:5000"
//! group = "239.1.1.1:7000"
//! bytes = "100MB"             # optional; default: send until the run ends
//! cc = "newreno"              # optional (default cubic)
//! repair_threshold = 0.05     # optional: multicast a repair above this share
//! wait_for = 10               # optional: members to wait for (default all)
//! unicast_fanout = false      # optional: no multicast, a copy per member
//! ack_every = 2               # optional segments per ACK at the members
//! window = "1MiB"             # optional send buffer and member receive windows
//! ```

use crate::app::{AppProbe, SimApp};
use crate::ids::AppId;
use crate::scenario::{FlowFactory, FlowSpec, ScenarioContext};
use crate::sim::Simulator;
use crate::transfer::{apply_transport_options, feed_bulk, SinkReceiver};
use crate::units::Bytes;
use fanout_core::{Engine, Instant, Transmit};
use fanout_transport::session::{SessionConfig, SessionSender};
use fanout_transport::Receiver;
use serde::Deserialize;
use std::net::SocketAddr;

/// A session sender application writing `total` bytes (or forever).
#[derive(Debug)]
pub struct BulkSession {
    session: SessionSender,
    total: Option<u64>,
    written: u64,
}

impl BulkSession {
    /// A session sending `total` bytes (`None`: endless).
    pub fn new(config: SessionConfig, session_id: u64, total: Option<u64>) -> Self {
        BulkSession {
            session: SessionSender::new(config, session_id, Instant::ZERO),
            total,
            written: 0,
        }
    }

    /// The session.
    pub fn session(&self) -> &SessionSender {
        &self.session
    }
}

impl Engine for BulkSession {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.session.handle_datagram(now, from, datagram);
        while self.session.poll_event().is_some() {}
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let s = &mut self.session;
        if feed_bulk(&mut self.written, self.total, |b| s.write(b)) {
            s.finish();
        }
        self.session.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.session.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.session.handle_timeout(now);
        while self.session.poll_event().is_some() {}
    }
}

impl SimApp for BulkSession {
    fn probe(&self) -> AppProbe {
        AppProbe {
            delivered_bytes: self.session.bytes_acked_by_all(),
            cwnd_bytes: Some(self.session.cwnd()),
            srtt: None,
            rate_bps: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionSpec {
    from: String,
    group: String,
    #[serde(default)]
    bytes: Option<Bytes>,
    #[serde(default)]
    cc: Option<String>,
    #[serde(default)]
    repair_threshold: Option<f64>,
    #[serde(default)]
    wait_for: Option<usize>,
    #[serde(default)]
    unicast_fanout: Option<bool>,
    #[serde(default)]
    ack_every: Option<u32>,
    #[serde(default)]
    window: Option<Bytes>,
}

/// One session built into a simulation.
#[derive(Debug, Clone)]
pub struct SessionFlow {
    /// The [`BulkSession`].
    pub sender: AppId,
    /// One [`SinkReceiver`] per member node.
    pub members: Vec<AppId>,
}

/// Builds `kind = "session"` flows and remembers them.
#[derive(Debug, Default)]
pub struct SessionFlows {
    /// Sessions built, in scenario order.
    pub sessions: Vec<SessionFlow>,
}

impl FlowFactory for SessionFlows {
    fn build(
        &mut self,
        spec: &FlowSpec,
        sim: &mut Simulator,
        ctx: &ScenarioContext,
    ) -> Result<bool, String> {
        if spec.kind != "session" {
            return Ok(false);
        }
        let t: SessionSpec = spec.parse()?;
        let from = sim.resolve(&t.from).map_err(|e| format!("from: {e}"))?;
        let group: SocketAddr = t
            .group
            .parse()
            .map_err(|e| format!("group: `{}`: {e}", t.group))?;
        if !group.ip().is_multicast() {
            return Err(format!("group: {} is not a multicast address", group.ip()));
        }
        let addrs = ctx.member_addrs(sim, group);
        if addrs.is_empty() {
            return Err(format!("group: no [[group]] {} with members", group.ip()));
        }
        let mut config = SessionConfig {
            group: (!t.unicast_fanout.unwrap_or(false)).then_some(group),
            wait_for_members: t.wait_for.unwrap_or(addrs.len()),
            ..SessionConfig::default()
        };
        if let Some(th) = t.repair_threshold {
            if !(0.0..=1.0).contains(&th) {
                return Err("repair_threshold: must be within 0..=1".into());
            }
            config.multicast_repair_threshold = th;
        }
        apply_transport_options(
            &mut config.transport,
            t.cc.as_deref(),
            t.window,
            t.ack_every,
        )?;
        let mut members = Vec::with_capacity(addrs.len());
        for addr in addrs {
            let r = Receiver::join(config.transport.clone(), from, Instant::ZERO);
            members.push(
                sim.add_app(addr, Box::new(SinkReceiver::with(r)))
                    .map_err(|e| format!("member {addr}: {e}"))?,
            );
        }
        let session_id = 0x5E55_0000 + self.sessions.len() as u64;
        let sender = sim
            .add_app(
                from,
                Box::new(BulkSession::new(config, session_id, t.bytes.map(|b| b.0))),
            )
            .map_err(|e| format!("from: {e}"))?;
        self.sessions.push(SessionFlow { sender, members });
        Ok(true)
    }
}
