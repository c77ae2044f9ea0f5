//! The live race's section of `docs/benchmarks.md`: what ran, per
//! scenario a table of every tool at every budget, and the targets the
//! target tool met or missed.

use super::results::{LiveResults, LiveRun};
use crate::bench::report::{describe, median};
use fanout_sim::units::parse_rate_bps;
use std::fmt::Write as _;

/// `median` of `f` over `runs`, formatted with `digits`, or `–`.
fn med(runs: &[&LiveRun], digits: usize, f: impl Fn(&LiveRun) -> Option<f64>) -> String {
    let v: Vec<f64> = runs.iter().filter_map(|r| f(r)).collect();
    median(&v).map_or("–".into(), |m| format!("{m:.digits$}"))
}

/// The Markdown section of `res` (a level-2 heading and below).
pub fn markdown(res: &LiveResults) -> String {
    let mut md = String::new();
    let m = &res.machine;
    let _ = writeln!(md, "## Live streams: fanout against SRT\n");
    let _ = writeln!(
        md,
        "A {:.1} Mbit/s stream of {}-byte messages, {:.0} s long, through each tool on the same \
         emulated paths (a freshly built lab per run). The bench writes every message, numbered, \
         at its time into the sender (fanout: `stream send`'s stdin; SRT: each \
         `srt-live-transmit`'s UDP input) and times it when it comes out of each receiver \
         (`stream recv`'s stdout; SRT's UDP output), on one clock. A budget of k RTT is the \
         deadline of every message, counted from its writing: fanout gets it as `--latency`, SRT \
         as `latency=` (its receiver-side buffer, which counts from the packet's sending \
         time as mapped at the handshake, so SRT reads about one one-way delay after its \
         setting).\n",
        res.rate_bps as f64 / 1e6,
        res.message,
        res.duration_s
    );
    let _ = writeln!(
        md,
        "*loss*: messages a receiver never read (worst receiver); *late*: read after the \
         deadline; *delay*: writing to reading, p50 / p99 / max of the worst receiver; \
         *retransmitted*: the senders' own count of resent datagrams per original one \
         (fanout's `repairs`; SRT's `packetsRetransmitted` over `packetsUnique` from its last report, one per 100 packets); *net loss*: the loss the emulator \
         drew on the links toward the receivers; *wire*: bytes on the sender's link per byte of \
         the stream; *first*: seconds from the stream's start to the first message read.\n"
    );
    let _ = writeln!(md, "Reproduce:\n\n```sh\n{}\n```\n", res.command);
    let _ = writeln!(
        md,
        "Machine: {} × {}, kernel {}, {}; load {:.2} at the start, {:.2} at the end; {}.\n",
        m.cores,
        m.cpu_model,
        m.kernel,
        m.date,
        m.load_start[0],
        m.load_end[0],
        m.versions
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(md, "| tool | how it runs |\n| --- | --- |");
    for t in &res.tools {
        let _ = writeln!(md, "| {} | {} |", t.name, t.about);
    }
    md.push('\n');
    for scn in &res.scenarios {
        let runs: Vec<&LiveRun> = res.runs.iter().filter(|r| r.scenario == scn.name).collect();
        if runs.is_empty() {
            continue;
        }
        let _ = writeln!(md, "### {}: {}\n", scn.name, scn.title);
        let rate = scn
            .rate
            .as_deref()
            .map(|r| format!("; a stream of {r} here"))
            .unwrap_or_default();
        let _ = writeln!(
            md,
            "{}; round trip {} ms{rate}.\n",
            describe(&scn.network()),
            scn.rtt().as_millis()
        );
        for r in res.tcp_references.iter().filter(|r| r.scenario == scn.name) {
            let _ = match (r.mbps, &r.error) {
                (Some(m), _) => writeln!(
                    md,
                    "One kernel TCP flow (bulk, CUBIC) from the sender to \
                     r1 over this path for the stream's duration got **{m:.2} Mbit/s** (the \
                     emulator drew {:.2}% loss toward r1): what a TCP-friendly stream may take \
                     here, against the {} Mbit/s of payload this stream needs.\n",
                    r.network_loss * 100.0,
                    (scn.rate.as_deref())
                        .and_then(|r| parse_rate_bps(r).ok())
                        .unwrap_or(res.rate_bps) as f64
                        / 1e6,
                ),
                (None, e) => writeln!(
                    md,
                    "The reference TCP flow on this path failed: {}\n",
                    e.as_deref().unwrap_or("?")
                ),
            };
        }
        let tcp = scn.competing_tcp.is_some();
        let _ = writeln!(
            md,
            "| budget | tool | runs | loss % | late % | delay p50 / p99 / max ms | retransmitted % | net loss % | wire B/B | first s |{}",
            if tcp { " stream / TCP Mbit/s |" } else { "" }
        );
        let _ = writeln!(
            md,
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |{}",
            if tcp { " --- |" } else { "" }
        );
        for &budget in &scn.budgets_rtt {
            for tool in &res.tools {
                let all: Vec<&LiveRun> = runs
                    .iter()
                    .copied()
                    .filter(|r| r.budget_rtt == budget && r.tool == tool.name)
                    .collect();
                if all.is_empty() {
                    continue;
                }
                let ok: Vec<&LiveRun> = all.iter().copied().filter(|r| r.ok).collect();
                let pct = |f: fn(&LiveRun) -> f64| med(&ok, 3, |r| Some(f(r) * 100.0));
                let _ = write!(
                    md,
                    "| {budget} RTT ({} ms) | {} | {}/{} | {} | {} | {} / {} / {} | {} | {} | {} | {} |",
                    all[0].budget_ms,
                    tool.name,
                    ok.len(),
                    all.len(),
                    pct(LiveRun::loss),
                    pct(LiveRun::late),
                    med(&ok, 1, |r| r.receivers.iter().map(|x| x.delay_p50_ms).reduce(f64::max)),
                    med(&ok, 1, |r| Some(r.delay_p99_ms())),
                    med(&ok, 1, |r| r.receivers.iter().map(|x| x.delay_max_ms).reduce(f64::max)),
                    med(&ok, 2, |r| r.retransmission().map(|x| x * 100.0)),
                    pct(|r| r.network_loss),
                    med(&ok, 3, |r| Some(r.wire_per_byte)),
                    med(&ok, 3, LiveRun::first_data_s),
                );
                if tcp {
                    let _ = write!(
                        md,
                        " {} / {} |",
                        med(&ok, 2, |r| r.tcp.map(|t| t.1)),
                        med(&ok, 2, |r| r.tcp.map(|t| t.0))
                    );
                }
                md.push('\n');
            }
        }
        md.push('\n');
        let invalid = runs.iter().filter(|r| !r.valid).count();
        if invalid > 0 {
            let _ = writeln!(
                md,
                "{invalid} run(s) of this scenario were marked invalid (the emulator fell behind).\n"
            );
        }
        for r in runs.iter().filter(|r| !r.ok) {
            let _ = writeln!(
                md,
                "- failed: {} at {} RTT, run {}: {}\n",
                r.tool,
                r.budget_rtt,
                r.run,
                r.error.as_deref().unwrap_or("?")
            );
        }
    }
    if let Some(tool) = &res.target_tool {
        let missed = res.missed();
        let _ = writeln!(md, "### Targets ({tool})\n");
        if missed.is_empty() {
            let _ = writeln!(md, "Every target of the suite holds in every run.\n");
        } else {
            for (r, what) in missed {
                let _ = writeln!(
                    md,
                    "- **missed** in {} at {} RTT, run {}: {}",
                    r.scenario,
                    r.budget_rtt,
                    r.run,
                    what.join("; ")
                );
            }
            md.push('\n');
        }
    }
    md
}
