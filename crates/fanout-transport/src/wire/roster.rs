//! ROSTER (`docs/wire.md` §4.8): a merger's bounded, paged digest of its
//! subtree for its parent — how many receivers stand behind it, the largest
//! fan-in of any merger in it, and per receiver its address and cumulative ACK.
//! MCTCP merges ACKs (MCTCP §V.B) and so hides who is behind a merger; the
//! roster gives the sender its per-receiver accounting back (as in TCP-SMO
//! §IV.A) without per-receiver ACKs.

use fanout_core::codec::{DecodeError, Reader, Writer, VARINT_MAX};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Most entries one ROSTER frame carries: 32 IPv6 entries take at most
/// 32 × 27 = 864 bytes, so a page fits any datagram of 1200 bytes.
pub const MAX_ROSTER_PAGE: usize = 32;

const FAMILY_V4: u8 = 4;
const FAMILY_V6: u8 = 6;

/// One receiver of a subtree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RosterEntry {
    /// The receiver's address as its merger sees it (its feedback source);
    /// the receiver's identity in the session's roster.
    pub addr: SocketAddr,
    /// Its cumulative ACK (every stream offset below was received), as
    /// last known to the merger that reports it.
    pub cumulative: u64,
}

/// One page of a merger's roster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RosterFrame {
    /// Receivers behind the frame's sender (its subtree member count; a
    /// receiver counts 1, a merger the sum of its children's counts).
    pub receivers: u64,
    /// Largest number of direct children of any merger in the subtree,
    /// this one included (the busiest feedback node below the parent).
    pub fan_in: u64,
    /// Entries of the whole roster (the length of one cycle of pages).
    pub total: u64,
    /// Index of this page's first entry in the cycle; a page with
    /// `first` = 0 starts a new cycle.
    pub first: u64,
    /// At most [`MAX_ROSTER_PAGE`] entries.
    pub entries: Vec<RosterEntry>,
}

impl RosterFrame {
    /// Decodes the fields after the type byte.
    pub(super) fn decode(r: &mut Reader<'_>) -> Result<RosterFrame, DecodeError> {
        let receivers = r.varint()?;
        let fan_in = r.varint()?;
        let total = r.varint()?;
        let first = r.varint()?;
        let n = r.varint_len("roster.count", MAX_ROSTER_PAGE)?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let ip = match r.u8()? {
                FAMILY_V4 => IpAddr::V4(Ipv4Addr::from(r.array::<4>()?)),
                FAMILY_V6 => IpAddr::V6(Ipv6Addr::from(r.array::<16>()?)),
                _ => return Err(DecodeError::Invalid("roster.family")),
            };
            let port = r.u16()?;
            let cumulative = r.varint()?;
            entries.push(RosterEntry {
                addr: SocketAddr::new(ip, port),
                cumulative,
            });
        }
        Ok(RosterFrame {
            receivers,
            fan_in,
            total,
            first,
            entries,
        })
    }

    /// Appends the fields after the type byte (at most
    /// [`MAX_ROSTER_PAGE`] entries, the first ones; values clamped to
    /// varints).
    pub(super) fn encode_fields(&self, out: &mut Vec<u8>) {
        out.put_varint(self.receivers.min(VARINT_MAX));
        out.put_varint(self.fan_in.min(VARINT_MAX));
        out.put_varint(self.total.min(VARINT_MAX));
        out.put_varint(self.first.min(VARINT_MAX));
        let n = self.entries.len().min(MAX_ROSTER_PAGE);
        out.put_varint(n as u64);
        for e in &self.entries[..n] {
            match e.addr.ip() {
                IpAddr::V4(ip) => {
                    out.put_u8(FAMILY_V4);
                    out.put_bytes(&ip.octets());
                }
                IpAddr::V6(ip) => {
                    out.put_u8(FAMILY_V6);
                    out.put_bytes(&ip.octets());
                }
            }
            out.put_u16(e.addr.port());
            out.put_varint(e.cumulative.min(VARINT_MAX));
        }
    }
}
