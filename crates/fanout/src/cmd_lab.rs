//! `fanout lab run|probe TOPOLOGY.toml`: emulated networks of real processes.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fanout_lab::{
    expected_one_way, run, EmuReport, KernelReport, Lab, LinkReport, ProbeConfig, Profile,
    RunOptions, RunReport, Topology, IP_UDP_OVERHEAD,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `fanout lab`.
#[derive(Debug, Args)]
#[command(after_help = "Examples (as root):
  fanout lab run scenarios/lab/multicast.toml
  fanout lab bench benchmarks/suite.toml --only g --out results.json
  fanout lab report results.json")]
pub struct LabArgs {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Debug, Subcommand)]
enum LabCommand {
    /// Build the topology (one network namespace per host, links emulated in
    /// user space with the simulator's models), run each `[[command]]` in
    /// its host, print a summary, and tear everything down — also on
    /// Ctrl-C, SIGTERM, timeout or error. Needs root. Exit status 0 only if
    /// every foreground command exited 0 and the emulator kept up.
    Run(RunArgs),
    /// Build the topology and measure one-way delay and loss between two
    /// hosts with a UDP probe, next to what the model predicts (the lab's
    /// self-check). Commands in the file are not run.
    Probe(ProbeArgs),
    /// Benchmark fanout against uftp and udpcast: for every scenario of a
    /// suite (benchmarks/suite.toml) and every tool, build the scenario's
    /// lab, start the receivers, then the sender, and measure wall time,
    /// goodput, bytes on the sender's link per file byte, CPU seconds, and
    /// verify every received file (media tools stream instead, beside a
    /// competing TCP flow). Progress on stderr. Needs root, and uftp and
    /// udpcast installed (apt-get install uftp udpcast).
    Bench(crate::cmd_lab_bench::BenchArgs),
    /// Write docs/benchmarks.md and its SVG plots from a results JSON of
    /// `fanout lab bench --out`.
    Report(crate::cmd_lab_bench::ReportArgs),
}

/// Arguments of `fanout lab run`.
#[derive(Debug, Args)]
struct RunArgs {
    /// Topology file (TOML); see scenarios/lab/ and docs/lab.md.
    topology: PathBuf,
    /// Print the full report (commands' output, per-link counters, emulator
    /// lateness) as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Stop after this many seconds (overrides the file's `timeout`);
    /// commands still running are killed and the run fails.
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// What carries the links (overrides the file's `profile`): `emulator`
    /// (user space, the simulator's models) or `kernel` (one bridge, tbf,
    /// nftables random loss: a cross-check; no delay, RED or
    /// Gilbert–Elliott, one router).
    #[arg(long, value_name = "PROFILE")]
    profile: Option<Profile>,
}

/// Arguments of `fanout lab probe`.
#[derive(Debug, Args)]
struct ProbeArgs {
    /// Topology file (TOML).
    topology: PathBuf,
    /// Sending host.
    #[arg(long)]
    from: String,
    /// Receiving host.
    #[arg(long)]
    to: String,
    /// Datagrams to send.
    #[arg(long, default_value_t = 20_000)]
    count: u32,
    /// Microseconds between datagrams.
    #[arg(long, default_value_t = 200, value_name = "US")]
    interval_us: u64,
    /// UDP payload bytes (16 to 1400).
    #[arg(long, default_value_t = 100, value_name = "BYTES")]
    payload: usize,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// What carries the links (overrides the file's `profile`): `emulator`
    /// or `kernel`.
    #[arg(long, value_name = "PROFILE")]
    profile: Option<Profile>,
}

/// Reads a topology and applies a `--profile` override.
fn load(path: &std::path::Path, profile: Option<Profile>) -> Result<Topology> {
    let topo = Topology::load(path)?;
    Ok(match profile {
        Some(p) => topo.with_profile(p)?,
        None => topo,
    })
}

/// Runs `fanout lab`.
pub fn run_lab(args: LabArgs) -> Result<()> {
    match args.command {
        LabCommand::Run(a) => run_topology(a),
        LabCommand::Probe(a) => probe(a),
        LabCommand::Bench(a) => crate::cmd_lab_bench::bench(a, cancel_flag()?),
        LabCommand::Report(a) => crate::cmd_lab_bench::report_cmd(a),
    }
}

/// A flag set by Ctrl-C (SIGINT) and SIGTERM, so the lab is torn down
/// instead of the process dying with namespaces left behind.
fn cancel_flag() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    let set = Arc::clone(&flag);
    ctrlc::set_handler(move || {
        set.store(true, Ordering::Relaxed);
        eprintln!("fanout lab: stopping, tearing the lab down");
    })
    .context("installing the Ctrl-C handler")?;
    Ok(flag)
}

fn run_topology(args: RunArgs) -> Result<()> {
    let topo = load(&args.topology, args.profile)?;
    let timeout = match args.timeout {
        Some(s) => Some(Duration::try_from_secs_f64(s).context("--timeout: want seconds ≥ 0")?),
        None => None,
    };
    let options = RunOptions {
        timeout,
        cancel: Some(cancel_flag()?),
    };
    let report = run(&topo, &options)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_run(&report);
    }
    if !report.ok {
        bail!("lab run did not succeed ({:?})", report.outcome);
    }
    Ok(())
}

fn print_run(r: &RunReport) {
    println!(
        "lab {} ({} profile): {:?} after {:.2} s, {}",
        r.topology,
        r.profile,
        r.outcome,
        r.wall_s,
        if r.ok { "ok" } else { "FAILED" }
    );
    println!("  namespaces (removed): {}", r.namespaces.join(" "));
    if let Some(e) = &r.emulator {
        print_emulator(e);
    }
    if let Some(k) = &r.kernel {
        print_kernel(k);
    }
    for c in &r.commands {
        let status = match (c.exit_code, c.signal) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            (None, None) => "unknown status".into(),
        };
        let bg = if c.background { " (background)" } else { "" };
        println!(
            "  [{}]{bg} {status} at {:.2} s: {}",
            c.host, c.wall_s, c.cmd
        );
        for (name, text) in [("stdout", &c.stdout), ("stderr", &c.stderr)] {
            for line in text.lines().take(20) {
                println!("      {name}: {line}");
            }
        }
    }
}

fn print_emulator(e: &EmuReport) {
    let l = &e.lateness;
    println!(
        "  emulator: {} datagrams in, {} delivered, {} no route, {} write errors; \
         lateness p50 {} us, p99 {} us, max {} us{}; {}",
        e.counters.ingress_packets,
        e.counters.delivered_packets,
        e.counters.no_route_packets,
        e.write_errors,
        l.p50_us,
        l.p99_us,
        l.max_us,
        if e.realtime { " (SCHED_FIFO)" } else { "" },
        match &e.invalid_reason {
            None => "valid".to_owned(),
            Some(why) => format!("INVALID: {why}"),
        }
    );
    let o = &e.offload;
    println!(
        "  offloads: {} UDP GSO packets split into {} datagrams, {} checksums filled, {} malformed \
         dropped; emulator CPU {:.2} s",
        o.gso_packets, o.gso_segments, o.csum_filled, o.malformed, e.cpu_s
    );
    match &e.steering {
        Some(s) => println!(
            "  receive steering: emulator on CPU {}, hosts' packet input on CPUs {:?}",
            s.emulator_cpu, s.input_cpus
        ),
        None => println!("  receive steering: off (the emulator ran the hosts' packet input)"),
    }
    print_links(&e.links);
}

fn print_kernel(k: &KernelReport) {
    println!(
        "  kernel links (tc and nftables counters; TSO/GSO/GRO {}){}",
        if k.offloads_disabled { "off" } else { "ON" },
        match &k.counters_unavailable {
            None => String::new(),
            Some(why) => format!(": counters unavailable: {why}"),
        }
    );
    print_links(&k.links);
}

fn print_links(links: &[LinkReport]) {
    for link in links {
        let drops: Vec<String> = link.drops.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "  link {} -> {}: {} offered, {} sent, {} delivered, drops: {}",
            link.from,
            link.to,
            link.offered_packets,
            link.tx_packets,
            link.delivered_packets,
            if drops.is_empty() {
                "none".into()
            } else {
                drops.join(" ")
            }
        );
    }
}

fn probe(args: ProbeArgs) -> Result<()> {
    let topo = load(&args.topology, args.profile)?;
    let index = |name: &str| {
        topo.host_by_name(name)
            .with_context(|| format!("no host named {name:?} in {}", topo.origin))
    };
    let (from, to) = (index(&args.from)?, index(&args.to)?);
    let wire = u32::try_from(args.payload).unwrap_or(u32::MAX) + IP_UDP_OVERHEAD;
    let expected = expected_one_way(&topo, from, to, wire)
        .with_context(|| format!("no route from {} to {}", args.from, args.to))?;
    let configured_loss = loss_along(&topo, from, to);
    let cancel = cancel_flag()?;
    let mut lab = Lab::build(&topo)?;
    let config = ProbeConfig {
        from: args.from.clone(),
        to: args.to.clone(),
        count: args.count,
        interval: Duration::from_micros(args.interval_us),
        payload: args.payload,
        port: 47_000,
    };
    let report = lab.probe(&config)?;
    let emulator = lab.stop_emulator();
    let kernel = lab.kernel_report();
    drop(lab);
    if args.json {
        let out = serde_json::json!({
            "profile": topo.profile,
            "expected_one_way_ms": expected.as_secs_f64() * 1e3,
            "configured_loss": configured_loss,
            "probe": report,
            "emulator": emulator,
            "kernel": kernel,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "probe {} -> {} ({} profile): {} sent, {} received, loss {:.4} (configured {:.4})",
            args.from,
            args.to,
            topo.profile,
            report.sent,
            report.received,
            report.loss,
            configured_loss
        );
        println!(
            "  one-way delay ms: min {:.3}, p50 {:.3}, p99 {:.3}, max {:.3} (model {:.3})",
            report.delay_min_ms,
            report.delay_p50_ms,
            report.delay_p99_ms,
            report.delay_max_ms,
            expected.as_secs_f64() * 1e3
        );
        if let Some(e) = &emulator {
            print_emulator(e);
        }
        if let Some(k) = &kernel {
            print_kernel(k);
        }
    }
    if cancel.load(Ordering::Relaxed) {
        bail!("interrupted");
    }
    Ok(())
}

/// The long-run loss rate of the path the model routes `from` → `to` on.
fn loss_along(topo: &Topology, from: usize, to: usize) -> f64 {
    let routes = fanout_lab::Routes::new(topo.hosts.len(), topo.node_count(), &topo.links);
    let mut delivered = 1.0;
    let mut node = from;
    for _ in 0..topo.links.len() {
        let Some(l) = (node != to).then(|| routes.next_hop(node, to)).flatten() else {
            break;
        };
        delivered *= 1.0 - topo.links[l].config.loss.stationary_loss_rate();
        node = topo.links[l].to;
    }
    1.0 - delivered
}
