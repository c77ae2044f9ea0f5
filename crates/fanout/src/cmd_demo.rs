//! `fanout demo`. Being written.
use anyhow::Result;
use clap::Args;

/// Arguments of `fanout demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {}

/// Runs `fanout demo`.
pub fn run(_args: DemoArgs) -> Result<()> {
    anyhow::bail!("not yet")
}
