//! Two-level ACK merger trees over real IP multicast (MCTCP), in a bridged LAN
//! of network namespaces this test creates (10.77.0.0/24, TTL 1; nothing
//! reaches the root namespace):
//!
//! sender (host 0) → M0 (host 1) → {M1 (host 2), M2 (host 3)} → 8 receivers
//! each (hosts 4..=19). Receivers report through `fanout recv --merger M1
//! --merger-fallback M0` (the sender ends every chain); M1 and M2 run with
//! `fanout merge --parent M0 --fallback SENDER`.
//!
//! * All 16 files arrive identical; the sender's feedback packet count is
//!   compared with what the receivers sent.
//! * M1 is killed (by PID) mid-transfer: its 8 receivers re-attach to M0
//!   and all 16 still complete.
//! * A receiver joining M2 after the start of the file was released gets
//!   the missed prefix by catch-up from the sender and the whole file.
//!
//! File size: 16 MiB, or 256 MiB with FANOUT_BIG_TESTS=1. Every wait is
//! bounded; the LAN guard kills what runs in it and removes it. Skipped
//! without namespaces unless `FANOUT_NETNS_REQUIRED=1`.

#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

mod common;
use common::{finish, spawn};
use fanout_netns::{require_netns, LanTopology, NsChild};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const GROUP: &str = "239.77.0.11:7060";
const GROUP_IP: Ipv4Addr = Ipv4Addr::new(239, 77, 0, 11);
const SENDER: &str = "10.77.0.1:6060";
const HOSTS: usize = 20;
const RECEIVERS: usize = 16;
/// The sender's `--window-mib`: its send buffer, which a late joiner's
/// start must be beyond.
const WINDOW_MIB: u64 = 2;

fn file_size() -> usize {
    if std::env::var("FANOUT_BIG_TESTS").is_ok_and(|v| v == "1") {
        256 << 20
    } else {
        16 << 20
    }
}

/// The generous bound on any one process: scaled with the file.
fn limit() -> Duration {
    Duration::from_secs(60 + (file_size() >> 20) as u64)
}

fn merger_addr(lan: &LanTopology, m: usize) -> String {
    format!("{}:6061", lan.host(1 + m).ipv4())
}

/// Receiver `i` (0-based) runs on host 4 + i, under M1 (i < 8) or M2.
fn receiver_host(i: usize) -> usize {
    4 + i
}

fn receiver_merger(i: usize) -> usize {
    1 + i / 8
}

fn part_len(out: &Path) -> u64 {
    let mut p = out.as_os_str().to_owned();
    p.push(".part");
    std::fs::metadata(PathBuf::from(p))
        .or_else(|_| std::fs::metadata(out))
        .map_or(0, |m| m.len())
}

struct Tree {
    lan: LanTopology,
    dir: PathBuf,
    data: Vec<u8>,
    src: PathBuf,
    /// M0, M1, M2.
    mergers: Vec<Option<NsChild>>,
    receivers: Vec<Option<NsChild>>,
}

impl Tree {
    /// The LAN, the file and the mergers; `m2_children` is how many
    /// children M2 waits for before joining upstream.
    fn new(tag: &str, m2_children: usize) -> Option<Tree> {
        if let Some(reason) = require_netns() {
            eprintln!("skipped: {reason}");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("fanout-mtree-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("payload.bin");
        let mut data = vec![0u8; file_size()];
        fanout_core::Rng::new(61).fill(&mut data);
        std::fs::File::create(&src)
            .unwrap()
            .write_all(&data)
            .unwrap();
        let lan = LanTopology::new(HOSTS).expect("LAN");
        let m0 = merger_addr(&lan, 0);
        let mut mergers = Vec::new();
        for m in 0..3 {
            let listen = merger_addr(&lan, m);
            let children = match m {
                0 => "2".to_string(),
                1 => "8".to_string(),
                _ => m2_children.to_string(),
            };
            let (parent, fallback): (&str, &[&str]) = if m == 0 {
                (SENDER, &[])
            } else {
                (&m0, &["--fallback", SENDER])
            };
            let mut args = vec![
                "merge",
                "--listen",
                &listen,
                "--parent",
                parent,
                "--children",
                &children,
                // Join upstream by count only: a slow spawn must not make
                // a child late (late children are tested separately).
                "--join-ms",
                "20000",
                "--json",
                "--quiet",
            ];
            args.extend_from_slice(fallback);
            mergers.push(Some(spawn(&lan, 1 + m, &args)));
        }
        Some(Tree {
            lan,
            dir,
            data,
            src,
            mergers,
            receivers: (0..RECEIVERS).map(|_| None).collect(),
        })
    }

    fn out(&self, i: usize) -> PathBuf {
        self.dir.join(format!("got{i}.bin"))
    }

    fn start_receiver(&mut self, i: usize) {
        let host = receiver_host(i);
        let merger = merger_addr(&self.lan, receiver_merger(i));
        let m0 = merger_addr(&self.lan, 0);
        let out = self.out(i);
        let extra = ["--merger", &merger, "--merger-fallback", &m0];
        let c = common::spawn_group_receiver(&self.lan, host, GROUP, SENDER, &out, &extra);
        self.receivers[i] = Some(c);
    }

    fn start_sender(&self) -> NsChild {
        spawn(
            &self.lan,
            0,
            &[
                "send",
                self.src.to_str().unwrap(),
                "--group",
                GROUP,
                "--bind",
                SENDER,
                // The tree is one member: M0.
                "--wait-for",
                "1",
                "--window-mib",
                &WINDOW_MIB.to_string(),
                "--json",
                "--quiet",
            ],
        )
    }

    fn wait_group(&self, n: usize) {
        let joined = self
            .lan
            .wait_for_members(IpAddr::V4(GROUP_IP), n, Duration::from_secs(10))
            .expect("bridge");
        assert_eq!(joined.len(), n, "{joined:?}");
    }

    /// Waits until every receiver in `which` wrote at least `bytes`.
    fn wait_progress(&self, which: impl Fn(usize) -> bool, bytes: u64) {
        let t0 = Instant::now();
        while (0..RECEIVERS)
            .filter(|&i| which(i) && self.receivers[i].is_some())
            .any(|i| part_len(&self.out(i)) < bytes)
        {
            if t0.elapsed() >= limit() {
                let lens: Vec<u64> = (0..RECEIVERS).map(|i| part_len(&self.out(i))).collect();
                panic!("receivers never got past {bytes} bytes: {lens:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Collects the receivers' reports and checks every file; returns the
    /// reports.
    fn check_receivers(&mut self) -> Vec<serde_json::Value> {
        let mut reports = Vec::new();
        for i in 0..RECEIVERS {
            let c = self.receivers[i].as_mut().expect("started");
            let what = format!("receiver {i} (host {})", receiver_host(i));
            let r = finish(c, &what, limit());
            assert_eq!(r["verified"], true, "{what}: {r}");
            assert!(
                std::fs::read(self.out(i)).unwrap() == self.data,
                "{what}: file differs"
            );
            reports.push(r);
        }
        reports
    }

    fn finish_merger(&mut self, m: usize) -> serde_json::Value {
        let c = self.mergers[m].as_mut().expect("running");
        finish(c, &format!("merger M{m}"), limit())
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn acks_sent(reports: &[serde_json::Value]) -> u64 {
    reports
        .iter()
        .map(|r| r["transport"]["acks_sent"].as_u64().unwrap())
        .sum()
}

#[test]
fn sixteen_receivers_under_two_merger_levels_get_the_file() {
    let Some(mut t) = Tree::new("all", 8) else {
        return;
    };
    for i in 0..RECEIVERS {
        t.start_receiver(i);
    }
    t.wait_group(RECEIVERS);
    let mut sender = t.start_sender();
    let sent = finish(&mut sender, "sender", limit());
    let reports = t.check_receivers();
    let merged: Vec<serde_json::Value> = (0..3).map(|m| t.finish_merger(m)).collect();
    for (m, r) in merged.iter().enumerate() {
        let want = if m == 0 { 2 } else { 8 };
        assert_eq!(r["transport"]["children_joined"], want, "M{m}: {r}");
    }
    assert_eq!(sent["transport"]["members_joined"], 1, "{sent}");
    let receiver_acks = acks_sent(&reports);
    let at_sender = sent["transport"]["acks_received"].as_u64().unwrap();
    let m0_out = merged[0]["transport"]["acks_out"].as_u64().unwrap();
    let m12_out: u64 = merged[1..]
        .iter()
        .map(|r| r["transport"]["acks_out"].as_u64().unwrap())
        .sum();
    eprintln!(
        "{} MiB to 16 receivers through 2 merger levels: {:.2} s ({:.0} Mbit/s); receivers \
         sent {receiver_acks} ACKs, M1+M2 {m12_out}, M0 {m0_out}, the sender received \
         {at_sender} ({:.1}x fewer)",
        file_size() >> 20,
        sent["seconds"].as_f64().unwrap(),
        sent["goodput_bps"].as_f64().unwrap() / 1e6,
        receiver_acks as f64 / at_sender.max(1) as f64,
    );
    assert!(
        at_sender <= m0_out && 4 * at_sender <= receiver_acks,
        "sender {at_sender}, M0 {m0_out}, receivers {receiver_acks}"
    );
}

#[test]
fn a_killed_merger_s_subtree_reattaches_and_completes() {
    let Some(mut t) = Tree::new("kill", 8) else {
        return;
    };
    for i in 0..RECEIVERS {
        t.start_receiver(i);
    }
    t.wait_group(RECEIVERS);
    let mut sender = t.start_sender();
    // Kill M1 once its receivers have a quarter of the file.
    let quarter = (file_size() / 4) as u64;
    t.wait_progress(|i| receiver_merger(i) == 1, quarter);
    let progress = (0..8).map(|i| part_len(&t.out(i))).min().unwrap();
    assert!(
        progress < file_size() as u64 * 3 / 4,
        "the transfer was nearly over before the kill: {progress}"
    );
    let killed = Instant::now();
    t.mergers[1].as_mut().unwrap().kill().expect("kill M1");
    t.mergers[1] = None;
    let sent = finish(&mut sender, "sender", limit());
    let after = killed.elapsed();
    let reports = t.check_receivers();
    for (i, r) in reports.iter().enumerate().take(8) {
        assert_eq!(r["transport"]["reattaches"], 1, "receiver {i}: {r}");
    }
    let m0 = t.finish_merger(0);
    let m2 = t.finish_merger(2);
    assert_eq!(m0["transport"]["children_resumed"], 8, "M0: {m0}");
    assert_eq!(m2["transport"]["reattaches"], 0, "M2: {m2}");
    assert_eq!(sent["transport"]["members_left"], 0, "{sent}");
    eprintln!(
        "{} MiB to 16 receivers, M1 killed at {:.1} MiB: its 8 receivers re-attached to M0 \
         ({} resumed, M1 {}); sender done {:.2} s after the kill, {:.2} s in all",
        file_size() >> 20,
        progress as f64 / (1 << 20) as f64,
        m0["transport"]["children_resumed"],
        if m0["transport"]["children_evicted"] == 1 {
            "evicted"
        } else {
            "expired"
        },
        after.as_secs_f64(),
        sent["seconds"].as_f64().unwrap(),
    );
}

#[test]
fn a_late_receiver_behind_a_merger_gets_the_whole_file() {
    // M2 joins upstream with 7 children; the 8th arrives after the start
    // of the file left the sender's buffer.
    let Some(mut t) = Tree::new("late", 7) else {
        return;
    };
    let late = RECEIVERS - 1;
    for i in 0..late {
        t.start_receiver(i);
    }
    t.wait_group(late);
    let mut sender = t.start_sender();
    let beyond = (2 * WINDOW_MIB) << 20;
    t.wait_progress(|i| i != late, beyond);
    let progress = (0..late).map(|i| part_len(&t.out(i))).min().unwrap();
    assert!(
        progress < file_size() as u64 * 3 / 4,
        "the transfer was nearly over before the join: {progress}"
    );
    t.start_receiver(late);
    let sent = finish(&mut sender, "sender", limit());
    let reports = t.check_receivers();
    let r = &reports[late]["transport"];
    let start = r["start_offset"].as_u64().expect("late joiner report");
    assert!(start >= beyond, "started beyond the send buffer: {r}");
    assert_eq!(r["catch_up_bytes"].as_u64(), Some(start), "{r}");
    eprintln!(
        "{} MiB: a receiver joined M2 at {:.1} MiB of the others' progress, start offset {}, \
         prefix by catch-up from the sender; sender {:.2} s, catch-ups {}",
        file_size() >> 20,
        progress as f64 / (1 << 20) as f64,
        start,
        sent["seconds"].as_f64().unwrap(),
        sent["transport"]["catch_ups_completed"],
    );
}
