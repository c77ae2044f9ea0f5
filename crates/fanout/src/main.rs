//! `fanout`: deliver the same bytes to many receivers at once.

mod catch_up;
mod cmd_demo;
mod cmd_lab;
mod cmd_lab_bench;
mod cmd_merge;
mod cmd_recv;
mod cmd_relay;
mod cmd_send;
mod cmd_sim;
mod cmd_stream;
mod merger_opts;
mod net_opts;
mod pipe;
mod progress;
mod realtime_opts;
mod recv_counters;
mod report;
mod security_opts;
mod session_args;
mod session_net;
mod session_view;

use clap::{Parser, Subcommand};
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
    #[arg(long, global = true, default_value = "warn", value_name = "LEVEL")]
    log: String,
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
    /// Merge the feedback of a session's receivers (MCTCP ACK aggregation):
    /// children report to --listen, one merged flow goes to --parent.
    Merge(cmd_merge::MergeArgs),
    /// Run a simulated network scenario from a TOML file.
    Sim(cmd_sim::SimArgs),
    /// Stream stdin to many receivers (`stream send`), or a live stream to
    /// stdout (`stream recv`).
    Stream(cmd_stream::StreamArgs),
    /// A self-contained demonstration: a loopback transfer and a short
    /// simulation, no setup needed.
    Demo(cmd_demo::DemoArgs),
    /// Emulated networks of real processes: network namespaces joined by
    /// user-space links that reuse the simulator's models (needs root).
    Lab(cmd_lab::LabArgs),
    /// Write a key pair (or a pre-shared key) for protected sessions.
    Keygen(security_opts::KeygenArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Send(a) => cmd_send::run(a),
        Command::Recv(a) => cmd_recv::run(a),
        Command::Relay(a) => cmd_relay::run(a),
        Command::Merge(a) => cmd_merge::run(a),
        Command::Sim(a) => cmd_sim::run(a),
        Command::Stream(a) => cmd_stream::run(a),
        Command::Demo(a) => cmd_demo::run(a),
        Command::Lab(a) => cmd_lab::run_lab(a),
        Command::Keygen(a) => security_opts::keygen(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fanout: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
