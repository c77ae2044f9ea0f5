//! What engines tell their application, and why sessions end.

use std::fmt;

/// Why a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// Every byte was delivered and the session closed normally.
    Completed,
    /// The peer reset the session.
    PeerReset {
        /// Code from the RESET frame.
        code: u64,
        /// Reason from the RESET frame.
        reason: String,
    },
    /// This side reset the session.
    LocalReset {
        /// Code sent.
        code: u64,
        /// Reason sent.
        reason: String,
    },
    /// Nothing was heard from the peer for the idle timeout.
    IdleTimeout,
    /// The peer never answered the handshake.
    HandshakeTimeout,
    /// A one-to-many session lost its last receiver after data started.
    NoReceivers,
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::Completed => f.write_str("completed"),
            CloseReason::PeerReset { code, reason } => {
                write!(f, "reset by peer (code {code}): {reason}")
            }
            CloseReason::LocalReset { code, reason } => {
                write!(f, "reset locally (code {code}): {reason}")
            }
            CloseReason::IdleTimeout => f.write_str("peer silent for the idle timeout"),
            CloseReason::HandshakeTimeout => f.write_str("peer did not answer the handshake"),
            CloseReason::NoReceivers => f.write_str("every receiver left the session"),
        }
    }
}

/// Session progress reported to the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed.
    Connected,
    /// Sender: every byte including the end of stream was acknowledged.
    /// Receiver: the whole stream arrived and was read.
    Finished,
    /// The session ended.
    Closed(CloseReason),
}
