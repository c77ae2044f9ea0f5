//! Transfers to one receiver as scenario flows (`kind = "transfer"`): a
//! bulk sender — the session engine with one member, offered to the
//! receiver, exactly what `fanout send --to` runs — fed from an endless (or
//! sized) source, and a listening [`Receiver`] whose application reads
//! everything at once.
//!
//! ```toml
//! [[flow]]
//! kind = "transfer"
//! from = "s1:5000"
//! to = "d1:6000"
//! cc = "newreno"        # or "cubic" (default)
//! bytes = "100MB"       # optional; default: send until the run ends
//! start = "0s"          # optional
//! stop = "120s"         # optional: the sender aborts then (the flow ends)
//! window = "8MiB"       # optional send buffer / receive window
//! ack_every = 2         # optional segments per ACK
//! max_datagram = 1452   # optional
//! ```

use crate::app::{AppProbe, SimApp};
use crate::ids::AppId;
use crate::scenario::{FlowFactory, FlowSpec, ScenarioContext};
use crate::sim::Simulator;
use crate::units::{Bytes, HumanDuration, Rate};
use fanout_core::cc::CcAlgorithm;
use fanout_core::{Engine, Instant, Transmit};
use fanout_transport::session::{SessionConfig, SessionSender};
use fanout_transport::{Receiver, TransportConfig};
use serde::Deserialize;
use std::net::SocketAddr;
use std::time::Duration;

/// Zeros the bulk source writes from.
const SOURCE_CHUNK: [u8; 16 << 10] = [0; 16 << 10];

/// A sender application: offers itself to its receiver at `start`, writes
/// `total` bytes (or forever), then finishes; or aborts at its stop time.
#[derive(Debug)]
pub struct BulkSender {
    config: SessionConfig,
    peer: SocketAddr,
    session_id: u64,
    start: Instant,
    total: Option<u64>,
    written: u64,
    sender: Option<SessionSender>,
    /// When it aborts, until it has.
    stop: Option<Instant>,
}

impl BulkSender {
    /// A sender of `total` bytes (`None`: endless) to `peer` from `start`.
    pub fn new(
        config: SessionConfig,
        peer: SocketAddr,
        session_id: u64,
        start: Instant,
        total: Option<u64>,
    ) -> Self {
        BulkSender {
            config,
            peer,
            session_id,
            start,
            total,
            written: 0,
            sender: None,
            stop: None,
        }
    }

    /// Aborts the session at `stop` (a competing flow that ends).
    pub fn stopping_at(mut self, stop: Instant) -> Self {
        self.stop = Some(stop);
        self
    }

    /// The session, once started.
    pub fn sender(&self) -> Option<&SessionSender> {
        self.sender.as_ref()
    }

    fn feed(&mut self) {
        let Some(s) = self.sender.as_mut().filter(|s| s.close_reason().is_none()) else {
            return;
        };
        if feed_bulk(&mut self.written, self.total, |b| s.write(b)) {
            s.finish();
        }
    }
}

/// Writes zeros into a sender until `total` bytes (or forever) were taken
/// or it stops taking; returns true once all of `total` was written.
pub(crate) fn feed_bulk(
    written: &mut u64,
    total: Option<u64>,
    mut write: impl FnMut(&[u8]) -> usize,
) -> bool {
    loop {
        let left = total.map_or(u64::MAX, |t| t - *written);
        if left == 0 {
            return true;
        }
        let n = (SOURCE_CHUNK.len() as u64).min(left) as usize;
        let taken = write(&SOURCE_CHUNK[..n]);
        *written += taken as u64;
        if taken < n {
            return false;
        }
    }
}

impl Engine for BulkSender {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if let Some(s) = self.sender.as_mut() {
            s.handle_datagram(now, from, datagram);
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.sender.is_none() && now >= self.start {
            let mut s = SessionSender::new(self.config.clone(), self.session_id, now);
            s.offer(now, self.peer);
            self.sender = Some(s);
        }
        self.feed();
        self.sender.as_mut()?.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match &self.sender {
            None => Some(self.start),
            Some(s) => [s.poll_timeout(), self.stop].into_iter().flatten().min(),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some(s) = self.sender.as_mut() {
            if self.stop.is_some_and(|t| t <= now) {
                self.stop = None;
                s.abort("the scenario stops this flow");
            }
            s.handle_timeout(now);
        }
    }
}

impl SimApp for BulkSender {
    fn probe(&self) -> AppProbe {
        self.sender
            .as_ref()
            .map_or_else(AppProbe::default, |s| AppProbe {
                delivered_bytes: s.bytes_acked_by_all(),
                cwnd_bytes: Some(s.cwnd()),
                srtt: Some(s.session_rtt()),
                rate_bps: None,
            })
    }
}

/// A receiver application that reads (and discards) everything at once.
#[derive(Debug)]
pub struct SinkReceiver {
    receiver: Receiver,
    scratch: Vec<u8>,
}

impl SinkReceiver {
    /// Listens with `config`.
    pub fn new(config: TransportConfig) -> Self {
        Self::listening_from(config, Instant::ZERO)
    }

    /// Listens with `config` for a sender that starts at `start` (its idle
    /// timeout runs from then, not from the start of the run).
    pub fn listening_from(config: TransportConfig, start: Instant) -> Self {
        SinkReceiver {
            receiver: Receiver::listen(config, start),
            scratch: vec![0; 64 << 10],
        }
    }

    /// Wraps an already created receiver (e.g. [`Receiver::join`]).
    pub fn with(receiver: Receiver) -> Self {
        SinkReceiver {
            receiver,
            scratch: vec![0; 64 << 10],
        }
    }

    /// The session.
    pub fn receiver(&self) -> &Receiver {
        &self.receiver
    }
}

impl Engine for SinkReceiver {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.receiver.handle_datagram(now, from, datagram);
        while self.receiver.read(&mut self.scratch) > 0 {}
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.receiver.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.receiver.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.receiver.handle_timeout(now);
    }
}

impl SimApp for SinkReceiver {
    fn probe(&self) -> AppProbe {
        AppProbe {
            delivered_bytes: self.receiver.bytes_read(),
            ..AppProbe::default()
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TransferSpec {
    from: String,
    to: String,
    #[serde(default)]
    cc: Option<String>,
    #[serde(default)]
    bytes: Option<Bytes>,
    #[serde(default)]
    start: Option<HumanDuration>,
    #[serde(default)]
    stop: Option<HumanDuration>,
    #[serde(default)]
    window: Option<Bytes>,
    #[serde(default)]
    ack_every: Option<u32>,
    #[serde(default)]
    max_datagram: Option<usize>,
    #[serde(default)]
    pacing: Option<bool>,
    /// A cap on the sender's rate on top of congestion control.
    #[serde(default)]
    max_rate: Option<Rate>,
}

/// One transfer flow built into a simulation.
#[derive(Debug, Clone)]
pub struct TransferFlow {
    /// "from → to".
    pub label: String,
    /// The [`BulkSender`].
    pub sender: AppId,
    /// The [`SinkReceiver`].
    pub receiver: AppId,
}

/// Builds `kind = "transfer"` flows and remembers them.
#[derive(Debug, Default)]
pub struct TransferFlows {
    /// Flows built, in scenario order.
    pub flows: Vec<TransferFlow>,
}

impl FlowFactory for TransferFlows {
    fn build(
        &mut self,
        spec: &FlowSpec,
        sim: &mut Simulator,
        _ctx: &ScenarioContext,
    ) -> Result<bool, String> {
        if spec.kind != "transfer" {
            return Ok(false);
        }
        let t: TransferSpec = spec.parse()?;
        let from = sim.resolve(&t.from).map_err(|e| format!("from: {e}"))?;
        let to = sim.resolve(&t.to).map_err(|e| format!("to: {e}"))?;
        let mut config = TransportConfig::default();
        apply_transport_options(&mut config, t.cc.as_deref(), t.window, t.ack_every)?;
        if let Some(m) = t.max_datagram {
            if !(256..=65_000).contains(&m) {
                return Err("max_datagram: must be 256..=65000".into());
            }
            config.max_datagram = m;
        }
        if let Some(p) = t.pacing {
            config.pacing = p;
        }
        config.max_rate = t.max_rate.map(|r| r.0.div_ceil(8));
        let start = Instant::ZERO + t.start.map_or(Duration::ZERO, |d| d.0);
        let stop = t.stop.map(|d| Instant::ZERO + d.0);
        if stop.is_some_and(|s| s <= start) {
            return Err("stop: must be after start".into());
        }
        let session = SessionConfig::unicast(config.clone());
        let session_id = 0x5EED_0000 + self.flows.len() as u64;
        let receiver = sim
            .add_app(
                to,
                Box::new(SinkReceiver::listening_from(config.clone(), start)),
            )
            .map_err(|e| format!("to: {e}"))?;
        let sender = sim
            .add_app(
                from,
                Box::new({
                    let b = BulkSender::new(session, to, session_id, start, t.bytes.map(|b| b.0));
                    match stop {
                        Some(at) => b.stopping_at(at),
                        None => b,
                    }
                }),
            )
            .map_err(|e| format!("from: {e}"))?;
        self.flows.push(TransferFlow {
            label: format!("{} -> {}", t.from, t.to),
            sender,
            receiver,
        });
        Ok(true)
    }
}

/// Applies the transport keys `transfer` and `session` flows share
/// (`cc`, `window`, `ack_every`), with their validation.
pub(crate) fn apply_transport_options(
    config: &mut TransportConfig,
    cc: Option<&str>,
    window: Option<Bytes>,
    ack_every: Option<u32>,
) -> Result<(), String> {
    if let Some(cc) = cc {
        config.cc = cc.parse::<CcAlgorithm>().map_err(|e| format!("cc: {e}"))?;
    }
    if let Some(w) = window {
        let w = usize::try_from(w.0).map_err(|_| "window: too large".to_owned())?;
        if w < 64 << 10 {
            return Err("window: at least 64KiB".into());
        }
        config.send_buffer_bytes = w;
        config.recv_window_bytes = w;
    }
    if let Some(n) = ack_every {
        if !(1..=64).contains(&n) {
            return Err("ack_every: must be 1..=64".into());
        }
        config.ack.every_segments = n;
    }
    Ok(())
}

/// Bytes a receiver app had delivered at the last metrics sample at or
/// before `at` (0 before the first sample).
pub fn delivered_at(sim: &Simulator, app: AppId, at: Instant) -> u64 {
    let series = &sim.metrics().apps[app.index()];
    series
        .samples
        .iter()
        .take_while(|s| s.at <= at)
        .last()
        .map_or(0, |s| s.delivered_bytes)
}

/// Goodput of `app` in bits/s between two instants, from metrics samples.
pub fn goodput_bps(sim: &Simulator, app: AppId, from: Instant, to: Instant) -> f64 {
    let bytes = delivered_at(sim, app, to).saturating_sub(delivered_at(sim, app, from));
    bytes as f64 * 8.0 / (to - from).as_secs_f64().max(1e-9)
}

/// Jain's fairness index of `xs`: (Σx)² / (n·Σx²); 1 = perfectly fair.
pub fn jain_index(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    if sq == 0.0 {
        return 1.0;
    }
    sum * sum / (xs.len() as f64 * sq)
}
