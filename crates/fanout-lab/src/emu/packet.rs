//! Datagrams read from a host's TUN device: what the emulator queues, and
//! where an IPv4 header says they go.

use fanout_sim::WireSize;
use std::net::Ipv4Addr;
use std::sync::Arc;

/// Shortest IPv4 header.
const IPV4_MIN_HEADER: usize = 20;
/// IGMP's IP protocol number (RFC 1112, RFC 3376): membership reports the
/// kernel sends; group membership here is static, so they are not forwarded.
const PROTO_IGMP: u8 = 2;

/// One copy of an IP datagram inside the emulated network. Multicast copies
/// share the bytes; each copy carries the hosts it still has to reach.
#[derive(Debug, Clone)]
pub struct EmuPacket {
    /// The IP datagram as the sending host's kernel wrote it.
    pub bytes: Arc<[u8]>,
    /// Destination hosts this copy serves (one for unicast).
    pub targets: Vec<usize>,
    /// Whether its L4 checksum is known to be valid (computed or verified
    /// by the emulator): delivered with `VIRTIO_NET_HDR_F_DATA_VALID`.
    pub csum_valid: bool,
}

impl WireSize for EmuPacket {
    /// The IP datagram's length: like the simulator, no link-layer framing.
    fn wire_size(&self) -> u32 {
        u32::try_from(self.bytes.len()).unwrap_or(u32::MAX)
    }
}

/// What an IPv4 header says about a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classified {
    /// To a unicast address; `len` is the datagram's total length.
    Unicast {
        /// Destination address.
        dst: Ipv4Addr,
        /// IPv4 total length (≤ bytes read).
        len: usize,
    },
    /// To a multicast group outside 224.0.0.0/24.
    Multicast {
        /// Group address.
        group: Ipv4Addr,
        /// IPv4 total length (≤ bytes read).
        len: usize,
    },
    /// Local control traffic not forwarded: IGMP, link-local multicast, IPv6
    /// (router and neighbour solicitations and the like).
    Control,
    /// Not a well-formed IPv4 datagram.
    Malformed,
}

/// Reads the IPv4 header of `bytes` (never panics on any input).
pub fn classify(bytes: &[u8]) -> Classified {
    let Some(&first) = bytes.first() else {
        return Classified::Malformed;
    };
    match first >> 4 {
        4 => {}
        6 => return Classified::Control,
        _ => return Classified::Malformed,
    }
    let ihl = usize::from(first & 0x0f) * 4;
    if ihl < IPV4_MIN_HEADER || bytes.len() < ihl {
        return Classified::Malformed;
    }
    let len = usize::from(u16::from_be_bytes([bytes[2], bytes[3]]));
    if len < ihl || len > bytes.len() {
        return Classified::Malformed;
    }
    let dst = Ipv4Addr::new(bytes[16], bytes[17], bytes[18], bytes[19]);
    if dst.is_multicast() {
        if bytes[9] == PROTO_IGMP || dst.octets()[..3] == [224, 0, 0] {
            return Classified::Control;
        }
        return Classified::Multicast { group: dst, len };
    }
    Classified::Unicast { dst, len }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(dst: [u8; 4], proto: u8, total: u16, extra: usize) -> Vec<u8> {
        let mut p = vec![0u8; usize::from(total) + extra];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[9] = proto;
        p[12..16].copy_from_slice(&[10, 78, 0, 1]);
        p[16..20].copy_from_slice(&dst);
        p
    }

    #[test]
    fn classifies_headers() {
        assert_eq!(
            classify(&ipv4([10, 78, 0, 2], 17, 48, 0)),
            Classified::Unicast {
                dst: Ipv4Addr::new(10, 78, 0, 2),
                len: 48
            }
        );
        // Trailing bytes beyond the total length are not part of it.
        assert_eq!(
            classify(&ipv4([239, 1, 1, 1], 17, 48, 4)),
            Classified::Multicast {
                group: Ipv4Addr::new(239, 1, 1, 1),
                len: 48
            }
        );
        assert_eq!(
            classify(&ipv4([239, 1, 1, 1], 2, 32, 0)),
            Classified::Control
        );
        assert_eq!(
            classify(&ipv4([224, 0, 0, 22], 17, 40, 0)),
            Classified::Control
        );
        assert_eq!(classify(&[0x60; 40]), Classified::Control);
    }

    #[test]
    fn malformed_input_is_rejected_not_panicking() {
        assert_eq!(classify(&[]), Classified::Malformed);
        assert_eq!(classify(&[0x45; 10]), Classified::Malformed);
        let mut p = ipv4([10, 78, 0, 2], 17, 48, 0);
        p[2..4].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(classify(&p), Classified::Malformed);
        p[0] = 0x44; // IHL 16 bytes
        assert_eq!(classify(&p), Classified::Malformed);
        for n in 0..64 {
            let _ = classify(&vec![0x4f; n]);
        }
    }
}
