//! A file session under a flood of forged datagrams, over real IP multicast
//! in a bridged LAN of network namespaces this test creates (10.77.0.0/24,
//! TTL 1; nothing reaches the root namespace):
//!
//! sender (host 0) → 2 receivers (hosts 1, 2); an attacker on host 3, which
//! learns the session id from the group (as any LAN host can) and sends,
//! through a raw socket with forged source addresses, as fast as it can for
//! the whole transfer:
//! * CONNECTs as the victim (host 4, whose UDP port counts every byte that
//!   reaches it), and as unassigned addresses of the LAN (each admitted
//!   unvalidated, never to answer);
//! * ACKs with SACK blocks under the session id, as the victim and as
//!   strangers;
//! * in a protected session (`--psk-file`), also 1-byte DATA frames to the
//!   group as the sender, at every offset of the file.
//!
//! Both again with the receivers reporting through an ACK merger (host
//! 5), the joins and ACKs flooding the merger instead.
//!
//! The honest receivers get the file, the sender's (and merger's) memory
//! stays bounded, and the victim receives at most three times what was
//! sent in its name
//! (`docs/wire.md` §4.11); protected, no forged join is even admitted and
//! every forged datagram is dropped unopened or unauthenticated. The figures are printed. File size: 32 MiB, or
//! 256 MiB with FANOUT_BIG_TESTS=1. Every wait is bounded; the LAN guard
//! kills what runs in it and removes it, panics too. Skipped without
//! namespaces unless `FANOUT_NETNS_REQUIRED=1`.

#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

mod common;
use common::{finish, spawn, spawn_group_sender, Scratch};
use fanout_netns::{require_netns, LanTopology};
use socket2::{Domain, Protocol, Socket, Type};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const GROUP: &str = "239.77.0.21:7070";
const GROUP_IP: Ipv4Addr = Ipv4Addr::new(239, 77, 0, 21);
const GROUP_PORT: u16 = 7070;
const SENDER_PORT: u16 = 6070;
const VICTIM_PORT: u16 = 7070;

fn file_size() -> usize {
    if std::env::var("FANOUT_BIG_TESTS").is_ok_and(|v| v == "1") {
        256 << 20
    } else {
        32 << 20
    }
}

fn limit() -> Duration {
    Duration::from_secs(90 + (file_size() >> 20) as u64)
}

/// A QUIC varint (RFC 9000 §16), as the wire format has it.
fn varint(out: &mut Vec<u8>, v: u64) {
    if v < 1 << 6 {
        out.push(v as u8);
    } else if v < 1 << 14 {
        out.extend_from_slice(&((v as u16) | 0x4000).to_be_bytes());
    } else if v < 1 << 30 {
        out.extend_from_slice(&((v as u32) | 0x8000_0000).to_be_bytes());
    } else {
        out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes());
    }
}

/// A wire header (`docs/wire.md` §2): "FO", this build's version, no
/// flags.
fn header(session_id: u64, pn: u32) -> Vec<u8> {
    let mut d = b"FO".to_vec();
    d.extend_from_slice(&[fanout_transport::wire::VERSION, 0]);
    d.extend_from_slice(&session_id.to_be_bytes());
    d.extend_from_slice(&pn.to_be_bytes());
    d
}

fn connect(pn: u32) -> Vec<u8> {
    let mut d = header(0, pn);
    d.push(0x02);
    varint(&mut d, 1400);
    varint(&mut d, 64 << 20);
    d.extend_from_slice(&0u32.to_be_bytes());
    varint(&mut d, 0);
    d
}

/// An ACK claiming much, with 8 SACK blocks.
fn ack(session_id: u64, pn: u32) -> Vec<u8> {
    let mut d = header(session_id, pn);
    d.push(0x04);
    varint(&mut d, u64::from(pn) * 1400);
    varint(&mut d, 64 << 20);
    d.extend_from_slice(&0u32.to_be_bytes());
    varint(&mut d, 0);
    varint(&mut d, 8);
    for k in 0..8u64 {
        varint(&mut d, (u64::from(pn) + 2 * k + 2) * 1400);
        varint(&mut d, 1400);
    }
    d
}

/// An IPv4 + UDP datagram from `from` to `to` carrying `payload` (the
/// kernel fills the IP checksum and length of a raw IPPROTO_RAW socket; a
/// zero UDP checksum means none, RFC 768).
fn forged(from: SocketAddrV4, to: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let udp_len = 8 + payload.len() as u16;
    let mut p = Vec::with_capacity(20 + usize::from(udp_len));
    p.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    p.extend_from_slice(&from.ip().octets());
    p.extend_from_slice(&to.ip().octets());
    p.extend_from_slice(&from.port().to_be_bytes());
    p.extend_from_slice(&to.port().to_be_bytes());
    p.extend_from_slice(&udp_len.to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    p
}

/// What the attacker sent: datagrams in all, and bytes (UDP payload, as
/// the victim counts them) forged as coming from the victim.
#[derive(Debug, Default, Clone, Copy)]
struct Flood {
    datagrams: u64,
    as_victim_bytes: u64,
}

/// A DATA frame of one byte at `offset` (type 0x10, `docs/wire.md` §3).
fn one_byte_data(session_id: u64, pn: u32, offset: u64) -> Vec<u8> {
    let mut d = header(session_id, pn);
    d.push(0x10);
    varint(&mut d, offset);
    d.extend_from_slice(&0u32.to_be_bytes());
    varint(&mut d, 1);
    d.push(0xEE);
    d
}

/// The attacker (in its namespace): learns the session id from the group,
/// then floods the sender (and, with `data`, the group as the sender)
/// until `stop`.
/// `target` takes the joins and ACKs (the sender, or its merger).
fn attack(
    sender: SocketAddrV4,
    target: SocketAddrV4,
    victim: SocketAddrV4,
    data: bool,
    stop: &AtomicBool,
) -> Flood {
    let listen = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, GROUP_PORT)).expect("bind group");
    listen
        .join_multicast_v4(&GROUP_IP, &Ipv4Addr::UNSPECIFIED)
        .expect("join group");
    listen
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 2048];
    let session_id = loop {
        if stop.load(Ordering::Relaxed) {
            return Flood::default();
        }
        // The flood starts with the transfer: the first datagram on the
        // group that is not the sender's announcement (a clear OFFER, sent
        // while it waits for receivers). A flood that starts before the
        // receivers joined an unprotected merger is another scenario.
        if let Ok((n, _)) = listen.recv_from(&mut buf) {
            let announcement = n > 16 && buf[16] == 0x0b;
            if n >= 16 && &buf[..2] == b"FO" && !announcement {
                break u64::from_be_bytes(buf[4..12].try_into().unwrap());
            }
        }
    };
    let raw = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(255))).expect("raw");
    let group = SocketAddrV4::new(GROUP_IP, GROUP_PORT);
    let mut f = Flood::default();
    let mut rng = fanout_core::Rng::new(13);
    let mut pn = 0u32;
    while !stop.load(Ordering::Relaxed) {
        pn = pn.wrapping_add(1);
        let stranger = SocketAddrV4::new(
            Ipv4Addr::new(10, 77, 0, 100 + (rng.next_u64() % 150) as u8),
            1024 + (rng.next_u64() % 60_000) as u16,
        );
        let (from, to, payload) = match pn % 5 {
            0 => (victim, target, connect(pn)),
            1 => (stranger, target, connect(pn)),
            2 => (victim, target, ack(session_id, pn)),
            3 => (stranger, target, ack(session_id, pn)),
            _ if data => {
                let offset = u64::from(pn) * 7919 % file_size() as u64;
                (sender, group, one_byte_data(session_id, pn, offset))
            }
            _ => (stranger, target, ack(session_id, pn)),
        };
        let dest = SocketAddr::V4(to).into();
        if raw.send_to(&forged(from, to, &payload), &dest).is_ok() {
            f.datagrams += 1;
            if from == victim {
                f.as_victim_bytes += payload.len() as u64;
            }
        }
        // About 100 000 datagrams a second: more than the sender's own
        // feedback by far, while leaving the two cores to the transfer.
        if pn.is_multiple_of(100) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    f
}

/// The victim (in its namespace): counts the UDP payload bytes that reach
/// its port until `stop`.
fn count_arrivals(stop: &AtomicBool) -> u64 {
    let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, VICTIM_PORT)).expect("bind victim");
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut buf = [0u8; 2048];
    let mut bytes = 0u64;
    // A little past the stop: late answers count too.
    let mut until: Option<Instant> = None;
    loop {
        if let Ok(n) = s.recv(&mut buf) {
            bytes += n as u64;
        }
        match until {
            None if stop.load(Ordering::Relaxed) => {
                until = Some(Instant::now() + Duration::from_secs(4))
            }
            Some(t) if Instant::now() >= t => return bytes,
            _ => {}
        }
    }
}

#[test]
fn a_transfer_completes_under_a_flood_of_forged_joins_and_acks() {
    flood(None, false);
}

/// Protected by a pre-shared key, with forged 1-byte DATA to the group on
/// top: nothing forged is admitted or opened.
#[test]
fn a_protected_transfer_completes_under_a_flood_of_forged_joins_acks_and_data() {
    let psk = common::PskFile::new("flood-key", 0x3c);
    flood(Some(psk.path()), false);
}

/// The receivers report through a merger, which the joins and ACKs flood.
#[test]
fn a_transfer_through_a_merger_completes_under_a_flood_of_forged_joins_and_acks() {
    flood(None, true);
}

/// The same protected: no forged child is admitted at the merger.
#[test]
fn a_protected_transfer_through_a_merger_completes_under_a_flood() {
    let psk = common::PskFile::new("flood-merger-key", 0x3d);
    flood(Some(psk.path()), true);
}

/// One flooded transfer; `psk`: protected by that key file; `merger`: the
/// receivers report through a merger on host 5, which takes the flood of
/// joins and ACKs.
fn flood(psk: Option<&str>, merger: bool) {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let dir = Scratch::new(&format!(
        "flood{}{}",
        if psk.is_some() { "-psk" } else { "" },
        if merger { "-merger" } else { "" }
    ));
    let src = dir.path().join("payload.bin");
    let mut data = vec![0u8; file_size()];
    fanout_core::Rng::new(71).fill(&mut data);
    std::fs::File::create(&src)
        .unwrap()
        .write_all(&data)
        .unwrap();
    let lan = LanTopology::new(6).expect("LAN");
    let sender_ip = lan.host(0).ipv4();
    let sender = SocketAddrV4::new(sender_ip, SENDER_PORT);
    let merger_addr = SocketAddrV4::new(lan.host(5).ipv4(), SENDER_PORT + 1);
    let target = if merger { merger_addr } else { sender };
    let victim = SocketAddrV4::new(lan.host(4).ipv4(), VICTIM_PORT);
    let stop = Arc::new(AtomicBool::new(false));
    let victim_count = {
        let stop = stop.clone();
        lan.host(4)
            .netns()
            .spawn_in(move || count_arrivals(&stop))
            .expect("victim")
    };
    let protected = psk.is_some();
    let keys: Vec<&str> = psk.map(|p| vec!["--psk-file", p]).unwrap_or_default();
    let flood = {
        let stop = stop.clone();
        lan.host(3)
            .netns()
            .spawn_in(move || attack(sender, target, victim, protected, &stop))
            .expect("attacker")
    };
    let merger_addr = merger_addr.to_string();
    let mut merger_child =
        merger.then(|| common::spawn_merger(&lan, 5, &merger_addr, &sender.to_string(), 2, &keys));
    let via: Vec<&str> = if merger {
        vec!["--merger", &merger_addr]
    } else {
        Vec::new()
    };
    let outs: Vec<_> = (1..=2)
        .map(|i| dir.path().join(format!("got{i}.bin")))
        .collect();
    let mut receivers: Vec<_> = (1..=2)
        .map(|i| {
            let ip = lan.host(i).ipv4().to_string();
            let args = [
                "recv",
                "--group",
                GROUP,
                "--from",
                &sender.to_string(),
                "--interface",
                &ip,
                "--json",
                "--quiet",
                "--idle-timeout",
                "30",
                "-o",
                outs[i - 1].to_str().unwrap(),
            ];
            spawn(&lan, i, &[&args[..], &keys, &via].concat())
        })
        .collect();
    let joined = lan
        .wait_for_members(GROUP_IP.into(), 2, Duration::from_secs(10))
        .expect("bridge");
    assert!(joined.len() >= 2, "{joined:?}");
    let t0 = Instant::now();
    let members = if merger { 1 } else { 2 };
    let mut send = spawn_group_sender(&lan, 0, &src, GROUP, &sender.to_string(), members, &keys);
    let sent = finish(&mut send, "sender", limit());
    let seconds = t0.elapsed().as_secs_f64();
    let reports: Vec<_> = receivers
        .iter_mut()
        .enumerate()
        .map(|(i, r)| finish(r, &format!("receiver {}", i + 1), limit()))
        .collect();
    let merged = merger_child
        .as_mut()
        .map(|m| finish(m, "merger", Duration::from_secs(30)));
    stop.store(true, Ordering::Relaxed);
    let flood = flood.join().expect("attacker");
    let to_victim = victim_count.join().expect("victim");
    for (i, r) in reports.iter().enumerate() {
        assert_eq!(r["verified"], true, "receiver {}: {r}", i + 1);
        assert!(
            std::fs::read(&outs[i]).unwrap() == data,
            "receiver {} file",
            i + 1
        );
    }
    let t = &sent["transport"];
    let rss = sent["peak_rss_bytes"].as_u64().unwrap_or(0);
    eprintln!(
        "{} MiB to 2 receivers in {seconds:.1} s under a flood of {} forged datagrams \
         ({:.0}/s); sender: {} members admitted, {} unvalidated evicted, {} datagrams \
         not sent (3x limit), peak RSS {:.1} MiB, drops {}; victim got {to_victim} B for \
         {} B forged in its name",
        file_size() >> 20,
        flood.datagrams,
        flood.datagrams as f64 / seconds,
        t["members_joined"],
        t["unvalidated_evicted"],
        t["amplification_limited"],
        rss as f64 / (1 << 20) as f64,
        sent["drops"],
        flood.as_victim_bytes,
    );
    if let Some(m) = &merged {
        let mt = &m["transport"];
        let mrss = m["peak_rss_bytes"].as_u64().unwrap_or(0);
        eprintln!(
            "merger: {} children joined, {} RETRYs, {} unvalidated evicted, {} refused, {} \
             datagrams not sent (3x limit), peak RSS {:.1} MiB, drops {}, socket {}",
            mt["children_joined"],
            mt["retries_sent"],
            mt["unvalidated_evicted"],
            mt["children_refused"],
            mt["amplification_limited"],
            mrss as f64 / (1 << 20) as f64,
            m["drops"],
            m["io"],
        );
        // Bounded: at most 256 children and 1 024 queued datagrams.
        assert!(mrss < 64 << 20, "merger peak RSS {mrss} B");
        if protected {
            assert_eq!(mt["children_joined"], 2, "{m}");
            assert!(m["drops"]["unauthenticated"].as_u64().unwrap() > 0, "{m}");
        }
    }
    assert!(flood.datagrams > 5_000, "the flood ran: {flood:?}");
    assert!(
        to_victim <= 3 * flood.as_victim_bytes,
        "victim got {to_victim} B for {} B",
        flood.as_victim_bytes
    );
    // Bounded: the flood's members are evicted unvalidated; the sender's
    // memory is its window and at most 1 024 unvalidated members.
    assert!(rss < 200 << 20, "peak RSS {rss} B");
    if protected {
        // No forged join authenticates: none is admitted, nothing is sent
        // to the victim, and the receivers open no forged DATA.
        assert_eq!(t["members_joined"], members, "{sent}");
        assert_eq!(to_victim, 0);
        if !merger {
            assert!(
                sent["drops"]["unauthenticated"].as_u64().unwrap() > 0,
                "{sent}"
            );
        }
        for r in &reports {
            eprintln!("receiver drops {}", r["drops"]);
            assert!(
                r["drops"]["unauthenticated"].as_u64().unwrap_or(0) > 0,
                "{r}"
            );
        }
    } else if let Some(m) = &merged {
        // The first 16 forged joins got in, the rest stateless RETRYs (or
        // nothing, beyond 100 per 100 ms).
        assert!(m["transport"]["retries_sent"].as_u64().unwrap() > 0, "{m}");
        let joined = m["transport"]["children_joined"].as_u64().unwrap();
        assert!(joined <= 2 + 16, "{m}");
    } else {
        assert!(t["unvalidated_evicted"].as_u64().unwrap() > 0, "{sent}");
    }
}
