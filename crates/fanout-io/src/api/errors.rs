//! How the transport's outcomes become `std::io::Error`s, so the API
//! composes with `?`, `io::copy` and friends.

use crate::IoError;
use fanout_transport::CloseReason;
use std::io::{self, ErrorKind};

/// The error a call gets once the session ended for `reason` (anything
/// but [`CloseReason::Completed`], which callers treat as success or EOF).
pub(crate) fn closed(reason: &CloseReason) -> io::Error {
    let kind = match reason {
        CloseReason::Completed => ErrorKind::NotConnected,
        CloseReason::PeerReset { .. } => ErrorKind::ConnectionReset,
        CloseReason::LocalReset { .. } => ErrorKind::ConnectionAborted,
        CloseReason::IdleTimeout | CloseReason::HandshakeTimeout => ErrorKind::TimedOut,
        CloseReason::NoReceivers => ErrorKind::BrokenPipe,
    };
    io::Error::new(kind, format!("fanout session ended: {reason}"))
}

/// A runtime setup error (bind, socket option) as an `io::Error`, keeping
/// the OS error's kind where there is one.
pub(crate) fn setup(e: IoError) -> io::Error {
    let kind = match &e {
        IoError::Bind { source, .. } | IoError::SocketOption { source, .. } => source.kind(),
        IoError::Poll(source) => source.kind(),
        IoError::Family(_) | IoError::Config(_) => ErrorKind::InvalidInput,
    };
    io::Error::new(kind, e)
}
