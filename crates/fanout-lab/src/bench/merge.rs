//! One report from several `fanout lab bench` invocations (e.g. the slow
//! lossy scenario run once, the others several times): their results are
//! merged into one [`Results`], keeping every run and saying which
//! invocations and machines states they came from.

use super::results::Results;

/// Merges `parts` (at least one) in order. All must be for the same file
/// size and machine (cores, kernel). Tools and scenarios are the union by
/// name (first definition kept); runs are concatenated; `command` lists
/// every invocation, one per line; reference flows are concatenated (the
/// report takes a scenario's first); the machine notes keep the first part's
/// hardware and start load and the last part's end load, and join each
/// differing version or date with "; ". Scenarios end up sorted by name.
pub fn merge(parts: Vec<Results>) -> Result<Results, String> {
    let mut parts = parts.into_iter();
    let mut all = parts.next().ok_or("no results to merge")?;
    for (i, p) in parts.enumerate() {
        let which = format!("results file {}", i + 2);
        if p.size != all.size {
            return Err(format!(
                "{which}: file size {} differs from {}",
                p.size, all.size
            ));
        }
        let (m, n) = (&all.machine, &p.machine);
        if (m.cores, &m.kernel) != (n.cores, &n.kernel) {
            return Err(format!(
                "{which}: taken on another machine ({} cores, kernel {})",
                n.cores, n.kernel
            ));
        }
        all.command = format!("{}\n{}", all.command, p.command);
        all.runs = all.runs.max(p.runs);
        let m = &mut all.machine;
        m.date = join_distinct(&m.date, &n.date);
        m.load_end = n.load_end;
        m.fanout_release_build &= n.fanout_release_build;
        for (k, v) in &n.versions {
            let joined = m.versions.get(k).map_or(v.clone(), |w| join_distinct(w, v));
            m.versions.insert(k.clone(), joined);
        }
        for t in p.tools {
            if !all.tools.iter().any(|u| u.name == t.name) {
                all.tools.push(t);
            }
        }
        for s in p.scenarios {
            if !all.scenarios.iter().any(|u| u.name == s.name) {
                all.scenarios.push(s);
            }
        }
        all.results.extend(p.results);
        all.tcp_references.extend(p.tcp_references);
    }
    all.scenarios.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(all)
}

/// `a`, or `a; b` when `b` is different and not already listed.
fn join_distinct(a: &str, b: &str) -> String {
    if a.split("; ").any(|x| x == b) {
        a.to_owned()
    } else {
        format!("{a}; {b}")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bench::results::{Machine, TcpReference};
    use crate::bench::suite::{ScenarioSpec, ToolKind, ToolSpec};

    /// Results of one invocation: `tools` in `scenario`, no runs yet.
    pub(crate) fn part(date: &str, fanout: &str, scenario: &str, tools: &[&str]) -> Results {
        Results {
            suite: "s.toml".into(),
            command: format!("fanout lab bench --only {scenario}"),
            size: 1 << 20,
            runs: 1,
            machine: Machine {
                cores: 2,
                cpu_model: "cpu".into(),
                kernel: "6.18".into(),
                load_start: [1.0; 3],
                load_end: [2.0; 3],
                date: date.into(),
                versions: [("fanout".to_owned(), fanout.to_owned())].into(),
                fanout_release_build: true,
            },
            tools: tools
                .iter()
                .map(|t| ToolSpec::new(t, ToolKind::Fanout, "r"))
                .collect(),
            scenarios: vec![ScenarioSpec {
                name: scenario.into(),
                title: "t".into(),
                receivers: 1,
                sender_rate: "1Gbit".into(),
                receiver_rate: "1Gbit".into(),
                delay: "1ms".into(),
                receiver_delay: None,
                loss: 0.0,
                loss_burst: None,
                reorder: None,
                slow: None,
                hosts: Vec::new(),
                competing_tcp: None,
                queue_packets: None,
                timeout: None,
                receive_steering: false,
                tcp_reference: false,
                tcp_reference_s: None,
                profile: Default::default(),
            }],
            results: Vec::new(),
            tcp_references: Vec::new(),
        }
    }

    #[test]
    fn the_overlay_race_targets_miss_where_they_should() {
        let mut r = part("15:00", "0.1.0", "o", &["overlay", "bt", "tcp"]);
        let rx = |host: &str, done: Option<f64>, bound: f64, predicted: Option<f64>| {
            crate::bench::results::ReceiverResult {
                host: host.into(),
                done_s: done,
                goodput_mbps: done.map(|d| 8.0 * 1.048576 / d),
                verified: done.is_some(),
                stream_bytes: None,
                exit_code: Some(0),
                cpu_s: None,
                problem: None,
                bound_s: Some(bound),
                predicted_mbps: predicted,
                parent: None,
            }
        };
        for (tool, wall) in [("overlay", 2.0), ("bt", 2.5), ("tcp", 5.0)] {
            let mut run = crate::bench::measure::failed(String::new());
            run.scenario = "o".into();
            run.tool = tool.into();
            run.ok = true;
            run.wall_s = Some(wall);
            r.results.push(run);
        }
        // r1 within 10% of its 1.0 s bound and its predicted 8 Mbit/s; r2
        // 1.5× its bound and under its prediction; r3 never done.
        r.results[0].receivers = vec![
            rx("r1", Some(1.05), 1.0, Some(8.0)),
            rx("r2", Some(2.0), 4.0 / 3.0, Some(8.0)),
        ];
        let o = &mut r.tools[0];
        o.bound_target = Some(0.1);
        o.predicted_target = Some(0.1);
        o.finish_within = [("bt".to_owned(), 1.0), ("tcp".to_owned(), 0.5)].into();
        let whats = |r: &Results| -> Vec<String> {
            r.target_misses().iter().map(|m| m.what.clone()).collect()
        };
        let missed = whats(&r);
        assert_eq!(missed.len(), 2, "{missed:?}");
        assert!(missed[0].starts_with("r2 done at 2.0 s") && missed[1].starts_with("r2 at 4.2"));
        // Slower than half the unicast copies' time, and a host that never
        // finished.
        r.results[0].wall_s = Some(2.6);
        r.results[0].receivers.push(rx("r3", None, 1.0, Some(8.0)));
        let missed = whats(&r);
        assert!(missed.iter().any(|m| m.starts_with("r3 done at never")));
        assert!(missed.iter().any(|m| m.contains("1× bt's 2.5 s")));
        assert!(missed.iter().any(|m| m.contains("0.5× tcp's 5.0 s")));
        // Where the others did not finish nothing is compared.
        for run in &mut r.results[1..] {
            run.ok = false;
        }
        assert!(!whats(&r).iter().any(|m| m.starts_with("all done")));
    }

    #[test]
    fn a_run_below_its_tools_reference_target_is_a_miss() {
        let mut r = part("15:00", "0.1.0", "d", &["fast", "slow", "free"]);
        for t in &mut r.tools {
            t.reference_target = (t.name != "free").then_some(0.9);
        }
        r.scenarios[0].tcp_reference = true;
        r.tcp_references.push(TcpReference {
            scenario: "d".into(),
            mbps: Some(8.0),
            network_loss: 0.01,
            error: None,
        });
        // 1 MiB in 1.0 s is 8.39 Mbit/s (1.05×); in 2.0 s, 0.52×.
        for (tool, wall) in [
            ("fast", Some(1.0)),
            ("slow", Some(2.0)),
            ("free", Some(9.0)),
        ] {
            let mut run = crate::bench::measure::failed(String::new());
            run.scenario = "d".into();
            run.tool = tool.into();
            run.ok = true;
            run.wall_s = wall;
            r.results.push(run);
        }
        // Bytes on the wire and the race against another tool.
        r.tools[0].wire_target = Some(1.10);
        r.tools[0].faster_than = vec!["slow".into(), "absent".into()];
        r.tools[2].faster_than = vec!["fast".into()];
        r.results[0].wire_per_file_byte = 1.12;
        let misses = r.target_misses();
        let missed: Vec<(&str, &str)> = misses
            .iter()
            .map(|m| (m.run.tool.as_str(), &m.what[..m.what.find(' ').unwrap()]))
            .collect();
        assert_eq!(missed, [("fast", "1.120"), ("free", "wall")], "{missed:?}");
        // Where no reference flow was measured the targets are not checked.
        let mut elsewhere = r.clone();
        for run in &mut elsewhere.results {
            run.scenario = "b".into();
        }
        assert!(elsewhere.target_misses().is_empty());
        let misses = r.reference_misses();
        assert_eq!(misses.len(), 1, "{misses:?}");
        assert_eq!(misses[0].run.tool, "slow");
        let ratio = misses[0].ratio.unwrap();
        assert!((ratio - 8.0 * 1.048576 / 2.0 / 8.0).abs() < 1e-9);
        // A reference that gave no figure cannot vouch for anyone.
        let mut failed = r.clone();
        failed.tcp_references[0].mbps = None;
        assert_eq!(failed.reference_misses().len(), 2);
        // The references of several invocations are kept.
        let m = merge(vec![r.clone(), part("16:00", "0.1.0", "g", &["fast"])]).unwrap();
        assert_eq!(m.reference_mbps("d"), Some(8.0));
        assert_eq!(m.reference_mbps("g"), None);
    }

    #[test]
    fn shares_against_a_competing_flow_are_checked_against_their_targets() {
        use crate::bench::results::TcpShare;
        use crate::bench::suite::Competing;
        let mut r = part("15:00", "0.1.0", "f", &["near", "far", "peer", "free"]);
        r.scenarios[0].competing_tcp = Some(Competing {
            bottleneck_rate: "100Mbit".into(),
            delay: "10ms".into(),
            cc: "cubic".into(),
            warmup_s: 2.0,
        });
        for t in &mut r.tools[..2] {
            t.share_target = Some([0.5, 2.0]);
            t.closer_than = vec!["peer".into()];
        }
        // near 0.8×, far 2.5×, peer 0.44× and 0.5× (geometric mean 0.47×);
        // free 0.1× with no targets.
        for (tool, tool_mbps) in [
            ("near", 40.0),
            ("far", 125.0),
            ("peer", 22.0),
            ("peer", 25.0),
            ("free", 5.0),
        ] {
            let mut run = crate::bench::measure::failed(String::new());
            run.scenario = "f".into();
            run.tool = tool.into();
            run.ok = true;
            run.wall_s = Some(60.0);
            run.tcp = Some(TcpShare {
                tcp_mbps: 50.0,
                tool_mbps,
            });
            r.results.push(run);
        }
        let what = |r: &Results| -> Vec<String> {
            r.target_misses()
                .iter()
                .map(|m| format!("{}: {}", m.run.tool, m.what))
                .collect()
        };
        assert_eq!(
            what(&r),
            [
                "far: 2.50× the TCP flow, target 0.5–2×",
                "far: 2.50× the TCP flow, not nearer 1× than peer (0.47×)"
            ]
        );
        // A failed run has no share; without the named tool's runs there
        // is nothing to be nearer than.
        r.results[0].ok = false;
        r.results.retain(|x| x.tool != "peer");
        assert_eq!(
            what(&r),
            [
                "near: no share measured, target 0.5–2×",
                "far: 2.50× the TCP flow, target 0.5–2×"
            ]
        );
        // Without a competing flow no share is asked for.
        r.scenarios[0].competing_tcp = None;
        assert!(what(&r).is_empty());
    }

    #[test]
    fn unions_tools_and_scenarios_and_records_both_invocations() {
        let mut d = part("15:00", "0.1.0 (git a)", "d", &["fanout", "fanout-fair"]);
        d.runs = 1;
        let mut b = part("16:00", "0.1.0 (git b)", "b", &["fanout", "uftp"]);
        b.runs = 2;
        let m = merge(vec![d, b]).unwrap();
        let names = |v: Vec<&str>| v.join(",");
        assert_eq!(
            names(m.tools.iter().map(|t| t.name.as_str()).collect()),
            "fanout,fanout-fair,uftp"
        );
        assert_eq!(
            names(m.scenarios.iter().map(|s| s.name.as_str()).collect()),
            "b,d"
        );
        assert_eq!(m.runs, 2);
        assert_eq!(m.command.lines().count(), 2);
        assert_eq!(m.machine.date, "15:00; 16:00");
        assert_eq!(m.machine.versions["fanout"], "0.1.0 (git a); 0.1.0 (git b)");
    }

    #[test]
    fn refuses_other_sizes_and_machines() {
        let mut other = part("x", "v", "b", &["fanout"]);
        other.size = 2 << 20;
        assert!(merge(vec![part("x", "v", "d", &["fanout"]), other])
            .unwrap_err()
            .contains("size"));
        let mut other = part("x", "v", "b", &["fanout"]);
        other.machine.cores = 4;
        assert!(merge(vec![part("x", "v", "d", &["fanout"]), other])
            .unwrap_err()
            .contains("machine"));
        assert!(merge(Vec::new()).is_err());
    }
}
