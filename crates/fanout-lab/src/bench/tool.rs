//! Command lines of each tool's sender and receivers, and how the bench
//! tells that a receiver has the whole file.
//!
//! Peers are configured for the lab's network: the emulator forwards
//! neither broadcast nor 224.0.0.0/24, so udpcast's rendez-vous and uftp's
//! announcements use 239.x groups (see [`super::scenario::GROUPS`]), and
//! every tool is bound to the hosts' one interface, [`crate::TUN_IF`].

use super::overlay_tree::{OverlayTree, StarLink};
use super::race_tools as race;
use super::scenario::{FANOUT_GROUP, UDPCAST_DATA, UDPCAST_RDV, UFTP_PRIVATE, UFTP_PUBLIC};
use super::suite::{ToolKind, ToolSpec, PSK_PLACEHOLDER};
use crate::lab::TUN_IF;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// fanout's group port.
const FANOUT_PORT: u16 = 7000;
/// fanout sender's port (receivers name it in `--from`).
const FANOUT_SENDER_PORT: u16 = 6000;
/// Seconds fanout's sender and receivers wait for each other at most.
const FANOUT_WAIT_S: &str = "60";

/// How the bench knows a receiver is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoneBy {
    /// The receiver exits (fanout, udp-receiver).
    Exit,
    /// The final file appears: uftpd (a daemon that never exits by itself)
    /// runs with `-t`, receiving into a temporary name and renaming it to
    /// the final one once complete.
    FileAppears,
    /// This file appears: written by a hook the receiver runs once it has
    /// the whole file (aria2c, which then keeps seeding).
    Marker(PathBuf),
}

/// One receiver's command.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiverCmd {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Where the received file ends up.
    pub output: PathBuf,
    /// Completion signal.
    pub done_by: DoneBy,
}

/// Everything one run of a tool executes.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The sender's program and arguments.
    pub sender: Vec<String>,
    /// Per receiver, in receiver order.
    pub receivers: Vec<ReceiverCmd>,
    /// A `sh` script run before anything starts, outside the clock (a
    /// torrent made from the file, say).
    pub setup: Option<String>,
    /// The sender starts first, and the receivers (and the clock) once it
    /// listens on this TCP port (`None`: the receivers first, then the
    /// sender, the clock with it).
    pub sender_port: Option<u16>,
    /// The sender serves until the bench stops it once every receiver is
    /// done, rather than exiting by itself.
    pub sender_serves: bool,
    /// The sender may exit while receivers are still at work (an overlay
    /// source once its children hold the file, and hung up): its exit
    /// does not bound the run.
    pub sender_may_leave: bool,
    /// Receiver indices in the order they start (parents before children).
    pub start_order: Vec<usize>,
    /// The overlay's planned tree.
    pub tree: Option<OverlayTree>,
}

/// Where things are for one run.
#[derive(Debug, Clone)]
pub struct Endpoints<'a> {
    /// The file to send.
    pub source: &'a Path,
    /// The sender's address.
    pub sender_ip: Ipv4Addr,
    /// Receiver addresses, in order.
    pub receiver_ips: &'a [Ipv4Addr],
    /// Each receiver's (empty, existing) output directory, in order.
    pub receiver_dirs: &'a [PathBuf],
    /// The run's pre-shared key file, for arguments naming
    /// [`PSK_PLACEHOLDER`] (written by the run if any does).
    pub psk: &'a Path,
    /// The run's directory (the setup's files go there).
    pub run_dir: &'a Path,
    /// Each host's link to the switch, the sender's first, then the
    /// receivers' in order.
    pub links: &'a [StarLink],
}

/// uftp's client ID of a host: its IPv4 address (uftp's own default).
fn uftp_id(ip: Ipv4Addr) -> String {
    format!("0x{:08x}", u32::from(ip))
}

pub(crate) fn s(x: impl ToString) -> String {
    x.to_string()
}

/// The commands of `tool` for a run at `at`.
pub fn plan(tool: &ToolSpec, at: &Endpoints<'_>) -> Plan {
    if let Some(p) = race::plan(tool, at) {
        return p;
    }
    let n = at.receiver_ips.len();
    let name = at.source.file_name().map_or_else(
        || std::ffi::OsString::from("file"),
        std::ffi::OsStr::to_os_string,
    );
    let src = at.source.display().to_string();
    let (mut sender, receivers): (Vec<String>, Vec<ReceiverCmd>) = match tool.kind {
        ToolKind::Fanout => {
            let from = format!("{}:{FANOUT_SENDER_PORT}", at.sender_ip);
            let group = format!("{FANOUT_GROUP}:{FANOUT_PORT}");
            let sender = vec![
                s("fanout"),
                s("send"),
                src,
                s("--group"),
                group.clone(),
                s("--bind"),
                from.clone(),
                s("--wait-for"),
                s(n),
                s("--wait-secs"),
                s(FANOUT_WAIT_S),
                s("--quiet"),
            ];
            let receivers = at
                .receiver_dirs
                .iter()
                .map(|dir| ReceiverCmd {
                    argv: vec![
                        s("fanout"),
                        s("recv"),
                        s("--group"),
                        group.clone(),
                        s("--from"),
                        from.clone(),
                        s("-o"),
                        dir.display().to_string(),
                        s("--wait"),
                        s(FANOUT_WAIT_S),
                        s("--quiet"),
                    ],
                    output: dir.join(&name),
                    done_by: DoneBy::Exit,
                })
                .collect();
            (sender, receivers)
        }
        ToolKind::Media => {
            let group = format!("{FANOUT_GROUP}:{}", super::media::MEDIA_PORT);
            let sender = vec![
                s("fanout"),
                s("media"),
                s("send"),
                s("--group"),
                group.clone(),
                s("--input"),
                format!("udp://127.0.0.1:{}", super::media::INPUT_PORT),
                s("--input-idle"),
                s(super::media::INPUT_IDLE_S),
                s("--json"),
                s("--quiet"),
            ];
            let receivers = at
                .receiver_dirs
                .iter()
                .map(|_| ReceiverCmd {
                    // The figures are the --json summary on stdout.
                    argv: vec![
                        s("fanout"),
                        s("media"),
                        s("recv"),
                        s("--group"),
                        group.clone(),
                        s("-o"),
                        s("/dev/null"),
                        s("--idle-timeout"),
                        s(FANOUT_WAIT_S),
                        s("--json"),
                        s("--quiet"),
                    ],
                    output: PathBuf::from("/dev/null"),
                    done_by: DoneBy::Exit,
                })
                .collect();
            (sender, receivers)
        }
        ToolKind::Udpcast => {
            let sender = vec![
                s("udp-sender"),
                s("--file"),
                src,
                s("--interface"),
                s(TUN_IF),
                s("--nokbd"),
                s("--min-receivers"),
                s(n),
                s("--mcast-rdv-address"),
                s(UDPCAST_RDV),
                s("--mcast-data-address"),
                s(UDPCAST_DATA),
            ];
            let receivers = at
                .receiver_dirs
                .iter()
                .map(|dir| {
                    let output = dir.join(&name);
                    ReceiverCmd {
                        argv: vec![
                            s("udp-receiver"),
                            s("--file"),
                            output.display().to_string(),
                            s("--interface"),
                            s(TUN_IF),
                            s("--nokbd"),
                            s("--mcast-rdv-address"),
                            s(UDPCAST_RDV),
                        ],
                        output,
                        done_by: DoneBy::Exit,
                    }
                })
                .collect();
            (sender, receivers)
        }
        ToolKind::Uftp => {
            let ids: Vec<String> = at.receiver_ips.iter().map(|ip| uftp_id(*ip)).collect();
            let sender = vec![
                s("uftp"),
                s("-I"),
                s(TUN_IF),
                s("-M"),
                s(UFTP_PUBLIC),
                s("-P"),
                s(UFTP_PRIVATE),
                s("-H"),
                ids.join(","),
            ];
            let receivers = at
                .receiver_dirs
                .iter()
                .zip(at.receiver_ips)
                .map(|(dir, ip)| ReceiverCmd {
                    argv: vec![
                        s("uftpd"),
                        s("-d"),
                        s("-q"),
                        s("-t"),
                        s("-I"),
                        s(TUN_IF),
                        s("-U"),
                        uftp_id(*ip),
                        s("-M"),
                        s(UFTP_PUBLIC),
                        s("-D"),
                        dir.display().to_string(),
                    ],
                    output: dir.join(&name),
                    done_by: DoneBy::FileAppears,
                })
                .collect();
            (sender, receivers)
        }
        ToolKind::Overlay | ToolKind::TcpUnicast | ToolKind::Bittorrent => {
            unreachable!("planned by race::plan")
        }
    };
    let psk = at.psk.display().to_string();
    let with_psk = |a: &String| a.replace(PSK_PLACEHOLDER, &psk);
    sender.extend(tool.args.iter().map(with_psk));
    let mut receivers = receivers;
    for r in &mut receivers {
        r.argv.extend(tool.receiver_args.iter().map(with_psk));
    }
    if tool.kind == ToolKind::Uftp {
        // uftp takes the files last.
        sender.push(at.source.display().to_string());
    }
    Plan {
        sender,
        start_order: (0..receivers.len()).collect(),
        receivers,
        setup: None,
        sender_port: None,
        sender_serves: false,
        sender_may_leave: false,
        tree: None,
    }
}

/// `argv` as one `sh` word list (each word single-quoted).
pub fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(kind: ToolKind, args: &[&str]) -> ToolSpec {
        ToolSpec {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            receiver_args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..ToolSpec::new("t", kind, "r")
        }
    }

    #[test]
    fn uftp_names_every_receiver_and_takes_the_file_last() {
        let ips = [Ipv4Addr::new(10, 78, 0, 2), Ipv4Addr::new(10, 78, 0, 3)];
        let dirs = [PathBuf::from("/w/r1"), PathBuf::from("/w/r2")];
        let at = Endpoints {
            source: Path::new("/w/src/payload.bin"),
            sender_ip: Ipv4Addr::new(10, 78, 0, 1),
            receiver_ips: &ips,
            receiver_dirs: &dirs,
            psk: Path::new("/w/session.psk"),
            run_dir: Path::new("/w"),
            links: &[100_000_000, 100_000_000, 10_000_000].map(StarLink::clean),
        };
        let p = plan(&tool(ToolKind::Uftp, &["-R", "95000"]), &at);
        let h = p.sender.iter().position(|a| a == "-H").unwrap();
        assert_eq!(p.sender[h + 1], "0x0a4e0002,0x0a4e0003");
        assert_eq!(p.sender.last().unwrap(), "/w/src/payload.bin");
        assert!(p.sender.contains(&"95000".to_owned()));
        assert_eq!(p.receivers[1].output, Path::new("/w/r2/payload.bin"));
        assert_eq!(p.receivers[1].done_by, DoneBy::FileAppears);
        let f = plan(&tool(ToolKind::Fanout, &[]), &at);
        assert!(f.sender.windows(2).any(|w| w == ["--wait-for", "2"]));
        let keyed = plan(&tool(ToolKind::Fanout, &["--psk-file", "{psk}"]), &at);
        for argv in [&keyed.sender, &keyed.receivers[0].argv] {
            assert!(argv.ends_with(&["--psk-file".into(), "/w/session.psk".into()]));
        }
        let u = plan(&tool(ToolKind::Udpcast, &[]), &at);
        assert!(u.sender.windows(2).any(|w| w == ["--min-receivers", "2"]));
    }

    #[test]
    fn shell_words_quote() {
        assert_eq!(
            shell_words(&["a b".into(), "it's".into()]),
            r"'a b' 'it'\''s'"
        );
    }
}
