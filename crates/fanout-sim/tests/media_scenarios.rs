//! Media rate control (ASMP, TFMCC, PGMCC) in the simulator, on the
//! scenarios of `scenarios/asmp/`: the controllers' rates against TCP flows
//! sharing their bottlenecks and as receivers come and go, and RTCP's
//! share.

mod common;

use fanout_core::Instant;
use fanout_sim::analysis::{figures, RunFigures};
use fanout_sim::scenario::BuiltinFlows;
use fanout_sim::session_media::{
    media_figures, MediaFigures, MediaFlows, MediaMember, MediaSource,
};
use fanout_sim::transfer::TransferFlows;
use fanout_sim::units::HumanDuration;
use fanout_sim::{Scenario, Simulator};
use std::time::Duration;

struct MediaRun {
    flows: RunFigures,
    media: Vec<MediaFigures>,
}

/// Runs `sc` with every media flow's controller set to `cc`: the
/// simulator, its transfers and media flows, and the trace hash.
fn simulate(mut sc: Scenario, cc: &str) -> (Simulator, TransferFlows, MediaFlows, Option<u64>) {
    for f in sc.flows.iter_mut().filter(|f| f.kind == "media") {
        f.params.insert("cc".into(), toml::Value::String(cc.into()));
    }
    let mut transfers = TransferFlows::default();
    let mut media = MediaFlows::default();
    let (sim, report) = sc
        .run(None, &mut [&mut BuiltinFlows, &mut transfers, &mut media])
        .expect("the scenario runs");
    (sim, transfers, media, report.trace_hash)
}

/// Runs `sc` for `secs` with every media flow's controller set to `cc`,
/// measuring from `warmup` s to the end.
fn run(mut sc: Scenario, cc: &str, secs: u64, warmup: u64) -> MediaRun {
    sc.duration = HumanDuration(Duration::from_secs(secs));
    let (sim, transfers, media, trace_hash) = simulate(sc, cc);
    let (from, to) = (
        Instant::ZERO + Duration::from_secs(warmup),
        Instant::ZERO + Duration::from_secs(secs),
    );
    let flows = figures(&sim, &transfers, &Default::default(), trace_hash, from, to);
    MediaRun {
        flows,
        media: media_figures(&sim, &media, from, to),
    }
}

#[test]
fn asmp_reports_set_the_senders_rate_and_rtcp_keeps_to_its_share() {
    // 4 receivers behind 2 Mbit/s each; the encoder would send 4 Mbit/s,
    // so the sender's queue drops what the allowed rate cannot carry.
    for cc in ["asmp-paper", "asmp"] {
        let r = run(common::load("asmp", "four-receivers.toml"), cc, 120, 0);
        four_receivers(cc, &r.media[0]);
    }
}

fn four_receivers(cc: &str, m: &MediaFigures) {
    eprintln!("{m:#?}");
    assert_eq!(m.members.len(), 4);
    for member in &m.members {
        // Every receiver measured a round trip. fanout's is the sender's
        // measurement of the path's 30 ms, plus its queue (at most 50
        // packets of 1356 bytes at 2 Mbit/s: 271 ms), moved by the
        // one-way delay since; the paper's is calibrated per packet.
        let rtt = member.measured_rtt_ms.expect("a round trip");
        if cc == "asmp" {
            assert!((30.0..301.0).contains(&rtt), "{rtt}");
        }
        // What was sent went through the bottleneck with little loss;
        // the rest dropped in the sender's own queue.
        assert!(member.goodput_bps > 0.9 * m.sent_bps, "{member:?}");
    }
    assert!(m.queue_drops > 0);
    // ASMP under-uses its path (the paper's own verdict): a substantial
    // share, never above the bottleneck.
    assert!((0.25 * 2e6..2e6).contains(&m.sent_bps), "{}", m.sent_bps);
    // RTCP within its 5% of the session's traffic (RFC 3550 §6.2).
    assert!(m.rtcp_share < 0.05, "{}", m.rtcp_share);
}

/// The share of its fair share (1/11 of the link) a media flow took on
/// each bottleneck of the two-bottleneck scenario, and the TCP flows' mean
/// share.
fn shares(r: &MediaRun) -> Shares {
    let links = [6.5e6, 11e6];
    r.media
        .iter()
        .zip(links)
        .enumerate()
        .map(|(i, (m, link))| {
            let fair = link / 11.0;
            let tcp: Vec<f64> = r.flows.flows[i * 10..i * 10 + 10]
                .iter()
                .map(|f| f.goodput_bps)
                .collect();
            let tcp_mean = tcp.iter().sum::<f64>() / tcp.len() as f64;
            (m.min_goodput_bps / fair, tcp_mean / fair, m.cov)
        })
        .collect()
}

/// Per bottleneck: the media flow's share of its fair share, the TCP
/// flows' mean share, and the media flow's coefficient of variation.
type Shares = Vec<(f64, f64, f64)>;

/// The two-bottleneck scenario with the media flows' controller `cc` (and
/// RTCP's 5 s minimum interval unless `reduced_rtcp`), seed `seed`, 600 s
/// measured from 50 s: per bottleneck (share, TCP's share, CoV).
fn two_bottlenecks(cc: &str, reduced_rtcp: bool, seed: u64) -> Shares {
    let mut sc = common::load("asmp", "two-bottleneck.toml");
    sc.seed = seed;
    for f in sc.flows.iter_mut().filter(|f| f.kind == "media") {
        f.params.insert(
            "reduced_rtcp_minimum".into(),
            toml::Value::Boolean(reduced_rtcp),
        );
    }
    let s = shares(&run(sc, cc, 600, 50));
    for (i, (m, tcp, cov)) in s.iter().enumerate() {
        eprintln!(
            "{cc:>10} seed {seed} L{}: {:.0}% of its share (TCP {:.0}%), CoV {cov:.3}",
            i + 1,
            m * 100.0,
            tcp * 100.0
        );
    }
    s
}

/// ASMP §5.3.1, Tables I and II, with seeds 1 and 2 (the spread over 8
/// seeds is in docs/experiments/asmp.md). fanout's ASMP takes 90–110% of
/// its fair share on both bottlenecks, and varies less from second to
/// second than TFMCC in the same run; the faithful ASMP (RTCP at its 5 s
/// minimum, as RFC 3550 sets it) under-uses its share on both, as the
/// paper found, and TFMCC takes more than it. The TCP flows keep at least
/// 85% of theirs (the paper: 86–95%).
#[test]
fn two_bottlenecks_asmp_takes_its_share_more_smoothly_than_tfmcc_and_the_papers_under_uses_it() {
    let runs: Vec<(&str, u64, Shares)> = std::thread::scope(|scope| {
        let jobs: Vec<_> = [("asmp", true), ("tfmcc", true), ("asmp-paper", false)]
            .into_iter()
            .flat_map(|(cc, reduced)| [1, 2].map(|seed| (cc, reduced, seed)))
            .map(|(cc, reduced, seed)| {
                scope.spawn(move || (cc, seed, two_bottlenecks(cc, reduced, seed)))
            })
            .collect();
        jobs.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let of = |cc: &str, seed: u64| &runs.iter().find(|r| r.0 == cc && r.1 == seed).unwrap().2;
    for seed in [1, 2] {
        let (asmp, tfmcc, paper) = (of("asmp", seed), of("tfmcc", seed), of("asmp-paper", seed));
        for link in 0..2 {
            let l = link + 1;
            assert!(
                (0.9..=1.1).contains(&asmp[link].0),
                "seed {seed} L{l}: fanout's ASMP took {:.2} of its share",
                asmp[link].0
            );
            assert!(
                asmp[link].2 < tfmcc[link].2,
                "seed {seed} L{l}: CoV {:.3} against TFMCC's {:.3}",
                asmp[link].2,
                tfmcc[link].2
            );
            assert!(
                (0.6..1.0).contains(&paper[link].0),
                "seed {seed} L{l}: the paper's ASMP took {:.2} of its share",
                paper[link].0
            );
            assert!(
                tfmcc[link].0 > paper[link].0,
                "seed {seed} L{l}: TFMCC {:.2} against the paper's ASMP {:.2}",
                tfmcc[link].0,
                paper[link].0
            );
            for s in [asmp, tfmcc, paper] {
                assert!(s[link].1 > 0.85, "seed {seed} L{l}: TCP {:.2}", s[link].1);
            }
        }
    }
}

/// The figures of docs/experiments/asmp.md: the two-bottleneck scenario
/// over seeds 1–8 for each controller (about a minute in release; run with
/// `--ignored --nocapture`; `FANOUT_SWEEP_CC=asmp` runs one controller's
/// cases). Asserts what the default test asserts, on the means.
#[test]
#[ignore]
fn sweep_two_bottlenecks_over_eight_seeds() {
    let cases = [
        ("asmp", true),
        ("tfmcc", true),
        ("asmp-paper", false),
        ("asmp-paper", true),
    ];
    // FANOUT_SWEEP_CC=asmp: only that controller's cases.
    let only = std::env::var("FANOUT_SWEEP_CC").ok();
    let mut means = Vec::new();
    for (cc, reduced) in cases
        .into_iter()
        .filter(|(cc, _)| only.as_deref().is_none_or(|o| o == *cc))
    {
        let runs: Vec<Shares> = std::thread::scope(|scope| {
            let jobs: Vec<_> = (1..=8)
                .map(|seed| scope.spawn(move || two_bottlenecks(cc, reduced, seed)))
                .collect();
            jobs.into_iter().map(|j| j.join().unwrap()).collect()
        });
        let stat = |link: usize, f: fn(&(f64, f64, f64)) -> f64| {
            let xs: Vec<f64> = runs.iter().map(|r| f(&r[link])).collect();
            let mean = xs.iter().sum::<f64>() / xs.len() as f64;
            let (lo, hi) = xs
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
            (mean, lo, hi)
        };
        let rtcp = if reduced { "reduced" } else { "5 s" };
        for link in 0..2 {
            let (s, slo, shi) = stat(link, |r| r.0);
            let (t, _, _) = stat(link, |r| r.1);
            let (c, clo, chi) = stat(link, |r| r.2);
            println!(
                "| `{cc}` (RTCP {rtcp}) | L{} | {:.0}% ({:.0}–{:.0}%) | {:.0}% | {c:.3} ({clo:.3}–{chi:.3}) |",
                link + 1,
                s * 100.0,
                slo * 100.0,
                shi * 100.0,
                t * 100.0
            );
        }
        means.push((cc, reduced, stat(0, |r| r.0).0, stat(1, |r| r.0).0));
    }
    if let Some(asmp) = means.iter().find(|m| m.0 == "asmp") {
        assert!(
            (0.9..=1.1).contains(&asmp.2) && (0.9..=1.1).contains(&asmp.3),
            "{asmp:?}"
        );
    }
}

/// The mean of `app`'s samples of `f` in `(from, to]` seconds.
fn mean_of(
    sim: &Simulator,
    app: fanout_sim::AppId,
    from: f64,
    to: f64,
    f: fn(&fanout_sim::metrics::AppSample) -> f64,
) -> f64 {
    let xs: Vec<f64> = sim.metrics().apps[app.index()]
        .samples
        .iter()
        .filter(|s| {
            let t = s.at.as_secs_f64();
            t > from && t <= to
        })
        .map(f)
        .collect();
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

/// `run(cc)` for each of `ccs`, in parallel: `(cc, what it returned)`.
fn per_controller<T: Send>(
    ccs: &[&'static str],
    run: impl Fn(&'static str) -> T + Sync,
) -> Vec<(&'static str, T)> {
    std::thread::scope(|scope| {
        let jobs: Vec<_> = ccs
            .iter()
            .map(|&cc| {
                let run = &run;
                scope.spawn(move || (cc, run(cc)))
            })
            .collect();
        jobs.into_iter().map(|j| j.join().unwrap()).collect()
    })
}

/// `scenarios/asmp/halving.toml`: at 60 s an unresponsive 2 Mbit/s stream
/// starts over the limiting receiver's 4 Mbit/s link, halving what is left
/// for the media. On five seeds fanout's ASMP is within 10% of the 2 Mbit/s
/// left by 61.5 s (its queue of 50 packets fills first: the first losses
/// come 0.2–0.3 s after the stream starts) and averages within 10% of it
/// over the next 8.5 s. Before it restarted its loss history on an overrun
/// it took 1.5–1.9 s.
#[test]
fn when_the_limiting_path_halves_asmp_is_at_the_new_rate_within_seconds() {
    let band = 1.8e6..=2.2e6;
    for seed in 1..=5 {
        let mut sc = common::load("asmp", "halving.toml");
        sc.seed = seed;
        let (sim, _, media, _) = simulate(sc, "asmp");
        let source = media.flows[0].source;
        let rate = |s: &fanout_sim::metrics::AppSample| s.rate_bps.unwrap_or(0) as f64;
        let entered = sim.metrics().apps[source.index()]
            .samples
            .iter()
            .find(|s| s.at.as_secs_f64() > 60.0 && band.contains(&rate(s)))
            .map(|s| s.at.as_secs_f64());
        let after = mean_of(&sim, source, 61.5, 70.0, rate);
        eprintln!("seed {seed}: within 10% at {entered:?} s, {after:.0} bit/s over 61.5-70 s");
        assert!(
            entered.is_some_and(|t| t <= 61.5),
            "seed {seed}: entered at {entered:?}"
        );
        assert!(band.contains(&after), "seed {seed}: {after}");
    }
}

/// Runs the late-join scenario with `cc`: the simulator and its media flow.
fn late_join(cc: &str) -> (Simulator, fanout_sim::session_media::MediaFlow) {
    let (sim, _, media, _) = simulate(common::load("asmp", "late-join.toml"), cc);
    let flow = media.flows[0].clone();
    (sim, flow)
}

/// ASMP §5.3.2 (Figure 22): a receiver behind 300 kbit/s joins at 50 s and
/// leaves at 100 s. fanout's ASMP and TFMCC both come down to what it can
/// take while it is there and back up after: to at least 80% of the rate
/// before it came, 1.4 times the rate while it was there.
#[test]
fn a_slow_late_joiner_holds_the_rate_down_only_while_it_is_there() {
    for cc in ["asmp", "tfmcc"] {
        let (sim, flow) = late_join(cc);
        let rate = |from, to| {
            mean_of(&sim, flow.source, from, to, |s| {
                s.rate_bps.unwrap_or(0) as f64
            })
        };
        let slow = flow
            .members
            .iter()
            .find(|(n, _)| n == "mr5")
            .expect("mr5")
            .1;
        let slow_got = mean_of(&sim, slow, 55.0, 100.0, |s| s.goodput_bps);
        let (before, during, after) = (rate(20.0, 50.0), rate(55.0, 100.0), rate(110.0, 150.0));
        eprintln!(
            "{cc}: rate {:.0} / {:.0} / {:.0} kbit/s before / while / after the late joiner; it got {:.0}",
            before / 1e3,
            during / 1e3,
            after / 1e3,
            slow_got / 1e3
        );
        assert!(during < 330e3, "{cc}: {during}");
        assert!(slow_got > 150e3, "{cc}: {slow_got}");
        // Near its fair share of the bottleneck (1.5 Mbit/s, 5 flows: 300
        // kbit/s): fanout's ASMP above it, TFMCC at 0.86 of it beside
        // NewReno flows that sample their round trip through the queue
        // while a hole waits for its repair (SACK samples), and take theirs.
        assert!(before > 240e3, "{cc}: {before}");
        assert!(
            after > 0.8 * before && after > 1.4 * during,
            "{cc}: {before} {during} {after}"
        );
    }
}

/// Writes docs/experiments/asmp-late-join.svg: the sender's rate over time
/// in the late-join scenario with each controller (run with `--ignored`).
#[test]
#[ignore]
fn plot_late_join() {
    plot_rates(
        "late-join.toml",
        &["asmp-paper", "asmp", "tfmcc"],
        "Late join of a 300 kbit/s receiver (50–100 s): the sender's rate",
        "asmp-late-join.svg",
    );
}

/// Writes docs/experiments/asmp-pgmcc.svg: the sender's rate over time in
/// pgmcc's bottleneck scenario with each controller (run with
/// `--ignored`).
#[test]
#[ignore]
fn plot_pgmcc_bottleneck() {
    plot_rates(
        "pgmcc-bottleneck.toml",
        &["pgmcc", "asmp", "tfmcc"],
        "L2 500 kbit/s, L1 400 kbit/s: MR1 joins at 50 s, TCP on L2 100–200 s; the sender's rate",
        "asmp-pgmcc.svg",
    );
}

/// Writes docs/experiments/asmp-{competing,heterogeneous,hundred}.svg:
/// the sender's rate over time in those scenarios with each controller
/// (run with `--ignored`).
#[test]
#[ignore]
fn plot_dynamic_scenarios() {
    let all = ["asmp-paper", "asmp", "tfmcc", "pgmcc"];
    plot_rates(
        "competing.toml",
        &all,
        "1 Mbit/s: TCP1 throughout, TCP2 30–120 s, UDP 300 kbit/s 80–170 s; the sender's rate",
        "asmp-competing.svg",
    );
    plot_rates(
        "heterogeneous.toml",
        &all,
        "Receivers losing 0.05–0.15% join every 50 s, leave in reverse from 200 s; the sender's rate",
        "asmp-heterogeneous.svg",
    );
    plot_rates(
        "hundred-receivers.toml",
        &all,
        "10 receivers losing 1%, 90 more from 300 s; the sender's rate",
        "asmp-hundred.svg",
    );
}

/// Plots the allowed rate over time of scenario `file` run with each of
/// `ccs` into docs/experiments/`svg`.
fn plot_rates(file: &str, ccs: &[&str], title: &str, svg: &str) {
    let lines: Vec<fanout_sim::plot::Line> = ccs
        .iter()
        .map(|&cc| {
            let (sim, _, media, _) = simulate(common::load("asmp", file), cc);
            let pts = sim.metrics().apps[media.flows[0].source.index()]
                .samples
                .iter()
                .map(|s| (s.at.as_secs_f64(), s.rate_bps.unwrap_or(0) as f64 / 1e3))
                .collect();
            (cc.to_owned(), pts)
        })
        .collect();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/experiments")
        .join(svg);
    fanout_sim::plot::line_chart(&path, title, "kbit/s", &lines).unwrap();
}

/// ASMP §5.4.1 (Figures 30, 31), pgmcc's own test: a sender with MR2
/// behind L2 (500 kbit/s) from the start, MR1 further behind L1
/// (400 kbit/s) from 50 s, a TCP flow over L2 from 100 s to 200 s. PGMCC
/// fills L2 with MR2 alone, comes down to L1's rate once MR1 is in (MR1
/// becomes the acker), leaves TCP a fair part of L2 while it runs, and
/// returns to L1's rate after; ASMP and TFMCC follow the same path.
#[test]
fn pgmcc_follows_its_slowest_receiver_and_shares_l2_with_tcp() {
    for cc in ["pgmcc", "asmp", "tfmcc"] {
        let (sim, transfers, media, _) =
            simulate(common::load("asmp", "pgmcc-bottleneck.toml"), cc);
        let flow = &media.flows[0];
        let member = |name: &str| flow.members.iter().find(|(n, _)| n == name).unwrap().1;
        let (mr1, mr2) = (member("mr1"), member("mr2"));
        let tcp = transfers.flows[0].receiver;
        let got = |app, from, to| mean_of(&sim, app, from, to, |s| s.goodput_bps) / 1e3;
        let alone = got(mr2, 10.0, 50.0);
        let with_mr1 = got(mr1, 70.0, 100.0);
        let (media_tcp, tcp_got) = (got(mr1, 110.0, 200.0), got(tcp, 110.0, 200.0));
        let after = got(mr1, 230.0, 300.0);
        eprintln!(
            "{cc}: MR2 alone {alone:.0}, with MR1 {with_mr1:.0}, beside TCP {media_tcp:.0} \
             (TCP {tcp_got:.0}), after {after:.0} kbit/s"
        );
        assert!(alone > 400.0, "{cc}: {alone}");
        for r in [with_mr1, after] {
            assert!((300.0..=400.0).contains(&r), "{cc}: {r}");
        }
        // L2 shared: each at least half its fair 250 kbit/s, together most
        // of the link.
        assert!(media_tcp > 125.0 && tcp_got > 125.0, "{cc}");
        assert!(media_tcp + tcp_got > 400.0, "{cc}");
        // The slow receiver limits the rate at the end.
        let source = sim.app::<MediaSource>(flow.source).unwrap().sender();
        let mr1_ssrc = sim.app::<MediaMember>(mr1).unwrap().receiver().ssrc();
        assert_eq!(source.control().limiting_receiver(), Some(mr1_ssrc), "{cc}");
    }
}

/// ASMP §5.4.2 (Figures 32–34): 10 receivers behind their own links that
/// lose 1% at random, 90 more from 300 s, and a TCP flow over a link of
/// the same kind. fanout's ASMP dips when the 90 join and is back within
/// 10 s (the paper: "adjusted again in a few seconds"), and with 100
/// receivers keeps most of what one TCP flow gets on such a path; PGMCC,
/// following one acker, is not moved by the newcomers; neither takes more
/// than 1.25× the TCP flow.
#[test]
fn a_hundred_lossy_receivers_joining_at_once_cost_asmp_only_seconds() {
    // Per controller: kbit/s sent before, as the 90 join, at 308–310 s,
    // after, and TCP's (the two runs in parallel).
    let runs = per_controller(&["asmp", "pgmcc"], |cc| {
        let (sim, transfers, media, _) =
            simulate(common::load("asmp", "hundred-receivers.toml"), cc);
        let source = media.flows[0].source;
        let sent = |from, to| mean_of(&sim, source, from, to, |s| s.goodput_bps) / 1e3;
        let tcp = mean_of(&sim, transfers.flows[0].receiver, 30.0, 600.0, |s| {
            s.goodput_bps
        }) / 1e3;
        let figures = [
            sent(30.0, 300.0),
            sent(300.0, 303.0),
            sent(308.0, 310.0),
            sent(330.0, 600.0),
            tcp,
        ];
        (figures, media.flows[0].members.len())
    });
    for (cc, ([before, dip, recovered, after, tcp], members)) in runs {
        eprintln!(
            "{cc}: {before:.0} kbit/s with 10, {dip:.0} as 90 join, {recovered:.0} at 308–310 s, \
             {after:.0} with 100; TCP {tcp:.0}"
        );
        assert_eq!(members, 100);
        assert!(after < 1.25 * tcp && before < 1.25 * tcp, "{cc}");
        match cc {
            "asmp" => {
                assert!(dip < 0.8 * before, "the newcomers are felt");
                assert!(recovered > 0.7 * before, "{recovered} vs {before}");
                assert!(after > 0.8 * tcp, "{after} vs TCP {tcp}");
            }
            _ => assert!(after > 0.9 * before, "{after} vs {before}"),
        }
    }
}

/// ASMP §5.3.4 (Figures 26–28): a 1 Mbit/s bottleneck shared with TCP1
/// throughout, TCP2 from 30 s to 120 s and 300 kbit/s of UDP from 80 s to
/// 170 s. fanout's ASMP and TFMCC give way when the UDP stream joins the
/// two TCP flows, take the room back when the competitors leave, leave
/// every TCP flow a part, and ASMP never falls below 100 kbit/s in any
/// second (the paper: "never below about 100 kbit/s").
#[test]
fn competing_traffic_comes_and_goes_and_asmp_never_starves() {
    for cc in ["asmp", "tfmcc"] {
        let (sim, transfers, media, _) = simulate(common::load("asmp", "competing.toml"), cc);
        let member = media.flows[0].members[0].1;
        let got = |app, from, to| mean_of(&sim, app, from, to, |s| s.goodput_bps) / 1e3;
        let (tcp1, tcp2) = (transfers.flows[0].receiver, transfers.flows[1].receiver);
        let with_tcp2 = got(member, 40.0, 80.0);
        let with_udp = got(member, 90.0, 120.0);
        let udp_only = got(member, 130.0, 170.0);
        let alone_again = got(member, 180.0, 200.0);
        let least = sim.metrics().apps[member.index()]
            .samples
            .iter()
            .filter(|s| s.at.as_secs_f64() > 10.0)
            .map(|s| s.goodput_bps)
            .fold(f64::MAX, f64::min)
            / 1e3;
        eprintln!(
            "{cc}: {with_tcp2:.0} beside two TCP flows, {with_udp:.0} with UDP too, \
             {udp_only:.0} beside TCP1 and UDP, {alone_again:.0} beside TCP1 again; \
             least second {least:.0} kbit/s"
        );
        assert!(with_udp < 0.9 * with_tcp2, "{cc} gives way");
        assert!(alone_again > udp_only, "{cc} takes the room back");
        for (tcp, from, to) in [
            (tcp1, 40.0, 120.0),
            (tcp2, 40.0, 120.0),
            (tcp1, 130.0, 200.0),
        ] {
            assert!(got(tcp, from, to) > 100.0, "{cc}: TCP keeps a part");
        }
        if cc == "asmp" {
            assert!(least > 100.0, "{least}");
        }
    }
}

/// ASMP §5.3.3 (Figure 25): receivers losing 0.05%, 0.08%, 0.12% and
/// 0.15% join one every 50 s and leave in reverse from 200 s. The rate
/// steps down as lossier receivers join and back up as they leave, and
/// with all four in, stays near what one TCP flow gets at the lossiest's
/// 0.15% (about 8 Mbit/s here).
#[test]
fn a_changing_group_of_lossy_receivers_steps_the_rate_down_and_up() {
    let runs = per_controller(&["asmp", "tfmcc"], |cc| {
        let (sim, _, media, _) = simulate(common::load("asmp", "heterogeneous.toml"), cc);
        let source = media.flows[0].source;
        [(20.0, 50.0), (170.0, 200.0), (320.0, 350.0)]
            .iter()
            .map(|&(a, b)| mean_of(&sim, source, a, b, |s| s.goodput_bps) / 1e6)
            .collect::<Vec<f64>>()
    });
    for (cc, r) in runs {
        let (one, four, one_again) = (r[0], r[1], r[2]);
        eprintln!(
            "{cc}: {one:.1} Mbit/s with r1, {four:.1} with all four, {one_again:.1} with r1 again"
        );
        assert!(four < 0.85 * one && four < 0.85 * one_again, "{cc}");
        assert!((6.0..10.0).contains(&four), "{cc}: {four}");
    }
}

/// ASMP §3.8 at scale (`scenarios/asmp/star-1000.toml`): 1000 receivers
/// behind their own lossy links. Once every receiver has reported (the
/// first rounds, with nothing heard yet to suppress by, let more through),
/// fewer than 20 rate reports reach the sender a round, and RTCP stays
/// within 5% of the RTP payload over the whole run (RFC 3550 §6.2).
#[test]
fn a_thousand_receivers_send_few_rate_reports_a_round_within_rtcps_share() {
    let mut sc = common::load("asmp", "star-1000.toml");
    sc.duration = HumanDuration(Duration::from_secs(600));
    let mut media = MediaFlows::default();
    let mut sim = sc
        .build(&mut [&mut BuiltinFlows, &mut media])
        .expect("the scenario builds");
    let at = |s: u64| Instant::ZERO + Duration::from_secs(s);
    let counts = |sim: &Simulator| {
        let f = media_figures(sim, &media, at(0), sim.now())
            .pop()
            .expect("the media flow");
        (f.rate_reports as f64, f.rounds, f.rtcp_share)
    };
    sim.run_until(at(300));
    let (reports_then, rounds_then, _) = counts(&sim);
    sim.run_until(at(600));
    let (reports, rounds, rtcp_share) = counts(&sim);
    let per_round = (reports - reports_then) / (rounds - rounds_then);
    eprintln!(
        "{reports} rate reports in {rounds:.1} rounds ({reports_then} in the first \
         {rounds_then:.1}); {per_round:.1} a round over 300–600 s; RTCP {:.2}% of the payload",
        rtcp_share * 100.0
    );
    assert!(rounds - rounds_then >= 3.0, "{rounds_then} {rounds}");
    assert!(per_round <= 20.0, "{per_round}");
    assert!(rtcp_share <= 0.05, "{rtcp_share}");
}
