//! Throw-away Linux network namespaces for real IP multicast tests (and later
//! `fanout lab`): a [`Netns`] guard, a bridged [`LanTopology`] of hosts, and
//! [`require_netns`] to skip cleanly where namespaces cannot be created.
//!
//! Everything is created with iproute2 (`ip`, `tc`, `bridge`; `ethtool` when
//! present) under names `fo-<pid>-<n>[-label]` unique to the calling process,
//! and removed on drop, panics included. Code runs inside a namespace either
//! as a thread that entered it with `setns(2)` ([`Netns::run_in`],
//! [`Netns::spawn_in`]) or as a process started by `ip netns exec`
//! ([`Netns::exec`], [`Netns::spawn`]). Needs root; Linux only.
//!
//! ```no_run
//! use fanout_netns::{require_netns, LanTopology};
//! use std::net::{Ipv4Addr, UdpSocket};
//!
//! if let Some(reason) = require_netns() {
//!     eprintln!("skipped: {reason}");
//!     return;
//! }
//! let lan = LanTopology::new(2).unwrap();
//! let (a, b) = (lan.host(0), lan.host(1));
//! let group = Ipv4Addr::new(239, 77, 0, 1);
//! let rx = b.netns().run_in(|| {
//!     let s = UdpSocket::bind("0.0.0.0:9000")?;
//!     s.join_multicast_v4(&group, &b.ipv4())?;
//!     Ok::<_, std::io::Error>(s)
//! }).unwrap().unwrap();
//! let tx = a.netns().run_in(|| UdpSocket::bind((a.ipv4(), 0))).unwrap().unwrap();
//! tx.send_to(b"hi", (group, 9000)).unwrap();
//! let mut buf = [0; 16];
//! let (n, _) = rx.recv_from(&mut buf).unwrap();
//! assert_eq!(&buf[..n], b"hi");
//! // `lan` drops here: every namespace, link and process is gone.
//! ```

mod cmd;
mod error;
mod lan;
mod netns;
mod skip;

pub use error::NetnsError;
pub use lan::{
    LanConfig, LanHost, LanTopology, LinkDirection, RateLimit, BRIDGE, HOST_IF, MAX_HOSTS,
    MULTICAST_V4,
};
pub use netns::{cleanup_stale, list_namespaces, LinkStats, Netns, NsChild, NAME_PREFIX};
pub use skip::{require_netns, SkipReason, REQUIRED_ENV};
