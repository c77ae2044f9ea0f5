//! ACKs processed per second by the session sender with 1000 members
//! (issue 3: target ≥ 5 million per core). Only `handle_datagram` of the
//! ACKs is timed; sending the data they acknowledge is not.
//!
//! Criterion reports the mean over rounds of 1000 ACKs (one per member), in
//! wall time. On a shared, loaded machine that counts time the benchmark
//! was not running, so the fastest round is printed too: the per-core cost
//! with the least interference.

#![allow(
    missing_docs,
    reason = "criterion_group! generates undocumented functions"
)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fanout_core::Engine;
use fanout_transport::session::bench_support::SyntheticSession;
use std::time::{Duration, Instant as WallInstant};

fn acks(c: &mut Criterion) {
    const MEMBERS: usize = 1000;
    let mut g = c.benchmark_group("session");
    g.throughput(Throughput::Elements(MEMBERS as u64));
    let mut best = Duration::MAX;
    g.bench_function("ack_per_member_n1000", |b| {
        let mut s = SyntheticSession::new(MEMBERS);
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let cum = s.send_more(64 << 10, Duration::from_millis(1));
                let acks: Vec<Vec<u8>> = (0..MEMBERS).map(|_| s.ack(cum)).collect();
                let now = s.now;
                #[expect(clippy::disallowed_methods, reason = "benchmark timing")]
                let t0 = WallInstant::now();
                for (i, a) in acks.iter().enumerate() {
                    s.session.handle_datagram(now, s.members[i], a);
                }
                let round = t0.elapsed();
                best = best.min(round);
                spent += round;
            }
            spent
        });
    });
    g.finish();
    let per_ack_ns = best.as_nanos() as f64 / MEMBERS as f64;
    println!(
        "session/ack_per_member_n1000 fastest round: {per_ack_ns:.0} ns/ACK = {:.2} M ACKs/s",
        1e3 / per_ack_ns
    );
}

criterion_group!(benches, acks);
criterion_main!(benches);
