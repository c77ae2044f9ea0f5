//! `fanout sim SCENARIO.toml`. Being written.
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

/// Arguments of `fanout sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Scenario file (TOML).
    pub scenario: PathBuf,
    /// Override the scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Directory for CSV time series and plots.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Runs `fanout sim`.
pub fn run(_args: SimArgs) -> Result<()> {
    anyhow::bail!("not yet")
}
