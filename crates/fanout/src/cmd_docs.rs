//! `fanout completions SHELL` and `fanout man`: shell completions and man
//! pages generated from the command line's own definition, so they never
//! drift from `--help`.

use anyhow::{Context, Result};
use clap::{Args, Command};
use clap_complete::Shell;
use std::path::PathBuf;

/// Arguments of `fanout completions`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fanout completions bash > /etc/bash_completion.d/fanout
  fanout completions zsh > \"${fpath[1]}/_fanout\"
  fanout completions fish > ~/.config/fish/completions/fanout.fish")]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: Shell,
}

/// Arguments of `fanout man`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fanout man | man -l -
  fanout man --dir /usr/local/share/man/man1   # fanout.1, fanout-send.1, ...")]
pub struct ManArgs {
    /// Write a page per command (fanout.1, fanout-send.1, ...) into this
    /// directory instead of printing fanout.1 on stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Prints the completion script for `args.shell` on stdout.
pub fn completions(args: &CompletionsArgs, mut cli: Command) -> Result<()> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cli, "fanout", &mut out);
    crate::report::print_stdout(&String::from_utf8_lossy(&out))
}

/// Prints fanout(1), or writes every command's page into `args.dir`.
pub fn man(args: &ManArgs, cli: Command) -> Result<()> {
    match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(cli, dir)
                .with_context(|| format!("cannot write man pages into {}", dir.display()))?;
            eprintln!("fanout: man pages written to {}", dir.display());
            Ok(())
        }
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cli).render(&mut out)?;
            crate::report::print_stdout(&String::from_utf8_lossy(&out))
        }
    }
}
