//! `fanout demo`: a real loopback transfer and a short simulation, with no
//! setup, on any machine.

use crate::cmd_recv::{recv, RecvArgs};
use crate::cmd_send::{send, SendArgs};
use crate::cmd_sim::simulate_scenario;
use crate::merger_opts::MergerOpts;
use crate::net_opts::TransportOpts;
use crate::report::OutputOpts;
use crate::session_args::{CatchUpArgs, SessionSendArgs};
use anyhow::{ensure, Context, Result};
use clap::{Args, Parser};
use fanout_sim::Scenario;
use fanout_transport::session::ReleasePolicy;
use fanout_transport::session::{RttPolicy, WindowPolicy};
use std::io::Write;
use std::sync::mpsc;

/// The embedded scenario: two CUBIC flows sharing a 20 Mbit/s bottleneck.
const DEMO_SCENARIO: &str = include_str!("../../../scenarios/fairness-droptail-cubic.toml");

/// Arguments of `fanout demo`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fanout demo
  fanout demo --mib 256 --loss 0.02")]
pub struct DemoArgs {
    /// Size of the file sent over loopback, in MiB.
    #[arg(long, default_value_t = 64, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub mib: u64,
    /// Fraction of datagrams the receiver drops on purpose (0–1), to show recovery.
    #[arg(long, default_value_t = 0.01, value_name = "P")]
    pub loss: f64,
}

/// Default transport flags, as `send`/`recv` would parse them.
fn default_net() -> TransportOpts {
    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        net: TransportOpts,
    }
    Wrap::parse_from(["demo"]).net
}

/// Runs `fanout demo`.
pub fn run(args: DemoArgs) -> Result<()> {
    ensure!(
        (0.0..0.5).contains(&args.loss),
        "--loss must be in [0, 0.5)"
    );
    let dir = std::env::temp_dir().join(format!("fanout-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let result = demo_in(&dir, &args);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn demo_in(dir: &std::path::Path, args: &DemoArgs) -> Result<()> {
    println!("fanout demo");
    println!(
        "1) real UDP on loopback: {} MiB file, {:.1}% of datagrams dropped at the receiver",
        args.mib,
        args.loss * 100.0
    );
    let src = dir.join("demo.bin");
    let mut f = std::fs::File::create(&src)?;
    let mut rng = fanout_core::Rng::new(0xDE30);
    let mut chunk = vec![0u8; 1 << 20];
    for _ in 0..args.mib {
        rng.fill(&mut chunk);
        f.write_all(&chunk)?;
    }
    drop(f);
    let out = dir.join("received");
    std::fs::create_dir_all(&out)?;
    let mut net = default_net();
    net.inject_loss = args.loss;
    let recv_args = RecvArgs {
        listen: Some("127.0.0.1:0".parse()?),
        group: None,
        from: None,
        interface: None,
        source: None,
        merger: MergerOpts {
            merger: None,
            merger_key: None,
            merger_fallback: Vec::new(),
        },
        output: out.clone(),
        allow_from: Vec::new(),
        overwrite: false,
        wait: 10,
        out: OutputOpts {
            json: false,
            quiet: true,
        },
        service: crate::cmd_serve::ServiceOpts::default(),
        net: net.clone(),
    };
    let (tx, rx) = mpsc::channel();
    let receiver = std::thread::spawn(move || recv(&recv_args, Some(tx)));
    let addr = rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .context("receiver did not start")?;
    net.inject_loss = 0.0;
    let sent = send(&SendArgs {
        file: src,
        to: Some(addr.to_string()),
        group: None,
        unicast: false,
        bind: None,
        require: crate::outcome::Requirement::All,
        stats: crate::realtime_opts::StatsOpts {
            stats: None,
            stats_interval: 1000,
        },
        session: SessionSendArgs {
            wait_for: 1,
            wait_secs: 10,
            ttl: 1,
            repair_threshold: 0.05,
            repair: "auto".into(),
            repair_block: 32,
            stall_timeout: 10,
            release: ReleasePolicy::SlowestReceiver,
            window_policy: WindowPolicy::Auto,
            session_rtt: RttPolicy::Maximum,
        },
        catch_up: CatchUpArgs { catch_up_share: 32 },
        out: OutputOpts {
            json: false,
            quiet: true,
        },
        net,
    });
    let received = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiver thread panicked"))??;
    let sent = sent?;
    ensure!(
        received.verified && received.blake3 == sent.blake3,
        "hash mismatch"
    );
    println!(
        "   {} bytes in {:.2} s = {:.0} Mbit/s; BLAKE3 {} verified; {} datagrams dropped on purpose, {} bytes retransmitted",
        received.bytes,
        received.seconds,
        received.goodput_bps / 1e6,
        &received.blake3[..16],
        received.injected_drops,
        sent.transport.get("retransmitted_bytes").copied().unwrap_or(0),
    );
    println!(
        "2) simulation: two CUBIC flows through a 20 Mbit/s DropTail bottleneck, 50 ms RTT, 65 s"
    );
    let scenario = Scenario::from_toml(DEMO_SCENARIO, "fairness-droptail-cubic.toml")?;
    let figs = simulate_scenario(scenario, None, None, 5.0)?;
    for fl in &figs.flows {
        println!("   flow {}: {:.2} Mbit/s", fl.label, fl.goodput_bps / 1e6);
    }
    let bottleneck = figs.links.iter().find(|l| l.label == "r1->r2");
    let trace = figs.trace_hash.as_deref().map_or(String::new(), |h| {
        format!(
            "; trace hash {h} (seed {}: rerun gives the same)",
            figs.seed
        )
    });
    println!(
        "   Jain fairness index {:.4}; bottleneck utilisation {:.1}%{trace}",
        figs.jain_index,
        bottleneck.map_or(0.0, |l| l.utilisation * 100.0),
    );
    println!("done: try `fanout send --help`, `fanout recv --help`, `fanout sim scenarios/red-4m5.toml`.");
    Ok(())
}
