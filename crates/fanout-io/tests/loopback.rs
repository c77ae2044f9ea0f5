//! The driver over real loopback sockets: two engines on two threads.
//! Every run is bounded by `LIMIT`; only 127.0.0.1 and ::1 are used.

mod common;

use common::{Blaster, Echo, Pinger, Sink};
use fanout_core::{Engine, Instant, Transmit};
use fanout_io::{Clock, Driver, DriverConfig, ImpairConfig, Impairment, RunStats, UdpEndpoint};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Upper bound on any one run; tests finish far sooner.
const LIMIT: Duration = Duration::from_secs(20);
/// How long a receiver keeps listening after its peer finished.
const GRACE: Duration = Duration::from_millis(150);

fn v4() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn driver(addr: SocketAddr, config: DriverConfig) -> Driver {
    Driver::new(UdpEndpoint::bind(addr).unwrap(), Clock::new(), config).unwrap()
}

/// Runs `engine` on its own thread until `done(engine)` (or `LIMIT`), then
/// raises `finished`.
fn spawn<E: Engine + Send + 'static>(
    mut driver: Driver,
    mut engine: E,
    done: impl Fn(&E) -> bool + Send + 'static,
    finished: Arc<AtomicBool>,
) -> JoinHandle<(E, RunStats)> {
    std::thread::spawn(move || {
        let end = Instant::ZERO + LIMIT;
        let stats = driver
            .run(&mut engine, |e, now| done(e) || now > end)
            .unwrap();
        finished.store(true, Ordering::SeqCst);
        (engine, stats)
    })
}

/// A stop condition for a passive peer: `GRACE` after `other` finished.
fn after(other: Arc<AtomicBool>) -> impl FnMut(Instant) -> bool {
    let mut seen: Option<Instant> = None;
    move |now| {
        if now > Instant::ZERO + LIMIT {
            return true;
        }
        if other.load(Ordering::SeqCst) {
            let t = *seen.get_or_insert(now);
            return now - t > GRACE;
        }
        false
    }
}

fn spawn_passive<E: Engine + Send + 'static>(
    mut driver: Driver,
    mut engine: E,
    other: Arc<AtomicBool>,
) -> JoinHandle<(E, RunStats)> {
    std::thread::spawn(move || {
        let mut stop = after(other);
        let stats = driver.run(&mut engine, |_, now| stop(now)).unwrap();
        (engine, stats)
    })
}

/// Pinger against echo; returns both sides.
fn ping_pong(
    pinger_addr: SocketAddr,
    echo_driver: Driver,
    echo_target: SocketAddr,
    pinger: impl FnOnce(SocketAddr) -> Pinger,
) -> ((Pinger, RunStats), (Echo, RunStats)) {
    let p_driver = driver(pinger_addr, DriverConfig::default());
    let done = Arc::new(AtomicBool::new(false));
    let echo = spawn_passive(echo_driver, Echo::default(), done.clone());
    let ping = spawn(p_driver, pinger(echo_target), Pinger::done, done);
    (ping.join().unwrap(), echo.join().unwrap())
}

#[test]
fn echo_delivers_every_datagram() {
    let e_driver = driver(v4(), DriverConfig::default());
    let target = e_driver.endpoint().local_addr();
    let ((p, ps), (e, es)) = ping_pong(v4(), e_driver, target, |peer| {
        Pinger::new(peer, 2000, 64, 1200)
    });
    assert!(p.done(), "answered {}/{}", p.answered_count, p.total);
    assert_eq!(p.corrupt, 0);
    assert_eq!((ps.datagrams_sent, ps.datagrams_delivered), (2000, 2000));
    assert_eq!(ps.bytes_sent, 2000 * 1200);
    assert_eq!(e.echoed, 2000);
    assert_eq!((es.datagrams_received, es.datagrams_sent), (2000, 2000));
    assert_eq!(ps.send_errors + es.send_errors + ps.unsent + es.unsent, 0);
}

#[test]
fn echo_without_gso_uses_plain_sends() {
    let no_gso = DriverConfig {
        gso: false,
        ..DriverConfig::default()
    };
    let e_driver = driver(v4(), no_gso.clone());
    let target = e_driver.endpoint().local_addr();
    let p_driver = driver(v4(), no_gso);
    assert_eq!(p_driver.max_gso_segments(), 1);
    let done = Arc::new(AtomicBool::new(false));
    let echo = spawn_passive(e_driver, Echo::default(), done.clone());
    let ping = spawn(
        p_driver,
        Pinger::new(target, 1000, 32, 1400),
        Pinger::done,
        done,
    );
    let (p, ps) = ping.join().unwrap();
    let (_, es) = echo.join().unwrap();
    assert!(p.done());
    assert_eq!(p.corrupt, 0);
    assert_eq!(ps.send_syscalls, 1000);
    assert_eq!(es.send_syscalls, 1000);
}

#[test]
fn receive_loss_is_counted_exactly() {
    const N: u64 = 2000;
    let loss = ImpairConfig::loss(0.1, 42);
    // One Bernoulli draw per datagram: the drop count depends only on the seed.
    let mut reference = Impairment::new(loss.clone()).unwrap();
    let expected = (0..N)
        .filter(|_| reference.handle(Instant::ZERO, v4(), b"") != fanout_io::impair::Verdict::Pass)
        .count() as u64;
    let sink_driver = driver(
        v4(),
        DriverConfig {
            rx_impairment: loss,
            ..DriverConfig::default()
        },
    );
    let target = sink_driver.endpoint().local_addr();
    let done = Arc::new(AtomicBool::new(false));
    let sink = spawn_passive(sink_driver, Sink::default(), done.clone());
    let blast = spawn(
        driver(v4(), DriverConfig::default()),
        Blaster::new(target, N, 200),
        Blaster::done,
        done,
    );
    let (_, bs) = blast.join().unwrap();
    let (sink, ss) = sink.join().unwrap();
    assert_eq!(bs.datagrams_sent, N);
    assert_eq!(ss.datagrams_received, N, "the kernel dropped some: {ss:?}");
    assert_eq!(ss.impair_rx.dropped_loss, expected);
    assert!(
        (140..=260).contains(&expected),
        "{expected} of {N} at p = 0.1"
    );
    assert_eq!(sink.received, N - expected);
    assert_eq!(ss.datagrams_delivered, sink.received);
    assert_eq!(sink.corrupt, 0);
}

#[test]
fn send_loss_is_counted() {
    const N: u64 = 2000;
    let sink_driver = driver(v4(), DriverConfig::default());
    let target = sink_driver.endpoint().local_addr();
    let done = Arc::new(AtomicBool::new(false));
    let sink = spawn_passive(sink_driver, Sink::default(), done.clone());
    let config = DriverConfig {
        tx_impairment: ImpairConfig::loss(0.25, 7),
        ..DriverConfig::default()
    };
    let blast = spawn(
        driver(v4(), config),
        Blaster::new(target, N, 300),
        Blaster::done,
        done,
    );
    let (_, bs) = blast.join().unwrap();
    let (sink, _) = sink.join().unwrap();
    assert_eq!(bs.datagrams_emitted, N);
    assert_eq!(bs.datagrams_sent + bs.impair_tx.dropped(), N);
    assert!((400..=600).contains(&bs.impair_tx.dropped()), "{bs:?}");
    assert_eq!(sink.received, bs.datagrams_sent);
}

#[test]
fn added_delay_shows_in_round_trip_times() {
    let delay = Duration::from_millis(15);
    let e_driver = driver(
        v4(),
        DriverConfig {
            tx_impairment: ImpairConfig::delay(delay),
            ..DriverConfig::default()
        },
    );
    let target = e_driver.endpoint().local_addr();
    let ((p, _), (_, es)) = ping_pong(v4(), e_driver, target, |peer| {
        Pinger::new(peer, 100, 8, 100)
    });
    assert!(p.done());
    let min = p.rtts.iter().min().unwrap();
    let max = p.rtts.iter().max().unwrap();
    assert!(*min >= delay, "min rtt {min:?}");
    assert!(*max < delay + Duration::from_millis(10), "max rtt {max:?}");
    assert_eq!(es.impair_tx.delayed, 100);
}

#[test]
fn ipv6_loopback_smoke() {
    let Ok(endpoint) = UdpEndpoint::bind("[::1]:0".parse().unwrap()) else {
        eprintln!("SKIP ipv6_loopback_smoke: cannot bind [::1] (IPv6 unavailable)");
        return;
    };
    let e_driver = Driver::new(endpoint, Clock::new(), DriverConfig::default()).unwrap();
    let target = e_driver.endpoint().local_addr();
    let ((p, ps), _) = ping_pong("[::1]:0".parse().unwrap(), e_driver, target, |peer| {
        Pinger::new(peer, 200, 16, 1000)
    });
    assert!(p.done(), "{ps:?}");
    assert_eq!(p.corrupt, 0);
}

#[test]
fn dual_stack_socket_answers_ipv4_peers() {
    let Ok(endpoint) = UdpEndpoint::bind("[::]:0".parse().unwrap()) else {
        eprintln!("SKIP dual_stack_socket_answers_ipv4_peers: IPv6 unavailable");
        return;
    };
    let e_driver = Driver::new(endpoint, Clock::new(), DriverConfig::default()).unwrap();
    let target: SocketAddr = format!("127.0.0.1:{}", e_driver.endpoint().local_addr().port())
        .parse()
        .unwrap();
    let ((p, _), (_, es)) = ping_pong(v4(), e_driver, target, |peer| Pinger::new(peer, 50, 8, 64));
    assert!(p.done());
    assert_eq!(es.send_errors, 0);
}

#[test]
fn gso_batches_and_payloads_survive() {
    const N: u64 = 2000;
    let sink_driver = driver(v4(), DriverConfig::default());
    let gro = sink_driver.gro_segments();
    let target = sink_driver.endpoint().local_addr();
    let done = Arc::new(AtomicBool::new(false));
    let sink = spawn_passive(sink_driver, Sink::default(), done.clone());
    let b_driver = driver(v4(), DriverConfig::default());
    let gso = b_driver.max_gso_segments();
    let blast = spawn(b_driver, Blaster::new(target, N, 1400), Blaster::done, done);
    let (_, bs) = blast.join().unwrap();
    let (sink, ss) = sink.join().unwrap();
    eprintln!(
        "gso {gso} gro {gro}: {} datagrams in {} sends, {} received in {} recvs",
        bs.datagrams_sent, bs.send_syscalls, ss.datagrams_received, ss.recv_syscalls
    );
    assert_eq!(bs.datagrams_sent, N);
    assert_eq!(sink.received, N, "{ss:?}");
    assert_eq!(sink.corrupt, 0);
    assert_eq!(sink.bytes, N * 1400);
    if gso > 1 {
        assert!(bs.send_syscalls * 4 < N, "GSO should batch: {bs:?}");
    }
}

/// Two UDP-Lite sockets on 127.0.0.1, or `None` where the kernel has no
/// UDP-Lite (it is deprecated upstream).
fn udplite_pair() -> Option<(UdpEndpoint, UdpEndpoint)> {
    use socket2::{Domain, Protocol, Socket, Type};
    const IPPROTO_UDPLITE: i32 = 136;
    let open = || -> Option<UdpEndpoint> {
        let s = Socket::new(
            Domain::IPV4,
            Type::DGRAM,
            Some(Protocol::from(IPPROTO_UDPLITE)),
        )
        .ok()?;
        s.set_recv_buffer_size(fanout_io::DEFAULT_BUFFER_BYTES)
            .ok()?;
        s.bind(&v4().into()).ok()?;
        UdpEndpoint::from_std(s.into()).ok()
    };
    Some((open()?, open()?))
}

#[test]
fn gso_refused_by_the_kernel_falls_back_to_single_sends() {
    // Linux refuses UDP GSO on UDP-Lite sockets (EIO, `udp_send_skb`), a
    // real refusal like a device without checksum offload: the driver must
    // resend the batch one datagram at a time, stop using GSO, and count it.
    const N: u64 = 500;
    let Some((sink_ep, blast_ep)) = udplite_pair() else {
        eprintln!("SKIP gso_refused_by_the_kernel_falls_back: no UDP-Lite");
        return;
    };
    let sink_driver = Driver::new(sink_ep, Clock::new(), DriverConfig::default()).unwrap();
    let target = sink_driver.endpoint().local_addr();
    let b_driver = Driver::new(blast_ep, Clock::new(), DriverConfig::default()).unwrap();
    if b_driver.max_gso_segments() < 2 {
        eprintln!("SKIP gso_refused_by_the_kernel_falls_back: no GSO here");
        return;
    }
    let done = Arc::new(AtomicBool::new(false));
    let sink = spawn_passive(sink_driver, Sink::default(), done.clone());
    let blast = spawn(b_driver, Blaster::new(target, N, 1000), Blaster::done, done);
    let (_, bs) = blast.join().unwrap();
    let (sink, ss) = sink.join().unwrap();
    eprintln!(
        "UDP-Lite: {} datagrams in {} sends, {} GSO refusals",
        bs.datagrams_sent, bs.send_syscalls, bs.gso_refused
    );
    assert!(bs.gso_refused >= 1, "the kernel accepted GSO? {bs:?}");
    assert_eq!((bs.datagrams_sent, bs.send_errors, bs.unsent), (N, 0, 0));
    // After the first refusal every datagram goes alone.
    assert!(bs.send_syscalls >= N, "{bs:?}");
    assert_eq!(sink.received, N, "{ss:?}");
    assert_eq!((sink.corrupt, sink.max_seq), (0, Some(N - 1)));
    assert_eq!(sink.bytes, N * 1000);
}

/// A running echo server, and a driver for a pinger that coalesces its
/// input (and wakes for timers) `coalesce` late; the flag ends the echo.
fn coalescing_pinger(
    coalesce: Duration,
) -> (
    Driver,
    SocketAddr,
    JoinHandle<(Echo, RunStats)>,
    Arc<AtomicBool>,
) {
    let e_driver = driver(v4(), DriverConfig::default());
    let target = e_driver.endpoint().local_addr();
    let p_driver = driver(
        v4(),
        DriverConfig {
            rx_coalesce: coalesce,
            timer_slack: coalesce,
            ..DriverConfig::default()
        },
    );
    let done = Arc::new(AtomicBool::new(false));
    let echo = spawn_passive(e_driver, Echo::default(), done.clone());
    (p_driver, target, echo, done)
}

#[test]
fn coalesced_input_keeps_kernel_arrival_times() {
    // The pinger sleeps 3 ms through arrivals after each input, yet its
    // round-trip samples stay loopback-fast: each pong is dated by its
    // kernel receive timestamp, not by when the driver got to read it.
    let coalesce = Duration::from_millis(3);
    let (p_driver, target, echo, done) = coalescing_pinger(coalesce);
    let ping = spawn(
        p_driver,
        Pinger::new(target, 60, 1, 100),
        Pinger::done,
        done,
    );
    let (p, ps) = ping.join().unwrap();
    echo.join().unwrap();
    assert!(p.done(), "answered {}/{}", p.answered_count, p.total);
    let mut rtts = p.rtts.clone();
    rtts.sort();
    let median = rtts[rtts.len() / 2];
    eprintln!(
        "coalesced pinger: median rtt {median:?}, {} coalesced waits, {} iterations",
        ps.coalesced_waits, ps.iterations
    );
    if ps.coalesced_waits == 0 {
        eprintln!("SKIP: no kernel receive timestamps here, so no coalescing");
        return;
    }
    // One ping at a time, each answered during a 3 ms sleep.
    assert!(ps.coalesced_waits >= 50, "{ps:?}");
    assert!(
        median < coalesce / 2,
        "median rtt {median:?}: read time, not arrival"
    );
}

/// An engine that accepts reactions at most `bound` late
/// ([`Engine::max_wake_delay`]), otherwise the pinger it wraps.
struct Impatient {
    pinger: Pinger,
    bound: Duration,
}

impl Engine for Impatient {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, d: &[u8]) {
        self.pinger.handle_datagram(now, from, d);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.pinger.poll_transmit(now, buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.pinger.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.pinger.handle_timeout(now);
    }
    fn max_wake_delay(&self) -> Option<Duration> {
        Some(self.bound)
    }
}

#[test]
fn the_engine_bounds_input_coalescing() {
    // One ping at a time: with 3 ms of coalescing each pong waits unread
    // until the sleep ends, so 60 rounds take at least 180 ms. An engine
    // that accepts 0.2 ms keeps the coalescing (it still sleeps through
    // arrivals) but shortens every sleep to that.
    let coalesce = Duration::from_millis(3);
    let (p_driver, target, echo, done) = coalescing_pinger(coalesce);
    let engine = Impatient {
        pinger: Pinger::new(target, 60, 1, 100),
        bound: Duration::from_micros(200),
    };
    let clock = Clock::new();
    let start = clock.now();
    let ping = spawn(p_driver, engine, |e| e.pinger.done(), done);
    let (p, ps) = ping.join().unwrap();
    let elapsed = clock.now() - start;
    echo.join().unwrap();
    assert!(
        p.pinger.done(),
        "answered {}/{}",
        p.pinger.answered_count,
        p.pinger.total
    );
    eprintln!(
        "bounded coalescing: 60 rounds in {elapsed:?}, {} coalesced waits",
        ps.coalesced_waits
    );
    if ps.coalesced_waits == 0 {
        eprintln!("SKIP: no kernel receive timestamps here, so no coalescing");
        return;
    }
    assert!(
        elapsed < coalesce * 60 / 2,
        "60 rounds took {elapsed:?}: the 3 ms sleeps were not cut to 0.2 ms"
    );
}

/// Sends `total` numbered datagrams through the transport's own token-bucket
/// pacer ([`fanout_core::pacing::Pacer`]), as fast as it allows.
struct TokenBlaster {
    peer: SocketAddr,
    total: u64,
    size: usize,
    next: u64,
    pacer: fanout_core::pacing::Pacer,
    now: Instant,
}

impl Engine for TokenBlaster {
    fn handle_datagram(&mut self, _: Instant, _: SocketAddr, _: &[u8]) {}
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.now = now;
        let size = self.size as u64;
        if self.next >= self.total || self.pacer.next_send_time(now, size) > now {
            return None;
        }
        self.pacer.on_sent(now, size);
        common::write_datagram(buf, self.next, self.size);
        self.next += 1;
        Some(Transmit {
            destination: self.peer,
        })
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (self.next < self.total).then(|| self.pacer.next_send_time(self.now, self.size as u64))
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
    }
}

/// A [`TokenBlaster`] at one 1000-byte datagram per 100 µs (10 MB/s; its
/// bucket holds 10 datagrams) run with `slack`; returns the sender's
/// counters and the sink's arrival span.
fn token_blast(slack: Duration, total: u64) -> (RunStats, Sink, Duration) {
    let sink_driver = driver(v4(), DriverConfig::default());
    let target = sink_driver.endpoint().local_addr();
    let done = Arc::new(AtomicBool::new(false));
    let sink = spawn_passive(sink_driver, Sink::default(), done.clone());
    let mut pacer = fanout_core::pacing::Pacer::new(1000).with_gains(1.0, 1.0);
    pacer.set_rate(10_000, Duration::from_millis(1), false);
    let engine = TokenBlaster {
        peer: target,
        total,
        size: 1000,
        next: 0,
        pacer,
        now: Instant::ZERO,
    };
    let config = DriverConfig {
        timer_slack: slack,
        ..DriverConfig::default()
    };
    let blast = spawn(driver(v4(), config), engine, |b| b.next >= b.total, done);
    let (_, bs) = blast.join().unwrap();
    let (sink, _) = sink.join().unwrap();
    let span = sink.last_at.unwrap() - sink.first_at.unwrap();
    (bs, sink, span)
}

#[test]
fn timer_slack_batches_paced_datagrams_at_the_same_rate() {
    const N: u64 = 400;
    // 400 datagrams at 100 µs each: 40 ms, less the first bucket (10).
    let ideal = Duration::from_micros(100 * (N - 10));
    let (exact, exact_sink, exact_span) = token_blast(Duration::ZERO, N);
    let (slack, slack_sink, slack_span) = token_blast(fanout_io::DEFAULT_TIMER_SLACK, N);
    eprintln!(
        "exact: {} sends, {} iterations, span {exact_span:?}; \
         default slack: {} sends, {} iterations, span {slack_span:?}",
        exact.send_syscalls, exact.iterations, slack.send_syscalls, slack.iterations
    );
    for sink in [&exact_sink, &slack_sink] {
        assert_eq!((sink.received, sink.corrupt), (N, 0));
    }
    // The rate holds: the bucket stores what fell due while asleep (a
    // loaded host wakes later still, which costs both runs alike).
    assert!(slack_span >= ideal - ideal / 20, "{slack_span:?}");
    assert!(slack_span < exact_span + ideal / 2, "{slack_span:?}");
    // About six datagrams per wake-up instead of one or two.
    assert!(
        slack.iterations * 2 < exact.iterations,
        "{slack:?} vs {exact:?}"
    );
    if slack.send_syscalls < N {
        // GSO: each wake-up's datagrams leave in one send.
        assert!(slack.send_syscalls * 3 < N, "{slack:?}");
    }
}

#[test]
fn paced_sender_spreads_datagrams_over_time() {
    const N: u64 = 100;
    let sink_driver = driver(v4(), DriverConfig::default());
    let target = sink_driver.endpoint().local_addr();
    let done = Arc::new(AtomicBool::new(false));
    let sink = spawn_passive(sink_driver, Sink::default(), done.clone());
    let mut blaster = Blaster::new(target, N, 500);
    blaster.interval = Duration::from_millis(1);
    let blast = spawn(
        driver(v4(), DriverConfig::default()),
        blaster,
        Blaster::done,
        done,
    );
    let (_, bs) = blast.join().unwrap();
    let (sink, _) = sink.join().unwrap();
    assert_eq!(sink.received, N);
    let span = sink.last_at.unwrap() - sink.first_at.unwrap();
    assert!(span >= Duration::from_millis(95), "{span:?}");
    assert!(span < Duration::from_millis(200), "{span:?}");
    // Roughly one wake-up per paced datagram, not a spin.
    assert!(bs.iterations < 4 * N, "{bs:?}");
}

/// Fires every `period`, recording how late each `handle_timeout` came.
struct Ticker {
    period: Duration,
    next: Instant,
    remaining: u32,
    lateness: Vec<Duration>,
}

impl Engine for Ticker {
    fn handle_datagram(&mut self, _: Instant, _: SocketAddr, _: &[u8]) {}
    fn poll_transmit(&mut self, _: Instant, _: &mut Vec<u8>) -> Option<Transmit> {
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (self.remaining > 0).then_some(self.next)
    }
    fn handle_timeout(&mut self, now: Instant) {
        if self.remaining == 0 || now < self.next {
            return;
        }
        self.lateness.push(now - self.next);
        self.remaining -= 1;
        self.next += self.period;
    }
}

#[test]
fn timers_fire_on_time_without_spinning() {
    let exact = DriverConfig {
        timer_slack: Duration::ZERO,
        ..DriverConfig::default()
    };
    let mut d = driver(v4(), exact);
    let mut ticker = Ticker {
        period: Duration::from_millis(10),
        next: d.clock().now() + Duration::from_millis(10),
        remaining: 20,
        lateness: Vec::new(),
    };
    let end = d.clock().now() + LIMIT;
    let stats = d
        .run(&mut ticker, |t, now| t.remaining == 0 || now > end)
        .unwrap();
    assert_eq!(ticker.lateness.len(), 20);
    let mut sorted = ticker.lateness.clone();
    sorted.sort();
    eprintln!(
        "timer lateness: median {:?}, max {:?}; {} iterations",
        sorted[10], sorted[19], stats.iterations
    );
    // Generous bounds: the machine is shared with compilers.
    assert!(sorted[10] < Duration::from_millis(2), "{sorted:?}");
    assert!(sorted[19] < Duration::from_millis(8), "{sorted:?}");
    // One wake-up per tick, plus a few spurious ones at most.
    assert!(stats.iterations <= 2 * 20 + 5, "{stats:?}");
    // Timer wake-ups without a readiness event do not look at the socket.
    assert!(stats.recv_empty <= 2, "{stats:?}");
}

#[test]
fn idle_driver_sleeps() {
    let mut d = driver(
        v4(),
        DriverConfig {
            max_wait: Duration::from_millis(50),
            ..DriverConfig::default()
        },
    );
    let end = d.clock().now() + Duration::from_millis(300);
    let stats = d.run(&mut Sink::default(), |_, now| now >= end).unwrap();
    // 300 ms / 50 ms = 6 wake-ups for the stop check.
    assert!(stats.iterations <= 10, "{stats:?}");
}

#[test]
fn waker_cuts_a_long_sleep_short() {
    let mut d = driver(
        v4(),
        DriverConfig {
            max_wait: Duration::from_secs(10),
            ..DriverConfig::default()
        },
    );
    let waker = d.waker();
    let woken = Arc::new(AtomicBool::new(false));
    let flag = woken.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        flag.store(true, Ordering::SeqCst);
        waker.wake();
    });
    let start = d.clock().now();
    // Idle engine, no deadline: only the waker ends this 10 s sleep early.
    while !woken.load(Ordering::SeqCst) {
        d.step(&mut Sink::default(), Duration::from_secs(10))
            .unwrap();
    }
    let took = d.clock().now() - start;
    t.join().unwrap();
    assert!(took < Duration::from_secs(5), "woke after {took:?}");
    // Wake-ups need no draining: a second one works as well.
    let waker = d.waker();
    let start = d.clock().now();
    waker.wake();
    d.step(&mut Sink::default(), Duration::from_secs(10))
        .unwrap();
    assert!(d.clock().now() - start < Duration::from_secs(5));
}
