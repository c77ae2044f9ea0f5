//! `fanout sim SCENARIO.toml [--seed N] [--out DIR]`.

use anyhow::{Context, Result};
use clap::Args;
use fanout_core::Instant;
use fanout_sim::analysis::{figures, RunFigures};
use fanout_sim::scenario::BuiltinFlows;
use fanout_sim::session_flow::SessionFlows;
use fanout_sim::transfer::TransferFlows;
use fanout_sim::Scenario;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Arguments of `fanout sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Scenario file (TOML); see scenarios/ for examples.
    pub scenario: PathBuf,
    /// Override the scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Directory for CSV time series, SVG plots and the summary.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Measurement starts after this warm-up, in seconds.
    #[arg(long, default_value_t = 5.0, value_name = "SECS")]
    pub warmup: f64,
    /// Print the figures as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Loads and runs a scenario file; returns the figures over
/// `[warmup, duration]`.
pub fn simulate(
    path: &Path,
    seed: Option<u64>,
    out: Option<&Path>,
    warmup: f64,
) -> Result<RunFigures> {
    simulate_scenario(Scenario::load(path)?, seed, out, warmup)
}

/// Runs a parsed scenario; returns the figures over `[warmup, duration]`.
pub fn simulate_scenario(
    mut scenario: Scenario,
    seed: Option<u64>,
    out: Option<&Path>,
    warmup: f64,
) -> Result<RunFigures> {
    if let Some(s) = seed {
        scenario.seed = s;
    }
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut builtin = BuiltinFlows;
    let mut transfers = TransferFlows::default();
    let mut sessions = SessionFlows::default();
    let (sim, report) = scenario
        .run(out, &mut [&mut builtin, &mut transfers, &mut sessions])
        .with_context(|| format!("seed {}", scenario.seed))?;
    let end = Instant::ZERO + scenario.duration.0;
    let warm = Duration::try_from_secs_f64(warmup.max(0.0))
        .unwrap_or_default()
        .min(scenario.duration.0 / 2);
    Ok(figures(
        &sim,
        &transfers,
        &sessions,
        report.trace_hash,
        Instant::ZERO + warm,
        end,
    ))
}

/// Prints figures for people.
pub fn print_human(f: &RunFigures) {
    println!(
        "seed {}  trace {}  window {:.1}–{:.1} s",
        f.seed, f.trace_hash, f.window_start_s, f.window_end_s
    );
    for fl in &f.flows {
        println!(
            "  flow {:<24} goodput {:>9.3} Mbit/s  retransmitted {:>10} B  recoveries {:>4}  RTOs {:>3}",
            fl.label,
            fl.goodput_bps / 1e6,
            fl.retransmitted_bytes,
            fl.recovery_episodes,
            fl.rto_events
        );
    }
    if f.flows.len() > 1 {
        println!("  Jain index {:.4}", f.jain_index);
    }
    for s in &f.sessions {
        println!(
            "  session: {} members ({} left)  goodput min {:.3} / median {:.3} / max {:.3} Mbit/s",
            s.members,
            s.members_left,
            s.min_goodput_bps / 1e6,
            s.median_goodput_bps / 1e6,
            s.max_goodput_bps / 1e6
        );
        println!(
            "    {} segments multicast, repairs {} multicast / {} unicast, {} recoveries, {} RTOs; sender link {:.3} B per delivered B",
            s.data_segments, s.multicast_repairs, s.unicast_repairs, s.recovery_episodes, s.rto_events, s.sender_link_bytes_per_delivered_byte
        );
        println!(
            "    feedback at the sender: {:.0} pkt/s, {:.3} Mbit/s, {} dropped by its CPU model",
            s.feedback_pps,
            s.feedback_bps / 1e6,
            s.feedback_cpu_drops
        );
    }
    for l in f.links.iter().filter(|l| l.utilisation > 0.01) {
        println!(
            "  link {:<10} {:>8.2} Mbit/s  utilisation {:>6.2}%  drops {}",
            l.label,
            l.rate_bps as f64 / 1e6,
            l.utilisation * 100.0,
            l.drops
        );
    }
}

/// Runs `fanout sim`.
pub fn run(args: SimArgs) -> Result<()> {
    let f = simulate(&args.scenario, args.seed, args.out.as_deref(), args.warmup)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&f)?);
    } else {
        print_human(&f);
        if let Some(dir) = &args.out {
            println!("  time series and plots in {}", dir.display());
        }
    }
    Ok(())
}
