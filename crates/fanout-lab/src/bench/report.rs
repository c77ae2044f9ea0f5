//! The Markdown report (`docs/benchmarks.md`) from a results JSON: per
//! scenario a table of every tool's figures and their ratios to fanout, the
//! fairness table, the target for scenario (b), machine notes and
//! run-to-run spread, and every failed or invalid run with its reason.

use super::results::{Results, RunResult};
use super::suite::{ScenarioSpec, ToolKind};
use std::fmt::Write as _;

/// The target for the 4-receiver, 100 Mbit/s scenario at 200 MiB.
pub mod target {
    /// The scenario it applies to.
    pub const SCENARIO: &str = "b";
    /// The tool it applies to.
    pub const TOOL: &str = "fanout";
    /// File size it was stated for.
    pub const SIZE: u64 = 200 << 20;
    /// Wall time, seconds.
    pub const WALL_S: f64 = 18.5;
    /// Bytes on the sender's link per file byte.
    pub const WIRE: f64 = 1.05;
    /// Sender CPU seconds.
    pub const SENDER_CPU_S: f64 = 1.0;
    /// The physical limit (200 MiB at 100 Mbit/s with headers), seconds.
    pub const LIMIT_S: f64 = 17.5;
}

/// Summary of one (scenario, tool) over its runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Runs in total.
    pub runs: usize,
    /// Runs that completed with every file verified.
    pub ok: usize,
    /// Of those, runs whose emulator kept up.
    pub ok_valid: usize,
    /// Wall seconds of the counted runs (see [`Stats::counted_valid`]).
    pub wall: Vec<f64>,
    /// Slowest receiver's goodput per counted run, Mbit/s.
    pub goodput_min: Vec<f64>,
    /// Mean receiver goodput per counted run, Mbit/s.
    pub goodput_mean: Vec<f64>,
    /// Wire bytes per file byte per counted run.
    pub wire: Vec<f64>,
    /// Sender CPU seconds per counted run.
    pub sender_cpu: Vec<f64>,
    /// Mean receiver CPU seconds per counted run.
    pub receiver_cpu: Vec<f64>,
    /// CPU seconds of every process of the run together (sender, all
    /// receivers, the emulator) per counted run: what the machine spent.
    pub total_cpu: Vec<f64>,
    /// Receivers verified / receivers, over all runs.
    pub verified: (usize, usize),
    /// TCP and tool Mbit/s per counted run (fairness scenarios).
    pub tcp: Vec<(f64, f64)>,
    /// Whether the figures come from valid runs (`false`: only invalid
    /// runs completed, and their figures are shown marked).
    pub counted_valid: bool,
}

impl Stats {
    /// Summarises `runs`: figures from the valid completed runs, or if
    /// there are none, from the invalid completed ones (marked).
    pub fn of<'a>(runs: impl Iterator<Item = &'a RunResult>) -> Self {
        let runs: Vec<&RunResult> = runs.collect();
        let mut s = Stats {
            runs: runs.len(),
            ..Stats::default()
        };
        for r in &runs {
            s.verified.0 += r.receivers.iter().filter(|x| x.verified).count();
            s.verified.1 += r.receivers.len();
        }
        let ok: Vec<&&RunResult> = runs.iter().filter(|r| r.ok && r.wall_s.is_some()).collect();
        s.ok = ok.len();
        s.ok_valid = ok.iter().filter(|r| r.valid).count();
        s.counted_valid = s.ok_valid > 0;
        for r in ok.iter().filter(|r| r.valid == s.counted_valid) {
            s.wall.extend(r.wall_s);
            let g: Vec<f64> = r.receivers.iter().filter_map(|x| x.goodput_mbps).collect();
            if !g.is_empty() {
                s.goodput_min
                    .push(g.iter().copied().fold(f64::INFINITY, f64::min));
                s.goodput_mean.push(g.iter().sum::<f64>() / g.len() as f64);
            }
            s.wire.push(r.wire_per_file_byte);
            s.sender_cpu.extend(r.sender_cpu_s);
            if let Some(c) = r.receiver_cpu_s {
                s.receiver_cpu.push(c / r.receivers.len().max(1) as f64);
            }
            if let (Some(a), Some(b), Some(e)) =
                (r.sender_cpu_s, r.receiver_cpu_s, r.emulator_cpu_s)
            {
                s.total_cpu.push(a + b + e);
            }
            if let Some(t) = &r.tcp {
                s.tcp.push((t.tcp_mbps, t.tool_mbps));
            }
        }
        s
    }
}

/// Median of `v` (`None` if empty).
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// `median` or `median (min–max)` when there are several values.
fn spread(v: &[f64], digits: usize) -> String {
    match median(v) {
        None => "–".into(),
        Some(m) if v.len() == 1 => format!("{m:.digits$}"),
        Some(m) => {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})")
        }
    }
}

fn ratio(v: Option<f64>, base: Option<f64>) -> String {
    match (v, base) {
        (Some(v), Some(b)) if b > 0.0 => format!("{:.2}×", v / b),
        _ => "–".into(),
    }
}

/// One line about a run, for progress output.
pub fn one_line(r: &RunResult) -> String {
    let wall = r.wall_s.map_or("–".into(), |w| format!("{w:.2} s"));
    // A stream's receivers have bytes to count, not a file to verify.
    let got = if r.receivers.iter().any(|x| x.stream_bytes.is_some()) {
        let streamed = r
            .receivers
            .iter()
            .filter(|x| x.stream_bytes.is_some_and(|b| b > 0))
            .count();
        format!("{streamed}/{} got the stream", r.receivers.len())
    } else {
        let verified = r.receivers.iter().filter(|x| x.verified).count();
        format!("{verified}/{} verified", r.receivers.len())
    };
    let mut line = format!(
        "{}: wall {wall}, {got}, wire {:.3} B/B, sender CPU {}, lateness p99 {} us{}",
        if r.ok { "ok" } else { "FAILED" },
        r.wire_per_file_byte,
        r.sender_cpu_s.map_or("–".into(), |c| format!("{c:.2} s")),
        r.lateness_p99_us,
        if r.valid { "" } else { " INVALID" },
    );
    if let Some(t) = &r.tcp {
        let _ = write!(
            line,
            ", tool {:.1} vs TCP {:.1} Mbit/s",
            t.tool_mbps, t.tcp_mbps
        );
    }
    if let Some(e) = &r.error {
        let _ = write!(line, "; {e}");
    }
    if let Some(why) = r.invalid_reason.as_ref().filter(|_| !r.valid) {
        let _ = write!(line, "; invalid: {why}");
    }
    for x in &r.receivers {
        if let Some(p) = &x.problem {
            let _ = write!(line, "; {}: {p}", x.host);
        }
    }
    line
}

/// One line describing the network of `s`.
pub fn describe(s: &ScenarioSpec) -> String {
    let receiver_delay = s.receiver_delay.as_deref().unwrap_or(&s.delay);
    let mut d = if s.hosts.is_empty() {
        format!(
            "{} receivers; sender link {} ({} one-way), receiver links {} ({receiver_delay} one-way)",
            s.receivers, s.sender_rate, s.delay, s.receiver_rate,
        )
    } else {
        let groups: Vec<String> = s
            .hosts
            .iter()
            .map(|g| {
                let mut t = format!(
                    "{}× {} ({} one-way",
                    g.count,
                    g.rate,
                    g.delay.as_deref().unwrap_or(receiver_delay)
                );
                if let Some(l) = g.loss.filter(|l| *l > 0.0) {
                    let _ = write!(t, ", {:.1}% loss", l * 100.0);
                }
                t + ")"
            })
            .collect();
        format!(
            "{} receivers; sender link {} ({} one-way), receiver links {}",
            s.receivers,
            s.sender_rate,
            s.delay,
            groups.join(", ")
        )
    };
    if let Some(slow) = &s.slow {
        let _ = write!(d, "; {} receiver(s) behind {}", slow.receivers, slow.rate);
    }
    if s.loss > 0.0 {
        let kind = match s.loss_burst {
            Some(b) => format!("bursty (Gilbert–Elliott, bursts of {b:.0} packets on average)"),
            None => "Bernoulli".into(),
        };
        let _ = write!(
            d,
            "; {:.1}% {kind} loss on every receiver link (both directions)",
            s.loss * 100.0
        );
    }
    if let Some(c) = &s.competing_tcp {
        let _ = write!(
            d,
            "; dumbbell: sender and a kernel TCP ({}) source share a {} link ({} one-way), the flow starts {:.0} s before the transfer",
            c.cc, c.bottleneck_rate, c.delay, c.warmup_s
        );
    }
    if let Some(q) = s.queue_packets {
        let _ = write!(d, "; DropTail queues of {q} packets");
    } else {
        d.push_str("; DropTail queues of 100 packets");
    }
    if s.receive_steering {
        d.push_str(
            "; receive steering: the emulator on a CPU of its own, the hosts' packet input on \
             the others (so per-process CPU includes some of other hosts' input; all CPU s is \
             complete)",
        );
    }
    if s.profile == crate::topo::Profile::Kernel {
        d.push_str(
            "; links by the kernel (bridge, tbf, nftables) instead of the user-space emulator: \
             no emulator thread shares the CPUs, and forwarding is charged to the hosts",
        );
    }
    d
}

/// The names of the figure files [`super::plot::write_all`] writes, with
/// their captions.
pub const PLOTS: [(&str, &str); 3] = [
    ("wall.svg", "Wall time (s), median; a gap: no completed run"),
    ("wire.svg", "Bytes on the sender's link per file byte"),
    ("sender_cpu.svg", "Sender CPU seconds"),
];

/// The whole report. `img_rel` is the plots' directory relative to the
/// report; `regen` the command that regenerates the report; `notes`
/// Markdown written by whoever ran it (explanations: why a target was
/// missed), included as a section.
pub fn markdown(res: &Results, img_rel: &str, regen: &str, notes: Option<&str>) -> String {
    let mut md = String::new();
    let m = &res.machine;
    let mib = res.size as f64 / f64::from(1u32 << 20);
    let _ = writeln!(
        md,
        "# Benchmarks: fanout, uftp and udpcast on the same emulated networks\n"
    );
    let _ = writeln!(
        md,
        "Generated by `fanout lab report` from the results of {} `fanout lab bench` invocation{}; \
         do not edit by hand. Every (scenario, tool) ran on a freshly built lab \
         (namespaces joined by the user-space link emulator, see [lab.md](lab.md)), \
         receivers first, then the sender; the tools ran one after the other, interleaved per run.\n",
        match res.command.lines().count() {
            0 | 1 => "one".to_owned(),
            n => n.to_string(),
        },
        if res.command.lines().count() > 1 { "s (one per line below)" } else { "" }
    );
    if !m.fanout_release_build {
        let _ = writeln!(
            md,
            "> **Not final figures.** fanout was a debug build. Re-run with a release build for \
             figures to quote.\n"
        );
    }
    let _ = writeln!(
        md,
        "Load averages below count the suite's own processes too (the emulator thread and 5 to 17 \
         programs per run), so a 1-minute load near the number of cores is what the suite itself \
         makes; the notes say whether anything else ran. The *all CPU s* column gives each run's own \
         CPU seconds.\n"
    );
    let _ = writeln!(md, "Reproduce:\n\n```sh\n{}\n{regen}\n```\n", res.command);
    let _ = writeln!(md, "## Machine\n");
    let _ = writeln!(md, "| | |\n| --- | --- |");
    let _ = writeln!(md, "| CPU | {} × {} |", m.cores, m.cpu_model);
    let _ = writeln!(md, "| kernel | {} |", m.kernel);
    let _ = writeln!(md, "| date | {} |", m.date);
    let _ = writeln!(
        md,
        "| load average (1/5/15 min) | start {:.2} / {:.2} / {:.2}; end {:.2} / {:.2} / {:.2} |",
        m.load_start[0],
        m.load_start[1],
        m.load_start[2],
        m.load_end[0],
        m.load_end[1],
        m.load_end[2]
    );
    let loads: Vec<f64> = res.results.iter().map(|r| r.load_before[0]).collect();
    if !loads.is_empty() {
        let lo = loads.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = loads.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let _ = writeln!(md, "| 1-min load before each run | {lo:.2} to {hi:.2} |");
    }
    for (k, v) in &m.versions {
        let _ = writeln!(md, "| {k} | {v} |");
    }
    let _ = writeln!(
        md,
        "| fanout build | {} |",
        if m.fanout_release_build {
            "release"
        } else {
            "debug"
        }
    );
    let _ = writeln!(
        md,
        "| file | {mib:.0} MiB ({} bytes) of pseudo-random data |",
        res.size
    );
    let _ = writeln!(md, "| runs per (scenario, tool) | {} |\n", res.runs);
    let _ = writeln!(md, "## Tools and their rate settings\n");
    let _ = writeln!(
        md,
        "| tool | sender arguments added | rate |\n| --- | --- | --- |"
    );
    for t in &res.tools {
        let _ = writeln!(
            md,
            "| {} | `{}` | {} |",
            t.name,
            if t.args.is_empty() {
                "(none)".to_owned()
            } else {
                t.args.join(" ")
            },
            t.rate
        );
    }
    let _ = writeln!(
        md,
        "\nThe full command lines are in `crates/fanout-lab/src/bench/tool.rs`: udpcast and uftp use \
         239.x groups for rendez-vous and announcements (the emulator forwards neither broadcast nor \
         224.0.0.0/24), uftp names every receiver with `-H` so it starts once all registered, \
         udpcast waits with `--min-receivers`, fanout with `--wait-for`.\n"
    );
    let _ = writeln!(md, "## What is measured\n");
    let _ = writeln!(
        md,
        "- **wall s**: from the sender's start until the last receiver had the whole file (its exit; \
         for uftpd, which does not exit, the moment `-t` renamed the finished temporary file to its \
         final name). Handshakes and waiting for receivers are included. Median over runs, (min–max) when several.\n\
         - **goodput**: file bits over each receiver's own completion time, Mbit/s: the slowest receiver / the mean.\n\
         - **wire B/B**: bytes the emulator serialised on the sender's link away from the sender \
         (IP datagrams, headers included) per file byte; 1.0 would be every byte once with free headers, \
         1400-byte datagrams carry about 2% of headers.\n\
         - **sender / receiver CPU s**: user + system seconds of the process (the `times` builtin of a \
         wrapper shell once it was reaped); receiver CPU is the mean per receiver.\n\
         - **all CPU s**: the sender's, every receiver's and the emulator thread's CPU seconds together \
         (the emulator's writes into the hosts' TUN devices carry their kernels' receive path): what \
         the machine spent on the run; near cores × wall s, the run was bound by the machine's CPU.\n\
         - **verified**: received files with the source's size and BLAKE3 hash, over all runs.\n\
         - **runs ok / valid**: completed with every file verified / of those, runs whose emulator \
         kept its p99 release lateness within 1 ms. Figures come from valid runs; if none was valid they \
         come from invalid ones and are marked ⚠.\n"
    );
    target_section(&mut md, res);
    if let Some(notes) = notes.map(str::trim).filter(|n| !n.is_empty()) {
        let _ = writeln!(md, "## Notes\n\n{notes}\n");
    }
    let _ = writeln!(md, "## Results per scenario\n");
    for (file, caption) in PLOTS {
        let _ = writeln!(md, "![{caption}]({img_rel}/{file})\n");
    }
    for s in &res.scenarios {
        scenario_section(&mut md, res, s);
    }
    failures_section(&mut md, res);
    md
}

fn stats_of(res: &Results, scenario: &str, tool: &str) -> Stats {
    Stats::of(
        res.results
            .iter()
            .filter(|r| r.scenario == scenario && r.tool == tool),
    )
}

fn target_section(md: &mut String, res: &Results) {
    let _ = writeln!(md, "## The target (scenario b)\n");
    let _ = writeln!(
        md,
        "Target: 200 MiB to 4 receivers each behind 100 Mbit/s, fanout with its TCP-friendly default in at most \
         {} s wall (physical limit about {} s; measured elsewhere: udpcast 19.6 s, NORM-CC 21.7 s, \
         uftp-TFMCC 31.3 s), at most {}× bytes on the wire, at most {} s of sender CPU.\n",
        target::WALL_S,
        target::LIMIT_S,
        target::WIRE,
        target::SENDER_CPU_S
    );
    if !res.scenarios.iter().any(|s| s.name == target::SCENARIO)
        || !res.tools.iter().any(|t| t.name == target::TOOL)
    {
        let _ = writeln!(
            md,
            "Not evaluated: scenario b or fanout was not part of this run.\n"
        );
        return;
    }
    if res.size != target::SIZE {
        let _ = writeln!(
            md,
            "Not evaluated: this run used {} bytes, the target is stated for 200 MiB.\n",
            res.size
        );
        return;
    }
    let s = stats_of(res, target::SCENARIO, target::TOOL);
    let check = |name: &str, v: Option<f64>, limit: f64, unit: &str| -> String {
        match v {
            None => format!("| {name} | – | ≤ {limit}{unit} | no completed run |"),
            Some(v) if v <= limit => format!("| {name} | {v:.3}{unit} | ≤ {limit}{unit} | met |"),
            Some(v) => format!(
                "| {name} | {v:.3}{unit} | ≤ {limit}{unit} | **not met**: {:.3}{unit} over ({:+.1}%) |",
                v - limit,
                (v / limit - 1.0) * 100.0
            ),
        }
    };
    let _ = writeln!(
        md,
        "| figure (fanout, median) | measured | target | verdict |\n| --- | --- | --- | --- |"
    );
    let _ = writeln!(
        md,
        "{}",
        check("wall", median(&s.wall), target::WALL_S, " s")
    );
    let _ = writeln!(
        md,
        "{}",
        check(
            "wire bytes per file byte",
            median(&s.wire),
            target::WIRE,
            ""
        )
    );
    let _ = writeln!(
        md,
        "{}",
        check(
            "sender CPU",
            median(&s.sender_cpu),
            target::SENDER_CPU_S,
            " s"
        )
    );
    if !s.counted_valid {
        let _ = writeln!(
            md,
            "\n⚠ no valid run: the figures above come from runs whose emulator fell behind."
        );
    }
    let runs: Vec<&RunResult> = res
        .results
        .iter()
        .filter(|r| r.scenario == target::SCENARIO && r.tool == target::TOOL)
        .collect();
    let load = runs.iter().map(|r| r.load_before[0]).fold(0.0, f64::max);
    let _ = writeln!(
        md,
        "\nThese runs started at a 1-minute load average of up to {load:.1} on {} cores (the \
         suite's own processes included); load from other work would inflate the sender's CPU \
         seconds and could stretch the wall time.",
        res.machine.cores
    );
    if let (Some(w), Some(g)) = (median(&s.wall), median(&s.goodput_min)) {
        let _ = writeln!(
            md,
            "\nfanout's slowest receiver got {g:.1} Mbit/s of its 100 Mbit/s link; the wall time is \
             {:.2} s above the physical limit of about {} s (handshake and waiting for the 4 \
             receivers included).",
            w - target::LIMIT_S,
            target::LIMIT_S
        );
    }
    let _ = writeln!(md);
}

fn scenario_section(md: &mut String, res: &Results, s: &ScenarioSpec) {
    let _ = writeln!(md, "### ({}) {}\n", s.name, s.title);
    let _ = writeln!(md, "{}.\n", describe(s));
    let base = stats_of(res, s.name.as_str(), target::TOOL);
    let (base_wall, base_wire) = (median(&base.wall), median(&base.wire));
    let _ = writeln!(
        md,
        "| tool | runs ok / valid / total | wall s | goodput Mbit/s (slowest / mean) | wire B/B | sender CPU s | receiver CPU s | all CPU s | verified | wall vs fanout | wire vs fanout |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for t in &res.tools {
        let st = stats_of(res, &s.name, &t.name);
        if st.runs == 0 {
            continue;
        }
        let mark = if st.ok > 0 && !st.counted_valid {
            " ⚠"
        } else {
            ""
        };
        let goodput = match (median(&st.goodput_min), median(&st.goodput_mean)) {
            (Some(a), Some(b)) => format!("{a:.1} / {b:.1}"),
            _ => "–".into(),
        };
        // A stream has no file to verify.
        let verified = if t.kind == ToolKind::Media {
            "stream".to_owned()
        } else {
            format!("{} / {}", st.verified.0, st.verified.1)
        };
        let _ = writeln!(
            md,
            "| {}{mark} | {} / {} / {} | {} | {goodput} | {} | {} | {} | {} | {verified} | {} | {} |",
            t.name,
            st.ok,
            st.ok_valid,
            st.runs,
            spread(&st.wall, 2),
            spread(&st.wire, 3),
            spread(&st.sender_cpu, 2),
            spread(&st.receiver_cpu, 2),
            spread(&st.total_cpu, 1),
            ratio(median(&st.wall), base_wall),
            ratio(median(&st.wire), base_wire),
        );
    }
    if s.competing_tcp.is_some() {
        let _ = writeln!(
            md,
            "\nFairness: each side's goodput while the transfer ran (the TCP flow's bytes at its sink over the \
             transfer's wall time; the transfer's file bits over the same time). A stream (media tools) is \
             measured over its duration: the bytes the receiver that got least received, and the TCP flow's \
             over the same span; its wall time is the stream's, its wire B/B the sender's link bytes per \
             byte a receiver got.\n"
        );
        let _ = writeln!(
            md,
            "| tool | tool Mbit/s | TCP Mbit/s | tool / TCP |\n| --- | --- | --- | --- |"
        );
        for t in &res.tools {
            let st = stats_of(res, &s.name, &t.name);
            if st.tcp.is_empty() {
                continue;
            }
            let tcp: Vec<f64> = st.tcp.iter().map(|x| x.0).collect();
            let tool: Vec<f64> = st.tcp.iter().map(|x| x.1).collect();
            let ratios: Vec<f64> = st
                .tcp
                .iter()
                .filter(|x| x.0 > 0.0)
                .map(|x| x.1 / x.0)
                .collect();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} |",
                t.name,
                spread(&tool, 1),
                spread(&tcp, 1),
                spread(&ratios, 2)
            );
        }
    }
    reference_table(md, res, s);
    host_table(md, res, s);
    let _ = writeln!(md);
}

/// Where receivers sit behind links of different rates (`hosts`): each
/// host's link, its physical bound, and the seconds until each tool's
/// runs had the verified file there (median, with the spread), the
/// overlay's parent beside its time.
fn host_table(md: &mut String, res: &Results, s: &ScenarioSpec) {
    if s.hosts.is_empty() {
        return;
    }
    fn runs<'a>(
        res: &'a Results,
        s: &'a ScenarioSpec,
        tool: &'a str,
    ) -> impl Iterator<Item = &'a RunResult> {
        res.results
            .iter()
            .filter(move |r| r.scenario == s.name && r.tool == tool)
    }
    let tools: Vec<&str> = res
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .filter(|t| runs(res, s, t).next().is_some())
        .collect();
    if tools.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "\nPer host: seconds until it held the verified file (median of the runs; never = not in \
         that run), against its physical bound (file bits over the lesser of its link's and the \
         sender's rate); `← p`: its parent in the overlay's tree.\n"
    );
    let _ = writeln!(
        md,
        "| host | link | bound s | {} |\n| --- | --- | --- |{}",
        tools.join(" | "),
        " --- |".repeat(tools.len())
    );
    for i in 0..s.receivers {
        let host = super::scenario::receiver_name(i);
        let of = |r: &'_ RunResult| r.receivers.iter().find(|x| x.host == host).cloned();
        let bound = tools
            .iter()
            .flat_map(|t| runs(res, s, t))
            .filter_map(|r| of(r)?.bound_s)
            .next()
            .map_or("–".into(), |b| format!("{b:.1}"));
        let cells: Vec<String> = tools
            .iter()
            .map(|t| {
                let got: Vec<_> = runs(res, s, t).filter_map(of).collect();
                let done: Vec<f64> = got.iter().filter_map(|x| x.done_s).collect();
                let mut cell = if done.len() == got.len() && !done.is_empty() {
                    spread(&done, 1)
                } else if done.is_empty() {
                    "never".into()
                } else {
                    format!(
                        "{} ({} of {} runs)",
                        spread(&done, 1),
                        done.len(),
                        got.len()
                    )
                };
                if let Some(p) = got.iter().find_map(|x| x.parent.as_deref()) {
                    let _ = write!(cell, " ← {p}");
                }
                cell
            })
            .collect();
        let _ = writeln!(
            md,
            "| {host} | {} | {bound} | {} |",
            super::scenario::receiver_link(s, i).rate,
            cells.join(" | ")
        );
    }
}

/// The scenario's reference flow beside each tool's rate to every receiver.
fn reference_table(md: &mut String, res: &Results, s: &ScenarioSpec) {
    let Some(r) = res.tcp_references.iter().find(|r| r.scenario == s.name) else {
        return;
    };
    let Some(reference) = r.mbps else {
        let why = r.error.as_deref().unwrap_or("no figure");
        let _ = writeln!(md, "\nThe reference flow failed: {why}.");
        return;
    };
    let _ = writeln!(
        md,
        "\nOne kernel {} flow from {} to {} alone on this topology, measured after the tools for {} s: \
         {reference:.2} Mbit/s (the emulator dropped {:.2}% toward {} at random). Each tool's rate to every \
         receiver (file bits over its wall time) against it:\n",
        super::reference::REFERENCE_CC,
        super::scenario::SENDER,
        super::scenario::receiver_name(0),
        s.reference_duration().as_secs_f64(),
        r.network_loss * 100.0,
        super::scenario::receiver_name(0),
    );
    let _ = writeln!(
        md,
        "| tool | Mbit/s | × the reference | target |\n| --- | --- | --- | --- |"
    );
    for t in &res.tools {
        let rates: Vec<f64> = res
            .results
            .iter()
            .filter(|x| x.scenario == s.name && x.tool == t.name)
            .filter_map(|x| res.run_mbps(x))
            .collect();
        if rates.is_empty() {
            continue;
        }
        let ratios: Vec<f64> = rates.iter().map(|x| x / reference).collect();
        let target = t
            .reference_target
            .map_or("–".into(), |x| format!("≥ {x:.2}"));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {target} |",
            t.name,
            spread(&rates, 2),
            spread(&ratios, 2)
        );
    }
}

/// Most characters of one receiver's problem shown in the report.
const PROBLEM_CHARS: usize = 240;

/// `line` on one Markdown line: newlines become ` ⏎ `, each `; `-separated
/// part is cut to [`PROBLEM_CHARS`].
fn compact(line: &str) -> String {
    line.split("; ")
        .map(|part| {
            let flat = part.trim().replace('\n', " ⏎ ");
            if flat.chars().count() > PROBLEM_CHARS {
                let cut: String = flat.chars().take(PROBLEM_CHARS).collect();
                format!("{cut}…")
            } else {
                flat
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn failures_section(md: &mut String, res: &Results) {
    let bad: Vec<&RunResult> = res.results.iter().filter(|r| !r.ok || !r.valid).collect();
    let _ = writeln!(md, "## Failed and invalid runs\n");
    if bad.is_empty() {
        let _ = writeln!(
            md,
            "None: every run completed, every file verified, the emulator kept up."
        );
        return;
    }
    for r in bad {
        let _ = writeln!(
            md,
            "- ({}) {}, run {}: {}",
            r.scenario,
            r.tool,
            r.run,
            compact(&one_line(r))
        );
        if !r.ok && !r.sender_log_tail.is_empty() {
            let _ = writeln!(md, "\n  ```text");
            for l in r.sender_log_tail.lines().take(8) {
                let _ = writeln!(md, "  {l}");
            }
            let _ = writeln!(md, "  ```");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streams_run_line_counts_who_got_it_not_files_verified() {
        let mut r = crate::bench::measure::failed("stopped".into());
        let rx = |host: &str, bytes| crate::bench::results::ReceiverResult {
            host: host.into(),
            done_s: None,
            goodput_mbps: None,
            verified: false,
            stream_bytes: bytes,
            exit_code: Some(0),
            cpu_s: None,
            problem: None,
            bound_s: None,
            predicted_mbps: None,
            parent: None,
        };
        r.receivers = vec![rx("r1", Some(10)), rx("r2", Some(0))];
        assert!(
            one_line(&r).contains("1/2 got the stream"),
            "{}",
            one_line(&r)
        );
        r.receivers = vec![rx("r1", None)];
        assert!(one_line(&r).contains("0/1 verified"), "{}", one_line(&r));
    }

    #[test]
    fn hosts_behind_different_links_get_a_row_each() {
        let mut res = crate::bench::merge::tests::part("15:00", "0.1.0", "o", &["overlay", "bt"]);
        let s = &mut res.scenarios[0];
        s.receivers = 2;
        s.hosts = vec![
            crate::bench::suite::HostGroup {
                count: 1,
                rate: "100Mbit".into(),
                delay: None,
                loss: None,
            },
            crate::bench::suite::HostGroup {
                count: 1,
                rate: "10Mbit".into(),
                delay: None,
                loss: None,
            },
        ];
        let rx = |host: &str, done: Option<f64>, parent: Option<&str>| {
            crate::bench::results::ReceiverResult {
                host: host.into(),
                done_s: done,
                goodput_mbps: None,
                verified: done.is_some(),
                stream_bytes: None,
                exit_code: Some(0),
                cpu_s: None,
                problem: None,
                bound_s: Some(if host == "r1" { 0.1 } else { 0.8 }),
                predicted_mbps: None,
                parent: parent.map(Into::into),
            }
        };
        for (tool, r1, r2) in [
            ("overlay", 0.2, Some(1.0)),
            ("overlay", 0.4, None),
            ("bt", 0.3, Some(2.0)),
        ] {
            let mut run = crate::bench::measure::failed(String::new());
            run.scenario = "o".into();
            run.tool = tool.into();
            let parent = (tool == "overlay").then_some("snd");
            run.receivers = vec![
                rx("r1", Some(r1), parent),
                rx("r2", r2, parent.map(|_| "r1")),
            ];
            res.results.push(run);
        }
        let mut md = String::new();
        host_table(&mut md, &res, &res.scenarios[0]);
        assert!(
            md.contains("| host | link | bound s | overlay | bt |"),
            "{md}"
        );
        assert!(
            md.contains("| r1 | 100Mbit | 0.1 | 0.3 (0.2–0.4) ← snd | 0.3 |"),
            "{md}"
        );
        assert!(
            md.contains("| r2 | 10Mbit | 0.8 | 1.0 (1 of 2 runs) ← r1 | 2.0 |"),
            "{md}"
        );
        // A scenario without host groups has no such table.
        res.scenarios[0].hosts.clear();
        let mut md = String::new();
        host_table(&mut md, &res, &res.scenarios[0]);
        assert!(md.is_empty());
    }

    #[test]
    fn median_and_spread() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0]), Some(2.5));
        assert_eq!(spread(&[2.0], 1), "2.0");
        assert_eq!(spread(&[3.0, 1.0, 2.0], 1), "2.0 (1.0–3.0)");
        assert_eq!(ratio(Some(3.0), Some(2.0)), "1.50×");
        assert_eq!(ratio(Some(3.0), None), "–");
        assert_eq!(compact("a\nb; c"), "a ⏎ b; c");
        assert!(compact(&"x".repeat(500)).ends_with('…'));
    }
}
