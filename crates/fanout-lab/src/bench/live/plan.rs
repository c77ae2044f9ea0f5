//! Command lines of a live race: fanout's real-time stream (one sender,
//! multicast to every receiver) and SRT's live mode (one
//! `srt-live-transmit` sender per receiver, each receiver a listener).
//!
//! fanout reads the stream on stdin and writes it on stdout; SRT's tool
//! buffers its stdout (16 KiB at a time) and reads its stdin in chunks that
//! may join two messages, so it takes and gives each message as a UDP
//! datagram on the loopback of its host instead (`udp://` URIs).

use super::suite::{LiveTool, LiveToolKind};
use crate::bench::scenario::FANOUT_GROUP;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

/// fanout's group port.
const FANOUT_PORT: u16 = 7000;
/// fanout sender's port.
const FANOUT_SENDER_PORT: u16 = 6000;
/// SRT receivers' listening port.
const SRT_PORT: u16 = 9000;
/// Where an SRT receiver sends each message (its host's loopback).
pub const SRT_OUTPUT_PORT: u16 = 9100;
/// SRT sender `i` reads its input on this port plus `i` (the sender host's
/// loopback).
pub const SRT_INPUT_BASE_PORT: u16 = 9200;
/// Seconds fanout's ends wait for each other.
const WAIT_S: &str = "15";
/// Milliseconds between statistics lines.
const STATS_MS: &str = "500";
/// SRT: packets between statistics lines.
const SRT_STATS_PACKETS: &str = "100";

/// How a process takes its input or gives its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Io {
    /// stdin / stdout.
    Pipe,
    /// A UDP datagram per message at this loopback port of its host.
    Udp(u16),
}

/// One process of a race.
#[derive(Debug, Clone, PartialEq)]
pub struct Process {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Its stream input (senders) or output (receivers).
    pub io: Io,
    /// Its statistics file (relative to its run directory).
    pub stats: &'static str,
}

/// Everything one run of a tool starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The senders (fanout: one; SRT: one per receiver, in receiver order).
    pub senders: Vec<Process>,
    /// The receivers, in order.
    pub receivers: Vec<Process>,
}

/// Name of the statistics file of every process.
pub const STATS_FILE: &str = "stats.jsonl";

fn s(x: impl ToString) -> String {
    x.to_string()
}

/// The commands of `tool` for receivers at `receiver_ips`, a sender at
/// `sender_ip`, a budget of `budget_ms` on a path of `rtt_ms` round trip,
/// and `message`-byte messages.
pub fn plan(
    tool: &LiveTool,
    sender_ip: Ipv4Addr,
    receiver_ips: &[Ipv4Addr],
    (budget_ms, rtt_ms): (u64, u64),
    message: usize,
) -> Plan {
    match tool.kind {
        LiveToolKind::Fanout => {
            let from = SocketAddr::from((sender_ip, FANOUT_SENDER_PORT)).to_string();
            let group = SocketAddr::from((FANOUT_GROUP, FANOUT_PORT)).to_string();
            let mut sender = vec![
                s("fanout"),
                s("stream"),
                s("send"),
                s("--group"),
                group.clone(),
                s("--bind"),
                from.clone(),
                s("--wait-for"),
                s(receiver_ips.len()),
                s("--wait-secs"),
                s(WAIT_S),
                s("--latency"),
                s(budget_ms),
                s("--message-size"),
                s(message),
                s("--stats"),
                s(STATS_FILE),
                s("--stats-interval"),
                s(STATS_MS),
                s("--quiet"),
            ];
            sender.extend(tool.args.iter().cloned());
            let mut receiver = vec![
                s("fanout"),
                s("stream"),
                s("recv"),
                s("--group"),
                group,
                s("--from"),
                from,
                s("--latency"),
                s(budget_ms),
                s("--wait"),
                s(WAIT_S),
                s("--stats"),
                s(STATS_FILE),
                s("--stats-interval"),
                s(STATS_MS),
                s("--quiet"),
            ];
            receiver.extend(tool.receiver_args.iter().cloned());
            Plan {
                senders: vec![Process {
                    argv: sender,
                    io: Io::Pipe,
                    stats: STATS_FILE,
                }],
                receivers: vec![
                    Process {
                        argv: receiver,
                        io: Io::Pipe,
                        stats: STATS_FILE,
                    };
                    receiver_ips.len()
                ],
            }
        }
        LiveToolKind::Srt => {
            let latency = tool.srt_latency.option_ms(budget_ms, rtt_ms);
            let options = |extra: &[String]| {
                let mut o = vec![format!("latency={latency}")];
                o.extend(extra.iter().cloned());
                o.join("&")
            };
            let senders = receiver_ips
                .iter()
                .enumerate()
                .map(|(i, ip)| Process {
                    argv: vec![
                        s("srt-live-transmit"),
                        format!("-chunk:{message}"),
                        format!("-s:{SRT_STATS_PACKETS}"),
                        s("-f"),
                        s("-pf:json"),
                        format!("-statsout:{STATS_FILE}"),
                        format!("udp://127.0.0.1:{}", input_port(i)),
                        format!(
                            "srt://{}?mode=caller&{}",
                            SocketAddr::from((*ip, SRT_PORT)),
                            options(&tool.args)
                        ),
                    ],
                    io: Io::Udp(input_port(i)),
                    stats: STATS_FILE,
                })
                .collect();
            let receiver = Process {
                argv: vec![
                    s("srt-live-transmit"),
                    format!("-chunk:{message}"),
                    format!(
                        "srt://:{SRT_PORT}?mode=listener&{}",
                        options(&tool.receiver_args)
                    ),
                    format!("udp://127.0.0.1:{SRT_OUTPUT_PORT}"),
                ],
                io: Io::Udp(SRT_OUTPUT_PORT),
                stats: STATS_FILE,
            };
            Plan {
                senders,
                receivers: vec![receiver; receiver_ips.len()],
            }
        }
    }
}

/// SRT sender `i`'s input port.
fn input_port(i: usize) -> u16 {
    SRT_INPUT_BASE_PORT + u16::try_from(i).unwrap_or(u16::MAX - SRT_INPUT_BASE_PORT)
}

/// The retransmitted datagrams per original datagram a sender reports in
/// the last line of its statistics file, with the originals: fanout's
/// `repairs` over `messages_sent`, SRT's `send.packetsRetransmitted` over
/// `send.packetsUnique`.
pub fn retransmissions(kind: LiveToolKind, stats: &Path) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(stats).ok()?;
    let last = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))?;
    let v: serde_json::Value = serde_json::from_str(last).ok()?;
    let n = |v: &serde_json::Value| v.as_u64();
    match kind {
        LiveToolKind::Fanout => Some((n(&v["repairs"])?, n(&v["messages_sent"])?)),
        LiveToolKind::Srt => Some((
            n(&v["send"]["packetsRetransmitted"])?,
            n(&v["send"]["packetsUnique"])?,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::live::suite::SrtLatency;

    fn tool(kind: LiveToolKind) -> LiveTool {
        LiveTool {
            name: "t".into(),
            kind,
            args: vec!["maxbw=-1".into()],
            receiver_args: Vec::new(),
            about: String::new(),
            srt_latency: SrtLatency::Budget,
            scenarios: Vec::new(),
        }
    }

    #[test]
    fn srt_runs_a_sender_per_receiver_and_fanout_one() {
        let ips = [Ipv4Addr::new(10, 78, 0, 2), Ipv4Addr::new(10, 78, 0, 3)];
        let sender = Ipv4Addr::new(10, 78, 0, 1);
        let srt = plan(&tool(LiveToolKind::Srt), sender, &ips, (80, 20), 1316);
        assert_eq!(srt.senders.len(), 2);
        assert_eq!(srt.senders[1].io, Io::Udp(9201));
        assert!(srt.senders[1]
            .argv
            .contains(&"srt://10.78.0.3:9000?mode=caller&latency=80&maxbw=-1".to_owned()));
        assert!(srt.receivers[0].argv[2].contains("mode=listener&latency=80"));
        let f = plan(&tool(LiveToolKind::Fanout), sender, &ips, (80, 20), 1316);
        let mut e2e = tool(LiveToolKind::Srt);
        e2e.srt_latency = SrtLatency::EndToEnd;
        let srt_e2e = plan(&e2e, sender, &ips, (80, 20), 1316);
        assert!(srt_e2e.receivers[0].argv[2].contains("latency=70"));
        assert_eq!(f.senders.len(), 1);
        assert_eq!(f.receivers.len(), 2);
        assert!(f.senders[0]
            .argv
            .windows(2)
            .any(|w| w == ["--latency", "80"]));
        assert!(f.senders[0]
            .argv
            .windows(2)
            .any(|w| w == ["--wait-for", "2"]));
        assert_eq!(f.senders[0].argv.last().unwrap(), "maxbw=-1");
    }

    #[test]
    fn reads_both_tools_retransmission_counters() {
        let dir = std::env::temp_dir().join(format!("fanout-live-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("f.jsonl");
        std::fs::write(
            &f,
            "{\"repairs\":1,\"messages_sent\":10}\n{\"repairs\":40,\"messages_sent\":3800}\n",
        )
        .unwrap();
        assert_eq!(retransmissions(LiveToolKind::Fanout, &f), Some((40, 3800)));
        let s = dir.join("s.jsonl");
        std::fs::write(
            &s,
            "{\"send\":{\"packets\":3900,\"packetsUnique\":3800,\"packetsRetransmitted\":100}}\n",
        )
        .unwrap();
        assert_eq!(retransmissions(LiveToolKind::Srt, &s), Some((100, 3800)));
        assert_eq!(retransmissions(LiveToolKind::Srt, &f), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
