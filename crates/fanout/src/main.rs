//! `fanout`: deliver the same bytes to many receivers at once.

mod catch_up;
mod cmd_demo;
mod cmd_docs;
mod cmd_lab;
mod cmd_lab_bench;
mod cmd_media;
mod cmd_merge;
mod cmd_overlay;
mod cmd_overlay_probe;
mod cmd_recv;
mod cmd_relay;
mod cmd_send;
mod cmd_serve;
mod cmd_sim;
mod cmd_stream;
mod interrupt;
mod merger_opts;
mod net_opts;
mod outcome;
mod overlay_progress;
mod pipe;
mod progress;
mod realtime_opts;
mod recv_counters;
mod report;
mod restart_file;
mod resume;
mod security_opts;
mod session_args;
mod session_net;
mod session_view;
mod stats_lines;
mod udp_stream;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use std::io::IsTerminal;
use std::process::ExitCode;

/// Deliver the same bytes — a file or a live stream — to many receivers at
/// once: fast, reliably, and fair to TCP.
#[derive(Debug, Parser)]
#[command(
    name = "fanout",
    version,
    about,
    long_about = None,
    propagate_version = true,
    after_help = "Security: with keys (--psk-file, or --key with --sender-key / --allow-keys; \
`fanout keygen` makes them) only peers that prove them join, and every datagram after the \
handshake is encrypted and authenticated, multicast data signed by the sender. Without keys a \
session is unprotected and says so: run it that way only where you trust every host that can \
reach its addresses (docs/security.md)."
)]
struct Cli {
    /// Log verbosity for diagnostics on stderr (error, warn, info, debug, trace).
    #[arg(long, global = true, default_value = "warn", value_name = "LEVEL", value_parser = parse_log_level)]
    log: String,
    /// Diagnostics as text or as JSON lines (one object per event).
    #[arg(long, global = true, default_value = "text", value_name = "FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Send a file to one receiver (--to) or to every receiver of a session
    /// (--group; --unicast without multicast).
    Send(cmd_send::SendArgs),
    /// Receive one file from a sender (--listen), or by joining a session
    /// (--from, with --group for multicast).
    Recv(cmd_recv::RecvArgs),
    /// Forward a session to another: join one (--from, --group) and serve
    /// its stream, as it arrives, to receivers of a second (--bind,
    /// --out-group).
    Relay(cmd_relay::RelayArgs),
    /// Merge the feedback of a session's receivers (ACK aggregation):
    /// children report to --listen, one merged flow goes to --parent.
    Merge(cmd_merge::MergeArgs),
    /// Run a simulated network scenario from a TOML file.
    Sim(cmd_sim::SimArgs),
    /// Stream stdin to many receivers (`stream send`), or a live stream to
    /// stdout (`stream recv`).
    Stream(cmd_stream::StreamArgs),
    /// Live MPEG-TS as RTP to a group at the rate its receivers' reports
    /// allow (`media send`), and its receiving end (`media recv`);
    /// players receive with the SDP it writes.
    Media(cmd_media::MediaArgs),
    /// Overlay delivery where multicast does not reach: `overlay plan`
    /// lays out the widest-path tree of TCP hops and predicts each host's
    /// rate.
    Overlay(cmd_overlay::OverlayArgs),
    /// A self-contained demonstration: a loopback transfer and a short
    /// simulation, no setup needed.
    Demo(cmd_demo::DemoArgs),
    /// Emulated networks of real processes: network namespaces joined by
    /// user-space links that reuse the simulator's models (needs root).
    Lab(cmd_lab::LabArgs),
    /// Write a key pair (or a pre-shared key) for protected sessions.
    Keygen(security_opts::KeygenArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd_docs::CompletionsArgs),
    /// Print the man page, or write one per command into a directory.
    Man(cmd_docs::ManArgs),
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    /// Human lines (coloured on a terminal only; `NO_COLOR` turns it off).
    Text,
    /// One JSON object per event, for log collectors.
    Json,
}

/// A `--log` level, or a `tracing` filter such as `fanout_transport=debug`.
fn parse_log_level(s: &str) -> Result<String, String> {
    let levels = ["error", "warn", "info", "debug", "trace", "off"];
    if levels.contains(&s.to_ascii_lowercase().as_str()) || s.contains('=') {
        tracing_subscriber::EnvFilter::try_new(s)
            .map(|_| s.to_owned())
            .map_err(|e| e.to_string())
    } else {
        Err(format!(
            "`{s}`: expected error, warn, info, debug, trace or off (or a filter such as \
             fanout_transport=debug)"
        ))
    }
}

/// Starts the diagnostics on stderr: `--log` sets the level, `--log-format`
/// the form; colour only when stderr is a terminal and `NO_COLOR` is unset.
fn init_logging(level: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => {
            let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            builder.with_ansi(colour).init()
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.log, cli.log_format);
    let result = match cli.command {
        Command::Send(a) => cmd_send::run(a),
        Command::Recv(a) => cmd_recv::run(a),
        Command::Relay(a) => cmd_relay::run(a),
        Command::Merge(a) => cmd_merge::run(a),
        Command::Sim(a) => cmd_sim::run(a),
        Command::Stream(a) => cmd_stream::run(a),
        Command::Media(a) => cmd_media::run(a),
        Command::Overlay(a) => cmd_overlay::run(a),
        Command::Demo(a) => cmd_demo::run(a),
        Command::Lab(a) => cmd_lab::run_lab(a),
        Command::Keygen(a) => security_opts::keygen(a),
        Command::Completions(a) => cmd_docs::completions(&a, Cli::command()),
        Command::Man(a) => cmd_docs::man(&a, Cli::command()),
    };
    match result {
        Ok(()) => ExitCode::from(outcome::exit_code::SUCCESS),
        Err(e) => {
            eprintln!("fanout: error: {e:#}");
            match e.downcast_ref::<outcome::Exit>() {
                Some(exit) => ExitCode::from(exit.code),
                None => ExitCode::from(outcome::exit_code::FAILURE),
            }
        }
    }
}
