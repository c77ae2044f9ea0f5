//! Per-datagram cost of packet protection (`fanout_transport::protection`):
//! sealing and opening a full 1452-byte datagram with AES-128-GCM (the
//! header authenticated), the copy an engine makes to open in place, and a
//! whole handshake (both ends) for each Noise pattern. Compare the seal and
//! open times with the ~1.2 µs a 1452-byte datagram takes at 10 Gbit/s.
//! Source authentication: the hash of each multicast datagram (sender and
//! receivers), and signing / verifying a list of 64 (once per 64
//! datagrams, or per millisecond at lower rates); a listed segment's hash
//! (SHA-256) and a run's (BLAKE3 over 12 segments of 1405 bytes, per
//! segment: the run hash divided by 12).
//!
//! `cargo bench -p fanout-transport --bench protection`

#![allow(
    missing_docs,
    reason = "criterion_group! generates undocumented functions"
)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fanout_core::time::Instant;
use fanout_transport::protection::noise::{public_key, Initiator, Responder};
use fanout_transport::protection::segments::{run_hash, segment_hash};
use fanout_transport::protection::source::{datagram_hash, Signer, Verifier, MAX_SIGNED};
use fanout_transport::protection::{Credentials, DataKey, PacketKey};
use fanout_transport::wire::{Header, HeaderFlags};
use std::hint::black_box;

const DATAGRAM: usize = 1452;

fn datagram() -> Vec<u8> {
    let mut d = Vec::with_capacity(DATAGRAM + 16);
    Header {
        flags: HeaderFlags::default().with(HeaderFlags::MULTICAST),
        session_id: 42,
        packet_number: 7,
    }
    .encode(&mut d);
    d.resize(DATAGRAM - 16, 0xA5);
    d
}

fn seal_and_open(c: &mut Criterion) {
    let key = PacketKey::new(&[9; 32]);
    let mut g = c.benchmark_group("packet");
    g.throughput(Throughput::Bytes(DATAGRAM as u64));
    let plain = datagram();
    let mut pn = 0u64;
    g.bench_function("seal_1452", |b| {
        let mut out = plain.clone();
        b.iter(|| {
            out.truncate(plain.len());
            out.copy_from_slice(&plain);
            pn += 1;
            key.seal(&mut out, 0, pn);
            black_box(out.len())
        })
    });
    let mut sealed = plain.clone();
    key.seal(&mut sealed, 0, 1);
    g.bench_function("copy_and_open_1452", |b| {
        let mut scratch = Vec::with_capacity(DATAGRAM);
        b.iter(|| {
            scratch.clear();
            scratch.extend_from_slice(&sealed);
            black_box(key.open(&mut scratch, 1).expect("opens").len())
        })
    });
    let data_key = DataKey::from_group_secret(&[9; 32]);
    g.bench_function("listed_data_ctr_1452", |b| {
        let mut out = plain.clone();
        b.iter(|| {
            pn += 1;
            data_key.apply(&mut out, pn);
            black_box(out.len())
        })
    });
    g.finish();
}

fn handshakes(c: &mut Criterion) {
    let (sender_secret, joiner_secret) = ([11; 32], [12; 32]);
    let psk = Credentials::with_psk([7; 32]);
    let sender_ik = Credentials::default()
        .identity(sender_secret)
        .allow(public_key(&joiner_secret));
    let joiner_ik = Credentials::default()
        .identity(joiner_secret)
        .sender_key(public_key(&sender_secret));
    let mut g = c.benchmark_group("handshake");
    for (name, joiner, sender) in [("nn_psk0", &psk, &psk), ("ik", &joiner_ik, &sender_ik)] {
        let mut seed = 0u8;
        g.bench_function(name, |b| {
            b.iter(|| {
                seed = seed.wrapping_add(1);
                let mut first = Vec::new();
                let i = Initiator::start(joiner, [seed; 32], b"connect", &mut first).unwrap();
                let (r, _) = Responder::read(sender, [seed ^ 0xff; 32], &first).unwrap();
                let mut answer = Vec::new();
                r.answer(b"accept", &mut answer).unwrap();
                black_box(i.finish(&answer).unwrap())
            })
        });
    }
    g.finish();
}

fn source_authentication(c: &mut Criterion) {
    let sealed = datagram();
    let mut g = c.benchmark_group("source");
    g.bench_function("hash_1452", |b| {
        b.iter(|| black_box(datagram_hash(&sealed)))
    });
    g.bench_function("segment_hash_1400", |b| {
        b.iter(|| black_box(segment_hash(7, false, false, &sealed[52..])))
    });
    let run = vec![0x5Au8; 12 * 1405];
    g.throughput(Throughput::Bytes(run.len() as u64));
    g.bench_function("run_hash_12x1405", |b| {
        b.iter(|| black_box(run_hash(7, 1405, 12, &[&run])))
    });
    g.throughput(Throughput::Elements(1));
    let mut signer = Signer::new([3; 32], DATAGRAM);
    let make_list = |signer: &mut Signer, base: u64| {
        for pn in base..base + MAX_SIGNED as u64 {
            signer.add(Instant::ZERO, pn, &sealed);
        }
        signer
            .take_due(Instant::ZERO, 42)
            .expect("a full list is due")
    };
    let mut base = 0;
    g.bench_function("hash_64_and_sign_list", |b| {
        b.iter(|| {
            base += MAX_SIGNED as u64;
            black_box(make_list(&mut signer, base))
        })
    });
    let list = make_list(&mut signer, 0);
    let mut verifier = Verifier::new(signer.public_key(), 42);
    g.bench_function("verify_list_64", |b| {
        b.iter(|| black_box(verifier.on_list(&list).expect("verifies").len()))
    });
    g.finish();
}

criterion_group!(benches, seal_and_open, handshakes, source_authentication);
criterion_main!(benches);
