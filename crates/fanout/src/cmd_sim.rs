//! `fanout sim SCENARIO.toml [--seed N] [--out DIR]`.

use anyhow::{Context, Result};
use clap::Args;
use fanout_core::Instant;
use fanout_sim::analysis::{figures, RunFigures};
use fanout_sim::scenario::BuiltinFlows;
use fanout_sim::session_flow::SessionFlows;
use fanout_sim::session_live::{live_figures, LiveFlows};
use fanout_sim::session_media::{media_figures, MediaFlows};
use fanout_sim::session_overlay::{overlay_figures, OverlayFlows};
use fanout_sim::transfer::TransferFlows;
use fanout_sim::Scenario;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Arguments of `fanout sim`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fanout sim scenarios/smo/star-100.toml --json | jq .sessions[0].min_goodput_bps
  fanout sim scenarios/red-4m5.toml --out out/red    # CSV series and SVG plots
  fanout sim scenarios/red-4m5.toml --seed 7         # same seed, same trace")]
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
    /// Measurement ends here, in seconds (default: the scenario's end), so
    /// a bounded transfer can be measured while it is still running.
    #[arg(long, value_name = "SECS")]
    pub until: Option<f64>,
    /// Print the figures as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Runs a parsed scenario; returns the figures over `[warmup, duration]`.
pub fn simulate_scenario(
    scenario: Scenario,
    seed: Option<u64>,
    out: Option<&Path>,
    warmup: f64,
) -> Result<RunFigures> {
    simulate_window(scenario, seed, out, warmup, None)
}

/// Runs a parsed scenario; returns the figures over `[warmup, until]`
/// (`until` defaults to the duration and is clamped to it).
pub fn simulate_window(
    mut scenario: Scenario,
    seed: Option<u64>,
    out: Option<&Path>,
    warmup: f64,
    until: Option<f64>,
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
    let mut live = LiveFlows::default();
    let mut media = MediaFlows::default();
    let mut overlay = OverlayFlows::default();
    let (sim, report) = scenario
        .run(
            out,
            &mut [
                &mut builtin,
                &mut transfers,
                &mut sessions,
                &mut live,
                &mut media,
                &mut overlay,
            ],
        )
        .with_context(|| format!("seed {}", scenario.seed))?;
    let end = until
        .and_then(|u| Duration::try_from_secs_f64(u.max(0.0)).ok())
        .map_or(scenario.duration.0, |u| u.min(scenario.duration.0));
    let warm = Duration::try_from_secs_f64(warmup.max(0.0))
        .unwrap_or_default()
        .min(end / 2);
    let end = Instant::ZERO + end;
    let mut f = figures(
        &sim,
        &transfers,
        &sessions,
        report.trace_hash,
        Instant::ZERO + warm,
        end,
    );
    f.live = live_figures(&sim, &live);
    f.media = media_figures(&sim, &media, Instant::ZERO + warm, end);
    f.overlay = overlay_figures(&sim, &overlay, Instant::ZERO + warm, end);
    Ok(f)
}

/// Figures for people, one line each.
pub fn human_report(f: &RunFigures) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "seed {}  trace {}  window {:.1}–{:.1} s",
        f.seed,
        f.trace_hash.as_deref().unwrap_or("off"),
        f.window_start_s,
        f.window_end_s
    );
    for fl in &f.flows {
        let _ = writeln!(
            out,
            "  flow {:<24} goodput {:>9.3} Mbit/s  retransmitted {:>10} B  recoveries {:>4}  RTOs {:>3}",
            fl.label,
            fl.goodput_bps / 1e6,
            fl.retransmitted_bytes,
            fl.recovery_episodes,
            fl.rto_events
        );
    }
    if f.flows.len() > 1 {
        let _ = writeln!(out, "  Jain index {:.4}", f.jain_index);
    }
    if !f.flows.is_empty() && !f.sessions.is_empty() {
        let _ = writeln!(
            out,
            "  Jain index with sessions (each at its slowest member) {:.4}",
            f.jain_index_with_sessions
        );
    }
    for s in &f.sessions {
        let _ = writeln!(
            out,
            "  session: {} members ({} left)  goodput min {:.3} / median {:.3} / max {:.3} Mbit/s",
            s.members,
            s.members_left,
            s.min_goodput_bps / 1e6,
            s.median_goodput_bps / 1e6,
            s.max_goodput_bps / 1e6
        );
        let _ = writeln!(
            out,
            "    {} segments multicast, repairs {} multicast / {} unicast ({} spurious), {} recoveries ({} undone), {} RTOs; sender link {:.3} B per delivered B",
            s.data_segments, s.multicast_repairs, s.unicast_repairs, s.spurious_repairs, s.recovery_episodes, s.recoveries_undone, s.rto_events, s.sender_link_bytes_per_delivered_byte
        );
        if s.multicast_repairs > 0 {
            let _ = writeln!(
            out,
                "    multicast repairs: {:.2} members served per copy, {} of a segment multicast again before",
                s.members_per_multicast_repair, s.repeat_multicast_repairs
            );
        }
        let _ = writeln!(
            out,
            "    feedback at the sender: {:.0} pkt/s, {:.3} Mbit/s, {} dropped by its CPU model",
            s.feedback_pps,
            s.feedback_bps / 1e6,
            s.feedback_cpu_drops
        );
        for r in &s.relays {
            let _ = writeln!(
            out,
                "    relay {}: upstream {:.3} Mbit/s; {} members ({} left) goodput min {:.3} / median {:.3} / max {:.3} Mbit/s",
                r.node,
                r.upstream_goodput_bps / 1e6,
                r.members,
                r.members_left,
                r.goodput.min_bps / 1e6,
                r.goodput.median_bps / 1e6,
                r.goodput.max_bps / 1e6
            );
        }
        if let Some(g) = &s.relayed {
            let _ = writeln!(
            out,
                "    all {} receivers behind relays: goodput min {:.3} / median {:.3} / max {:.3} Mbit/s",
                g.count,
                g.min_bps / 1e6,
                g.median_bps / 1e6,
                g.max_bps / 1e6
            );
        }
        for l in &s.late_joiners {
            let _ = writeln!(
            out,
                "    late joiner {} at {:.1} s: start {} B, session {} B ({}), catch-up {} B ({}); complete: {}",
                l.node,
                l.joined_at_s,
                l.start_offset,
                l.session_bytes,
                if l.session_finished { "finished" } else { "running" },
                l.catch_up_bytes,
                if l.catch_up_finished { "finished" } else { "running" },
                l.complete
            );
        }
    }
    for m in &f.media {
        let _ = writeln!(
            out,
            "  media ({}): {} members, allowed rate mean {:.3} Mbit/s, sent {:.3}; slowest member {:.3} Mbit/s (CoV {:.3}); {} rate reports in {:.1} rounds ({} suppressed); RTCP {:.2}% of RTP; queue dropped {}",
            m.cc,
            m.members.len(),
            m.mean_rate_bps / 1e6,
            m.sent_bps / 1e6,
            m.min_goodput_bps / 1e6,
            m.cov,
            m.rate_reports,
            m.rounds,
            m.suppressed,
            m.rtcp_share * 100.0,
            m.queue_drops
        );
    }
    for o in &f.overlay {
        let _ = writeln!(
            out,
            "  overlay: {} B object, the source wrote {:.2} copies",
            o.object_bytes, o.source_copies
        );
        for h in &o.hosts {
            let decoded = h.decoded_s.map_or_else(
                || "not decoded".to_owned(),
                |s| format!("decoded at {s:.2} s"),
            );
            let per_byte = h
                .bytes_per_object_byte
                .map_or_else(String::new, |b| format!(", {b:.4} B read per object byte"));
            let _ = writeln!(
                out,
                "    {:<18} from {:<18} {:>9.3} Mbit/s  {decoded}{per_byte}{}",
                h.host,
                h.parent,
                h.rate_bps / 1e6,
                h.error
                    .as_ref()
                    .map_or_else(String::new, |e| format!("; gave up: {e}"))
            );
        }
    }
    for l in &f.live {
        let _ = writeln!(
            out,
            "  live: {} members, {} messages written, {:.3} Mbit/s delivered each; perceived loss mean {:.3}% / max {:.3}%; \
             delay p50 {:.1} / p99 {:.1} / max {:.1} ms, {} read late, {} dropped late; jitter {:.1} ms; reordering index {:.2}",
            l.members,
            l.written,
            l.delivered_bps / 1e6,
            l.mean_perceived_loss * 100.0,
            l.max_perceived_loss * 100.0,
            l.delay_p50_ms,
            l.delay_p99_ms,
            l.delay_max_ms,
            l.late,
            l.dropped_late,
            l.jitter_ms,
            l.reordering_index
        );
        let _ = writeln!(
            out,
            "    sender: {} SKIPs, {} B repaired ({} repairs sent twice), {} messages dropped from its queue; {} recoveries, {} RTOs",
            l.skips_sent, l.repair_bytes, l.second_copies, l.queue_dropped, l.recovery_episodes, l.rto_events
        );
    }
    for l in f.links.iter().filter(|l| l.utilisation > 0.01) {
        let _ = writeln!(
            out,
            "  link {:<10} {:>8.2} Mbit/s  utilisation {:>6.2}%  drops {}",
            l.label,
            l.rate_bps as f64 / 1e6,
            l.utilisation * 100.0,
            l.drops
        );
    }
    out
}

/// Runs `fanout sim`.
pub fn run(args: SimArgs) -> Result<()> {
    let f = simulate_window(
        Scenario::load(&args.scenario)?,
        args.seed,
        args.out.as_deref(),
        args.warmup,
        args.until,
    )?;
    let mut text = if args.json {
        serde_json::to_string_pretty(&f)? + "\n"
    } else {
        human_report(&f)
    };
    if let (false, Some(dir)) = (args.json, &args.out) {
        let _ = writeln!(text, "  time series and plots in {}", dir.display());
    }
    crate::report::print_stdout(&text)
}
