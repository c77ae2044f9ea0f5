//! Running the iproute2 helpers and turning failures into [`NetnsError`]s.

use crate::error::NetnsError;
use std::process::{Command, Stdio};

/// Renders `cmd` as a shell-like line for messages.
pub(crate) fn describe(cmd: &Command) -> String {
    let mut line = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    line
}

/// Runs `cmd` to completion (stdin closed) and returns its stdout; a non-zero
/// exit becomes [`NetnsError::Command`] carrying stderr.
pub(crate) fn run(cmd: &mut Command) -> Result<String, NetnsError> {
    let command = describe(cmd);
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| NetnsError::Spawn {
            command: command.clone(),
            source,
        })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(NetnsError::Command {
            command,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// `run` for a program and its arguments.
pub(crate) fn run_args(program: &str, args: &[&str]) -> Result<String, NetnsError> {
    run(Command::new(program).args(args))
}

/// Whether `program` can be found and started (`program --version`-style
/// probing would need per-tool flags; this only checks `PATH`).
pub(crate) fn on_path(program: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        let candidate = dir.join(program);
        std::fs::metadata(&candidate).is_ok_and(|m| m.is_file())
    })
}
