//! ACKs processed per second by the session sender with 1000 members
//! (target: ≥ 5 million per core). Only `handle_datagram` of the ACKs is timed;
//! sending the data they acknowledge is not.
//!
//! Two ACK streams:
//! * `ack_per_member_n1000`: each round sends 64 KiB and every member
//!   acknowledges all of it (loss-free, members in lockstep);
//! * `ack_mix_n1000`: [`AckMix`] — advancing ACKs; 5% of the members a
//!   round SACKing above a reordered segment, 0.1% losing one and SACKing
//!   above it for 50 rounds (RACK loss detection, recovery, RTOs, unicast
//!   repairs); 8% extra duplicate ACKs. Members drift apart. The session's
//!   minimum window then carries a segment or two a round, one ACK per
//!   member per round; rounds hold about 1080 ACKs, times are scaled to
//!   1000.
//!
//! Criterion reports the mean over rounds of 1000 ACKs (one per member), in
//! wall time. On a shared, loaded machine that counts time the benchmark
//! was not running, so the fastest and the median round (warm-up rounds
//! included) are printed too: the per-core cost with the least
//! interference, and a typical round.

#![allow(
    missing_docs,
    reason = "criterion_group! generates undocumented functions"
)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fanout_core::Engine;
use fanout_transport::session::bench_support::{AckMix, SyntheticSession};
use std::time::{Duration, Instant as WallInstant};

const MEMBERS: usize = 1000;

/// Times `handle_datagram` of one round of ACKs, `(member index, datagram)`,
/// made (untimed) by `make`; returns the time scaled to [`MEMBERS`] ACKs.
fn round(
    s: &mut SyntheticSession,
    rounds: &mut Vec<Duration>,
    make: &mut impl FnMut(&mut SyntheticSession) -> Vec<(usize, Vec<u8>)>,
) -> Duration {
    let acks = make(s);
    let now = s.now;
    #[expect(clippy::disallowed_methods, reason = "benchmark timing")]
    let t0 = WallInstant::now();
    for (i, a) in &acks {
        s.session.handle_datagram(now, s.members[*i], a);
    }
    let spent = t0.elapsed() * MEMBERS as u32 / acks.len().max(1) as u32;
    rounds.push(spent);
    spent
}

/// Prints the fastest and the median round (the median is robust to the
/// rounds a loaded machine preempted, which inflate criterion's mean).
fn report(name: &str, rounds: &mut [Duration]) {
    if rounds.is_empty() {
        return; // filtered out
    }
    rounds.sort_unstable();
    let ns = |d: Duration| d.as_nanos() as f64 / MEMBERS as f64;
    let (best, median) = (ns(rounds[0]), ns(rounds[rounds.len() / 2]));
    println!(
        "session/{name}: fastest round {best:.0} ns/ACK = {:.2} M ACKs/s, \
         median round {median:.0} ns/ACK = {:.2} M ACKs/s ({} rounds)",
        1e3 / best,
        1e3 / median,
        rounds.len()
    );
}

fn acks(c: &mut Criterion) {
    let mut g = c.benchmark_group("session");
    // Per round of MEMBERS ACKs (the mix's rounds are scaled to that).
    g.throughput(Throughput::Elements(MEMBERS as u64));
    let mut rounds = Vec::new();
    g.bench_function("ack_per_member_n1000", |b| {
        let mut s = SyntheticSession::new(MEMBERS);
        let mut make = |s: &mut SyntheticSession| {
            let cum = s.send_more(64 << 10, Duration::from_millis(1));
            (0..MEMBERS).map(|i| (i, s.ack(i, cum))).collect()
        };
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| round(&mut s, &mut rounds, &mut make))
                .sum()
        });
    });
    report("ack_per_member_n1000", &mut rounds);
    let mut rounds = Vec::new();
    g.bench_function("ack_mix_n1000", |b| {
        let mut s = SyntheticSession::new(MEMBERS);
        let mut mix = AckMix::new(MEMBERS, 0x5EED);
        let mut make = |s: &mut SyntheticSession| mix.round(s);
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| round(&mut s, &mut rounds, &mut make))
                .sum()
        });
    });
    report("ack_mix_n1000", &mut rounds);
    g.finish();
}

criterion_group!(benches, acks);
criterion_main!(benches);
