//! `fanout stream` over real IP multicast, and the automatic fallback to
//! unicast fan-out, in bridged LANs of network namespaces this test
//! creates (10.77.0.0/24, TTL 1; nothing reaches the root namespace). Every
//! wait is bounded; the LAN guard kills what runs in it and removes it.

mod common;
use common::{read_all, wait_ok, BIN};
use fanout_netns::{require_netns, LanConfig, LanTopology, NsChild};
use std::io::Write;
use std::net::{IpAddr, UdpSocket};
use std::process::Stdio;
use std::thread::JoinHandle;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fanout_core::Rng::new(seed).fill(&mut v);
    v
}

/// Deletes host 0's route for IPv4 multicast.
fn drop_multicast_route(lan: &LanTopology) {
    let routes = lan.host(0).netns().ip(&["route", "show"]).unwrap();
    let mc = routes
        .lines()
        .find(|l| l.starts_with("224.0.0.0/4"))
        .expect("the LAN's multicast route");
    let args: Vec<&str> = ["route", "del"]
        .into_iter()
        .chain(mc.split_whitespace())
        .collect();
    lan.host(0).netns().ip(&args).unwrap();
}

/// Streams `data` from host 0 to `n` receivers (hosts 1..=n) that join
/// `group` with `recv_extra` flags; `sender_bind` is the sender's --bind,
/// `from` the address receivers name. With `mid_stream`, half the data is
/// written, then `mid_stream` runs, then the rest follows in small pieces.
/// Returns the sender's JSON report and
/// stderr and the receivers' reports, after checking every receiver got
/// `data`.
fn stream(
    lan: &LanTopology,
    n: usize,
    group: &str,
    (sender_bind, from): (&str, &str),
    recv_extra: &dyn Fn(usize) -> Vec<&'static str>,
    data: &[u8],
    mid_stream: Option<&dyn Fn()>,
) -> (serde_json::Value, String, Vec<serde_json::Value>) {
    let gip: IpAddr = group
        .rsplit_once(':')
        .unwrap()
        .0
        .trim_matches(['[', ']'])
        .parse()
        .unwrap();
    type Rx = (NsChild, JoinHandle<Vec<u8>>, JoinHandle<Vec<u8>>);
    let receivers: Vec<Rx> = (1..=n)
        .map(|i| {
            let h = lan.host(i);
            let mut cmd = h.netns().exec(BIN);
            cmd.args(["stream", "recv", "--group", group, "--from", from])
                .args(["--json", "--quiet", "--idle-timeout", "20"])
                .args(recv_extra(i));
            if gip.is_ipv4() {
                cmd.args(["--interface", &h.ipv4().to_string()]);
            }
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            let mut child = h.netns().spawn(cmd).expect("spawn receiver");
            let out = read_all(child.child_mut().stdout.take().unwrap());
            let err = read_all(child.child_mut().stderr.take().unwrap());
            (child, out, err)
        })
        .collect();
    let members = lan
        .wait_for_members(gip, n, Duration::from_secs(5))
        .expect("bridge state");
    assert_eq!(members.len(), n, "the bridge learned {members:?}");
    let mut cmd = lan.host(0).netns().exec(BIN);
    cmd.args(["stream", "send", "--group", group, "--bind", sender_bind])
        // Wait long for all n: on a loaded machine a receiver's CONNECT
        // retry (1 s, 3 s, 7 s after it started) can come late, and a
        // live joiner admitted after the start misses the prefix.
        .args([
            "--wait-for",
            &n.to_string(),
            "--wait-secs",
            "30",
            "--json",
            "--quiet",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut tx = lan.host(0).netns().spawn(cmd).expect("spawn sender");
    let report = read_all(tx.child_mut().stdout.take().unwrap());
    let stderr = read_all(tx.child_mut().stderr.take().unwrap());
    let mut stdin = tx.child_mut().stdin.take().unwrap();
    match mid_stream {
        None => stdin.write_all(data).unwrap(),
        Some(f) => {
            let half = data.len() / 2;
            stdin.write_all(&data[..half]).unwrap();
            // Receivers retry their CONNECT after 1 s (initial RTO) if the
            // first came before the sender was up: let the first half go.
            std::thread::sleep(Duration::from_millis(2000));
            f();
            for piece in data[half..].chunks(64 << 10) {
                stdin.write_all(piece).unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    drop(stdin);
    let ok = wait_ok(&mut tx, LIMIT);
    let stderr = String::from_utf8_lossy(&stderr.join().unwrap()).into_owned();
    assert!(ok, "sender failed: {stderr}");
    let sent: serde_json::Value =
        serde_json::from_slice(&report.join().unwrap()).expect("sender JSON");
    let mut reports = Vec::new();
    for (i, (mut child, out, err)) in receivers.into_iter().enumerate() {
        assert!(wait_ok(&mut child, LIMIT), "receiver {} failed", i + 1);
        let got = out.join().unwrap();
        let err = String::from_utf8_lossy(&err.join().unwrap()).into_owned();
        let report = err
            .find('{')
            .and_then(|at| serde_json::from_str::<serde_json::Value>(&err[at..]).ok())
            .unwrap_or_else(|| panic!("receiver {}: no JSON report: {err}", i + 1));
        assert!(
            got == data,
            "receiver {}: {} bytes, differ; its report: {report}",
            i + 1,
            got.len()
        );
        reports.push(report);
    }
    (sent, stderr, reports)
}

#[test]
fn a_stream_is_multicast_once_to_three_receivers() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let lan = LanTopology::new(4).expect("LAN");
    let data = random(8 << 20, 21);
    let sender = ("10.77.0.1:6100", "10.77.0.1:6100");
    let (sent, _, _) = stream(&lan, 3, "239.77.1.1:7100", sender, &|_| vec![], &data, None);
    assert_eq!(sent["delivery"]["mode"], "multicast", "{sent}");
    let t = &sent["transport"];
    assert_eq!(t["fanout_copies"], 0, "{t}");
    let segments = t["data_segments"].as_u64().unwrap();
    assert!(segments < data.len() as u64 / 1000, "multicast once: {t}");
    // The report's per-receiver figures.
    let members = sent["members"].as_array().unwrap();
    assert_eq!(members.len(), 3, "{sent}");
    for m in members {
        assert!(
            m["acked_bytes"].as_u64().unwrap() > data.len() as u64,
            "{m}"
        );
        assert!(m["acks"].as_u64().unwrap() > 0 && m["srtt_ms"].as_f64().unwrap() > 0.0);
        assert!(m["left"].is_null(), "{m}");
    }
}

#[test]
fn without_a_multicast_route_the_sender_falls_back_to_unicast() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let lan = LanTopology::new(3).expect("LAN");
    // The sender's host loses its multicast route; bound to the wildcard
    // address it has no interface to send the group to.
    drop_multicast_route(&lan);
    let data = random(4 << 20, 22);
    let sender = ("0.0.0.0:6101", "10.77.0.1:6101");
    let (sent, stderr, _) = stream(&lan, 2, "239.77.1.2:7101", sender, &|_| vec![], &data, None);
    let d = &sent["delivery"];
    assert_eq!(d["mode"], "unicast", "{sent}");
    let why = d["fallback"].as_str().expect("a fallback reason");
    assert!(why.contains("239.77.1.2"), "{why}");
    assert!(stderr.contains("falling back to unicast"), "{stderr}");
    let t = &sent["transport"];
    assert_eq!(
        t["fanout_copies"].as_u64().unwrap(),
        2 * t["data_segments"].as_u64().unwrap(),
        "{t}"
    );
    eprintln!("fallback: {why}");
}

/// Streams from host 0 to hosts 1 and 2 while host 3 sends junk to the same
/// group from another source; receiver 1 joins for `source` (host 0) only,
/// receiver 2 the whole group. Checks that the junk reached receiver 2 only.
fn check_source_specific_join(
    lan: &LanTopology,
    group: &'static str,
    sender: (&str, &str),
    source: &'static str,
    junk_bind: String,
    seed: u64,
) {
    // Host 3 sends junk to the group for 1.5 s, from another source.
    let junk = lan
        .host(3)
        .netns()
        .spawn_in(move || {
            let s = UdpSocket::bind(&junk_bind).unwrap();
            if s.local_addr().unwrap().is_ipv4() {
                s.set_multicast_ttl_v4(1).unwrap();
            }
            let mut sent = 0u32;
            for _ in 0..1500 {
                if s.send_to(b"not fanout", group).is_ok() {
                    sent += 1;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            sent
        })
        .expect("junk sender");
    let data = random(4 << 20, seed);
    let ssm = move |i: usize| {
        if i == 1 {
            vec!["--source", source]
        } else {
            vec![]
        }
    };
    let (sent, _, reports) = stream(lan, 2, group, sender, &ssm, &data, None);
    assert!(junk.join().unwrap() > 0, "junk was sent");
    assert_eq!(sent["delivery"]["mode"], "multicast", "{sent}");
    let dropped = |r: &serde_json::Value| -> u64 {
        r["drops"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum()
    };
    // Both count the same protocol noise (if any); only the any-source
    // receiver also counts the junk.
    let (ssm_drops, any_drops) = (dropped(&reports[0]), dropped(&reports[1]));
    eprintln!("dropped input: source-specific {ssm_drops}, any-source {any_drops}");
    assert!(
        any_drops >= ssm_drops + 10,
        "junk reached the any-source receiver only: {} / {}",
        reports[0]["drops"],
        reports[1]["drops"]
    );
}

#[test]
fn a_source_specific_receiver_ignores_other_sources() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let lan = LanTopology::new(4).expect("LAN");
    check_source_specific_join(
        &lan,
        "232.77.1.3:7102",
        ("10.77.0.1:6102", "10.77.0.1:6102"),
        "10.77.0.1",
        "10.77.0.4:0".to_string(),
        23,
    );
}

/// The same over IPv6 (MLDv2, `MCAST_JOIN_SOURCE_GROUP`), in the SSM range
/// ff3x::/96 (RFC 4607 §1).
#[test]
fn an_ipv6_source_specific_receiver_ignores_other_sources() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let config = LanConfig {
        ipv6: true,
        ..LanConfig::default()
    };
    let lan = LanTopology::with_config(4, &config).expect("LAN");
    let me = lan.host(0).ipv6().expect("IPv6 address");
    assert_eq!(me.to_string(), "fd77::1", "the source named below");
    let junk = lan.host(3).ipv6().expect("IPv6 address");
    let addr = format!("[{me}]:6105");
    check_source_specific_join(
        &lan,
        "[ff35::8000:77]:7105",
        (&addr, &addr),
        "fd77::1",
        format!("[{junk}]:0"),
        26,
    );
}

#[test]
fn a_stream_is_multicast_to_an_ipv6_group() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let config = LanConfig {
        ipv6: true,
        ..LanConfig::default()
    };
    let lan = LanTopology::with_config(3, &config).expect("LAN");
    let me = lan.host(0).ipv6().expect("IPv6 address");
    let addr = format!("[{me}]:6103");
    let data = random(4 << 20, 24);
    let (sent, _, _) = stream(
        &lan,
        2,
        "[ff15::77]:7103",
        (&addr, &addr),
        &|_| vec![],
        &data,
        None,
    );
    assert_eq!(sent["delivery"]["mode"], "multicast", "{sent}");
    assert_eq!(sent["delivery"]["group"], "[ff15::77]:7103");
    assert_eq!(sent["transport"]["fanout_copies"], 0);
}

#[test]
fn a_multicast_route_lost_mid_stream_falls_back_to_unicast() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let lan = LanTopology::new(3).expect("LAN");
    let data = random(4 << 20, 25);
    let sender = ("0.0.0.0:6104", "10.77.0.1:6104");
    let lose_route = || drop_multicast_route(&lan);
    let (sent, stderr, _) = stream(
        &lan,
        2,
        "239.77.1.4:7104",
        sender,
        &|_| vec![],
        &data,
        Some(&lose_route),
    );
    let d = &sent["delivery"];
    assert_eq!(d["mode"], "unicast", "{sent}");
    let why = d["fallback"].as_str().expect("a fallback reason");
    assert!(
        why.contains("sending to multicast group 239.77.1.4:7104 failed"),
        "{why}"
    );
    assert!(stderr.contains("falling back to unicast"), "{stderr}");
    let t = &sent["transport"];
    let copies = t["fanout_copies"].as_u64().unwrap();
    let segments = t["data_segments"].as_u64().unwrap();
    // The first half went to the group, the rest to each receiver.
    assert!(
        copies > 0 && copies <= 2 * (segments - 500),
        "both modes were used: {t}"
    );
    eprintln!("mid-stream fallback: {why}; {copies} unicast copies of {segments} segments");
}
