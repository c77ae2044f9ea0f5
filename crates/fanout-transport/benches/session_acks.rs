//! ACKs processed per second by the session sender with 1000 members
//! (issue 3: target ≥ 5 million per core). Only `handle_datagram` of the
//! ACKs is timed; sending the data they acknowledge is not.

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
                spent += t0.elapsed();
            }
            spent
        });
    });
    g.finish();
}

criterion_group!(benches, acks);
criterion_main!(benches);
