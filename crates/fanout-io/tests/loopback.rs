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
    let mut d = driver(v4(), DriverConfig::default());
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
