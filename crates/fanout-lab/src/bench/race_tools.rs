//! Command lines of the overlay race: fanout's overlay (ROMA) against one
//! kernel TCP download per receiver from the sender and against
//! BitTorrent, on the same star.
//!
//! * `overlay`: `fanout overlay source` on the sender, `fanout overlay
//!   node` on every receiver, joined as the planned tree says
//!   ([`super::overlay_tree`]); a relay listens for its children and stays
//!   until they hang up. A receiver is done when its file is in place (a
//!   node writes it once decoded and verified, then keeps relaying).
//! * `tcp_unicast`: `python3 -m http.server` on the sender, `curl` on
//!   every receiver at once; done when curl exits.
//! * `bittorrent`: a private torrent of the file (`mktorrent`, made before
//!   the clock starts), `opentracker` with its info-hash whitelisted and a
//!   seeding `aria2c` on the sender, `aria2c` on every receiver with DHT,
//!   local peer discovery and peer exchange off, re-announcing every
//!   [`BT_ANNOUNCE_S`] s and seeding on until the bench stops it; done when
//!   aria2c's download-complete hook writes its marker.

use super::suite::{ToolKind, ToolSpec, PSK_PLACEHOLDER};
use super::tool::{s, shell_words, DoneBy, Endpoints, Plan, ReceiverCmd};
use super::{overlay_tree, scenario::SENDER};
#[cfg(test)]
use overlay_tree::StarLink;
use std::path::Path;

/// Port of the overlay's source and relays.
pub const OVERLAY_PORT: u16 = 7100;
/// Port of the HTTP server of `tcp_unicast`.
pub const HTTP_PORT: u16 = 8000;
/// Port of the BitTorrent tracker.
pub const TRACKER_PORT: u16 = 6969;
/// Seconds between a BitTorrent client's announces.
pub const BT_ANNOUNCE_S: u32 = 2;
/// log2 of the torrent's piece size (256 KiB).
const BT_PIECE_LOG2: u32 = 18;
/// The torrent, in the run directory.
const TORRENT: &str = "payload.torrent";
/// aria2c's download-complete hook, in the run directory.
const BT_HOOK: &str = "bt-done";
/// What the hook appends to the downloaded file's path for its marker.
const BT_MARKER_SUFFIX: &str = ".done";

/// aria2c's options shared by the seed and the leechers: no peer sources
/// but the tracker, short announces, seeding until stopped, quiet.
fn aria2c_common() -> Vec<String> {
    [
        "--enable-dht=false",
        "--enable-dht6=false",
        "--bt-enable-lpd=false",
        "--enable-peer-exchange=false",
        "--disable-ipv6=true",
        "--seed-ratio=0.0",
        "--file-allocation=none",
        "--summary-interval=0",
        "--console-log-level=warn",
    ]
    .iter()
    .map(s)
    .chain([format!("--bt-tracker-interval={BT_ANNOUNCE_S}")])
    .collect()
}

/// The commands of a race tool (`None` for the other kinds).
pub fn plan(tool: &ToolSpec, at: &Endpoints<'_>) -> Option<Plan> {
    let psk = at.psk.display().to_string();
    let with_psk = |a: &String| a.replace(PSK_PLACEHOLDER, &psk);
    let name = at.source.file_name().map_or_else(
        || std::ffi::OsString::from("file"),
        std::ffi::OsStr::to_os_string,
    );
    let src = at.source.display().to_string();
    let src_dir = at
        .source
        .parent()
        .unwrap_or(Path::new("/"))
        .display()
        .to_string();
    let mut plan = match tool.kind {
        ToolKind::Overlay => overlay(tool, at, &src, &psk),
        ToolKind::TcpUnicast => {
            let url = format!(
                "http://{}:{HTTP_PORT}/{}",
                at.sender_ip,
                name.to_string_lossy()
            );
            let sender = vec![
                s("python3"),
                s("-m"),
                s("http.server"),
                s(HTTP_PORT),
                s("--bind"),
                s(at.sender_ip),
                s("--directory"),
                src_dir,
            ];
            let receivers = at
                .receiver_dirs
                .iter()
                .map(|dir| {
                    let output = dir.join(&name);
                    ReceiverCmd {
                        argv: vec![
                            s("curl"),
                            s("-sS"),
                            s("--fail"),
                            s("-o"),
                            output.display().to_string(),
                            url.clone(),
                        ],
                        output,
                        done_by: DoneBy::Exit,
                    }
                })
                .collect();
            base(sender, receivers, HTTP_PORT)
        }
        ToolKind::Bittorrent => bittorrent(at, &src_dir, &name),
        _ => return None,
    };
    plan.sender.extend(tool.args.iter().map(with_psk));
    for r in &mut plan.receivers {
        r.argv.extend(tool.receiver_args.iter().map(with_psk));
    }
    Some(plan)
}

/// A plan whose sender starts first and serves on `port` until stopped.
fn base(sender: Vec<String>, receivers: Vec<ReceiverCmd>, port: u16) -> Plan {
    Plan {
        sender,
        start_order: (0..receivers.len()).collect(),
        receivers,
        setup: None,
        sender_port: Some(port),
        sender_serves: true,
        sender_may_leave: false,
        tree: None,
    }
}

fn overlay(tool: &ToolSpec, at: &Endpoints<'_>, src: &str, psk: &str) -> Plan {
    let tree = overlay_tree::plan(at.links, tool.max_children);
    // Host 0 is the sender, host i receiver i - 1.
    let ip = |h: usize| {
        if h == 0 {
            at.sender_ip
        } else {
            at.receiver_ips[h - 1]
        }
    };
    let sender = vec![
        s("fanout"),
        s("overlay"),
        s("source"),
        s(src),
        s("--listen"),
        format!("{}:{OVERLAY_PORT}", at.sender_ip),
        s("--psk-file"),
        s(psk),
        s("--children"),
        s(tree.tree.children(0).len()),
    ];
    let receivers = at
        .receiver_dirs
        .iter()
        .enumerate()
        .map(|(i, dir)| {
            let h = i + 1;
            // An unreached host (a link of no rate) joins the source.
            let parent = tree.tree.parent[h].unwrap_or(0);
            let mut argv = vec![
                s("fanout"),
                s("overlay"),
                s("node"),
                s("--join"),
                format!("{}:{OVERLAY_PORT}", ip(parent)),
                s("--psk-file"),
                s(psk),
                s("-o"),
                dir.display().to_string(),
            ];
            let children = tree.tree.children(h).len();
            if children > 0 {
                argv.extend([
                    s("--listen"),
                    format!("{}:{OVERLAY_PORT}", ip(h)),
                    s("--children"),
                    s(children),
                ]);
            }
            ReceiverCmd {
                argv,
                output: dir.join(at.source.file_name().unwrap_or_default()),
                done_by: DoneBy::FileAppears,
            }
        })
        .collect();
    Plan {
        sender,
        receivers,
        setup: None,
        sender_port: Some(OVERLAY_PORT),
        sender_serves: false,
        sender_may_leave: true,
        start_order: tree
            .tree
            .order
            .iter()
            .filter(|&&h| h > 0)
            .map(|h| h - 1)
            .collect(),
        tree: Some(tree),
    }
}

fn bittorrent(at: &Endpoints<'_>, src_dir: &str, name: &std::ffi::OsStr) -> Plan {
    let run = at.run_dir;
    let torrent = run.join(TORRENT).display().to_string();
    let hook = run.join(BT_HOOK).display().to_string();
    let sender_dir = run.join(SENDER).display().to_string();
    let q = |x: &str| shell_words(&[x.to_owned()]);
    let announce = format!("http://{}:{TRACKER_PORT}/announce", at.sender_ip);
    // The tracker serves whitelisted info-hashes only (Debian's build).
    let setup = format!(
        "set -e\n\
         mkdir -p {sd}\n\
         mktorrent -p -l {BT_PIECE_LOG2} -a {a} -o {t} {src} >/dev/null\n\
         aria2c -S {t} | sed -n 's/^Info Hash: //p' >{sd}/whitelist.txt\n\
         test -s {sd}/whitelist.txt\n\
         printf '#!/bin/sh\\ntouch \"$3{BT_MARKER_SUFFIX}\"\\n' >{h}\n\
         chmod +x {h}\n",
        sd = q(&sender_dir),
        a = q(&announce),
        t = q(&torrent),
        src = q(&at.source.display().to_string()),
        h = q(&hook),
    );
    let mut seed = vec![
        s("aria2c"),
        format!("--dir={src_dir}"),
        s("--bt-seed-unverified=true"),
    ];
    seed.extend(aria2c_common());
    seed.push(torrent.clone());
    // Tracker and seed in one script that stops both on SIGTERM.
    let script = format!(
        "opentracker -i {ip} -p {TRACKER_PORT} -P {TRACKER_PORT} -d . -w whitelist.txt & t=$!\n\
         {seed} & a=$!\n\
         trap 'kill $t $a 2>/dev/null; wait' TERM\n\
         wait\n",
        ip = at.sender_ip,
        seed = shell_words(&seed),
    );
    let sender = vec![s("sh"), s("-c"), script];
    let receivers = at
        .receiver_dirs
        .iter()
        .map(|dir| {
            let output = dir.join(name);
            let mut argv = vec![
                s("aria2c"),
                format!("--dir={}", dir.display()),
                format!("--on-bt-download-complete={hook}"),
            ];
            argv.extend(aria2c_common());
            argv.push(torrent.clone());
            let mut marker = output.clone().into_os_string();
            marker.push(BT_MARKER_SUFFIX);
            ReceiverCmd {
                argv,
                output,
                done_by: DoneBy::Marker(marker.into()),
            }
        })
        .collect();
    Plan {
        setup: Some(setup),
        ..base(sender, receivers, TRACKER_PORT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::tool::plan as plan_of;
    use std::net::Ipv4Addr;
    use std::path::PathBuf;

    const M: u64 = 1_000_000;

    fn at<'a>(ips: &'a [Ipv4Addr], dirs: &'a [PathBuf], links: &'a [StarLink]) -> Endpoints<'a> {
        Endpoints {
            source: Path::new("/w/payload.bin"),
            sender_ip: Ipv4Addr::new(10, 0, 0, 1),
            receiver_ips: ips,
            receiver_dirs: dirs,
            psk: Path::new("/w/run/session.psk"),
            run_dir: Path::new("/w/run"),
            links,
        }
    }

    fn three() -> ([Ipv4Addr; 3], [PathBuf; 3]) {
        (
            [2, 3, 4].map(|x| Ipv4Addr::new(10, 0, 0, x)),
            ["r1", "r2", "r3"].map(|r| PathBuf::from(format!("/w/run/{r}/out"))),
        )
    }

    fn has(argv: &[String], pair: [&str; 2]) -> bool {
        argv.windows(2).any(|w| w == pair)
    }

    #[test]
    fn overlay_nodes_join_their_parents_in_the_planned_tree() {
        let (ips, dirs) = three();
        // r3 (10 Mbit/s) is slowest: the chain is snd -> r2 -> r1 -> r3.
        let rates = [100 * M, 50 * M, 100 * M, 10 * M].map(StarLink::clean);
        let p = plan_of(
            &ToolSpec::new("o", ToolKind::Overlay, "r"),
            &at(&ips, &dirs, &rates),
        );
        assert!(has(&p.sender, ["--listen", "10.0.0.1:7100"]));
        assert!(has(&p.sender, ["--children", "1"]));
        assert!(has(&p.sender, ["--psk-file", "/w/run/session.psk"]));
        assert!(has(&p.receivers[1].argv, ["--join", "10.0.0.1:7100"]));
        assert!(has(&p.receivers[0].argv, ["--join", "10.0.0.3:7100"]));
        assert!(has(&p.receivers[0].argv, ["--listen", "10.0.0.2:7100"]));
        assert!(has(&p.receivers[2].argv, ["--join", "10.0.0.2:7100"]));
        // A leaf neither listens nor waits for children.
        assert!(!p.receivers[2].argv.iter().any(|a| a == "--listen"));
        assert_eq!(p.start_order, [1, 0, 2]);
        assert_eq!(
            p.receivers[2].output,
            Path::new("/w/run/r3/out/payload.bin")
        );
        assert_eq!(p.receivers[2].done_by, DoneBy::FileAppears);
        let tree = p.tree.unwrap();
        assert_eq!(tree.predicted_bps[1..], [50e6, 100e6, 10e6]);
        assert_eq!(
            (p.sender_port, p.sender_serves, p.sender_may_leave),
            (Some(OVERLAY_PORT), false, true)
        );
        // A bound of two children: both fast hosts below the source.
        let mut wide = ToolSpec::new("o", ToolKind::Overlay, "r");
        wide.max_children = Some(2);
        let p = plan_of(&wide, &at(&ips, &dirs, &rates));
        assert!(has(&p.sender, ["--children", "2"]));
    }

    #[test]
    fn tcp_unicast_downloads_from_the_senders_server() {
        let (ips, dirs) = three();
        let rates = [100 * M; 4].map(StarLink::clean);
        let p = plan_of(
            &ToolSpec::new("t", ToolKind::TcpUnicast, "r"),
            &at(&ips, &dirs, &rates),
        );
        assert_eq!(p.sender[..3], ["python3", "-m", "http.server"]);
        assert!(has(&p.sender, ["--directory", "/w"]));
        assert_eq!(
            p.receivers[0].argv.last().unwrap(),
            "http://10.0.0.1:8000/payload.bin"
        );
        assert!(has(
            &p.receivers[0].argv,
            ["-o", "/w/run/r1/out/payload.bin"]
        ));
        assert!(p.sender_serves && p.setup.is_none() && p.tree.is_none());
    }

    #[test]
    fn bittorrent_whitelists_its_torrent_and_marks_completion() {
        let (ips, dirs) = three();
        let rates = [100 * M; 4].map(StarLink::clean);
        let p = plan_of(
            &ToolSpec::new("b", ToolKind::Bittorrent, "r"),
            &at(&ips, &dirs, &rates),
        );
        let setup = p.setup.as_deref().unwrap();
        assert!(setup.contains("mktorrent -p -l 18 -a 'http://10.0.0.1:6969/announce'"));
        assert!(setup.contains(">'/w/run/snd'/whitelist.txt"));
        assert_eq!(p.sender[..2], ["sh", "-c"]);
        assert!(p.sender[2].contains("opentracker -i 10.0.0.1 -p 6969"));
        assert!(p.sender[2].contains("'--bt-seed-unverified=true'"));
        assert!(p.sender[2].contains("trap 'kill $t $a"));
        let r = &p.receivers[1];
        assert!(r.argv.contains(&"--enable-dht=false".to_owned()));
        assert!(r.argv.contains(&"--bt-tracker-interval=2".to_owned()));
        assert!(r
            .argv
            .contains(&"--on-bt-download-complete=/w/run/bt-done".to_owned()));
        assert_eq!(r.argv.last().unwrap(), "/w/run/payload.torrent");
        assert_eq!(
            r.done_by,
            DoneBy::Marker(PathBuf::from("/w/run/r2/out/payload.bin.done"))
        );
        assert_eq!((p.sender_port, p.sender_serves), (Some(TRACKER_PORT), true));
    }
}
