//! The peers a suite compares fanout with come from Debian: before running,
//! the bench finds each selected tool's programs on `PATH` and, when some
//! are missing, installs their packages with `apt-get` (or, if told not to,
//! stops with the command that would).

use super::suite::{ToolKind, ToolSpec};
use crate::error::LabError;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

/// The programs a tool of `kind` runs, each group with the Debian package
/// holding it (none for fanout: the lab runs the binary running the bench).
pub fn programs(kind: ToolKind) -> &'static [(&'static [&'static str], &'static str)] {
    match kind {
        ToolKind::Fanout | ToolKind::Media | ToolKind::Overlay => &[],
        ToolKind::Uftp => &[(&["uftp", "uftpd"], "uftp")],
        ToolKind::Udpcast => &[(&["udp-sender", "udp-receiver"], "udpcast")],
        ToolKind::TcpUnicast => &[(&["python3"], "python3"), (&["curl"], "curl")],
        ToolKind::Bittorrent => &[
            (&["aria2c"], "aria2"),
            (&["opentracker"], "opentracker"),
            (&["mktorrent"], "mktorrent"),
        ],
    }
}

/// Whether an executable file `name` lies in one of the directories of
/// `path` (a `PATH` value).
fn on_path(name: &str, path: &OsStr) -> bool {
    std::env::split_paths(path).any(|dir| {
        let f = dir.join(name);
        f.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// The programs of `tools` and their Debian packages (fanout's own left out).
fn needs_of(tools: &[ToolSpec]) -> Vec<(&'static [&'static str], &'static str)> {
    tools
        .iter()
        .flat_map(|t| programs(t.kind).iter().copied())
        .collect()
}

/// The packages of `needs` (programs, package) with a program missing from
/// `path` (a `PATH` value), each once, in order.
fn missing_of<'a>(needs: &[(&[&str], &'a str)], path: &OsStr) -> Vec<&'a str> {
    let mut missing = Vec::new();
    for (names, pkg) in needs {
        if names.iter().any(|n| !on_path(n, path)) && !missing.contains(pkg) {
            missing.push(*pkg);
        }
    }
    missing
}

/// The Debian packages of `tools` with a program missing from `path`, each
/// once, in tool order.
pub fn missing_packages(tools: &[ToolSpec], path: &OsStr) -> Vec<&'static str> {
    missing_of(&needs_of(tools), path)
}

/// Makes sure the programs of `tools` are installed ([`ensure_programs`]).
pub fn ensure_installed(
    tools: &[ToolSpec],
    install: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<(), LabError> {
    ensure_programs(&needs_of(tools), install, progress)
}

/// Makes sure the programs of `needs` (programs, Debian package) are
/// installed: with `install`, runs `apt-get install` for the missing
/// packages (after `apt-get update` if the first attempt fails); without,
/// fails naming the command to run. `progress` gets a line per step.
pub fn ensure_programs(
    needs: &[(&[&str], &str)],
    install: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<(), LabError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let missing = missing_of(needs, &path);
    if missing.is_empty() {
        return Ok(());
    }
    let list = missing.join(" ");
    let refuse = |why: String| LabError::Topology {
        file: "peers".into(),
        message: format!(
            "{why}; install the Debian packages with `apt-get install {list}` \
             (or leave their tools out with --tools)"
        ),
    };
    if !install {
        return Err(refuse(format!("not installed: {list}")));
    }
    progress(&format!(
        "installing the peers' Debian packages: apt-get install {list}"
    ));
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let mut install_args = vec!["install", "-y", "--no-install-recommends"];
    install_args.extend(missing.iter().copied());
    let installed = apt(&install_args) || (apt(&["update"]) && apt(&install_args));
    if !installed {
        return Err(refuse("apt-get failed".into()));
    }
    let still = missing_of(needs, &path);
    if !still.is_empty() {
        return Err(refuse(format!(
            "installed, but programs of {} are still not on PATH",
            still.join(" ")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn tool(kind: ToolKind) -> ToolSpec {
        ToolSpec::new(&format!("{kind:?}"), kind, "r")
    }

    fn fake_program(dir: &Path, name: &str, mode: u32) {
        let f = dir.join(name);
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn finds_what_is_missing_per_package() {
        let dir = std::env::temp_dir().join(format!("fanout-peers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tools = [
            tool(ToolKind::Fanout),
            tool(ToolKind::Uftp),
            tool(ToolKind::Uftp),
            tool(ToolKind::Udpcast),
        ];
        let path = dir.as_os_str();
        assert_eq!(missing_packages(&tools, path), ["uftp", "udpcast"]);
        // One program of a package is not enough; a file that is not
        // executable does not count.
        fake_program(&dir, "uftp", 0o755);
        fake_program(&dir, "udp-sender", 0o755);
        fake_program(&dir, "udp-receiver", 0o644);
        assert_eq!(missing_packages(&tools, path), ["uftp", "udpcast"]);
        fake_program(&dir, "uftpd", 0o755);
        fake_program(&dir, "udp-receiver", 0o755);
        assert!(missing_packages(&tools, path).is_empty());
        assert!(on_path("uftpd", path) && !on_path("uftp-nope", path));
        // Installing nothing is a no-op even without apt-get.
        assert!(ensure_installed(&tools[..1], false, &mut |_| {}).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
