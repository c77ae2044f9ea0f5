//! The NIC half of the TUN offloads: every read from a host's TUN device
//! starts with a `struct virtio_net_hdr` (the device is opened with
//! `IFF_VNET_HDR`, offloads `TUN_F_CSUM | TUN_F_USO4 | TUN_F_USO6`), and
//! what it describes is done here, in the emulator, instead of in the
//! sending host's `sendmsg` (IPv4 only: IPv6 is off in the lab's hosts):
//!
//! - `gso_type` `VIRTIO_NET_HDR_GSO_UDP_L4` (UDP segmentation offload, the
//!   socket's `UDP_SEGMENT`): the super-packet is split into datagrams of
//!   `gso_size` payload bytes exactly as the kernel's software path would
//!   (`__udp_gso_segment` + `inet_gso_segment`): IP total length and header
//!   checksum per segment, IP id incremented per segment, UDP length and
//!   full checksum per segment (0 sent as 0xffff), the last segment
//!   possibly shorter;
//! - flag `VIRTIO_NET_HDR_F_NEEDS_CSUM` (`CHECKSUM_PARTIAL`): the 16-bit
//!   ones'-complement checksum from `csum_start` to the end is stored at
//!   `csum_start + csum_offset` (RFC 1071), the field already holding the
//!   pseudo-header sum, as `skb_checksum_help` does.
//!
//! So the links keep seeing MTU-sized datagrams, as on real wires. TCP
//! segmentation (`TUN_F_TSO4`) is not offered to the kernel: TCP
//! super-packets never reach the emulator, and a `GSO_TCPV4` header is
//! treated as malformed. Reads whose header makes no sense (unknown GSO
//! type, `gso_size` 0, offsets beyond the packet, a GSO packet that is not
//! unfragmented IPv4/UDP, more than [`MAX_SEGMENTS`] segments) are dropped
//! and counted; no input panics.
//!
//! Datagrams written to a host carry a header too: [`RX_HDR_VALID`]
//! (`VIRTIO_NET_HDR_F_DATA_VALID`, i.e. `CHECKSUM_UNNECESSARY`, as a NIC
//! with receive checksum offload marks them) when the L4 checksum is known
//! to be right, [`RX_HDR_PLAIN`] (the receiving kernel verifies) otherwise.

use serde::Serialize;

/// Size of `struct virtio_net_hdr` (the TUN default, `TUNSETVNETHDRSZ`
/// untouched).
pub const VNET_HDR_LEN: usize = 10;
/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the L4 checksum is still to be computed.
const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the checksum was verified.
const F_DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_GSO_NONE`.
const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_UDP_L4`.
const GSO_UDP_L4: u8 = 5;
/// Most segments one UDP GSO packet may carry (the kernel's
/// `UDP_MAX_SEGMENTS`); a header asking for more is malformed.
pub const MAX_SEGMENTS: usize = 128;
/// Shortest IPv4 header.
const IPV4_MIN_HEADER: usize = 20;
/// UDP header size.
const UDP_HEADER: usize = 8;
/// IP protocol numbers.
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

/// Header for a datagram whose L4 checksum is known to be valid.
pub const RX_HDR_VALID: [u8; VNET_HDR_LEN] = [F_DATA_VALID, 0, 0, 0, 0, 0, 0, 0, 0, 0];
/// Header for any other datagram: the receiving kernel checks it.
pub const RX_HDR_PLAIN: [u8; VNET_HDR_LEN] = [0; VNET_HDR_LEN];

/// `struct virtio_net_hdr` (little-endian fields: x86, and TUN's default
/// `TUNSETVNETLE`-less layout on little-endian hosts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VnetHdr {
    /// `VIRTIO_NET_HDR_F_*`.
    pub flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*`.
    pub gso_type: u8,
    /// Length of the headers to copy into every segment (bytes).
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the checksum starts, from the IP header (bytes).
    pub csum_start: u16,
    /// Where the checksum field is, from `csum_start` (bytes).
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Parses the first [`VNET_HDR_LEN`] bytes; `None` if fewer.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let h = bytes.get(..VNET_HDR_LEN)?;
        let u16_at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
        Some(VnetHdr {
            flags: h[0],
            gso_type: h[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        })
    }
}

/// What the offload stage did during a run (added to the emulator report).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OffloadCounters {
    /// UDP GSO super-packets split.
    pub gso_packets: u64,
    /// Datagrams they were split into.
    pub gso_segments: u64,
    /// `NEEDS_CSUM` datagrams whose checksum the emulator computed.
    pub csum_filled: u64,
    /// Reads dropped for a malformed `virtio_net_hdr` or GSO packet.
    pub malformed: u64,
}

/// Why a read was dropped (tests look at it; the report only counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Shorter than the virtio header.
    Short,
    /// A GSO type other than none and UDP_L4.
    GsoType,
    /// `gso_size` 0.
    GsoSize,
    /// `hdr_len`, `csum_start` or the checksum field beyond the packet, or
    /// checksum offsets that are not UDP's in a GSO packet.
    Offsets,
    /// A GSO packet that is not an unfragmented IPv4/UDP datagram.
    NotUdpV4,
    /// More than [`MAX_SEGMENTS`] segments.
    TooManySegments,
}

/// The offload stage: a scratch buffer and its counters.
#[derive(Debug, Default)]
pub struct Offload {
    scratch: Vec<u8>,
    counters: OffloadCounters,
}

impl Offload {
    /// Its counters.
    pub fn counters(&self) -> &OffloadCounters {
        &self.counters
    }

    /// Takes one TUN read (`virtio_net_hdr` + packet) and hands each
    /// resulting IP datagram to `emit(datagram, checksum_valid)`; returns
    /// how many, or why the read was dropped (then counted as malformed).
    pub fn process(
        &mut self,
        read: &mut [u8],
        mut emit: impl FnMut(&[u8], bool),
    ) -> Result<usize, Malformed> {
        let result = self.process_inner(read, &mut emit);
        if result.is_err() {
            self.counters.malformed += 1;
        }
        result
    }

    fn process_inner(
        &mut self,
        read: &mut [u8],
        emit: &mut impl FnMut(&[u8], bool),
    ) -> Result<usize, Malformed> {
        let hdr = VnetHdr::parse(read).ok_or(Malformed::Short)?;
        let packet = &mut read[VNET_HDR_LEN..];
        if usize::from(hdr.hdr_len) > packet.len() {
            return Err(Malformed::Offsets);
        }
        match hdr.gso_type {
            GSO_NONE => {
                let valid = if hdr.flags & F_NEEDS_CSUM != 0 {
                    fill_checksum(packet, hdr.csum_start, hdr.csum_offset)?;
                    self.counters.csum_filled += 1;
                    true
                } else {
                    l4_checksum_ok(packet)
                };
                emit(packet, valid);
                Ok(1)
            }
            GSO_UDP_L4 => {
                let n = segment_udp(&hdr, packet, &mut self.scratch, emit)?;
                self.counters.gso_packets += 1;
                self.counters.gso_segments += n as u64;
                Ok(n)
            }
            _ => Err(Malformed::GsoType),
        }
    }
}

/// Splits a UDP GSO super-packet (`packet`, IPv4) into datagrams of
/// `hdr.gso_size` payload bytes, built one at a time in `scratch`.
fn segment_udp(
    hdr: &VnetHdr,
    packet: &[u8],
    scratch: &mut Vec<u8>,
    emit: &mut impl FnMut(&[u8], bool),
) -> Result<usize, Malformed> {
    let mss = usize::from(hdr.gso_size);
    if mss == 0 {
        return Err(Malformed::GsoSize);
    }
    let first = *packet.first().ok_or(Malformed::NotUdpV4)?;
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || ihl < IPV4_MIN_HEADER || packet.len() < ihl + UDP_HEADER {
        return Err(Malformed::NotUdpV4);
    }
    let total = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
    let fragment = u16::from_be_bytes([packet[6], packet[7]]) & 0x3fff;
    if packet[9] != PROTO_UDP || fragment != 0 || total < ihl + UDP_HEADER || total > packet.len() {
        return Err(Malformed::NotUdpV4);
    }
    if hdr.flags & F_NEEDS_CSUM != 0 && (usize::from(hdr.csum_start) != ihl || hdr.csum_offset != 6)
    {
        return Err(Malformed::Offsets);
    }
    let payload = &packet[ihl + UDP_HEADER..total];
    let count = payload.len().div_ceil(mss).max(1);
    if count > MAX_SEGMENTS {
        return Err(Malformed::TooManySegments);
    }
    let id = u16::from_be_bytes([packet[4], packet[5]]);
    let headers = &packet[..ihl + UDP_HEADER];
    for i in 0..count {
        let chunk = &payload[(i * mss).min(payload.len())..((i + 1) * mss).min(payload.len())];
        scratch.clear();
        scratch.extend_from_slice(headers);
        scratch.extend_from_slice(chunk);
        write_ipv4_header(scratch, ihl, id.wrapping_add(i as u16));
        let udp_len = UDP_HEADER + chunk.len();
        // Fits: at most the super-packet's own length.
        scratch[ihl + 4..ihl + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        scratch[ihl + 6..ihl + 8].copy_from_slice(&[0, 0]);
        let sum = pseudo_header_sum(scratch, PROTO_UDP, udp_len) + ones_sum(&scratch[ihl..]);
        let check = match !fold(sum) {
            0 => 0xffff,
            c => c,
        };
        scratch[ihl + 6..ihl + 8].copy_from_slice(&check.to_be_bytes());
        emit(scratch, true);
    }
    Ok(count)
}

/// Sets the IPv4 header of `datagram` (header length `ihl`) to its
/// length, the id `id`, and its checksum.
fn write_ipv4_header(datagram: &mut [u8], ihl: usize, id: u16) {
    let total = datagram.len() as u16;
    datagram[2..4].copy_from_slice(&total.to_be_bytes());
    datagram[4..6].copy_from_slice(&id.to_be_bytes());
    datagram[10..12].copy_from_slice(&[0, 0]);
    let check = !fold(ones_sum(&datagram[..ihl]));
    datagram[10..12].copy_from_slice(&check.to_be_bytes());
}

/// `CHECKSUM_PARTIAL` completion: the ones'-complement sum of
/// `packet[start..]` (whose checksum field holds the pseudo-header sum)
/// stored at `start + offset`.
fn fill_checksum(packet: &mut [u8], start: u16, offset: u16) -> Result<(), Malformed> {
    let start = usize::from(start);
    let field = start + usize::from(offset);
    if start >= packet.len() || field + 2 > packet.len() {
        return Err(Malformed::Offsets);
    }
    let check = match !fold(ones_sum(&packet[start..])) {
        0 => 0xffff,
        c => c,
    };
    packet[field..field + 2].copy_from_slice(&check.to_be_bytes());
    Ok(())
}

/// Whether `packet` is an unfragmented IPv4 UDP or TCP datagram whose L4
/// checksum verifies (a UDP checksum of 0, "none", does not count).
fn l4_checksum_ok(packet: &[u8]) -> bool {
    let Some(&first) = packet.first() else {
        return false;
    };
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || ihl < IPV4_MIN_HEADER || packet.len() < ihl {
        return false;
    }
    let total = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
    let fragment = u16::from_be_bytes([packet[6], packet[7]]) & 0x3fff;
    if fragment != 0 || total < ihl || total > packet.len() {
        return false;
    }
    let l4 = &packet[ihl..total];
    let proto = packet[9];
    let ok_len = match proto {
        PROTO_UDP => l4.len() >= UDP_HEADER && l4[6..8] != [0, 0],
        PROTO_TCP => l4.len() >= 20,
        _ => false,
    };
    ok_len && fold(pseudo_header_sum(packet, proto, l4.len()) + ones_sum(l4)) == 0xffff
}

/// The IPv4 pseudo-header's contribution (RFC 768, RFC 9293 §3.1): source,
/// destination, protocol, L4 length.
fn pseudo_header_sum(ip: &[u8], proto: u8, l4_len: usize) -> u64 {
    ones_sum(&ip[12..20]) + u64::from(proto) + l4_len as u64
}

/// Sum of `bytes` as big-endian 16-bit words (an odd last byte padded with
/// zero), not yet folded (RFC 1071).
fn ones_sum(bytes: &[u8]) -> u64 {
    let mut chunks = bytes.chunks_exact(8);
    let mut sum = 0u64;
    for c in &mut chunks {
        // Four words at once; a u64 of 32-bit halves cannot overflow for
        // any IP datagram (< 2^16 bytes).
        let v = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        sum += (v >> 32) + (v & 0xffff_ffff);
    }
    let rest = chunks.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        sum += u64::from(u16::from_be_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        sum += u64::from(*last) << 8;
    }
    sum
}

/// Folds a sum into 16 bits with end-around carry.
fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 1071 the slow, obvious way: 16-bit words, end-around carry at
    /// every step (independent of `ones_sum`/`fold`).
    fn rfc1071(bytes: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        for pair in bytes.chunks(2) {
            let word = u32::from(pair[0]) << 8 | u32::from(*pair.get(1).unwrap_or(&0));
            sum += word;
            if sum > 0xffff {
                sum = (sum & 0xffff) + 1;
            }
        }
        !(sum as u16)
    }

    const SRC: [u8; 4] = [10, 78, 0, 1];
    const DST: [u8; 4] = [239, 1, 2, 3];

    /// An IPv4/UDP datagram built by hand: id `id`, DF, TTL 1, both
    /// checksums computed with [`rfc1071`].
    fn datagram(id: u16, payload: &[u8]) -> Vec<u8> {
        let total = (28 + payload.len()) as u16;
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 1, 17, 0, 0];
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[4..6].copy_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&SRC);
        p.extend_from_slice(&DST);
        let ip_check = rfc1071(&p);
        p[10..12].copy_from_slice(&ip_check.to_be_bytes());
        let udp_len = (8 + payload.len()) as u16;
        let mut udp = vec![0x30, 0x39, 0x1f, 0x90];
        udp.extend_from_slice(&udp_len.to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.extend_from_slice(payload);
        let mut pseudo = SRC.to_vec();
        pseudo.extend_from_slice(&DST);
        pseudo.extend_from_slice(&[0, 17]);
        pseudo.extend_from_slice(&udp_len.to_be_bytes());
        pseudo.extend_from_slice(&udp);
        let check = match rfc1071(&pseudo) {
            0 => 0xffff,
            c => c,
        };
        udp[6..8].copy_from_slice(&check.to_be_bytes());
        p.extend_from_slice(&udp);
        p
    }

    fn vnet(flags: u8, gso_type: u8, gso_size: u16, csum_start: u16, csum_offset: u16) -> Vec<u8> {
        let mut h = vec![flags, gso_type];
        for v in [0u16, gso_size, csum_start, csum_offset] {
            h.extend_from_slice(&v.to_le_bytes());
        }
        h
    }

    /// What the sending kernel hands a USO device: one datagram holding the
    /// whole payload, IP/UDP lengths of the whole, the UDP checksum field
    /// holding the pseudo-header sum (`CHECKSUM_PARTIAL`).
    fn gso_read(id: u16, payload: &[u8], gso_size: u16) -> Vec<u8> {
        let mut p = datagram(id, payload);
        let udp_len = (8 + payload.len()) as u16;
        let mut pseudo = SRC.to_vec();
        pseudo.extend_from_slice(&DST);
        pseudo.extend_from_slice(&[0, 17]);
        pseudo.extend_from_slice(&udp_len.to_be_bytes());
        let seed = !rfc1071(&pseudo);
        p[26..28].copy_from_slice(&seed.to_be_bytes());
        let mut read = vnet(F_NEEDS_CSUM, GSO_UDP_L4, gso_size, 20, 6);
        read.extend_from_slice(&p);
        read
    }

    /// Datagrams emitted, each with its `checksum_valid` flag.
    type Emitted = Vec<(Vec<u8>, bool)>;

    fn run(offload: &mut Offload, read: &mut [u8]) -> (Result<usize, Malformed>, Emitted) {
        let mut out = Vec::new();
        let r = offload.process(read, |d, ok| out.push((d.to_vec(), ok)));
        (r, out)
    }

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn gso_packet_splits_into_handmade_datagrams() {
        let data = payload(6 * 1400 - 333); // five full segments, an odd last one
        let mut read = gso_read(0xfffe, &data, 1400);
        let mut o = Offload::default();
        let (r, out) = run(&mut o, &mut read);
        assert_eq!(r, Ok(6));
        for (i, (d, ok)) in out.iter().enumerate() {
            let chunk = &data[i * 1400..((i + 1) * 1400).min(data.len())];
            // The id wraps like the kernel's u16.
            assert_eq!(
                d,
                &datagram(0xfffe_u16.wrapping_add(i as u16), chunk),
                "segment {i}"
            );
            assert!(ok);
            assert!(l4_checksum_ok(d));
        }
        assert_eq!(out[5].0.len(), 28 + 1400 - 333);
        assert_eq!(
            *o.counters(),
            OffloadCounters {
                gso_packets: 1,
                gso_segments: 6,
                csum_filled: 0,
                malformed: 0
            }
        );
    }

    #[test]
    fn needs_csum_is_filled_and_plain_reads_are_verified() {
        let data = payload(999);
        let good = datagram(7, &data);
        // CHECKSUM_PARTIAL: the field holds the pseudo-header sum only.
        let mut read = gso_read(7, &data, 0);
        read[1] = GSO_NONE;
        let mut o = Offload::default();
        let (r, out) = run(&mut o, &mut read);
        assert_eq!(r, Ok(1));
        assert_eq!(out, [(good.clone(), true)]);
        assert_eq!(o.counters().csum_filled, 1);
        // No flags: passed through, marked valid only if it verifies.
        let mut plain = vnet(0, GSO_NONE, 0, 0, 0);
        plain.extend_from_slice(&good);
        assert_eq!(run(&mut o, &mut plain.clone()).1, [(good.clone(), true)]);
        let last = plain.len() - 1;
        plain[last] ^= 1;
        let (_, out) = run(&mut o, &mut plain);
        assert!(!out[0].1, "corrupted payload is not marked valid");
        // UDP checksum 0 ("none") and non-UDP/TCP are not marked valid either.
        let mut none = vnet(0, GSO_NONE, 0, 0, 0);
        none.extend_from_slice(&good);
        none[VNET_HDR_LEN + 26..VNET_HDR_LEN + 28].copy_from_slice(&[0, 0]);
        assert!(!run(&mut o, &mut none).1[0].1);
        let mut v6 = vnet(0, GSO_NONE, 0, 0, 0);
        v6.extend_from_slice(&[0x60; 48]);
        assert_eq!(run(&mut o, &mut v6).1, [(vec![0x60; 48], false)]);
        assert_eq!(o.counters().malformed, 0);
    }

    #[test]
    fn malformed_headers_are_dropped_and_counted() {
        let data = payload(3000);
        let mut o = Offload::default();
        let mut cases: Vec<(Vec<u8>, Malformed)> = Vec::new();
        cases.push((vec![0; 9], Malformed::Short));
        let mut zero = gso_read(1, &data, 0);
        zero[1] = GSO_UDP_L4;
        cases.push((zero, Malformed::GsoSize));
        let mut hdr_len = gso_read(1, &data, 1000);
        hdr_len[2..4].copy_from_slice(&9000u16.to_le_bytes());
        cases.push((hdr_len, Malformed::Offsets));
        let mut csum = gso_read(1, &data, 1000);
        csum[1] = GSO_NONE;
        csum[6..8].copy_from_slice(&5000u16.to_le_bytes());
        cases.push((csum, Malformed::Offsets));
        let mut field = gso_read(1, &data, 1000);
        field[1] = GSO_NONE;
        field[8..10].copy_from_slice(&(3028 - 20 - 1u16).to_le_bytes());
        cases.push((field, Malformed::Offsets));
        let mut gso_csum = gso_read(1, &data, 1000);
        gso_csum[6..8].copy_from_slice(&24u16.to_le_bytes());
        cases.push((gso_csum, Malformed::Offsets));
        let mut v6 = vnet(F_NEEDS_CSUM, GSO_UDP_L4, 1000, 40, 6);
        v6.extend_from_slice(&[0x60; 200]);
        cases.push((v6, Malformed::NotUdpV4));
        let mut tcp = gso_read(1, &data, 1000);
        tcp[VNET_HDR_LEN + 9] = PROTO_TCP;
        cases.push((tcp, Malformed::NotUdpV4));
        let mut frag = gso_read(1, &data, 1000);
        frag[VNET_HDR_LEN + 6] |= 0x20; // MF
        cases.push((frag, Malformed::NotUdpV4));
        let mut tso = gso_read(1, &data, 1000);
        tso[1] = 1; // VIRTIO_NET_HDR_GSO_TCPV4: not offered
        cases.push((tso, Malformed::GsoType));
        cases.push((gso_read(1, &data, 2), Malformed::TooManySegments));
        let n = cases.len() as u64;
        for (mut read, why) in cases {
            let (r, out) = run(&mut o, &mut read);
            assert_eq!(r, Err(why));
            assert!(out.is_empty());
        }
        assert_eq!(o.counters().malformed, n);
        assert_eq!(o.counters().gso_packets, 0);
    }

    #[test]
    fn fast_sum_matches_rfc1071() {
        for n in 0..40 {
            let b = payload(n);
            assert_eq!(!fold(ones_sum(&b)), rfc1071(&b), "length {n}");
        }
        assert_eq!(!fold(ones_sum(&[0xff; 4000])), rfc1071(&[0xff; 4000]));
    }

    proptest! {
        #[test]
        fn random_reads_never_panic(mut read in proptest::collection::vec(any::<u8>(), 0..3000)) {
            let mut o = Offload::default();
            let _ = o.process(&mut read, |d, _| assert!(d.len() <= 3000));
        }

        #[test]
        fn random_gso_packets_split_like_by_hand(len in 0usize..9000, mss in 1u16..1500, id: u16) {
            let data = payload(len);
            let mut read = gso_read(id, &data, mss);
            let mut o = Offload::default();
            let (r, out) = run(&mut o, &mut read);
            let expect = len.div_ceil(usize::from(mss)).max(1);
            if expect > MAX_SEGMENTS {
                prop_assert_eq!(r, Err(Malformed::TooManySegments));
            } else {
                prop_assert_eq!(r, Ok(expect));
                let mut joined = Vec::new();
                for (i, (d, ok)) in out.iter().enumerate() {
                    prop_assert!(ok);
                    let body = &d[28..];
                    prop_assert_eq!(d, &datagram(id.wrapping_add(i as u16), body));
                    prop_assert!(body.len() <= usize::from(mss));
                    joined.extend_from_slice(body);
                }
                prop_assert_eq!(joined, data);
            }
        }
    }
}
