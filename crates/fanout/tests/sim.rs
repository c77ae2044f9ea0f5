//! `fanout sim` on a small scenario file: the trace hash it prints, for
//! people and as JSON, with and without tracing.

mod common;

use std::path::Path;
use std::process::Command;

/// Two nodes and a 1 Mbit/s CBR flow, for 1 s; `{trace}` is the trace key.
const SCENARIO: &str = r#"
seed = 3
duration = "1s"
{trace}

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

[[flow]]
kind = "cbr"
from = "a:5000"
to = "b:6000"
rate = "1Mbit"
"#;

/// FNV-1a 64 of nothing: what an untraced run used to print as its hash.
const EMPTY_TRACE_HASH: &str = "cbf29ce484222325";

/// Runs `fanout sim FILE --warmup 0 EXTRA`; returns its stdout.
fn sim(file: &Path, extra: &[&str]) -> String {
    let out = Command::new(common::BIN)
        .arg("sim")
        .arg(file)
        .args(["--warmup", "0"])
        .args(extra)
        .output()
        .expect("runs fanout");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn json(file: &Path) -> serde_json::Value {
    let out = sim(file, &["--json"]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON ({e}): {out}"))
}

#[test]
fn only_a_traced_run_prints_a_trace_hash() {
    let dir = common::Scratch::new("test-sim-trace");
    let write = |name: &str, trace: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, SCENARIO.replace("{trace}", trace)).expect("scenario written");
        p
    };
    let untraced = write("untraced.toml", "");
    let traced = write("traced.toml", "trace = \"hash\"");

    let human = sim(&untraced, &[]);
    let first = human.lines().next().unwrap_or_default();
    assert!(first.starts_with("seed 3  trace off  "), "{human}");
    assert!(!human.contains(EMPTY_TRACE_HASH), "{human}");
    let v = json(&untraced);
    assert!(v["trace_hash"].is_null(), "{v}");
    assert_eq!(v["seed"], 3);

    let v = json(&traced);
    let hash = v["trace_hash"].as_str().expect("a traced run has a hash");
    assert_eq!(hash.len(), 16, "{hash}");
    assert_ne!(hash, EMPTY_TRACE_HASH, "the run's events were traced");
    let human = sim(&traced, &[]);
    let first = human.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("seed 3  trace {hash}  ")),
        "{human}"
    );
}
