//! Socket options an operator sets: the DSCP mark of every datagram sent,
//! and kernel buffer sizes, with what the kernel actually granted.

use crate::error::IoError;
use crate::socket::UdpEndpoint;
use socket2::SockRef;
use std::fmt;
use std::os::fd::AsFd;

/// DSCP names (RFC 2474 class selectors, RFC 2597 assured forwarding,
/// RFC 3246 expedited forwarding, RFC 8622 lower effort) and their code
/// points.
const DSCP_NAMES: [(&str, u8); 22] = [
    ("cs0", 0),
    ("le", 1),
    ("cs1", 8),
    ("af11", 10),
    ("af12", 12),
    ("af13", 14),
    ("cs2", 16),
    ("af21", 18),
    ("af22", 20),
    ("af23", 22),
    ("cs3", 24),
    ("af31", 26),
    ("af32", 28),
    ("af33", 30),
    ("cs4", 32),
    ("af41", 34),
    ("af42", 36),
    ("af43", 38),
    ("cs5", 40),
    ("ef", 46),
    ("cs6", 48),
    ("cs7", 56),
];

/// Parses a DSCP: a code point 0–63 or a name (`ef`, `af41`, `cs1`, `le`,
/// ...; any case).
pub fn parse_dscp(s: &str) -> Result<u8, String> {
    let lower = s.to_ascii_lowercase();
    if let Some((_, v)) = DSCP_NAMES.iter().find(|(n, _)| *n == lower) {
        return Ok(*v);
    }
    match s.parse::<u8>() {
        Ok(v) if v < 64 => Ok(v),
        _ => Err(format!(
            "`{s}`: expected a DSCP code point 0-63 or a name (ef, af11-af43, cs0-cs7, le)"
        )),
    }
}

/// Buffer sizes asked for and granted (usable bytes: Linux reports twice
/// what it grants, and this is half the report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferGrant {
    /// Bytes asked for, each direction.
    pub asked: usize,
    /// `SO_RCVBUF` granted, usable bytes.
    pub recv: usize,
    /// `SO_SNDBUF` granted, usable bytes.
    pub send: usize,
}

impl BufferGrant {
    /// Whether the kernel granted less than asked in either direction.
    pub fn clamped(&self) -> bool {
        self.recv < self.asked || self.send < self.asked
    }
}

impl fmt::Display for BufferGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "asked {} bytes, granted {} to receive and {} to send",
            self.asked, self.recv, self.send
        )
    }
}

impl UdpEndpoint {
    /// Marks every datagram sent with `dscp` (0–63): `IP_TOS` (also for
    /// IPv4 peers of a dual-stack socket) and, on an IPv6 socket,
    /// `IPV6_TCLASS`. ECN bits stay 0.
    pub fn set_dscp(&self, dscp: u8) -> Result<(), IoError> {
        let tos = u32::from(dscp.min(63)) << 2;
        let s = self.sock_ref();
        if self.is_ipv6() {
            s.set_tclass_v6(tos)
                .map_err(IoError::option("IPV6_TCLASS"))?;
            // IPv4 peers of a dual-stack socket; a v6-only one refuses it.
            let _ = s.set_tos(tos);
            Ok(())
        } else {
            s.set_tos(tos).map_err(IoError::option("IP_TOS"))
        }
    }

    /// The traffic class byte datagrams are sent with (DSCP << 2).
    pub fn traffic_class(&self) -> Result<u32, IoError> {
        let s = self.sock_ref();
        if self.is_ipv6() {
            s.tclass_v6().map_err(IoError::option("IPV6_TCLASS"))
        } else {
            s.tos().map_err(IoError::option("IP_TOS"))
        }
    }

    /// Asks for `bytes` of kernel buffer in each direction
    /// ([`set_socket_buffers`]).
    pub fn set_buffers(&self, bytes: usize) -> Result<BufferGrant, IoError> {
        set_socket_buffers(self.socket(), bytes)
    }
}

/// Asks for `bytes` of kernel buffer in each direction on `socket` (UDP
/// or TCP). Where the kernel's limit (`net.core.rmem_max`, `wmem_max`)
/// clamps the request and the process may exceed it (`CAP_NET_ADMIN`),
/// asks again past the limit (`SO_RCVBUFFORCE`, `SO_SNDBUFFORCE`). Returns
/// what was granted. A TCP socket takes a fixed size instead of the
/// kernel's autotuning; its receive buffer, set before it connects (or
/// listens), also sets the window scale it offers.
pub fn set_socket_buffers(socket: impl AsFd, bytes: usize) -> Result<BufferGrant, IoError> {
    let s = SockRef::from(&socket);
    s.set_recv_buffer_size(bytes)
        .map_err(IoError::option("SO_RCVBUF"))?;
    s.set_send_buffer_size(bytes)
        .map_err(IoError::option("SO_SNDBUF"))?;
    let grant = |s: &SockRef<'_>| -> Result<BufferGrant, IoError> {
        Ok(BufferGrant {
            asked: bytes,
            recv: s.recv_buffer_size().map_err(IoError::option("SO_RCVBUF"))? / 2,
            send: s.send_buffer_size().map_err(IoError::option("SO_SNDBUF"))? / 2,
        })
    };
    let mut granted = grant(&s)?;
    if granted.clamped() {
        // Refused without the capability: the grant stays as it is.
        if granted.recv < bytes {
            let _ = rustix::net::sockopt::set_socket_recv_buffer_size_force(&socket, bytes);
        }
        if granted.send < bytes {
            let _ = rustix::net::sockopt::set_socket_send_buffer_size_force(&socket, bytes);
        }
        granted = grant(&s)?;
    }
    Ok(granted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn dscp_names_and_numbers_parse() {
        assert_eq!(parse_dscp("EF"), Ok(46));
        assert_eq!(parse_dscp("af41"), Ok(34));
        assert_eq!(parse_dscp("le"), Ok(1));
        assert_eq!(parse_dscp("63"), Ok(63));
        assert!(parse_dscp("64").is_err());
        assert!(parse_dscp("gold").is_err());
    }

    #[test]
    fn the_dscp_is_set_on_ipv4_and_ipv6_sockets() {
        let v4 = UdpEndpoint::bind("127.0.0.1:0".parse::<SocketAddr>().unwrap()).unwrap();
        v4.set_dscp(46).unwrap();
        assert_eq!(v4.traffic_class().unwrap(), 46 << 2);
        if let Ok(v6) = UdpEndpoint::bind("[::1]:0".parse::<SocketAddr>().unwrap()) {
            v6.set_dscp(10).unwrap();
            assert_eq!(v6.traffic_class().unwrap(), 10 << 2);
        }
    }

    #[test]
    fn buffers_report_what_was_granted() {
        let ep = UdpEndpoint::bind("127.0.0.1:0".parse::<SocketAddr>().unwrap()).unwrap();
        let small = ep.set_buffers(256 << 10).unwrap();
        assert!(!small.clamped(), "{small}");
        assert!(small.recv >= 256 << 10 && small.send >= 256 << 10);
        // Far past any default limit: granted only with CAP_NET_ADMIN.
        let huge = ep.set_buffers(1 << 30).unwrap();
        assert_eq!(huge.asked, 1 << 30);
        assert!(huge.recv <= huge.asked);
    }
}
