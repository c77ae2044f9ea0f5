//! `fanout relay` over real IP multicast (TCP-SMO §V.D), in a bridged LAN of
//! network namespaces this test creates (10.77.0.0/24, TTL 1; nothing reaches
//! the root namespace): a sender multicasts a 24 MiB file to group G1, where
//! the relay and two receivers are members; the relay forwards the stream as it
//! arrives to three receivers of group G2. All five files are identical and
//! verified end to end (the relay forwards the manifest and BLAKE3 trailer
//! untouched). A second case gives the relay a spool and has a downstream
//! receiver join late: it gets the missed prefix from the relay by catch-up.
//! Every wait is bounded; the LAN guard kills what runs in it and removes it.

#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

mod common;
use common::{finish, spawn, BIN};
use fanout_netns::{require_netns, LanConfig, LanTopology, NsChild, RateLimit};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::{Duration, Instant};

const G1: &str = "239.77.0.5:7030";
const G2: &str = "239.77.0.6:7031";
const SENDER: &str = "10.77.0.1:6030";
/// The relay's downstream address (host 1).
const RELAY: &str = "10.77.0.2:6031";
const FILE_BYTES: usize = 24 << 20;
/// Hosts: 0 sender, 1 relay, 2..=4 behind the relay, 5..=6 direct.
const BEHIND: [usize; 3] = [2, 3, 4];
const DIRECT: [usize; 2] = [5, 6];

fn receiver(
    lan: &LanTopology,
    host: usize,
    group: &str,
    from: &str,
    out: &Path,
    extra: &[String],
) -> NsChild {
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    common::spawn_group_receiver(lan, host, group, from, out, &extra)
}

/// Starts `fanout relay` on host 1 from G1 (sender on host 0) to G2, with
/// `--json --quiet` and `extra`.
fn start_relay(lan: &LanTopology, extra: &[&str]) -> NsChild {
    let relay_ip = lan.host(1).ipv4().to_string();
    let args = [
        "relay",
        "--from",
        SENDER,
        "--group",
        G1,
        "--interface",
        &relay_ip,
        "--bind",
        RELAY,
        "--out-group",
        G2,
        "--json",
        "--quiet",
    ];
    spawn(lan, 1, &[&args[..], extra].concat())
}

/// Key pairs for every host of a protected relay run (`fanout keygen` in
/// `dir`) and the flags each host gets: the sender admits the relay and
/// the direct receivers, the relay pins the sender and admits the
/// receivers behind it, each receiver pins the host it joins.
fn hop_keys(dir: &Path) -> impl Fn(usize) -> Vec<String> {
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    for h in 0..=6 {
        let out = std::process::Command::new(BIN)
            .args(["keygen", &path(&format!("h{h}.key"))])
            .output()
            .unwrap();
        assert!(out.status.success(), "keygen: {out:?}");
    }
    let public = |h: usize| std::fs::read_to_string(path(&format!("h{h}.key.pub"))).unwrap();
    let allow = |name: &str, hosts: &[usize]| {
        let list: String = hosts.iter().map(|&h| public(h)).collect();
        std::fs::write(path(name), list).unwrap();
    };
    allow("up.allow", &[1, DIRECT[0], DIRECT[1]]);
    allow("down.allow", &BEHIND);
    let dir = dir.to_owned();
    move |h: usize| {
        let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
        let key = vec!["--key".into(), path(&format!("h{h}.key"))];
        let more = match h {
            0 => vec!["--allow-keys".into(), path("up.allow")],
            1 => vec![
                "--sender-key".into(),
                path("h0.key.pub"),
                "--allow-keys".into(),
                path("down.allow"),
            ],
            h if BEHIND.contains(&h) => vec!["--sender-key".into(), path("h1.key.pub")],
            _ => vec!["--sender-key".into(), path("h0.key.pub")],
        };
        [key, more].concat()
    }
}

/// A fresh directory (removed on drop) holding a random `payload.bin`;
/// returns both and the bytes.
fn payload(tag: &str) -> (common::Scratch, std::path::PathBuf, Vec<u8>) {
    let dir = common::Scratch::new(&format!("relay-{tag}"));
    let src = dir.path().join("payload.bin");
    let mut data = vec![0u8; FILE_BYTES];
    fanout_core::Rng::new(21).fill(&mut data);
    std::fs::File::create(&src)
        .unwrap()
        .write_all(&data)
        .unwrap();
    (dir, src, data)
}

#[test]
fn a_relay_forwards_a_file_to_a_second_group() {
    relay_forwards("plain", false);
}

/// The same with key pairs on every host: each hop runs its own
/// handshake (the relay pins the sender and admits the receivers behind
/// it), BLAKE3 stays end to end.
#[test]
fn a_protected_relay_forwards_with_its_own_keys_on_each_hop() {
    relay_forwards("keys", true);
}

/// Sender on host 0 to G1, the relay on host 1 from G1 to G2; `keys`: with
/// key pairs on every host.
fn relay_forwards(tag: &str, keys: bool) {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let (dir, src, data) = payload(tag);
    let flags: Box<dyn Fn(usize) -> Vec<String>> = if keys {
        Box::new(hop_keys(dir.path()))
    } else {
        Box::new(|_| Vec::new())
    };
    let lan = LanTopology::new(7).expect("LAN");
    let out = |h: usize| dir.path().join(format!("got{h}.bin"));
    let mut behind: Vec<(usize, NsChild)> = BEHIND
        .iter()
        .map(|&h| (h, receiver(&lan, h, G2, RELAY, &out(h), &flags(h))))
        .collect();
    let mut direct: Vec<(usize, NsChild)> = DIRECT
        .iter()
        .map(|&h| (h, receiver(&lan, h, G1, SENDER, &out(h), &flags(h))))
        .collect();
    let relay_keys = flags(1);
    let relay_keys: Vec<&str> = relay_keys.iter().map(String::as_str).collect();
    let mut relay = start_relay(&lan, &[&["--wait-for", "3"][..], &relay_keys].concat());
    let g1 = IpAddr::V4(Ipv4Addr::new(239, 77, 0, 5));
    let g2 = IpAddr::V4(Ipv4Addr::new(239, 77, 0, 6));
    let m1 = lan
        .wait_for_members(g1, 3, Duration::from_secs(5))
        .expect("bridge");
    let m2 = lan
        .wait_for_members(g2, 3, Duration::from_secs(5))
        .expect("bridge");
    assert_eq!((m1.len(), m2.len()), (3, 3), "G1 {m1:?}, G2 {m2:?}");
    let sender_keys = flags(0);
    let sender_keys: Vec<&str> = sender_keys.iter().map(String::as_str).collect();
    let mut sender = common::spawn_group_sender(&lan, 0, &src, G1, SENDER, 3, &sender_keys);
    let sent = finish(&mut sender, "sender", Duration::from_secs(120));
    let relayed = finish(&mut relay, "relay", Duration::from_secs(60));
    for (h, c) in behind.iter_mut().chain(direct.iter_mut()) {
        let r = finish(c, &format!("receiver on host {h}"), Duration::from_secs(30));
        assert_eq!(r["verified"], true, "host {h}");
        assert!(
            std::fs::read(out(*h)).unwrap() == data,
            "host {h}: file differs"
        );
    }
    // The relay forwarded the whole stream: manifest + file + 32-byte hash.
    let stream = relayed["bytes"].as_u64().unwrap();
    assert!(
        stream > FILE_BYTES as u64 + 32 && stream < FILE_BYTES as u64 + 512,
        "{relayed}"
    );
    assert_eq!(relayed["transport"]["members_joined"], 3, "{relayed}");
    assert_eq!(
        relayed["upstream_transport"]["bytes_read"].as_u64(),
        Some(stream)
    );
    let segments = relayed["transport"]["data_segments_multicast"]
        .as_u64()
        .unwrap();
    assert!(
        segments < FILE_BYTES as u64 / 1000,
        "downstream data multicast once, not per receiver: {segments}"
    );
    assert_eq!(sent["transport"]["members_joined"], 3, "{sent}");
    eprintln!(
        "relay ({tag}): sender {:.2} s ({:.0} Mbit/s), relay {:.2} s ({:.0} Mbit/s), peak RSS {} MiB",
        sent["seconds"].as_f64().unwrap(),
        sent["goodput_bps"].as_f64().unwrap() / 1e6,
        relayed["seconds"].as_f64().unwrap(),
        relayed["goodput_bps"].as_f64().unwrap() / 1e6,
        relayed["peak_rss_bytes"].as_u64().unwrap_or(0) >> 20,
    );
}

fn part_len(out: &Path) -> u64 {
    let mut p = out.to_path_buf().into_os_string();
    p.push(".part");
    std::fs::metadata(std::path::PathBuf::from(p)).map_or(0, |m| m.len())
}

#[test]
fn a_relay_with_a_spool_serves_a_late_downstream_joiner() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let (dir, src, data) = payload("spool");
    // 100 Mbit/s links make the transfer last long enough to join mid-way.
    let config = LanConfig {
        rate_limit: Some(RateLimit::mbit(100)),
        ..LanConfig::default()
    };
    let lan = LanTopology::with_config(5, &config).expect("LAN");
    let out = |h: usize| dir.path().join(format!("got{h}.bin"));
    let mut rx: Vec<(usize, NsChild)> = [2, 3]
        .iter()
        .map(|&h| (h, receiver(&lan, h, G2, RELAY, &out(h), &[])))
        .collect();
    let spool = dir.path().join("relay.spool");
    let spool_path = spool.to_str().unwrap();
    let mut relay = start_relay(
        &lan,
        &[
            "--wait-for",
            "2",
            "--window-mib",
            "2",
            "--spool",
            spool_path,
        ],
    );
    let g1 = IpAddr::V4(Ipv4Addr::new(239, 77, 0, 5));
    let g2 = IpAddr::V4(Ipv4Addr::new(239, 77, 0, 6));
    let m1 = lan
        .wait_for_members(g1, 1, Duration::from_secs(5))
        .expect("bridge");
    let m2 = lan
        .wait_for_members(g2, 2, Duration::from_secs(5))
        .expect("bridge");
    assert_eq!((m1.len(), m2.len()), (1, 2), "G1 {m1:?}, G2 {m2:?}");
    let src_s = src.to_str().unwrap();
    let mut sender = spawn(
        &lan,
        0,
        &[
            "send",
            src_s,
            "--group",
            G1,
            "--bind",
            SENDER,
            "--wait-for",
            "1",
            "--json",
            "--quiet",
        ],
    );
    // Join once both early receivers wrote past the relay's 2 MiB buffer.
    let beyond = 4u64 << 20;
    let t0 = Instant::now();
    while [2, 3].iter().map(|&h| part_len(&out(h))).min().unwrap() < beyond {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the early receivers never got past {beyond} bytes"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    rx.push((4, receiver(&lan, 4, G2, RELAY, &out(4), &[])));
    let sent = finish(&mut sender, "sender", Duration::from_secs(120));
    let relayed = finish(&mut relay, "relay", Duration::from_secs(60));
    let mut reports = Vec::new();
    for (h, c) in rx.iter_mut() {
        let r = finish(c, &format!("receiver on host {h}"), Duration::from_secs(30));
        assert_eq!(r["verified"], true, "host {h}");
        assert!(
            std::fs::read(out(*h)).unwrap() == data,
            "host {h}: file differs"
        );
        reports.push(r);
    }
    let late = &reports[2]["transport"];
    let start = late["start_offset"].as_u64().expect("late joiner report");
    assert!(start > 2 << 20, "joined beyond the relay's buffer: {late}");
    assert_eq!(late["catch_up_bytes"].as_u64(), Some(start), "{late}");
    let t = &relayed["transport"];
    assert_eq!(t["members_joined"], 3, "{t}");
    assert_eq!(t["catch_ups_completed"], 1, "{t}");
    assert!(!spool.exists(), "the relay removes its spool");
    eprintln!(
        "relay with spool: late joiner started at {start}; sender {:.2} s, relay {:.2} s",
        sent["seconds"].as_f64().unwrap(),
        relayed["seconds"].as_f64().unwrap(),
    );
}
