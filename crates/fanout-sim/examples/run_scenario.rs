//! Runs a scenario file with the built-in flow kinds and writes CSV, SVG and
//! a summary: `cargo run -p fanout-sim --example run_scenario -- FILE [OUT_DIR] [--seed N]`.

use fanout_sim::Scenario;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut file = None;
    let mut out = None;
    let mut seed = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seed" => seed = args.next().and_then(|s| s.parse::<u64>().ok()),
            _ if file.is_none() => file = Some(PathBuf::from(a)),
            _ => out = Some(PathBuf::from(a)),
        }
    }
    let Some(file) = file else {
        eprintln!("usage: run_scenario FILE [OUT_DIR] [--seed N]");
        return ExitCode::FAILURE;
    };
    let result = Scenario::load(&file).and_then(|mut sc| {
        if let Some(s) = seed {
            sc.seed = s;
        }
        sc.run(out.as_deref(), &mut [])
    });
    match result {
        Ok((_, report)) => {
            print!("{}", report.summary);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
