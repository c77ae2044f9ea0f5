//! Typed, counted reasons for dropping input.
//!
//! Every datagram or frame an engine refuses is counted under one
//! [`DropReason`], surfaced in the engine's stats and in `--json` reports.

use std::fmt;

macro_rules! drop_reasons {
    ($( $(#[$m:meta])* $name:ident => $label:literal, )*) => {
        /// Why an input was dropped.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum DropReason { $( $(#[$m])* $name, )* }

        impl DropReason {
            /// Every reason, in declaration order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$name,)*];
            /// Stable snake_case label for reports.
            pub fn label(self) -> &'static str {
                match self { $(DropReason::$name => $label,)* }
            }
        }
    };
}

drop_reasons! {
    /// Not a fanout datagram (bad magic) or a header that does not parse.
    Malformed => "malformed",
    /// A frame inside an otherwise valid datagram did not parse.
    MalformedFrame => "malformed_frame",
    /// Wire version this build does not speak.
    UnsupportedVersion => "unsupported_version",
    /// Session id unknown to this endpoint.
    UnknownSession => "unknown_session",
    /// From an address that is not the session's peer.
    UnknownPeer => "unknown_peer",
    /// Failed authentication: does not open under the keys it should, or
    /// travels in the clear where it must be sealed.
    Unauthenticated => "unauthenticated",
    /// A packet number already accepted, or older than the replay window.
    Replayed => "replayed",
    /// A handshake proving a key that is not on the allow-list.
    NotAllowed => "not_allowed",
    /// A frame not allowed in the current state.
    UnexpectedFrame => "unexpected_frame",
    /// Acknowledges data never sent.
    AckOfUnsent => "ack_of_unsent",
    /// Data beyond the advertised receive window.
    BeyondWindow => "beyond_window",
    /// Data already received in full.
    Duplicate => "duplicate",
    /// A peer-controlled count exceeded its bound.
    LimitExceeded => "limit_exceeded",
    /// A cumulative ACK inside a segment (clipped to the segment's start).
    InvalidAck => "invalid_ack",
    /// For a session that already ended.
    SessionClosed => "session_closed",
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Counters per [`DropReason`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropCounters {
    counts: [u64; DropReason::ALL.len()],
}

impl DropCounters {
    /// Counts one drop.
    pub fn count(&mut self, reason: DropReason) {
        self.counts[reason as usize] += 1;
    }

    /// Drops counted under `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.counts[reason as usize]
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Non-zero counters, in declaration order.
    pub fn nonzero(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .iter()
            .map(|r| (*r, self.get(*r)))
            .filter(|(_, n)| *n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_reason() {
        let mut d = DropCounters::default();
        d.count(DropReason::Malformed);
        d.count(DropReason::Malformed);
        d.count(DropReason::SessionClosed);
        assert_eq!(d.get(DropReason::Malformed), 2);
        assert_eq!(d.total(), 3);
        assert_eq!(
            d.nonzero().collect::<Vec<_>>(),
            vec![(DropReason::Malformed, 2), (DropReason::SessionClosed, 1)]
        );
    }
}
