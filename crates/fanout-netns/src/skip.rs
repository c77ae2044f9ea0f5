//! Deciding whether namespace tests can run here: [`require_netns`].

use crate::cmd;
use crate::netns::{cleanup_stale, Netns};
use std::fmt;
use std::sync::OnceLock;

/// Set to `1` to turn a skip into a test failure (for CI, where root is
/// expected and a silent skip would hide a broken setup).
pub const REQUIRED_ENV: &str = "FANOUT_NETNS_REQUIRED";

/// Why namespace tests cannot run on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipReason(String);

impl SkipReason {
    /// The reason, as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `None` when this process can create namespaces (root, `ip` present, and
/// a probe `ip netns add` plus veth and bridge creation inside it work);
/// otherwise why not. Checked once per process; the first call also removes
/// namespaces left by earlier, killed test processes
/// ([`crate::cleanup_stale`]).
///
/// Tests call it first and return early when skipping:
///
/// ```no_run
/// if let Some(reason) = fanout_netns::require_netns() {
///     eprintln!("skipped: {reason}");
///     return;
/// }
/// ```
///
/// # Panics
///
/// When a skip would happen and the environment variable
/// `FANOUT_NETNS_REQUIRED` is `1` ([`REQUIRED_ENV`]).
pub fn require_netns() -> Option<SkipReason> {
    static VERDICT: OnceLock<Option<SkipReason>> = OnceLock::new();
    let verdict = VERDICT.get_or_init(probe).clone();
    if let Some(reason) = &verdict {
        if std::env::var(REQUIRED_ENV).is_ok_and(|v| v == "1") {
            panic!("{REQUIRED_ENV}=1 but network namespace tests cannot run: {reason}");
        }
    }
    verdict
}

fn probe() -> Option<SkipReason> {
    if !cfg!(target_os = "linux") {
        return Some(SkipReason("network namespaces need Linux".into()));
    }
    if !nix::unistd::geteuid().is_root() {
        return Some(SkipReason(
            "network namespace tests need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)".into(),
        ));
    }
    if !cmd::on_path("ip") {
        return Some(SkipReason("`ip` (iproute2) is not installed".into()));
    }
    if let Err(e) = cleanup_stale() {
        return Some(SkipReason(format!("`ip netns list` failed: {e}")));
    }
    let ns = match Netns::with_label("probe") {
        Ok(ns) => ns,
        Err(e) => return Some(SkipReason(format!("cannot create a namespace: {e}"))),
    };
    let links = ns
        .ip(&[
            "link", "add", "fo-pa", "type", "veth", "peer", "name", "fo-pb",
        ])
        .and_then(|_| ns.ip(&["link", "add", "fo-br", "type", "bridge"]));
    if let Err(e) = links {
        return Some(SkipReason(format!("cannot create veth or bridge: {e}")));
    }
    if let Err(e) = ns.run_in(|| ()) {
        return Some(SkipReason(format!("cannot enter a namespace: {e}")));
    }
    None
}
