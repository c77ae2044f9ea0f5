//! `fanout media` over real IP multicast in a bridged LAN of network
//! namespaces this test creates (10.77.0.0/24, 239.77.0.9; nothing reaches
//! the root namespace): a live MPEG-TS stream of about 1.5 Mbit/s from
//! ffmpeg to three receivers, one of them behind a 1 Mbit/s link. Every
//! receiver reports; the sender's rate follows the least report, so the
//! slow receiver is not flooded and the sender drops what the rate cannot
//! carry from its own queue; the fast receivers lose nothing of what was
//! sent. Every wait is bounded; the LAN guard kills what runs in it and
//! removes it, panics too.

mod common;
#[path = "common/ffmpeg.rs"]
mod ffmpeg;
use common::{finish, Scratch, BIN};
use fanout_netns::{require_netns, LanTopology, LinkDirection, NsChild, RateLimit};
use std::process::{Command, Stdio};
use std::time::Duration;

const GROUP: &str = "239.77.0.9:5004";
/// Seconds of media.
const SECONDS: u32 = 20;

/// Whether to skip: no namespaces, or no ffmpeg (each says why).
fn skip() -> bool {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return true;
    }
    !ffmpeg::ffmpeg_installed()
}

fn receiver(lan: &LanTopology, host: usize, out: &std::path::Path) -> NsChild {
    let ip = lan.host(host).ipv4().to_string();
    common::spawn(
        lan,
        host,
        &[
            "media",
            "recv",
            "--group",
            GROUP,
            "--interface",
            &ip,
            "--json",
            "--idle-timeout",
            "4",
            "-o",
            out.to_str().unwrap(),
        ],
    )
}

#[test]
fn the_sender_follows_its_slowest_receiver_over_multicast() {
    if skip() {
        return;
    }
    let scratch = Scratch::new("media-netns");
    let input = scratch.path().join("in.ts");
    let constant = ["-minrate", "1400k", "-maxrate", "1400k", "-bufsize", "700k"];
    ffmpeg::make_test_stream(&input, SECONDS, "640x360", "1400k", &constant, None);
    let lan = LanTopology::new(4).expect("LAN");
    // Receiver 3's link carries 1 Mbit/s.
    lan.set_rate_limit(3, LinkDirection::Downlink, Some(RateLimit::mbit(1)))
        .expect("tbf");
    let outs: Vec<_> = (1..=3)
        .map(|i| scratch.path().join(format!("out{i}.ts")))
        .collect();
    let mut rx: Vec<_> = (1..=3).map(|i| receiver(&lan, i, &outs[i - 1])).collect();
    let group_ip = GROUP.split(':').next().unwrap().parse().unwrap();
    let members = lan
        .wait_for_members(group_ip, 3, Duration::from_secs(5))
        .expect("bridge state");
    assert_eq!(members.len(), 3);
    // The encoder, in real time, into the sender's stdin.
    let mut feed = Command::new("ffmpeg")
        .args(["-hide_banner", "-v", "error", "-re", "-i"])
        .arg(&input)
        .args(["-c", "copy", "-f", "mpegts", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stats = scratch.path().join("stats.jsonl");
    let ip = lan.host(0).ipv4().to_string();
    let mut cmd = lan.host(0).netns().exec(BIN);
    cmd.args(["media", "send", "--group", GROUP, "--interface", &ip])
        .args(["--initial-rate", "500k", "--json", "--quiet", "--stats"])
        .arg(&stats)
        .stdin(Stdio::from(feed.stdout.take().unwrap()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut tx = lan.host(0).netns().spawn(cmd).expect("spawn sender");
    let sent = finish(
        &mut tx,
        "sender",
        Duration::from_secs(u64::from(SECONDS) + 30),
    );
    let _ = feed.wait();
    eprintln!("sender: {sent}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&stats)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let rates: Vec<f64> = lines
        .iter()
        .map(|l| l["allowed_rate_bps"].as_f64().unwrap() / 1000.0)
        .collect();
    eprintln!("allowed rate, kbit/s, each second: {rates:.0?}");
    // Every receiver reported, and the reports moved the rate.
    assert_eq!(sent["receivers"], 3, "{sent}");
    assert!(sent["rate_reports"].as_u64().unwrap() >= 3 * u64::from(SECONDS) / 5);
    assert!(rates.iter().any(|&r| (r - 500.0).abs() > 1.0), "{rates:?}");
    let input_bytes = std::fs::metadata(&input).unwrap().len();
    let sent_bytes = sent["payload_bytes"].as_u64().unwrap();
    let mut got = Vec::new();
    for (i, r) in rx.iter_mut().enumerate() {
        let report = finish(r, "receiver", Duration::from_secs(20));
        eprintln!("receiver {}: {report}", i + 1);
        got.push(report);
    }
    // The fast receivers got everything sent, in order.
    for r in &got[..2] {
        assert_eq!(r["lost"], 0, "{r}");
        assert_eq!(r["payload_bytes"].as_u64().unwrap(), sent_bytes, "{r}");
    }
    // The sender kept to what the slow one took: it sent less than the
    // stream (dropping the rest from its queue), and the slow link, which
    // carries 1 Mbit/s, lost a small share of it.
    assert!(sent["queue_drops"].as_u64().unwrap() > 0, "{sent}");
    assert!(
        sent_bytes < input_bytes * 9 / 10,
        "{sent_bytes} of {input_bytes}"
    );
    let slow = &got[2];
    let (lost, expected) = (
        slow["lost"].as_i64().unwrap() as f64,
        slow["expected"].as_u64().unwrap() as f64,
    );
    eprintln!("slow receiver lost {:.1}%", 100.0 * lost / expected);
    assert!(lost / expected < 0.2, "{slow}");
}

/// The same over IPv6 multicast (ff15::79 in an IPv6 LAN of namespaces):
/// two receivers join with MLD, take every packet of a 5 s stream and
/// report, and their reports move the sender's rate.
#[test]
fn media_is_multicast_to_an_ipv6_group() {
    if skip() {
        return;
    }
    const GROUP6: &str = "[ff15::79]:5004";
    let scratch = Scratch::new("media-netns-v6");
    let input = scratch.path().join("in.ts");
    ffmpeg::make_test_stream(&input, 5, "320x180", "500k", &[], None);
    let config = fanout_netns::LanConfig {
        ipv6: true,
        ..fanout_netns::LanConfig::default()
    };
    let lan = LanTopology::with_config(3, &config).expect("LAN");
    let outs: Vec<_> = (1..=2)
        .map(|i| scratch.path().join(format!("out{i}.ts")))
        .collect();
    let mut rx: Vec<_> = (1..=2)
        .map(|i| {
            let out = outs[i - 1].to_str().unwrap();
            common::spawn(
                &lan,
                i,
                &[
                    "media",
                    "recv",
                    "--group",
                    GROUP6,
                    "--json",
                    "--idle-timeout",
                    "3",
                    "-o",
                    out,
                ],
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut feed = Command::new("ffmpeg")
        .args(["-hide_banner", "-v", "error", "-re", "-i"])
        .arg(&input)
        .args(["-c", "copy", "-f", "mpegts", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut cmd = lan.host(0).netns().exec(BIN);
    cmd.args(["media", "send", "--group", GROUP6])
        .args(["--initial-rate", "2M", "--json", "--quiet"])
        .stdin(Stdio::from(feed.stdout.take().unwrap()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut tx = lan.host(0).netns().spawn(cmd).expect("spawn sender");
    let sent = finish(&mut tx, "sender", Duration::from_secs(40));
    let _ = feed.wait();
    eprintln!("sender: {sent}");
    assert_eq!(sent["receivers"], 2, "{sent}");
    assert!(sent["rate_reports"].as_u64().unwrap() > 0, "{sent}");
    let sent_bytes = sent["payload_bytes"].as_u64().unwrap();
    assert!(sent_bytes > 0);
    for r in rx.iter_mut() {
        let report = finish(r, "receiver", Duration::from_secs(20));
        eprintln!("receiver: {report}");
        assert_eq!(report["lost"], 0, "{report}");
        assert_eq!(
            report["payload_bytes"].as_u64().unwrap(),
            sent_bytes,
            "{report}"
        );
    }
}
