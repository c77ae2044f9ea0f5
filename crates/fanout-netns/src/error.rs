//! The crate's one error type.

use std::io;

/// What can go wrong while building, entering or tearing down namespaces.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// A helper program (`ip`, `tc`, `bridge`, `ethtool`) could not be started.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command line, for the message.
        command: String,
        /// Why it could not be started.
        source: io::Error,
    },
    /// A helper program ran and failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line, for the message.
        command: String,
        /// Its exit status, as text.
        status: String,
        /// What it wrote to stderr, trimmed.
        stderr: String,
    },
    /// Entering a namespace with `setns(2)` failed.
    #[error("setns into {name}: {source}")]
    Setns {
        /// The namespace.
        name: String,
        /// The OS error.
        source: io::Error,
    },
    /// Some other OS call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: io::Error,
    },
    /// The caller asked for something this crate cannot build.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// Output of a helper program could not be understood.
    #[error("cannot parse output of `{command}`: {detail}")]
    Parse {
        /// The command line, for the message.
        command: String,
        /// What was wrong.
        detail: String,
    },
}
