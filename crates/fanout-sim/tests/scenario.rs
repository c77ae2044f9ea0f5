//! Scenario files: parsing, error messages, building, running and outputs.

use fanout_core::Instant;
use fanout_sim::analysis::figures;
use fanout_sim::apps::CountingSink;
use fanout_sim::scenario::{ScenarioContext, TraceSpec};
use fanout_sim::session_flow::SessionFlows;
use fanout_sim::transfer::TransferFlows;
use fanout_sim::{FlowFactory, FlowSpec, NetDrop, Scenario, ScenarioError, Simulator, TraceLevel};
use std::path::{Path, PathBuf};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/cbr-red.toml")
}

fn out_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("fanout-sim-{}-{name}", std::process::id()))
}

const MINI: &str = r#"
seed = 3
duration = "1s"

[[node]]
name = "a"
ip = "10.0.0.1"

[[node]]
name = "b"
ip = "10.0.0.2"

[[link]]
from = "a"
to = "b"
rate = "10Mbit"
delay = "5ms"
duplex = true
"#;

fn parse_err(extra: &str) -> String {
    let text = format!("{MINI}{extra}");
    match Scenario::from_toml(&text, "bad.toml").and_then(|s| s.build(&mut []).map(|_| ())) {
        Ok(()) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn example_scenario_runs_and_writes_outputs() {
    let mut sc = Scenario::load(&example()).unwrap();
    sc.duration.0 = std::time::Duration::from_secs(4);
    let dir = out_dir("example");
    let (sim, report) = sc.run(Some(&dir), &mut []).unwrap();
    for f in [
        "links.csv",
        "apps.csv",
        "summary.txt",
        "throughput.svg",
        "queue.svg",
        "goodput.svg",
    ] {
        let p = dir.join(f);
        assert!(
            p.metadata().map(|m| m.len() > 100).unwrap_or(false),
            "missing {}",
            p.display()
        );
    }
    assert!(report.summary.contains("seed 1"), "{}", report.summary);
    // The RED bottleneck is overloaded from t = 1 s and drops early.
    let r1 = sim.node_by_name("r1").unwrap();
    let r2 = sim.node_by_name("r2").unwrap();
    let bottleneck = sim.link(sim.link_between(r1, r2).unwrap());
    assert!(
        bottleneck.stats().drops[NetDrop::RedEarly] > 0,
        "{}",
        report.summary
    );
    // d3 joined the group at 2 s and receives the multicast stream.
    let d3 = sim.node_by_name("d3").unwrap();
    let app = sim.node(d3).app_on_port(7000).unwrap();
    assert!(sim.app::<CountingSink>(app).unwrap().packets() > 100);
    // Same seed, same trace.
    assert!(report.trace_hash.is_some(), "the example is traced");
    let (_, again) = sc.run(None, &mut []).unwrap();
    assert_eq!(report.trace_hash, again.trace_hash, "seed {}", sc.seed);
    std::fs::remove_dir_all(&dir).ok();
}

/// A CBR flow a -> b for [`MINI`].
const CBR: &str = r#"
[[flow]]
kind = "cbr"
from = "a:5000"
to = "b:6000"
rate = "1Mbit"
"#;

/// Only a traced run reports a trace hash (an untraced run's would be the
/// hash of an empty trace, the same for every run); tracing does not change
/// the run.
#[test]
fn only_a_traced_run_reports_a_trace_hash() {
    let run = |trace: TraceSpec| {
        let mut sc = Scenario::from_toml(&format!("{MINI}{CBR}"), "mini.toml").unwrap();
        sc.trace = trace;
        let (sim, report) = sc.run(None, &mut []).unwrap();
        let figs = figures(
            &sim,
            &TransferFlows::default(),
            &SessionFlows::default(),
            report.trace_hash,
            Instant::ZERO,
            Instant::ZERO + sc.duration.0,
        );
        (report, figs.trace_hash)
    };
    let (off, off_figs) = run(TraceSpec::Off);
    assert_eq!((off.trace_hash, off_figs), (None, None));
    assert!(!off.summary.contains("trace_hash"), "{}", off.summary);
    let (on, on_figs) = run(TraceSpec::Hash);
    let hash = on.trace_hash.expect("traced run has a hash");
    let empty_trace = fanout_sim::trace::Trace::new(TraceLevel::Hash).hash();
    assert_ne!(hash, empty_trace, "the run's events were traced");
    assert_eq!(on_figs, Some(format!("{hash:016x}")));
    assert!(
        on.summary.contains(&format!("trace_hash {hash:016x}")),
        "{}",
        on.summary
    );
    assert!(on.events > 100);
    assert_eq!(on.events, off.events);
}

#[test]
fn bad_unit_names_file_and_field() {
    let e = parse_err("[[link]]\nfrom = \"b\"\nto = \"a\"\nrate = \"10Mbyte\"\ndelay = \"1ms\"\n");
    assert!(e.starts_with("bad.toml: "), "{e}");
    assert!(e.contains("unknown rate unit `Mbyte`"), "{e}");
    assert!(e.contains("rate"), "{e}");
    let e = parse_err("[[link]]\nfrom = \"b\"\nto = \"a\"\nrate = 1000\ndelay = 25\n");
    assert!(e.contains("missing duration unit"), "{e}");
}

#[test]
fn unknown_keys_are_rejected() {
    let e = parse_err("[[node]]\nname = \"c\"\nip = \"10.0.0.3\"\ncolour = \"red\"\n");
    assert!(e.contains("unknown field `colour`"), "{e}");
    let e = parse_err("[[link]]\nfrom = \"b\"\nto = \"a\"\nrate = 1\ndelay = \"1ms\"\nqueue = { kind = \"red\", min_th = 5, max_th = 15, packets = 9, maxp = 1 }\n");
    assert!(e.contains("unknown field `maxp`"), "{e}");
    let e = parse_err(
        "[[flow]]\nkind = \"cbr\"\nfrom = \"a:1\"\nto = \"b:2\"\nrate = \"1Mbit\"\nburst = 3\n",
    );
    assert!(
        e.contains("flow[0]") && e.contains("unknown field `burst`"),
        "{e}"
    );
    let e = parse_err("[[link]]\nfrom = \"b\"\nto = \"a\"\nrate = 1\ndelay = \"1ms\"\nloss = { model = \"bernoulli\", p = 0.1, q = 3 }\n");
    assert!(e.contains("unknown field `q`"), "{e}");
    let e = parse_err("[[link]]\nfrom = \"b\"\nto = \"a\"\nrate = 1\ndelay = \"1ms\"\nloss = { model = \"gilbert\" }\n");
    assert!(e.contains("unknown variant `gilbert`"), "{e}");
}

#[test]
fn explicit_group_tree_and_static_routes_build() {
    let text = format!(
        "{MINI}[[node]]\nname = \"c\"\nip = \"10.0.0.3\"\n\
         [[link]]\nfrom = \"b\"\nto = \"c\"\nrate = \"1Gbit\"\ndelay = \"1ms\"\nduplex = true\n\
         [[route]]\nnode = \"a\"\ndest = \"10.0.0.0/24\"\nvia = \"b\"\n\
         [[group]]\naddr = \"239.2.2.2\"\nmembers = [\"c\"]\ntree = {{ a = [\"b\"], b = [\"c\"] }}\n\
         [[flow]]\nkind = \"cbr\"\nfrom = \"a:1\"\nto = \"239.2.2.2:9\"\nrate = \"800kbit\"\npacket = 1000\nstop = \"100ms\"\n"
    );
    let sc = Scenario::from_toml(&text, "tree.toml").unwrap();
    let (sim, _) = sc.run(None, &mut []).unwrap();
    let c = sim.node_by_name("c").unwrap();
    assert_eq!(sim.node(c).stats().delivered_packets, 10);
}

#[test]
fn semantic_errors_name_the_field() {
    let e = parse_err("[[link]]\nfrom = \"b\"\nto = \"zz\"\nrate = 1\ndelay = \"1ms\"\n");
    assert!(e.contains("link[1].to") && e.contains("`zz`"), "{e}");
    let e = parse_err("[[flow]]\nkind = \"tcp\"\n");
    assert!(e.contains("unknown flow kind `tcp`"), "{e}");
    let e = parse_err("[[link]]\nfrom = \"b\"\nto = \"a\"\nrate = 1\ndelay = \"1ms\"\nloss = { model = \"bernoulli\", p = 2.0 }\n");
    assert!(e.contains("link[1]") && e.contains("p = 2"), "{e}");
    let e = parse_err("[[link]]\nfrom = \"b\"\nto = \"a\"\nrate = 1\ndelay = \"1ms\"\nqueue = { kind = \"red\", min_th = 20, max_th = 15, packets = 9 }\n");
    assert!(e.contains("min_th < max_th"), "{e}");
}

/// A caller-supplied flow kind, as the transport crate will provide.
struct Pinger {
    built: usize,
}

impl FlowFactory for Pinger {
    fn build(
        &mut self,
        spec: &FlowSpec,
        sim: &mut Simulator,
        _ctx: &ScenarioContext,
    ) -> Result<bool, String> {
        if spec.kind != "ping" {
            return Ok(false);
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct P {
            at: String,
        }
        let p: P = spec.parse()?;
        let addr = sim.resolve(&p.at).map_err(|e| e.to_string())?;
        sim.add_app(addr, Box::new(CountingSink::new()))
            .map_err(|e| e.to_string())?;
        self.built += 1;
        Ok(true)
    }
}

#[test]
fn custom_flow_factories_are_consulted_first() {
    let text = format!("{MINI}[[flow]]\nkind = \"ping\"\nat = \"b:9\"\n");
    let sc = Scenario::from_toml(&text, "ping.toml").unwrap();
    let mut p = Pinger { built: 0 };
    let sim = sc.build(&mut [&mut p]).unwrap();
    assert_eq!(p.built, 1);
    let b = sim.node_by_name("b").unwrap();
    assert!(sim.node(b).app_on_port(9).is_some());
    let e = format!("{MINI}[[flow]]\nkind = \"ping\"\nat = \"nowhere:9\"\n");
    let err = Scenario::from_toml(&e, "ping.toml")
        .unwrap()
        .build(&mut [&mut p])
        .unwrap_err();
    assert!(matches!(err, ScenarioError::Invalid { .. }), "{err}");
    assert!(err.to_string().contains("no node named `nowhere`"), "{err}");
}
