//! Datagrams per second through the driver on loopback.
//!
//! `cargo run --release -p fanout-io --example udp_blast -- [blast|echo] [secs] [size] [--no-gso]`
//!
//! `blast`: one thread sends as fast as the driver takes datagrams, another
//! receives. `echo`: a windowed pinger and an echo, so each datagram crosses
//! loopback in both directions.

#[path = "../tests/common/mod.rs"]
mod common;

use common::{Blaster, Echo, Pinger, Sink};
use fanout_core::Instant;
use fanout_io::{Clock, Driver, DriverConfig, RunStats, UdpEndpoint};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn driver(gso: bool) -> Driver {
    let endpoint = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let config = DriverConfig {
        gso,
        ..DriverConfig::default()
    };
    Driver::new(endpoint, Clock::new(), config).unwrap()
}

fn report(name: &str, s: &RunStats, secs: f64) {
    let rate = |n: u64| n as f64 / secs;
    println!(
        "{name:>8}: sent {:>9} ({:>8.0}/s, {:>5.2} Gbit/s, {:>6.1}/syscall) | received {:>9} ({:>8.0}/s, {:>5.2} Gbit/s, {:>6.1}/syscall) | would-block {} enobufs {} errors {} | iterations {}",
        s.datagrams_sent,
        rate(s.datagrams_sent),
        rate(s.bytes_sent) * 8e-9,
        s.datagrams_sent as f64 / s.send_syscalls.max(1) as f64,
        s.datagrams_received,
        rate(s.datagrams_received),
        rate(s.bytes_received) * 8e-9,
        s.datagrams_received as f64 / s.recv_syscalls.max(1) as f64,
        s.send_would_block,
        s.send_no_buffer,
        s.send_errors,
        s.iterations,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let gso = !args.iter().any(|a| a == "--no-gso");
    let pos: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let mode = pos.first().map_or("blast", |s| s.as_str()).to_owned();
    let secs: f64 = pos.get(1).map_or(3.0, |s| s.parse().expect("secs"));
    let size: usize = pos.get(2).map_or(1400, |s| s.parse().expect("size"));
    let run_for = Duration::from_secs_f64(secs);

    let mut passive = driver(gso);
    let target = passive.endpoint().local_addr();
    let mut active = driver(gso);
    println!(
        "mode {mode}, {secs} s, {size}-byte datagrams, GSO segments {}, GRO segments {}, SO_RCVBUF {} B, SO_SNDBUF {} B",
        active.max_gso_segments(),
        passive.gro_segments(),
        passive.endpoint().recv_buffer_bytes().unwrap(),
        active.endpoint().send_buffer_bytes().unwrap(),
    );
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    let passive_mode = mode.clone();
    let passive_thread = std::thread::spawn(move || {
        let mut seen: Option<Instant> = None;
        let mut stop = move |now: Instant| {
            flag.load(Ordering::SeqCst)
                && now - *seen.get_or_insert(now) > Duration::from_millis(100)
        };
        if passive_mode == "echo" {
            let mut echo = Echo::default();
            passive.run(&mut echo, |_, now| stop(now)).unwrap()
        } else {
            let mut sink = Sink {
                check_stride: 64,
                ..Sink::default()
            };
            let s = passive.run(&mut sink, |_, now| stop(now)).unwrap();
            assert_eq!(sink.corrupt, 0);
            s
        }
    });
    let end = active.clock().now() + run_for;
    let active_stats = if mode == "echo" {
        let mut pinger = Pinger::new(target, 10_000_000, 512, size);
        pinger.check_stride = 64;
        active
            .run(&mut pinger, |p, now| p.done() || now > end)
            .unwrap()
    } else {
        let mut blaster = Blaster::new(target, u64::MAX, size);
        active.run(&mut blaster, |_, now| now > end).unwrap()
    };
    finished.store(true, Ordering::SeqCst);
    let passive_stats = passive_thread.join().unwrap();
    report("active", &active_stats, secs);
    report("passive", &passive_stats, secs);
    let lost = active_stats
        .datagrams_sent
        .saturating_sub(passive_stats.datagrams_received);
    println!(
        "lost in the kernel (receive buffer overflow): {lost} ({:.2}%)",
        100.0 * lost as f64 / active_stats.datagrams_sent.max(1) as f64
    );
}
