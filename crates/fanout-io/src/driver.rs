//! The event loop: pumps one [`Engine`] over one [`UdpEndpoint`] with the
//! same [`fanout_core::drain`] the simulator uses.
//!
//! One [`Driver::step`]: read every datagram waiting on the socket (batched
//! `recvmmsg`, GRO) and hand each to the engine; run expired timers and poll
//! datagrams out of the engine into GSO batches; send them; then sleep until
//! input, the next deadline, or writability when the kernel pushed back.

use crate::clock::Clock;
use crate::error::IoError;
use crate::impair::{ImpairConfig, Impairment, Verdict};
use crate::outbox::Outbox;
use crate::poller::Poller;
use crate::socket::{canonical, UdpEndpoint};
use crate::stats::RunStats;
use fanout_core::{drain, Engine, Instant};
use quinn_udp::{RecvMeta, UdpSockRef, UdpSocketState, BATCH_SIZE};
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::time::Duration;

/// Bytes per receive slot: one GRO bundle or one maximal UDP datagram
/// (65507 bytes) fits, so nothing is truncated.
const RECV_SLOT_BYTES: usize = 1 << 16;

/// Sleep before retrying a send refused with `ENOBUFS` (no readiness event
/// announces its end).
const NO_BUFFER_RETRY: Duration = Duration::from_micros(200);

/// Drain rounds per step before reading input again; with the default
/// budget, up to 1024 datagrams leave between two reads.
const MAX_SEND_ROUNDS: usize = 16;

/// Default [`DriverConfig::timer_slack`]: at 100 Mbit/s about five
/// 1452-byte datagrams fall due per wake-up. The default pacer's bucket
/// holds max(10 segments, 1 ms of sending), so a wake-up up to 0.9 ms late
/// loses no sending credit at any rate; half of that leaves room for the
/// scheduler's own lateness on a busy host.
pub const DEFAULT_TIMER_SLACK: Duration = Duration::from_micros(500);

/// How the driver behaves. `Default` is what the CLI wants.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverConfig {
    /// Datagrams polled from the engine per `drain` call (one GSO batch at most
    /// is ~45 of 1400 bytes).
    pub send_budget: usize,
    /// Datagrams read per step before the engine gets to send; more waiting
    /// input makes the next step start without sleeping.
    pub max_recv_per_step: usize,
    /// Longest sleep of [`Driver::run`] between two `stop` checks.
    pub max_wait: Duration,
    /// How long [`Driver::run`] keeps trying to send queued datagrams after
    /// `stop` said yes.
    pub linger: Duration,
    /// Pack equal-size datagrams to one destination into one GSO send (Linux).
    pub gso: bool,
    /// How late the driver may wake for an engine deadline, so that one
    /// wake-up serves several paced datagrams (kernel timer slack, as
    /// `prctl(PR_SET_TIMERSLACK)`). A token-bucket pacer lets the datagrams
    /// that fell due meanwhile leave together — in one GSO send — while
    /// keeping its average rate, as long as the slack is shorter than the
    /// time its bucket takes to fill (`fanout_core::pacing`: at least 1 ms).
    /// Input still wakes the driver at once; zero: wake exactly on time.
    /// Never more than the engine's [`Engine::max_wake_delay`].
    pub timer_slack: Duration,
    /// Input coalescing (as a NIC's interrupt moderation): after a step
    /// that handled input, sleep this long (or until the next deadline)
    /// without waking for more input, then read all of it at once. Each
    /// datagram is dated by its kernel receive timestamp (`SO_TIMESTAMPNS`),
    /// so round-trip samples do not grow; only the reaction to input is
    /// late, by at most this much. Off (zero) by default, never used where
    /// the kernel does not stamp datagrams, and never longer than the
    /// engine's [`Engine::max_wake_delay`] (a share of its round trip).
    pub rx_coalesce: Duration,
    /// Impairment of received datagrams (before the engine sees them).
    pub rx_impairment: ImpairConfig,
    /// Impairment of sent datagrams (after the engine emitted them).
    pub tx_impairment: ImpairConfig,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            send_budget: 64,
            max_recv_per_step: 4096,
            max_wait: Duration::from_millis(50),
            linger: Duration::from_millis(200),
            gso: true,
            timer_slack: DEFAULT_TIMER_SLACK,
            rx_coalesce: Duration::ZERO,
            rx_impairment: ImpairConfig::default(),
            tx_impairment: ImpairConfig::default(),
        }
    }
}

/// Socket, clock, buffers and counters for running one engine.
#[derive(Debug)]
pub struct Driver {
    poller: Poller,
    endpoint: UdpEndpoint,
    state: UdpSocketState,
    /// A second, receive-only socket ([`Driver::add_receive_socket`]).
    second: Option<(UdpEndpoint, UdpSocketState)>,
    clock: Clock,
    config: DriverConfig,
    recv_buf: Box<[u8]>,
    meta: Box<[RecvMeta]>,
    send_buf: Vec<u8>,
    outbox: Outbox,
    impair_rx: Impairment,
    impair_tx: Impairment,
    stats: RunStats,
    /// Input may still be waiting (the step stopped reading at its cap).
    rx_pending: bool,
    /// The current step handed input to the engine.
    rx_handled: bool,
    /// The kernel stamps received datagrams (seen at least once).
    rx_stamped: bool,
    /// The latest time handed to the engine: datagrams dated by their
    /// kernel stamps are never dated before it.
    engine_time: Instant,
    /// The last send hit `WouldBlock`: wait for writability before more.
    tx_blocked: bool,
    /// The last send hit `ENOBUFS`: retry at this time.
    tx_retry_at: Option<Instant>,
    /// The latest datagram the kernel refused for good (destination and
    /// error), for [`Driver::take_send_error`].
    send_error: Option<(SocketAddr, io::Error)>,
}

impl Driver {
    /// Takes over `endpoint` (made nonblocking) and times everything with `clock`.
    pub fn new(endpoint: UdpEndpoint, clock: Clock, config: DriverConfig) -> Result<Self, IoError> {
        if config.send_budget == 0 || config.max_recv_per_step == 0 {
            return Err(IoError::Config(
                "send_budget and max_recv_per_step must be > 0",
            ));
        }
        let state = UdpSocketState::new(UdpSockRef::from(endpoint.socket()))
            .map_err(IoError::option("quinn-udp socket setup"))?;
        let poller = Poller::new(endpoint.socket())?;
        let max_segments = if config.gso {
            state.max_gso_segments()
        } else {
            1
        };
        Ok(Driver {
            poller,
            state,
            clock,
            recv_buf: vec![0; BATCH_SIZE * RECV_SLOT_BYTES].into_boxed_slice(),
            meta: vec![RecvMeta::default(); BATCH_SIZE].into_boxed_slice(),
            send_buf: Vec::with_capacity(RECV_SLOT_BYTES),
            outbox: Outbox::new(max_segments),
            impair_rx: Impairment::new(config.rx_impairment.clone())?,
            impair_tx: Impairment::new(config.tx_impairment.clone())?,
            stats: RunStats::default(),
            rx_pending: false,
            rx_handled: false,
            rx_stamped: false,
            engine_time: Instant::ZERO,
            tx_blocked: false,
            tx_retry_at: None,
            send_error: None,
            second: None,
            endpoint,
            config,
        })
    }

    /// Also reads `endpoint` (made nonblocking): its datagrams go to the
    /// engine as the main socket's do, while everything is sent from the
    /// main socket. A session member on a multicast group's port takes the
    /// group's data on it and keeps a unicast socket of its own as the main
    /// one, so several members on one host each have their own address.
    pub fn add_receive_socket(&mut self, endpoint: UdpEndpoint) -> Result<(), IoError> {
        let state = UdpSocketState::new(UdpSockRef::from(endpoint.socket()))
            .map_err(IoError::option("quinn-udp socket setup"))?;
        self.poller.register_second(endpoint.socket())?;
        self.second = Some((endpoint, state));
        Ok(())
    }

    /// The second, receive-only socket, if one was added.
    pub fn receive_socket(&self) -> Option<&UdpEndpoint> {
        self.second.as_ref().map(|(e, _)| e)
    }

    /// The socket, e.g. to join multicast groups while running.
    pub fn endpoint(&self) -> &UdpEndpoint {
        &self.endpoint
    }

    /// A handle other threads use to cut the driver's sleep short when they
    /// have new input for the engine (see [`crate::Waker`]).
    pub fn waker(&self) -> crate::Waker {
        self.poller.waker()
    }

    /// The clock stamping every input.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Most datagrams per send syscall (1 when GSO is off or unsupported).
    pub fn max_gso_segments(&self) -> usize {
        if self.config.gso {
            self.state.max_gso_segments()
        } else {
            1
        }
    }

    /// Most datagrams one receive slot can carry (1 without GRO).
    pub fn gro_segments(&self) -> usize {
        self.state.gro_segments()
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &DriverConfig {
        &self.config
    }

    /// The latest send the kernel refused for good since the last call
    /// (destination and error; e.g. `NetworkUnreachable` when a multicast
    /// route disappeared, `EMSGSIZE` for a datagram larger than the route
    /// carries), so the application can react —
    /// [`crate::RunStats::send_errors`] only counts them.
    pub fn take_send_error(&mut self) -> Option<(SocketAddr, io::Error)> {
        self.send_error.take()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> RunStats {
        RunStats {
            impair_rx: self.impair_rx.stats(),
            impair_tx: self.impair_tx.stats(),
            unsent: (self.outbox.queued() + self.impair_tx.held()) as u64,
            ..self.stats
        }
    }

    /// Runs `engine` until `stop(engine, now)` says so (checked before every
    /// step and at least every [`DriverConfig::max_wait`]), then lingers up
    /// to [`DriverConfig::linger`] to send what is still queued, including
    /// what `stop` itself made the engine queue (a RESET refusing the
    /// transfer, a last ACK).
    pub fn run<E: Engine + ?Sized>(
        &mut self,
        engine: &mut E,
        mut stop: impl FnMut(&mut E, Instant) -> bool,
    ) -> Result<RunStats, IoError> {
        while !stop(engine, self.clock.now()) {
            self.step(engine, self.config.max_wait)?;
        }
        self.pump(engine);
        self.flush_queued(self.config.linger)?;
        Ok(self.stats())
    }

    /// One loop iteration: receive everything waiting, pump the engine, send,
    /// then sleep at most `max_wait` until input, a deadline or writability.
    pub fn step<E: Engine + ?Sized>(
        &mut self,
        engine: &mut E,
        max_wait: Duration,
    ) -> Result<(), IoError> {
        self.stats.iterations += 1;
        self.receive(engine);
        let now = self.clock.now();
        self.release_rx(engine, now);
        let (deadline, more_output) = self.pump(engine);
        if self.rx_pending || more_output {
            // No wait, so no readiness news: look at the socket next time.
            self.poller.assume_readable();
            return Ok(());
        }
        self.sleep(deadline, max_wait, engine.max_wake_delay())
    }

    /// Tries for up to `timeout` to hand every queued datagram to the kernel
    /// (including ones held by the send impairment's delay).
    pub fn flush_queued(&mut self, timeout: Duration) -> Result<(), IoError> {
        let end = self.clock.now() + timeout;
        loop {
            let now = self.clock.now();
            self.release_tx(now);
            self.flush(now);
            if (self.outbox.is_empty() && self.impair_tx.held() == 0) || now >= end {
                return Ok(());
            }
            let mut deadline = end;
            for d in [self.impair_tx.poll_timeout(), self.tx_retry_at]
                .into_iter()
                .flatten()
            {
                deadline = deadline.min(d);
            }
            self.poller.want_writable(self.tx_blocked)?;
            self.poller.wait(&self.clock, Some(deadline), timeout)?;
        }
    }

    /// Reads until the sockets are empty or the per-step cap is reached.
    /// With two sockets, the one read first alternates from step to step,
    /// so a flood on one (forged datagrams to a group) cannot starve the
    /// other (a merger's keep-alives, the sender's replies).
    fn receive<E: Engine + ?Sized>(&mut self, engine: &mut E) {
        self.rx_pending = false;
        self.rx_handled = false;
        let mut got = 0;
        let order: &[usize] = match (&self.second, self.stats.iterations % 2) {
            (None, _) => &[0],
            (Some(_), 0) => &[0, 1],
            (Some(_), _) => &[1, 0],
        };
        for &which in order {
            if self.poller.maybe_readable(which) && !self.receive_from(which, engine, &mut got) {
                return;
            }
        }
    }

    /// Reads socket `which` (0: main, 1: second) until it is empty (true)
    /// or `got` reached the per-step cap (false, input pending).
    fn receive_from<E: Engine + ?Sized>(
        &mut self,
        which: usize,
        engine: &mut E,
        got: &mut usize,
    ) -> bool {
        let Driver {
            endpoint,
            state,
            second,
            clock,
            config,
            recv_buf,
            meta,
            impair_rx,
            stats,
            rx_pending,
            rx_handled,
            rx_stamped,
            engine_time,
            poller,
            ..
        } = self;
        let (socket, state) = match (which, second.as_ref()) {
            (1, Some((e, st))) => (e.socket(), st),
            _ => (endpoint.socket(), &*state),
        };
        let rx_transparent = impair_rx.is_transparent();
        loop {
            if *got >= config.max_recv_per_step {
                *rx_pending = true;
                return false;
            }
            let mut slots = recv_buf.chunks_mut(RECV_SLOT_BYTES);
            let mut bufs: [IoSliceMut<'_>; BATCH_SIZE] =
                std::array::from_fn(|_| IoSliceMut::new(slots.next().unwrap_or_default()));
            let n = match state.recv(UdpSockRef::from(socket), &mut bufs, meta) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    stats.recv_empty += 1;
                    poller.mark_drained(which);
                    return true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // E.g. a queued ICMP error; count it and look again next step.
                    tracing::debug!("recv: {e}");
                    stats.recv_errors += 1;
                    *rx_pending = true;
                    return true;
                }
            };
            stats.recv_syscalls += 1;
            *rx_handled = true;
            // Fewer datagrams than slots: `recvmmsg` stopped at an empty
            // queue, and the edge-triggered registration reports any later
            // arrival, so no second call to see `WouldBlock`.
            let drained = cfg!(any(target_os = "linux", target_os = "android")) && n < meta.len();
            let base = clock.stamp_base();
            for (m, buf) in meta.iter().zip(bufs.iter()).take(n) {
                let from = canonical(m.addr);
                // When the datagram arrived (not when it was read).
                let now = clock.stamp(&base, m.timestamp, *engine_time);
                *engine_time = now;
                *rx_stamped |= m.timestamp.is_some();
                let bytes = &buf[..m.len];
                let stride = if m.stride == 0 { m.len } else { m.stride };
                let mut deliver = |d: &[u8]| {
                    *got += 1;
                    stats.datagrams_received += 1;
                    stats.bytes_received += d.len() as u64;
                    if rx_transparent || impair_rx.handle(now, from, d) == Verdict::Pass {
                        stats.datagrams_delivered += 1;
                        engine.handle_datagram(now, from, d);
                    }
                };
                if bytes.is_empty() {
                    // `chunks` yields nothing for an empty datagram.
                    deliver(bytes);
                } else {
                    bytes.chunks(stride).for_each(deliver);
                }
            }
            if drained {
                poller.mark_drained(which);
                return true;
            }
        }
    }

    /// Delivers received datagrams whose impairment delay has passed.
    fn release_rx<E: Engine + ?Sized>(&mut self, engine: &mut E, now: Instant) {
        self.engine_time = self.engine_time.max(now);
        let delivered = self
            .impair_rx
            .release(now, |from, d| engine.handle_datagram(now, from, d));
        self.stats.datagrams_delivered += delivered as u64;
    }

    /// Moves sent datagrams whose impairment delay has passed to the outbox.
    fn release_tx(&mut self, now: Instant) {
        let outbox = &mut self.outbox;
        self.impair_tx.release(now, |to, d| outbox.push(to, d));
    }

    /// Runs timers and polls datagrams out of the engine while the kernel
    /// takes them. Returns the engine's next deadline and whether it may have
    /// more to send right away.
    fn pump<E: Engine + ?Sized>(&mut self, engine: &mut E) -> (Option<Instant>, bool) {
        let budget = self.config.send_budget;
        let mut deadline = engine.poll_timeout();
        for _ in 0..MAX_SEND_ROUNDS {
            let now = self.clock.now();
            self.release_tx(now);
            self.flush(now);
            // Backpressure: while the kernel refuses, only timers run.
            let room = if self.outbox.is_empty() { budget } else { 0 };
            let mut emitted = 0;
            let Driver {
                send_buf,
                outbox,
                impair_tx,
                stats,
                ..
            } = self;
            let tx_transparent = impair_tx.is_transparent();
            self.engine_time = self.engine_time.max(now);
            deadline = drain(engine, now, send_buf, room, |t, d| {
                emitted += 1;
                stats.datagrams_emitted += 1;
                if tx_transparent || impair_tx.handle(now, t.destination, d) == Verdict::Pass {
                    outbox.push(t.destination, d);
                }
            });
            self.flush(now);
            if emitted < budget {
                return (deadline, false);
            }
        }
        (deadline, true)
    }

    /// Sends queued batches until the outbox is empty or the kernel pushes back.
    fn flush(&mut self, now: Instant) {
        match self.tx_retry_at {
            Some(t) if t > now => return,
            Some(_) => self.tx_retry_at = None,
            None => {}
        }
        while let Some((batch, contents)) = self.outbox.front() {
            let transmit = quinn_udp::Transmit {
                destination: self.endpoint.map_destination(batch.destination),
                ecn: None,
                contents,
                segment_size: (batch.segments > 1).then_some(batch.segment_size),
                src_ip: None,
            };
            match self
                .state
                .try_send(UdpSockRef::from(self.endpoint.socket()), &transmit)
            {
                Ok(()) => {
                    self.stats.send_syscalls += 1;
                    self.stats.datagrams_sent += batch.segments as u64;
                    self.stats.bytes_sent += batch.len as u64;
                    self.tx_blocked = false;
                    self.outbox.pop_front();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.stats.send_would_block += 1;
                    self.tx_blocked = true;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_no_buffer(&e) => {
                    self.stats.send_no_buffer += 1;
                    self.tx_retry_at = Some(now + NO_BUFFER_RETRY);
                    return;
                }
                Err(e) if batch.segments > 1 => {
                    // GSO refused (quinn-udp then lowers max_gso_segments to
                    // 1 on EIO/EINVAL, e.g. a device without checksum
                    // offload): resend the datagrams one by one rather than
                    // lose them, and say so once.
                    self.stats.gso_refused += 1;
                    let before = self.outbox.max_segments();
                    self.outbox.split_front();
                    self.outbox.set_max_segments(self.max_gso_segments());
                    if before > 1 && self.outbox.max_segments() == 1 {
                        tracing::warn!(
                            "the kernel refused a GSO send of {} datagrams ({e}); \
                             GSO disabled, sending datagrams one by one",
                            batch.segments
                        );
                    } else {
                        tracing::debug!("GSO send of {} datagrams failed: {e}", batch.segments);
                    }
                }
                Err(e) => {
                    tracing::debug!("send to {} failed: {e}", batch.destination);
                    self.send_error = Some((batch.destination, e));
                    self.stats.send_errors += batch.segments as u64;
                    self.outbox.pop_front();
                }
            }
        }
    }

    /// Sleeps until input, `deadline`, writability (when blocked), a held
    /// datagram's release, or `max_wait`; the timer slack and input
    /// coalescing are at most `engine_bound` ([`Engine::max_wake_delay`]).
    fn sleep(
        &mut self,
        deadline: Option<Instant>,
        max_wait: Duration,
        engine_bound: Option<Duration>,
    ) -> Result<(), IoError> {
        let now = self.clock.now();
        let bound = |d: Duration| engine_bound.map_or(d, |b| b.min(d));
        let slack = bound(self.config.timer_slack);
        let mut wake = deadline.map(|d| if d > now { d + slack } else { d });
        if self.tx_blocked && !self.outbox.is_empty() {
            // Writability wakes us; an engine deadline that already passed
            // (e.g. a pacer waiting to send) must not spin meanwhile.
            wake = wake.map(|d| d.max(now + NO_BUFFER_RETRY));
        }
        let others = [
            self.impair_rx.poll_timeout(),
            self.impair_tx.poll_timeout(),
            self.tx_retry_at,
        ];
        for d in others.into_iter().flatten() {
            wake = Some(wake.map_or(d, |w| w.min(d)));
        }
        let coalesce = bound(self.config.rx_coalesce);
        let tx_waits = self.tx_blocked && !self.outbox.is_empty();
        if self.rx_handled && self.rx_stamped && !coalesce.is_zero() && !tx_waits {
            // Input moderation: sleep through arrivals, then read them all.
            let until = now + coalesce.min(max_wait);
            let until = wake.map_or(until, |w| w.min(until));
            if until > now {
                std::thread::sleep(until - now);
            }
            self.stats.coalesced_waits += 1;
            self.poller.assume_readable();
            return Ok(());
        }
        self.poller
            .want_writable(self.tx_blocked && !self.outbox.is_empty())?;
        self.poller.wait(&self.clock, wake, max_wait)
    }
}

/// Runs `engine` on a fresh [`Driver`] over `endpoint` until `stop` says so.
pub fn run<E: Engine + ?Sized>(
    engine: &mut E,
    endpoint: UdpEndpoint,
    clock: Clock,
    config: DriverConfig,
    stop: impl FnMut(&mut E, Instant) -> bool,
) -> Result<RunStats, IoError> {
    Driver::new(endpoint, clock, config)?.run(engine, stop)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn is_no_buffer(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOBUFS)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn is_no_buffer(_: &io::Error) -> bool {
    false
}
