//! How each receiver of a session ended, the `--require` rule that turns
//! those outcomes into the sender's exit code, and the exit codes of
//! every command.

use crate::report::MemberReport;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// Exit codes of `fanout` (documented in the README and `docs/guide.md`).
pub mod exit_code {
    /// The command did what it was asked.
    pub const SUCCESS: u8 = 0;
    /// It failed: the transfer, the network, a file, or the input.
    pub const FAILURE: u8 = 1;
    // 2: the command line was invalid (clap's own code for usage errors).
    /// A session ran, but fewer receivers completed than `--require` asks.
    pub const REQUIREMENT_UNMET: u8 = 3;
    /// Stopped by SIGINT (Ctrl-C) or SIGTERM, after telling the peer.
    pub const INTERRUPTED: u8 = 130;
}

/// RESET codes a receiver sends its sender (`docs/wire.md` §3).
pub mod reset_code {
    /// The application failed: its output could not be written, the file
    /// was refused, a relay could not forward.
    pub const APPLICATION: u64 = 3;
    /// Its operator stopped it (SIGINT, SIGTERM).
    pub const INTERRUPTED: u64 = 4;
    /// It was restarted and joins again as a new member, resuming (sent by
    /// the new process for the old one, `crate::resume`).
    pub const RESTARTED: u64 = 5;
}

/// Tells the sender at once why this receiver gives up (`e`, in full, as
/// the RESET's reason: the sender reports it as the receiver's outcome).
pub fn tell_sender_of_failure(r: &mut fanout_transport::Receiver, e: &anyhow::Error) {
    r.reset(reset_code::APPLICATION, &format!("{e:#}"));
}

/// An error that ends the process with a given exit code ([`exit_code`]).
#[derive(Debug)]
pub struct Exit {
    /// The process's exit code.
    pub code: u8,
    /// What is printed after `fanout: error: `.
    pub message: String,
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

/// How one receiver's part of a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It acknowledged the whole stream (and, if it joined late, its
    /// catch-up of the missed prefix completed).
    Completed,
    /// It left on a failure of its own, with its reason: its output could
    /// not be written, its disk filled, it was interrupted.
    Failed,
    /// The sender removed it: stalled, unreachable, silent, or behind data
    /// a quorum or buffer release had freed.
    Evicted,
    /// Still in the session when it ended without the whole stream (the
    /// session failed, or a late joiner's catch-up did).
    #[default]
    Incomplete,
    /// It was restarted and joined again as another member, which carries
    /// on (and is counted); this one is not counted.
    Restarted,
}

impl Outcome {
    /// The word used in summaries and JSON.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Evicted => "evicted",
            Outcome::Incomplete => "incomplete",
            Outcome::Restarted => "restarted",
        }
    }
}

/// How many receivers must complete for the sender to exit 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// Every receiver that joined.
    All,
    /// At least this many.
    AtLeast(u64),
}

impl FromStr for Requirement {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "all" {
            return Ok(Requirement::All);
        }
        match s.parse::<u64>() {
            Ok(0) | Err(_) => Err(format!(
                "`{s}`: expected `all` or a number of receivers (1 or more)"
            )),
            Ok(n) => Ok(Requirement::AtLeast(n)),
        }
    }
}

/// Receivers counted by outcome (an ACK merger counts for the receivers it
/// stands for), and whether the requirement held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReceiverTally {
    /// Receivers that joined.
    pub joined: u64,
    /// ... that completed.
    pub completed: u64,
    /// ... that failed on their own side.
    pub failed: u64,
    /// ... that the sender evicted.
    pub evicted: u64,
    /// ... still present at the end without the whole stream.
    pub incomplete: u64,
    /// Completions `--require` asked for.
    pub required: u64,
    /// Whether `completed >= required` (and at least one receiver joined).
    pub met: bool,
}

impl ReceiverTally {
    /// Counts `members` and checks `requirement` against them.
    pub fn count(members: &[MemberReport], requirement: Requirement) -> Self {
        let mut t = ReceiverTally::default();
        for m in members {
            // An ACK merger counts for its subtree; one that left, for none
            // (its receivers are counted where they re-attached).
            // A restarted receiver is counted as the member it became.
            let n = if m.outcome == Outcome::Restarted {
                0
            } else {
                m.receivers
            };
            t.joined += n;
            match m.outcome {
                Outcome::Completed => t.completed += n,
                Outcome::Failed => t.failed += n,
                Outcome::Evicted => t.evicted += n,
                Outcome::Incomplete => t.incomplete += n,
                Outcome::Restarted => {}
            }
        }
        t.required = match requirement {
            Requirement::All => t.joined,
            Requirement::AtLeast(n) => n,
        };
        t.met = t.joined > 0 && t.completed >= t.required;
        t
    }

    /// One line for people: `3 of 4 receivers completed, 1 failed`.
    pub fn summary(&self) -> String {
        let mut s = format!("{} of {} receivers completed", self.completed, self.joined);
        for (n, what) in [
            (self.failed, "failed"),
            (self.evicted, "evicted"),
            (self.incomplete, "incomplete"),
        ] {
            if n > 0 {
                s.push_str(&format!(", {n} {what}"));
            }
        }
        s
    }

    /// The error that sets exit code 3, or `None` if the requirement held.
    pub fn unmet(&self) -> Option<Exit> {
        (!self.met).then(|| Exit {
            code: exit_code::REQUIREMENT_UNMET,
            message: format!(
                "{} (--require asks for {}{})",
                self.summary(),
                self.required,
                if self.required == self.joined {
                    ", every receiver that joined"
                } else {
                    ""
                }
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(outcome: Outcome, receivers: u64) -> MemberReport {
        MemberReport {
            outcome,
            receivers,
            ..MemberReport::default()
        }
    }

    #[test]
    fn requirement_parses_all_or_a_positive_count() {
        assert_eq!("all".parse(), Ok(Requirement::All));
        assert_eq!("3".parse(), Ok(Requirement::AtLeast(3)));
        assert!("0".parse::<Requirement>().is_err());
        assert!("most".parse::<Requirement>().is_err());
    }

    #[test]
    fn one_failed_receiver_fails_require_all_but_not_require_three() {
        let members = [
            member(Outcome::Completed, 1),
            member(Outcome::Completed, 1),
            member(Outcome::Failed, 1),
            member(Outcome::Completed, 1),
        ];
        let all = ReceiverTally::count(&members, Requirement::All);
        assert_eq!((all.joined, all.completed, all.failed), (4, 3, 1));
        assert!(!all.met);
        let e = all.unmet().expect("unmet");
        assert_eq!(e.code, exit_code::REQUIREMENT_UNMET);
        assert!(
            e.message
                .starts_with("3 of 4 receivers completed, 1 failed"),
            "{e}"
        );
        assert!(ReceiverTally::count(&members, Requirement::AtLeast(3))
            .unmet()
            .is_none());
    }

    #[test]
    fn a_merger_counts_for_its_receivers_and_nobody_is_not_success() {
        // A merger that left stands for nobody.
        let members = [
            member(Outcome::Completed, 5),
            member(Outcome::Evicted, 3),
            member(Outcome::Failed, 0),
        ];
        let t = ReceiverTally::count(&members, Requirement::AtLeast(5));
        assert_eq!((t.joined, t.completed, t.evicted, t.met), (8, 5, 3, true));
        assert_eq!(t.failed, 0);
        assert!(!ReceiverTally::count(&[], Requirement::All).met);
    }

    #[test]
    fn a_restarted_receiver_counts_once_as_the_member_it_became() {
        let members = [
            member(Outcome::Completed, 1),
            member(Outcome::Restarted, 1),
            member(Outcome::Completed, 1),
        ];
        let t = ReceiverTally::count(&members, Requirement::All);
        assert_eq!((t.joined, t.completed, t.met), (2, 2, true));
    }
}
