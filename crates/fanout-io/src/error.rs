//! Errors of the real runtime.

use std::io;
use std::net::SocketAddr;

/// What can go wrong in the runtime. Per-datagram send and receive failures
/// are not errors: they are counted in [`crate::RunStats`] and the loop goes on.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// Creating or binding the socket failed.
    #[error("bind UDP socket to {addr}: {source}")]
    Bind {
        /// The address we tried to bind.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// Setting or reading a socket option failed.
    #[error("socket option {option}: {source}")]
    SocketOption {
        /// The option's name, e.g. `SO_RCVBUF` or `IP_ADD_MEMBERSHIP`.
        option: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The readiness poller (epoll) failed.
    #[error("poll: {0}")]
    Poll(io::Error),
    /// The endpoint's address family cannot reach this destination or group.
    #[error("address family mismatch: {0}")]
    Family(SocketAddr),
    /// A driver configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
}

impl IoError {
    pub(crate) fn option(option: &'static str) -> impl FnOnce(io::Error) -> IoError {
        move |source| IoError::SocketOption { option, source }
    }
}
