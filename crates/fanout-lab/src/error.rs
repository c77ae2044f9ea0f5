//! The crate's one error type.

use fanout_netns::NetnsError;
use std::io;

/// What can go wrong while reading a topology, building it or running it.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The topology file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        source: io::Error,
    },
    /// TOML syntax, unknown keys, bad units, or an inconsistent topology
    /// (the message names the key or entry).
    #[error("{file}: {message}")]
    Topology {
        /// Topology file (or `<string>`).
        file: String,
        /// What is wrong, where.
        message: String,
    },
    /// Creating, configuring or tearing down namespaces failed.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// Creating a TUN device failed.
    #[error("TUN device in {host}: {message}")]
    Tun {
        /// The host whose device it is.
        host: String,
        /// What the `tun` crate reported.
        message: String,
    },
    /// Building or reading the kernel profile's network (bridge, qdiscs,
    /// nftables rules) failed.
    #[error("kernel profile: {what}: {message}")]
    Kernel {
        /// What was being done.
        what: String,
        /// The tool's complaint.
        message: String,
    },
    /// Some other OS call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: io::Error,
    },
}

impl LabError {
    /// An [`LabError::Io`] for `what`.
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        LabError::Io {
            what: what.into(),
            source,
        }
    }

    /// The text of a file a loader parses, or a [`LabError::Read`] naming it.
    pub(crate) fn read_text(path: &std::path::Path) -> Result<String, Self> {
        std::fs::read_to_string(path).map_err(|source| LabError::Read {
            path: path.display().to_string(),
            source,
        })
    }

    /// Turns messages into [`LabError::Topology`] errors about `origin`.
    pub(crate) fn in_file(origin: &str) -> impl Fn(String) -> Self + Copy + '_ {
        move |message| LabError::Topology {
            file: origin.to_owned(),
            message,
        }
    }
}
