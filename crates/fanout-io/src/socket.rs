//! The UDP endpoint: binding, buffer sizes and multicast options via socket2.

use crate::error::IoError;
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::time::Duration;

/// Requested kernel buffer size: 8 MiB, enough for ~6000 datagrams of
/// 1400 bytes (~55 ms at 200k datagrams/s). Linux caps the request at
/// `net.core.{r,w}mem_max` and reports double the granted value.
pub const DEFAULT_BUFFER_BYTES: usize = 8 << 20;

/// How to create a [`UdpEndpoint`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointConfig {
    /// Requested `SO_RCVBUF`, in bytes (the kernel may grant less).
    pub recv_buffer_bytes: usize,
    /// Requested `SO_SNDBUF`, in bytes (the kernel may grant less).
    pub send_buffer_bytes: usize,
    /// `IPV6_V6ONLY` for IPv6 binds; `false` makes the socket dual-stack so
    /// IPv4 peers appear as ordinary [`SocketAddr::V4`] addresses.
    pub only_v6: bool,
    /// `SO_REUSEADDR`, for several multicast receivers on one host and port.
    pub reuse_address: bool,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            recv_buffer_bytes: DEFAULT_BUFFER_BYTES,
            send_buffer_bytes: DEFAULT_BUFFER_BYTES,
            only_v6: false,
            reuse_address: false,
        }
    }
}

/// A bound UDP socket, IPv4 or IPv6, with multicast controls. The
/// [`crate::Driver`] owns one and makes it nonblocking; used alone it offers
/// plain blocking [`UdpEndpoint::send_to`] / [`UdpEndpoint::recv_from`].
#[derive(Debug)]
pub struct UdpEndpoint {
    socket: UdpSocket,
    local: SocketAddr,
    dual_stack: bool,
}

impl UdpEndpoint {
    /// Binds `addr` (port 0 picks a free port) with [`EndpointConfig::default`].
    pub fn bind(addr: SocketAddr) -> Result<Self, IoError> {
        Self::bind_with(addr, &EndpointConfig::default())
    }

    /// Binds `addr` with explicit options. Buffer sizes are best effort: read
    /// the granted sizes back with [`UdpEndpoint::recv_buffer_bytes`].
    pub fn bind_with(addr: SocketAddr, config: &EndpointConfig) -> Result<Self, IoError> {
        let bind_err = |source| IoError::Bind { addr, source };
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
            .map_err(bind_err)?;
        let mut dual_stack = false;
        if addr.is_ipv6() {
            socket
                .set_only_v6(config.only_v6)
                .map_err(IoError::option("IPV6_V6ONLY"))?;
            dual_stack = !config.only_v6;
        }
        if config.reuse_address {
            socket
                .set_reuse_address(true)
                .map_err(IoError::option("SO_REUSEADDR"))?;
        }
        // Best effort: a smaller grant is not an error, the caller reads it back.
        if let Err(e) = socket.set_recv_buffer_size(config.recv_buffer_bytes) {
            tracing::warn!("SO_RCVBUF {}: {e}", config.recv_buffer_bytes);
        }
        if let Err(e) = socket.set_send_buffer_size(config.send_buffer_bytes) {
            tracing::warn!("SO_SNDBUF {}: {e}", config.send_buffer_bytes);
        }
        socket.bind(&addr.into()).map_err(bind_err)?;
        let socket: UdpSocket = socket.into();
        let local = socket.local_addr().map_err(bind_err)?;
        Ok(UdpEndpoint {
            socket,
            local,
            dual_stack,
        })
    }

    /// Takes over an already bound datagram socket (inherited from a parent,
    /// or of a protocol [`UdpEndpoint::bind`] does not create, such as
    /// UDP-Lite); an IPv6 socket counts as dual-stack unless `IPV6_V6ONLY`.
    pub fn from_std(socket: UdpSocket) -> Result<Self, IoError> {
        let local = socket
            .local_addr()
            .map_err(IoError::option("getsockname"))?;
        let dual_stack = local.is_ipv6()
            && !SockRef::from(&socket)
                .only_v6()
                .map_err(IoError::option("IPV6_V6ONLY"))?;
        Ok(UdpEndpoint {
            socket,
            local,
            dual_stack,
        })
    }

    /// The bound address (with the port the OS picked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Whether the socket is IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.local.is_ipv6()
    }

    /// The granted `SO_RCVBUF`, in bytes, as the kernel reports it (on Linux
    /// twice the usable payload space).
    pub fn recv_buffer_bytes(&self) -> Result<usize, IoError> {
        self.sock_ref()
            .recv_buffer_size()
            .map_err(IoError::option("SO_RCVBUF"))
    }

    /// The granted `SO_SNDBUF`, in bytes, as the kernel reports it.
    pub fn send_buffer_bytes(&self) -> Result<usize, IoError> {
        self.sock_ref()
            .send_buffer_size()
            .map_err(IoError::option("SO_SNDBUF"))
    }

    /// Switches `O_NONBLOCK`. The driver sets it; plain users may not need it.
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<(), IoError> {
        self.socket
            .set_nonblocking(nonblocking)
            .map_err(IoError::option("O_NONBLOCK"))
    }

    /// `SO_RCVTIMEO` for blocking [`UdpEndpoint::recv_from`]; `None` waits forever.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> Result<(), IoError> {
        self.socket
            .set_read_timeout(timeout)
            .map_err(IoError::option("SO_RCVTIMEO"))
    }

    /// Sends one datagram (plain `sendto`, no batching); returns bytes sent.
    pub fn send_to(&self, datagram: &[u8], destination: SocketAddr) -> io::Result<usize> {
        self.socket
            .send_to(datagram, self.map_destination(destination))
    }

    /// Receives one datagram into `buf` (plain `recvfrom`); returns its length
    /// and sender, truncating datagrams longer than `buf`.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let (n, from) = self.socket.recv_from(buf)?;
        Ok((n, canonical(from)))
    }

    /// Joins IPv4 multicast `group` on the interface whose address is
    /// `interface` ([`Ipv4Addr::UNSPECIFIED`]: let the kernel choose).
    pub fn join_multicast_v4(&self, group: Ipv4Addr, interface: Ipv4Addr) -> Result<(), IoError> {
        self.sock_ref()
            .join_multicast_v4(&group, &interface)
            .map_err(IoError::option("IP_ADD_MEMBERSHIP"))
    }

    /// Leaves an IPv4 group joined with [`UdpEndpoint::join_multicast_v4`].
    pub fn leave_multicast_v4(&self, group: Ipv4Addr, interface: Ipv4Addr) -> Result<(), IoError> {
        self.sock_ref()
            .leave_multicast_v4(&group, &interface)
            .map_err(IoError::option("IP_DROP_MEMBERSHIP"))
    }

    /// Joins IPv4 multicast `group` for datagrams from `source` only
    /// (source-specific multicast, RFC 4607; `IP_ADD_SOURCE_MEMBERSHIP`,
    /// IGMPv3) on the interface whose address is `interface`
    /// ([`Ipv4Addr::UNSPECIFIED`]: the kernel's choice). The kernel then
    /// drops the group's datagrams from other sources, and IGMPv3 snooping
    /// switches need not forward them. IPv6:
    /// [`UdpEndpoint::join_source_multicast_v6`].
    pub fn join_source_multicast_v4(
        &self,
        group: Ipv4Addr,
        source: Ipv4Addr,
        interface: Ipv4Addr,
    ) -> Result<(), IoError> {
        self.sock_ref()
            .join_ssm_v4(&source, &group, &interface)
            .map_err(IoError::option("IP_ADD_SOURCE_MEMBERSHIP"))
    }

    /// Joins IPv6 multicast `group` for datagrams from `source` only
    /// (source-specific multicast, RFC 4607; `MCAST_JOIN_SOURCE_GROUP`,
    /// RFC 3678 §5.2, MLDv2) on interface index `interface` (0: the
    /// kernel's choice). The socket must be IPv6.
    #[cfg(target_os = "linux")]
    pub fn join_source_multicast_v6(
        &self,
        group: Ipv6Addr,
        source: Ipv6Addr,
        interface: u32,
    ) -> Result<(), IoError> {
        crate::ssm_v6::set_source_membership_v6(&self.socket, group, source, interface, true)
            .map_err(IoError::option("MCAST_JOIN_SOURCE_GROUP"))
    }

    /// Leaves a membership taken with
    /// [`UdpEndpoint::join_source_multicast_v6`].
    #[cfg(target_os = "linux")]
    pub fn leave_source_multicast_v6(
        &self,
        group: Ipv6Addr,
        source: Ipv6Addr,
        interface: u32,
    ) -> Result<(), IoError> {
        crate::ssm_v6::set_source_membership_v6(&self.socket, group, source, interface, false)
            .map_err(IoError::option("MCAST_LEAVE_SOURCE_GROUP"))
    }

    /// Joins IPv6 multicast `group` on interface index `interface` (0: let the
    /// kernel choose). The socket must be IPv6.
    pub fn join_multicast_v6(&self, group: Ipv6Addr, interface: u32) -> Result<(), IoError> {
        self.sock_ref()
            .join_multicast_v6(&group, interface)
            .map_err(IoError::option("IPV6_ADD_MEMBERSHIP"))
    }

    /// Leaves an IPv6 group joined with [`UdpEndpoint::join_multicast_v6`].
    pub fn leave_multicast_v6(&self, group: Ipv6Addr, interface: u32) -> Result<(), IoError> {
        self.sock_ref()
            .leave_multicast_v6(&group, interface)
            .map_err(IoError::option("IPV6_DROP_MEMBERSHIP"))
    }

    /// Joins `group` (IPv4 or IPv6) on the default interface.
    pub fn join_multicast(&self, group: IpAddr) -> Result<(), IoError> {
        match group {
            IpAddr::V4(g) => self.join_multicast_v4(g, Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(g) => self.join_multicast_v6(g, 0),
        }
    }

    /// IPv4 multicast TTL for sent datagrams, in hops (kernel default 1).
    pub fn set_multicast_ttl_v4(&self, ttl_hops: u32) -> Result<(), IoError> {
        self.sock_ref()
            .set_multicast_ttl_v4(ttl_hops)
            .map_err(IoError::option("IP_MULTICAST_TTL"))
    }

    /// IPv6 multicast hop limit for sent datagrams, in hops (kernel default 1).
    pub fn set_multicast_hops_v6(&self, hops: u32) -> Result<(), IoError> {
        self.sock_ref()
            .set_multicast_hops_v6(hops)
            .map_err(IoError::option("IPV6_MULTICAST_HOPS"))
    }

    /// Whether our own IPv4 multicast datagrams loop back to local members.
    pub fn set_multicast_loop_v4(&self, on: bool) -> Result<(), IoError> {
        self.sock_ref()
            .set_multicast_loop_v4(on)
            .map_err(IoError::option("IP_MULTICAST_LOOP"))
    }

    /// Whether our own IPv6 multicast datagrams loop back to local members.
    pub fn set_multicast_loop_v6(&self, on: bool) -> Result<(), IoError> {
        self.sock_ref()
            .set_multicast_loop_v6(on)
            .map_err(IoError::option("IPV6_MULTICAST_LOOP"))
    }

    /// Outgoing interface for IPv4 multicast, by its address.
    pub fn set_multicast_if_v4(&self, interface: Ipv4Addr) -> Result<(), IoError> {
        self.sock_ref()
            .set_multicast_if_v4(&interface)
            .map_err(IoError::option("IP_MULTICAST_IF"))
    }

    /// Outgoing interface for IPv6 multicast, by its index (0: default).
    pub fn set_multicast_if_v6(&self, interface: u32) -> Result<(), IoError> {
        self.sock_ref()
            .set_multicast_if_v6(interface)
            .map_err(IoError::option("IPV6_MULTICAST_IF"))
    }

    /// Checks, without sending anything, that datagrams from this socket
    /// can reach multicast `group`: a scratch socket on the same local
    /// address and outgoing multicast interface is connected to it, which
    /// makes the kernel look the route up (`ENETUNREACH` when no route
    /// covers the group, e.g. a host without a multicast or default route).
    pub fn check_multicast_route(&self, group: SocketAddr) -> Result<(), IoError> {
        if !group.ip().is_multicast() {
            return Err(IoError::Family(group));
        }
        self.route_probe(group, "multicast route (connect)")
            .map(drop)
    }

    /// The MTU of the route from this socket to `destination`, in bytes of
    /// IP packet: the outgoing interface's MTU, or less where the kernel
    /// learnt a smaller path MTU (`IP_MTU` / `IPV6_MTU`, ip(7), ipv6(7)).
    /// A multicast group's route is the one through this socket's outgoing
    /// multicast interface. Nothing is sent.
    pub fn route_mtu(&self, destination: SocketAddr) -> Result<usize, IoError> {
        let probe = self.route_probe(destination, "route (connect)")?;
        // A dual-stack socket reaches IPv4 through IPv4-mapped addresses;
        // IPV6_MTU then reports the IPv4 route's MTU.
        let (mtu, option) = match destination.ip() {
            IpAddr::V4(_) if !self.dual_stack => (rustix::net::sockopt::ip_mtu(&probe), "IP_MTU"),
            _ => (rustix::net::sockopt::ipv6_mtu(&probe), "IPV6_MTU"),
        };
        let mtu = mtu.map_err(|e| IoError::SocketOption {
            option,
            source: e.into(),
        })?;
        Ok(mtu as usize)
    }

    /// A scratch socket on this socket's local address and outgoing
    /// multicast interface, connected to `destination` (the kernel's route
    /// lookup; nothing is sent).
    fn route_probe(&self, destination: SocketAddr, what: &'static str) -> Result<Socket, IoError> {
        let probe_err = |source| IoError::SocketOption {
            option: what,
            source,
        };
        let probe = Socket::new(
            Domain::for_address(self.local),
            Type::DGRAM,
            Some(Protocol::UDP),
        )
        .map_err(probe_err)?;
        if self.dual_stack {
            probe.set_only_v6(false).map_err(probe_err)?;
        }
        probe
            .bind(&SocketAddr::new(self.local.ip(), 0).into())
            .map_err(probe_err)?;
        let me = self.sock_ref();
        match destination.ip() {
            IpAddr::V4(_) => {
                if let Ok(interface) = me.multicast_if_v4() {
                    probe.set_multicast_if_v4(&interface).map_err(probe_err)?;
                }
            }
            IpAddr::V6(_) => {
                if let Ok(interface) = me.multicast_if_v6() {
                    probe.set_multicast_if_v6(interface).map_err(probe_err)?;
                }
            }
        }
        probe
            .connect(&self.map_destination(destination).into())
            .map_err(probe_err)?;
        Ok(probe)
    }

    /// The std socket, for the driver's batched I/O.
    pub(crate) fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// Rewrites an IPv4 destination as v4-mapped IPv6 on a dual-stack socket,
    /// so engines can address IPv4 peers plainly.
    pub(crate) fn map_destination(&self, destination: SocketAddr) -> SocketAddr {
        match destination {
            SocketAddr::V4(v4) if self.dual_stack => {
                SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
            }
            other => other,
        }
    }

    pub(crate) fn sock_ref(&self) -> SockRef<'_> {
        SockRef::from(&self.socket)
    }
}

/// Whether a send failed because the datagram is larger than the route
/// carries (`EMSGSIZE`), rather than because the destination is unusable.
pub fn is_message_too_long(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::EMSGSIZE)
}

/// Shows a v4-mapped IPv6 sender (from a dual-stack socket) as IPv4.
pub(crate) fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn localhost_v4() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    #[test]
    fn binds_and_reports_buffers() {
        let ep = UdpEndpoint::bind(localhost_v4()).unwrap();
        assert_ne!(ep.local_addr().port(), 0);
        // Linux grants at least the default and reports double the request.
        assert!(ep.recv_buffer_bytes().unwrap() >= 200_000);
        assert!(ep.send_buffer_bytes().unwrap() >= 200_000);
    }

    #[test]
    fn plain_send_and_receive_with_timeout() {
        let a = UdpEndpoint::bind(localhost_v4()).unwrap();
        let b = UdpEndpoint::bind(localhost_v4()).unwrap();
        b.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
        let mut buf = [0u8; 64];
        let err = b.recv_from(&mut buf).unwrap_err();
        assert!(matches!(
            err.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ));
        a.send_to(b"hello", b.local_addr()).unwrap();
        b.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let (n, from) = b.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(from, a.local_addr());
    }

    #[test]
    fn dual_stack_maps_ipv4_peers() {
        let Ok(v6) = UdpEndpoint::bind("[::]:0".parse().unwrap()) else {
            eprintln!("SKIP: IPv6 unavailable");
            return;
        };
        let v4 = UdpEndpoint::bind(localhost_v4()).unwrap();
        let to: SocketAddr = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), v6.local_addr().port());
        v4.send_to(b"x", to).unwrap();
        v6.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 8];
        let (_, from) = v6.recv_from(&mut buf).unwrap();
        assert_eq!(from, v4.local_addr(), "v4-mapped sender shown as IPv4");
        v6.send_to(b"y", v4.local_addr()).unwrap();
        v4.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let (n, _) = v4.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"y");
    }

    #[test]
    fn multicast_route_check_refuses_non_groups_and_finds_loopback_routes() {
        let ep = UdpEndpoint::bind(localhost_v4()).unwrap();
        let not_group: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert!(matches!(
            ep.check_multicast_route(not_group),
            Err(IoError::Family(_))
        ));
        // Bound to a specific address, Linux routes multicast out of the
        // interface owning it, so the check passes without any route.
        ep.set_multicast_if_v4(Ipv4Addr::LOCALHOST).unwrap();
        let group: SocketAddr = "239.255.77.1:9".parse().unwrap();
        ep.check_multicast_route(group).unwrap();
    }

    #[test]
    fn multicast_options_apply() {
        let ep = UdpEndpoint::bind(localhost_v4()).unwrap();
        ep.set_multicast_ttl_v4(4).unwrap();
        ep.set_multicast_loop_v4(false).unwrap();
        ep.set_multicast_if_v4(Ipv4Addr::LOCALHOST).unwrap();
        let s = SockRef::from(ep.socket());
        assert_eq!(s.multicast_ttl_v4().unwrap(), 4);
        assert!(!s.multicast_loop_v4().unwrap());
        // Joining needs a multicast-capable interface; the host's `lo` may not be one.
        let group = Ipv4Addr::new(239, 255, 77, 1);
        match ep.join_multicast_v4(group, Ipv4Addr::LOCALHOST) {
            Ok(()) => ep.leave_multicast_v4(group, Ipv4Addr::LOCALHOST).unwrap(),
            Err(e) => eprintln!("SKIP join: {e}"),
        }
        if let Ok(v6) = UdpEndpoint::bind("[::1]:0".parse().unwrap()) {
            v6.set_multicast_hops_v6(3).unwrap();
            v6.set_multicast_loop_v6(true).unwrap();
            assert_eq!(SockRef::from(v6.socket()).multicast_hops_v6().unwrap(), 3);
        }
    }
}
