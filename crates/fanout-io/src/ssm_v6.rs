//! IPv6 source-specific multicast joins (RFC 4607, MLDv2 per RFC 3810):
//! the protocol-independent `MCAST_JOIN_SOURCE_GROUP` /
//! `MCAST_LEAVE_SOURCE_GROUP` socket options of RFC 3678 §5.2.
//!
//! This is the only `unsafe` code in fanout's own crates: no safe binding
//! exists (socket2 0.5 offers source-specific joins for IPv4 only; nix and
//! rustix have none), and the option is one `setsockopt` with a plain
//! struct. The struct is zero-initialised, filled through safe field
//! writes of `sockaddr_in6` values copied into its two
//! `sockaddr_storage` fields, and passed with its exact size; the kernel
//! only reads it.

#![allow(unsafe_code)]

use std::io;
use std::net::Ipv6Addr;
use std::os::fd::AsRawFd;

/// Join (`true`) or leave (`false`) IPv6 `group` for datagrams from
/// `source` only, on interface index `interface` (0: the kernel's choice).
pub(crate) fn set_source_membership_v6(
    socket: &impl AsRawFd,
    group: Ipv6Addr,
    source: Ipv6Addr,
    interface: u32,
    join: bool,
) -> io::Result<()> {
    let request = libc::group_source_req {
        gsr_interface: interface,
        gsr_group: storage_of(group),
        gsr_source: storage_of(source),
    };
    let option = if join {
        libc::MCAST_JOIN_SOURCE_GROUP
    } else {
        libc::MCAST_LEAVE_SOURCE_GROUP
    };
    let size = std::mem::size_of::<libc::group_source_req>() as libc::socklen_t;
    // SAFETY: `request` is a fully initialised `group_source_req` that lives
    // across the call; `size` is its exact size; the kernel copies it in and
    // keeps no pointer. An invalid descriptor or option yields an error.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IPV6,
            option,
            (&raw const request).cast::<libc::c_void>(),
            size,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `addr` as an `AF_INET6` socket address (port 0) in a `sockaddr_storage`.
fn storage_of(addr: Ipv6Addr) -> libc::sockaddr_storage {
    let sin6 = libc::sockaddr_in6 {
        sin6_family: libc::AF_INET6 as libc::sa_family_t,
        sin6_port: 0,
        sin6_flowinfo: 0,
        sin6_addr: libc::in6_addr {
            s6_addr: addr.octets(),
        },
        sin6_scope_id: 0,
    };
    // SAFETY: `sockaddr_storage` is plain old data for which all-zero bytes
    // are valid, and it is larger than and at least as aligned as
    // `sockaddr_in6` (POSIX requires both), so writing one at its start is
    // in bounds and aligned.
    unsafe {
        let mut storage: libc::sockaddr_storage = std::mem::zeroed();
        std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in6>(), sin6);
        storage
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn storage_holds_the_address_as_af_inet6() {
        let addr: Ipv6Addr = "ff35::8000:77".parse().unwrap();
        let len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
        // SAFETY: `storage_of` initialises an AF_INET6 address of `len` bytes.
        let back = unsafe { socket2::SockAddr::new(storage_of(addr), len) };
        assert_eq!(back.as_socket_ipv6().map(|a| *a.ip()), Some(addr));
    }

    #[test]
    fn a_join_on_a_bad_socket_is_an_error_not_a_crash() {
        // An IPv4 socket cannot take an IPv6 source-specific membership.
        let v4 = UdpSocket::bind("127.0.0.1:0").unwrap();
        let group: Ipv6Addr = "ff35::8000:77".parse().unwrap();
        let err = set_source_membership_v6(&v4, group, Ipv6Addr::LOCALHOST, 0, true);
        assert!(err.is_err());
    }
}
