//! Which senders a listening receiver answers ([`AllowedSenders`]): an
//! OFFER from anyone else is dropped, counted as
//! [`DropReason::UnknownPeer`](fanout_core::stats::DropReason::UnknownPeer),
//! and never answered (no reflection toward a forged source).
//!
//! An address list is only as strong as the network's protection against
//! forged source addresses; it keeps strangers' transfers off a receiver
//! that is reachable by many, not a determined attacker on its LAN.

use ipnet::IpNet;
use std::net::SocketAddr;

/// The senders a listening receiver accepts an OFFER from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AllowedSenders {
    /// Any sender.
    #[default]
    Any,
    /// Exactly this address and port (a catch-up transfer from the session
    /// sender it asked).
    Exactly(SocketAddr),
    /// Any port of an address inside one of these networks (IPv4-mapped
    /// IPv6 senders count as their IPv4 address).
    Networks(Vec<IpNet>),
}

impl AllowedSenders {
    /// True if an OFFER from `from` may be answered.
    pub fn allows(&self, from: SocketAddr) -> bool {
        match self {
            AllowedSenders::Any => true,
            AllowedSenders::Exactly(a) => *a == from,
            AllowedSenders::Networks(nets) => {
                let ip = from.ip().to_canonical();
                nets.iter().any(|n| n.contains(&ip))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn networks_match_any_port_of_their_addresses() {
        let allowed = AllowedSenders::Networks(vec![
            "192.0.2.0/24".parse().unwrap(),
            "2001:db8::1/128".parse().unwrap(),
        ]);
        assert!(allowed.allows(at("192.0.2.7:6000")));
        assert!(allowed.allows(at("[::ffff:192.0.2.7]:6000")), "v4-mapped");
        assert!(allowed.allows(at("[2001:db8::1]:1")));
        assert!(!allowed.allows(at("192.0.3.7:6000")));
        assert!(!allowed.allows(at("[2001:db8::2]:1")));
        assert!(!AllowedSenders::Networks(Vec::new()).allows(at("192.0.2.7:1")));
        assert!(AllowedSenders::Any.allows(at("192.0.3.7:6000")));
        let one = AllowedSenders::Exactly(at("192.0.2.7:6000"));
        assert!(one.allows(at("192.0.2.7:6000")) && !one.allows(at("192.0.2.7:6001")));
    }
}
