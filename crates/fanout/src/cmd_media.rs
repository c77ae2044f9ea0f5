//! `fanout media send|recv`: a live MPEG-TS stream as RTP over multicast
//! (or to one receiver), at the rate its receivers' ASMP reports allow
//! (`fanout_media`). The sender reads the stream an encoder writes on
//! stdin and never blocks it: what the allowed rate cannot carry is
//! dropped from a queue, oldest first. It writes an SDP file with which
//! ffmpeg, VLC or GStreamer receive as well; `fanout media recv` joins the
//! group (or takes a unicast RTP stream, ffmpeg's `rtp_mpegts` output
//! among them), reports its rate, and writes the TS packets to stdout or
//! a file.

use crate::interrupt;
use crate::net_opts::parse_rate;
use crate::pipe::{InputFeed, OutputDrain};
use crate::report::OutputOpts;
use crate::session_net::{open_member_endpoint, JoinSpec};
use anyhow::{ensure, Context, Result};
use clap::{Args, Subcommand};
use fanout_app::StreamSink;
use fanout_core::Instant;
use fanout_io::{Clock, Driver, DriverConfig, UdpEndpoint};
use fanout_media::asmp::Variant;
use fanout_media::{
    Controller, MediaReceiver, MediaReceiverConfig, MediaSender, MediaSenderConfig,
};
use fanout_rtp::mp2t::{packets_per_payload, TsChunker};
use fanout_rtp::ntp::WallClock;
use fanout_rtp::sdp::StreamDescription;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `fanout media`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  ffmpeg -re -i in.mp4 -c copy -f mpegts - | fanout media send --group 239.1.2.3:5004 --sdp live.sdp
  fanout media recv --group 239.1.2.3:5004 | ffplay -     # on each receiver
  ffplay -protocol_whitelist file,udp,rtp live.sdp        # or any player, with the SDP")]
pub struct MediaArgs {
    #[command(subcommand)]
    pub command: MediaCommand,
}

/// The two ends of a media stream.
#[derive(Debug, Subcommand)]
pub enum MediaCommand {
    /// Send the MPEG-TS stream on stdin as RTP at the rate receivers allow.
    Send(MediaSendArgs),
    /// Receive an RTP MPEG-TS stream and write it to stdout (or -o FILE).
    Recv(MediaRecvArgs),
}

/// Arguments of `fanout media send`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  ffmpeg -re -i in.mp4 -c copy -f mpegts - | fanout media send --group 239.1.2.3:5004 --sdp live.sdp
  # from an encoder's UDP output
  fanout media send --input udp://127.0.0.1:4000 --group 239.1.2.3:5004 --sdp live.sdp
  # to one player that has the SDP (no rate reports: the initial rate holds)
  ffmpeg -re -i in.mp4 -c copy -f mpegts - | \\
      fanout media send --to 192.0.2.7:5004 --initial-rate 3M --sdp live.sdp")]
pub struct MediaSendArgs {
    /// Multicast group and port: RTP goes to PORT, RTCP to PORT + 1.
    #[arg(long, value_name = "GROUP:PORT", required_unless_present = "to")]
    pub group: Option<SocketAddr>,
    /// One receiver instead of a group (RTP to PORT, RTCP to PORT + 1).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "group")]
    pub to: Option<SocketAddr>,
    /// Local IPv4 address to send from (the multicast interface); to an
    /// IPv6 group or receiver the route picks it.
    #[arg(long, value_name = "IP")]
    pub interface: Option<Ipv4Addr>,
    /// Multicast TTL, or IPv6 hop limit (1 = this link only).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=255))]
    pub ttl: u32,
    /// Where the MPEG-TS comes from: "-" (stdin) or udp://ADDR:PORT (an
    /// encoder's UDP output; the stream ends after --input-idle seconds
    /// without a datagram).
    #[arg(long, value_name = "SOURCE", default_value = "-")]
    pub input: PathBuf,
    /// With a UDP input: seconds without a datagram that end the stream.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub input_idle: u64,
    /// Write a session description (SDP) for players to FILE.
    #[arg(long, value_name = "FILE")]
    pub sdp: Option<PathBuf>,
    /// The rate until receivers report, bits per second (e.g. 2M).
    #[arg(long, value_name = "RATE", default_value = "150k", value_parser = parse_rate)]
    pub initial_rate: u64,
    /// The rate control: `asmp` (receivers report the rate they compute;
    /// `asmp-paper` is the same on this side), `tfmcc` (RFC 4654) or
    /// `pgmcc` (a TCP window with the slowest receiver, which ACKs every
    /// packet). TFMCC's and PGMCC's fields ride in each RTP packet's
    /// header extension, which players skip.
    #[arg(long, value_enum, default_value = "asmp")]
    pub cc: MediaCc,
    /// Never send faster than this, bits per second (e.g. 8M).
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    pub max_rate: Option<u64>,
    /// Bytes of stream held for the allowed rate; beyond, the oldest are
    /// dropped.
    #[arg(long, value_name = "BYTES", default_value_t = 512 * 1024)]
    pub queue_bytes: usize,
    /// Largest UDP payload, bytes (whole 188-byte TS packets fill it).
    #[arg(long, value_name = "BYTES", default_value_t = 1328, value_parser = clap::value_parser!(u64).range(200..=65_000))]
    pub max_datagram: u64,
    /// Write a JSON line of the sender's figures every --stats-interval.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    /// Milliseconds between --stats lines.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub stats_interval: u64,
    #[command(flatten)]
    pub out: OutputOpts,
}

/// Arguments of `fanout media recv`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fanout media recv --group 239.1.2.3:5004 | ffplay -
  # what ffmpeg sends with -f rtp_mpegts rtp://192.0.2.9:5004
  fanout media recv --listen 192.0.2.9:5004 -o out.ts
  # into a player's (or srt-live-transmit's) UDP input
  fanout media recv --group 239.1.2.3:5004 -o udp://127.0.0.1:4010")]
pub struct MediaRecvArgs {
    /// Join this group: RTP on PORT, RTCP on PORT + 1.
    #[arg(long, value_name = "GROUP:PORT", required_unless_present = "listen")]
    pub group: Option<SocketAddr>,
    /// Take unicast RTP on ADDR:PORT (RTCP on PORT + 1) instead.
    #[arg(long, value_name = "ADDR:PORT", conflicts_with = "group")]
    pub listen: Option<SocketAddr>,
    /// Local IPv4 address to join the group on.
    #[arg(long, value_name = "IP")]
    pub interface: Option<Ipv4Addr>,
    /// Where the stream goes: a file, "-" (stdout; the --json report then
    /// goes to stderr) or udp://HOST:PORT (seven TS packets a datagram, as
    /// players and srt-live-transmit take it).
    #[arg(short, long, value_name = "PATH", default_value = "-")]
    pub output: PathBuf,
    /// The rate control this receiver computes its reports by when the
    /// sender runs ASMP: `asmp` (fanout's, the default) or `asmp-paper`
    /// (as the paper gives it). A TFMCC sender's receivers run TFMCC
    /// whatever this says (its packets say so).
    #[arg(long, value_enum, default_value = "asmp")]
    pub cc: MediaCc,
    /// End after this long without RTP (seconds; 0: never).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub idle_timeout: u64,
    #[command(flatten)]
    pub out: OutputOpts,
}

/// Runs `fanout media`.
pub fn run(args: MediaArgs) -> Result<()> {
    match args.command {
        MediaCommand::Send(a) => send(&a),
        MediaCommand::Recv(a) => recv(&a),
    }
}

/// The wall clock now, for SR timestamps and one-way delays.
fn wall_clock(clock: &Clock) -> WallClock {
    WallClock {
        at: clock.now(),
        unix: Duration::from_secs_f64(fanout_io::unix_time()),
    }
}

/// The local address the kernel would send to `destination` from (the
/// SDP's origin).
fn route_source(destination: SocketAddr) -> Option<IpAddr> {
    let any: IpAddr = match destination {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let probe = std::net::UdpSocket::bind(SocketAddr::new(any, 0)).ok()?;
    probe.connect(destination).ok()?;
    Some(probe.local_addr().ok()?.ip())
}

/// A random 32-bit SSRC.
fn random_ssrc() -> u32 {
    crate::net_opts::random_session_id() as u32
}

/// The port above `addr`'s: where RTCP goes (RFC 3550 §11).
fn rtcp_of(addr: SocketAddr) -> Result<SocketAddr> {
    let port = addr
        .port()
        .checked_add(1)
        .with_context(|| format!("{addr}: no port above it for RTCP"))?;
    Ok(SocketAddr::new(addr.ip(), port))
}

/// Writes what `chunker` cut from the input into `sender`.
struct SenderSink<'a> {
    sender: &'a mut MediaSender,
    chunker: &'a mut TsChunker,
    packets: usize,
    now: Instant,
}

impl SenderSink<'_> {
    fn drain(&mut self, flush: bool) {
        while let Some(p) = self.chunker.next_payload(self.packets, flush) {
            self.sender.write(self.now, &p);
        }
    }
}

impl StreamSink for SenderSink<'_> {
    fn write_message(&mut self, msg: &[u8]) -> bool {
        self.write(msg) == msg.len()
    }
    fn write(&mut self, data: &[u8]) -> usize {
        // Never blocks: the sender's queue drops the oldest instead.
        self.chunker.push(data);
        self.drain(false);
        data.len()
    }
    fn writable(&self) -> usize {
        usize::MAX
    }
    fn finish(&mut self) {
        self.drain(true);
        self.sender.finish();
    }
    fn abort(&mut self, _reason: &str) {
        self.sender.finish();
    }
}

/// A media session's rate control (`--cc`).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum MediaCc {
    /// ASMP with fanout's changes (the default).
    Asmp,
    /// ASMP exactly as its paper gives it.
    AsmpPaper,
    /// TFMCC (RFC 4654).
    Tfmcc,
    /// PGMCC (Rizzo, SIGCOMM 2000).
    Pgmcc,
}

impl MediaCc {
    fn controller(self) -> Controller {
        match self {
            MediaCc::Asmp => Controller::Asmp(Variant::Improved),
            MediaCc::AsmpPaper => Controller::Asmp(Variant::Paper),
            MediaCc::Tfmcc => Controller::Tfmcc,
            MediaCc::Pgmcc => Controller::Pgmcc,
        }
    }
}

fn send(args: &MediaSendArgs) -> Result<()> {
    let destination = args.group.or(args.to).context("--group or --to")?;
    if let Some(g) = args.group {
        ensure!(
            g.ip().is_multicast(),
            "--group {g}: not a multicast address"
        );
    }
    let rtcp = rtcp_of(destination)?;
    let local = match (destination.ip(), args.interface) {
        (IpAddr::V4(_), i) => IpAddr::V4(i.unwrap_or(Ipv4Addr::UNSPECIFIED)),
        (IpAddr::V6(_), None) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        (IpAddr::V6(_), Some(i)) => anyhow::bail!(
            "--interface {i} is an IPv4 address; to IPv6 {destination} the route picks the interface"
        ),
    };
    let endpoint = UdpEndpoint::bind(SocketAddr::new(local, 0))
        .with_context(|| format!("cannot bind {local}"))?;
    if destination.ip().is_multicast() {
        if destination.is_ipv4() {
            endpoint.set_multicast_ttl_v4(args.ttl)?;
            endpoint.set_multicast_loop_v4(true)?;
            if let Some(i) = args.interface {
                endpoint.set_multicast_if_v4(i)?;
            }
        } else {
            endpoint.set_multicast_hops_v6(args.ttl)?;
            endpoint.set_multicast_loop_v6(true)?;
        }
    }
    let origin = match endpoint.local_addr().ip() {
        ip if ip.is_unspecified() => route_source(destination).unwrap_or(ip),
        ip => ip,
    };
    let clock = Clock::new();
    let mut driver = Driver::new(endpoint, clock, DriverConfig::default())?;
    if let Some(group) = args.group {
        // Receivers' reports, multicast to the RTCP port.
        let reports = open_member_endpoint(&JoinSpec {
            group: Some(rtcp_of(group)?),
            from: None,
            interface: args.interface,
            listen: None,
            source: None,
        })?;
        driver.add_receive_socket(reports)?;
    }
    let ssrc = random_ssrc();
    if let Some(path) = &args.sdp {
        let sdp = StreamDescription {
            destination,
            origin,
            ttl: destination.ip().is_multicast().then_some(args.ttl as u8),
            session_id: u64::from(ssrc),
            name: "fanout".into(),
            bandwidth_kbps: args.max_rate.map(|r| r / 1000),
        };
        std::fs::write(path, sdp.to_sdp())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let cfg = MediaSenderConfig {
        destination,
        rtcp_destination: rtcp,
        initial_rate: args.initial_rate as f64 / 8.0,
        ssrc,
        cname: format!("fanout@{origin}"),
        queue_bytes: args.queue_bytes,
        wall: wall_clock(&clock),
        seed: u64::from(ssrc) ^ 0x5eed,
        reduced_rtcp_minimum: true,
        max_rate: args.max_rate.map(|r| r as f64 / 8.0),
        controller: args.cc.controller(),
    };
    let mut sender = MediaSender::new(cfg, clock.now());
    let mut chunker = TsChunker::default();
    let packets = packets_per_payload(args.max_datagram as usize);
    let input: Box<dyn std::io::Read + Send> = match crate::udp_stream::udp_target(&args.input) {
        Some(addr) => Box::new(crate::udp_stream::UdpInput::bind(
            addr?,
            Duration::from_secs(args.input_idle.max(1)),
        )?),
        None if args.input.as_os_str() == "-" => Box::new(std::io::stdin()),
        None => Box::new(
            std::fs::File::open(&args.input)
                .with_context(|| format!("cannot open {}", args.input.display()))?,
        ),
    };
    let mut feed = InputFeed::spawn(input, driver.waker(), clock);
    let mut stats = open_stats(args.stats.as_ref())?;
    let every = Duration::from_millis(args.stats_interval.max(10));
    let mut next_stats = clock.now();
    let started = clock.now();
    interrupt::watch();
    if !args.out.quiet {
        eprintln!("fanout: sending RTP to {destination} (RTCP {rtcp}), SSRC {ssrc:08x}");
    }
    let io = driver.run(&mut sender, |s, now| {
        if interrupt::interrupted() {
            s.finish();
        }
        let mut sink = SenderSink {
            sender: s,
            chunker: &mut chunker,
            packets,
            now,
        };
        feed.feed(&mut sink);
        if let Some(out) = stats.as_mut() {
            if now >= next_stats {
                next_stats = now + every;
                let line = sender_figures(s, now.saturating_duration_since(started));
                let _ = writeln!(out, "{line}");
            }
        }
        s.is_closed()
    })?;
    if let Some(e) = feed.take_error() {
        return Err(e);
    }
    let mut figures = sender_figures(&sender, clock.now().saturating_duration_since(started));
    figures["skipped_input_bytes"] = chunker.skipped().into();
    figures["send_syscalls"] = io.send_syscalls.into();
    if args.out.json {
        println!("{figures}");
    } else if !args.out.quiet {
        eprintln!(
            "fanout: sent {} RTP packets ({} bytes of stream); {} dropped for the rate; \
             {} receivers reporting, allowed rate {:.0} kbit/s",
            figures["packets"],
            figures["payload_bytes"],
            figures["queue_drops"],
            figures["receivers"],
            sender.rate() * 8.0 / 1000.0
        );
    }
    Ok(())
}

fn open_stats(path: Option<&PathBuf>) -> Result<Option<std::io::BufWriter<std::fs::File>>> {
    path.map(|p| {
        std::fs::File::create(p)
            .map(std::io::BufWriter::new)
            .with_context(|| format!("cannot create {}", p.display()))
    })
    .transpose()
}

fn sender_figures(s: &MediaSender, elapsed: Duration) -> serde_json::Value {
    let st = s.stats();
    serde_json::json!({
        "seconds": elapsed.as_secs_f64(),
        "allowed_rate_bps": (s.rate() * 8.0).round(),
        "cc": s.controller().name(),
        "receivers": s.control().receivers(),
        "limiting_receiver": s.control().limiting_receiver(),
        "packets": st.packets,
        "payload_bytes": st.payload_bytes,
        "queued_bytes": s.queued_bytes(),
        "queue_drops": st.queue_drops,
        "max_drop_age_ms": st.max_drop_age_us / 1000,
        "rate_reports": st.rate_reports,
        "rtcp_sent": st.rtcp_sent,
        "rtcp_bytes": st.rtcp_bytes,
        "malformed": st.malformed,
    })
}

fn recv(args: &MediaRecvArgs) -> Result<()> {
    let (rtp, rtcp_listen, rtcp_destination) = match (args.group, args.listen) {
        (Some(g), _) => {
            let spec = |group| JoinSpec {
                group: Some(group),
                from: None,
                interface: args.interface,
                listen: None,
                source: None,
            };
            let rtcp = rtcp_of(g)?;
            (
                open_member_endpoint(&spec(g))?,
                open_member_endpoint(&spec(rtcp))?,
                Some(rtcp),
            )
        }
        (None, Some(l)) => {
            let rtcp = rtcp_of(l)?;
            (
                UdpEndpoint::bind(l).with_context(|| format!("cannot listen on {l}"))?,
                UdpEndpoint::bind(rtcp).with_context(|| format!("cannot listen on {rtcp}"))?,
                None,
            )
        }
        (None, None) => anyhow::bail!("--group or --listen"),
    };
    let output: Box<dyn Write + Send> =
        if let Some(to) = crate::udp_stream::udp_target(&args.output) {
            Box::new(crate::udp_stream::UdpOutput::connect(to?)?)
        } else if args.output.as_os_str() == "-" {
            Box::new(std::io::stdout())
        } else {
            Box::new(
                std::fs::File::create(&args.output)
                    .with_context(|| format!("cannot create {}", args.output.display()))?,
            )
        };
    let clock = Clock::new();
    let mut driver = Driver::new(rtp, clock, DriverConfig::default())?;
    driver.add_receive_socket(rtcp_listen)?;
    let ssrc = random_ssrc();
    let cfg = MediaReceiverConfig {
        rtcp_destination,
        ssrc,
        cname: format!("fanout-recv-{ssrc:08x}"),
        wall: wall_clock(&clock),
        seed: u64::from(ssrc) ^ 0xfeed,
        reduced_rtcp_minimum: true,
        max_output_bytes: 4 << 20,
        controller: args.cc.controller(),
    };
    let mut receiver = MediaReceiver::new(cfg, clock.now());
    let mut out = OutputDrain::spawn(output, driver.waker());
    let idle = (args.idle_timeout > 0).then(|| Duration::from_secs(args.idle_timeout));
    let mut last_packets = 0;
    let mut last_progress = clock.now();
    let mut output_error = None;
    interrupt::watch();
    driver.run(&mut receiver, |r, now| {
        while output_error.is_none() {
            match out.has_room() {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    output_error = Some(e);
                    break;
                }
            }
            let Some(p) = r.read() else {
                break;
            };
            if let Err(e) = out.push(p) {
                output_error = Some(e);
            }
        }
        if r.stats().packets != last_packets {
            last_packets = r.stats().packets;
            last_progress = now;
        }
        let idle_out = idle.is_some_and(|d| now.saturating_duration_since(last_progress) >= d);
        interrupt::interrupted() || r.is_ended() || idle_out || output_error.is_some()
    })?;
    while let Some(p) = receiver.read() {
        if output_error.is_some() {
            break;
        }
        if let Err(e) = out.push(p) {
            output_error = Some(e);
        }
    }
    out.finish()?;
    if let Some(e) = output_error {
        return Err(e);
    }
    let st = receiver.stats();
    let e = receiver.estimates();
    let figures = serde_json::json!({
        "packets": st.packets,
        "payload_bytes": st.payload_bytes,
        "output_bytes": out.bytes(),
        "lost": receiver.sequence().map_or(0, |s| s.cumulative_lost()),
        "expected": receiver.sequence().map_or(0, |s| s.expected()),
        "jitter": receiver.jitter(),
        "cc": receiver.controller().name(),
        "rate_bps": (e.rate * 8.0).round(),
        "loss": e.loss,
        "rtt_ms": e.rtt.map(|d| d.as_secs_f64() * 1000.0),
        "reports_sent": st.reports_sent,
        "reports_suppressed": st.reports_suppressed,
        "other_sources": st.other_sources,
        "malformed": st.malformed,
        "ended_by_sender": receiver.is_ended(),
    });
    if args.out.json && args.output.as_os_str() == "-" {
        // The stream has stdout.
        eprintln!("{figures}");
    } else if args.out.json {
        println!("{figures}");
    } else if !args.out.quiet {
        eprintln!(
            "fanout: received {} RTP packets ({} bytes), {} lost; reported {:.0} kbit/s",
            st.packets,
            st.payload_bytes,
            figures["lost"],
            e.rate * 8.0 / 1000.0
        );
    }
    Ok(())
}
