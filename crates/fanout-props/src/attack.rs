//! Datagrams from attackers: strangers at their own addresses (never an
//! honest peer's: spoofing is out of scope), sending arbitrary bytes or
//! well-formed frames with plausible values — offsets near the send
//! position, windows around a segment, timestamp echoes near the sender's
//! clock — behind a header carrying the session's id, so that they reach
//! the engines' logic rather than their decoders' refusals.

use crate::script::Cursor;
use fanout_core::codec::VARINT_MAX;
use fanout_core::time::Instant;
use fanout_transport::fec::{BlockGeometry, MAX_REPAIR_ID, MAX_SOURCE_SYMBOLS};
use fanout_transport::session::SessionSender;
use fanout_transport::wire::{
    AcceptFrame, AckFrame, AckFrequencyFrame, CatchUpFrame, CloseFrame, ConnectFrame, DataFrame,
    Frame, Header, HeaderFlags, OfferFrame, RepairFrame, RosterEntry, RosterFrame, SkipFrame,
    UpstreamAckFrame, UpstreamFrame, WireTimestamp, MAX_ROSTER_PAGE, MAX_SACK_RANGES,
};
use std::collections::BTreeMap;
use std::net::{Ipv6Addr, SocketAddr};
use std::ops::Range;

/// Distinct attacker addresses.
pub const STRANGERS: usize = 8;

/// Attacker `i` (mod [`STRANGERS`]): six IPv4 and two IPv6 addresses.
pub fn stranger(i: usize) -> SocketAddr {
    let i = i % STRANGERS;
    if i < 6 {
        SocketAddr::from(([10, 0, 66, i as u8 + 1], 6666))
    } else {
        let ip = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0x66, i as u16);
        SocketAddr::new(ip.into(), 6666)
    }
}

/// What an attacker may know: the session's id and stream position (it
/// may listen to the group), the segment size and the honest peers'
/// addresses (it may list them in a forged roster, not send from them).
#[derive(Debug, Clone)]
pub struct View {
    /// The attack happens now.
    pub now: Instant,
    /// The session's id.
    pub session: u64,
    /// The sender's `SND.NXT`.
    pub snd_nxt: u64,
    /// Bytes the sender's application wrote.
    pub written: u64,
    /// The session's segment size.
    pub mss: u64,
    /// Honest peers.
    pub honest: Vec<SocketAddr>,
    /// The tokens of the sender's members by address: an attacker that
    /// joined speaks under its own token (a rogue member knows it).
    pub tokens: BTreeMap<SocketAddr, u64>,
}

impl View {
    /// The member tokens of `sender`, by address.
    pub fn tokens_of(sender: &SessionSender) -> BTreeMap<SocketAddr, u64> {
        sender
            .members()
            .filter_map(|(id, addr, ..)| Some((addr, sender.member_token(id)?)))
            .collect()
    }
}

/// What a structured attack step sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// Arbitrary bytes, no header.
    Raw,
    /// A header of the session and arbitrary frame bytes.
    RawFrames,
    /// A fresh CONNECT (possibly with a ROSTER, as a merger's).
    Connect,
    /// A resume CONNECT (`resume_from` > 0).
    Resume,
    /// An ACK with a few SACK ranges.
    Ack,
    /// ACKs with many SACK ranges in a pattern.
    AckPattern,
    /// A ROSTER page.
    Roster,
    /// UPSTREAM bytes.
    Upstream,
    /// RESET or CLOSE.
    Close,
    /// Frames only a sender sends (DATA, REPAIR, ACCEPT, ...).
    SenderFrames,
    /// An ACK of everything sent with a generous window, as an honest
    /// member would send it (keeps the attacker in the session).
    Mimic,
    /// Several of the above in one datagram.
    Mixed,
}

impl Attack {
    /// The attack of a harness script's step kinds 0–11, the table every
    /// session-level harness shares (kind 7 is [`Attack::Upstream`]; a
    /// harness whose peers have no upstream gives kind 7 its own meaning);
    /// `None` for the harnesses' own kinds, 12 and up.
    pub fn of_kind(kind: u8) -> Option<Attack> {
        const TABLE: [Attack; 12] = [
            Attack::Raw,
            Attack::RawFrames,
            Attack::Connect,
            Attack::Resume,
            Attack::Ack,
            Attack::AckPattern,
            Attack::Roster,
            Attack::Upstream,
            Attack::Close,
            Attack::SenderFrames,
            Attack::Mimic,
            Attack::Mixed,
        ];
        TABLE.get(usize::from(kind)).copied()
    }
}

/// The attackers' own state: packet numbers and the roster addresses they
/// made up so far.
#[derive(Debug, Default)]
pub struct Attackers {
    pn: [u32; STRANGERS],
    invented: u32,
}

fn clamp(v: u64) -> u64 {
    v.min(VARINT_MAX)
}

/// The sender's wire clock (µs, low 32 bits), as DATA timestamps carry it.
pub fn wire_timestamp(now: Instant) -> u32 {
    WireTimestamp::at(now).0
}

/// A plausible stream offset: at or around the send position, on or off a
/// segment boundary, beyond it, or anywhere.
pub fn offset(c: &mut Cursor<'_>, v: &View) -> u64 {
    let segs = v.snd_nxt / v.mss.max(1) + 2;
    let k = c.below(segs);
    clamp(match c.u8() % 12 {
        0 => 0,
        1 | 2 => v.snd_nxt,
        3 => v.snd_nxt + 1,
        4 | 5 => k * v.mss,
        6 => v.snd_nxt.saturating_sub(k * v.mss),
        7 => v.snd_nxt + (k + 1) * v.mss,
        8 => v.written,
        9 => k * v.mss + u64::from(c.u16()) % v.mss.max(1),
        10 => VARINT_MAX - u64::from(c.u16()),
        _ => c.u64(),
    })
}

/// A plausible receive window.
pub fn window(c: &mut Cursor<'_>, v: &View) -> u64 {
    match c.u8() % 10 {
        0 | 1 => 0,
        2 => 1,
        3 => v.mss - 1,
        4 => v.mss,
        5 | 6 => 64 << 10,
        7 => 1 << 20,
        8 => VARINT_MAX,
        _ => clamp(u64::from(c.u32())),
    }
}

/// A plausible timestamp echo: a little before the sender's clock now,
/// or anything.
pub fn echo(c: &mut Cursor<'_>, v: &View) -> WireTimestamp {
    let now = wire_timestamp(v.now);
    WireTimestamp(match c.u8() % 4 {
        0 | 1 => now.wrapping_sub(u32::from(c.u16())),
        2 => now.wrapping_sub(c.u32() % 1_000_000),
        _ => c.u32(),
    })
}

fn length(c: &mut Cursor<'_>, v: &View) -> u64 {
    match c.u8() % 6 {
        0 | 1 => v.mss,
        2 => (c.below(8) + 1) * v.mss,
        3 => 1,
        4 => u64::from(c.u16()) + 1,
        _ => c.u64() % VARINT_MAX + 1,
    }
}

/// A range starting at or above `from`, non-empty, within varints.
fn range_from(c: &mut Cursor<'_>, v: &View, from: u64) -> Range<u64> {
    let start = offset(c, v).max(from).min(VARINT_MAX - 1);
    let len = length(c, v).min(VARINT_MAX - start);
    start..start + len
}

fn max_payload(c: &mut Cursor<'_>, v: &View) -> u64 {
    match c.u8() % 4 {
        0 => 0,
        1 => clamp(c.u64()),
        _ => v.mss,
    }
}

fn connect(c: &mut Cursor<'_>, v: &View, resume: bool) -> ConnectFrame {
    let resume_from = if resume { offset(c, v).max(1) } else { 0 };
    ConnectFrame {
        max_payload: max_payload(c, v),
        window: window(c, v),
        timestamp: echo(c, v),
        resume_from,
    }
}

/// Frames only senders and joiners send to other roles: an OFFER (to a
/// sender, which never joins anyone) or a CATCH_UP (to a session alone,
/// without a catch-up server, or to a merger).
fn handshake_misfit(c: &mut Cursor<'_>, v: &View) -> Frame<'static> {
    if c.one_in(2) {
        Frame::Offer(OfferFrame {
            max_payload: max_payload(c, v),
            timestamp: echo(c, v),
        })
    } else {
        let end = offset(c, v).max(1);
        Frame::CatchUp(CatchUpFrame {
            member_id: clamp(c.u64()).max(1),
            end,
            from: c.u64() % end,
        })
    }
}

fn ack(c: &mut Cursor<'_>, v: &View) -> AckFrame {
    let cumulative = offset(c, v);
    let n = c.below(5);
    let sack = (0..n).map(|_| range_from(c, v, cumulative)).collect();
    AckFrame {
        cumulative,
        window: window(c, v),
        timestamp_echo: echo(c, v),
        ack_delay_us: if c.one_in(4) { clamp(c.u64()) } else { 0 },
        sack,
    }
}

/// An ACK whose SACK ranges hold every other group of segments above the
/// cumulative point (as many disjoint ranges as the frame takes).
fn ack_pattern(c: &mut Cursor<'_>, v: &View) -> AckFrame {
    let cumulative = offset(c, v).min(VARINT_MAX / 2);
    let held = (c.below(3) + 1) * v.mss;
    let gap = (c.below(3) + 1) * v.mss;
    let skew = if c.one_in(4) { c.below(v.mss) } else { 0 };
    let n = c.below(MAX_SACK_RANGES as u64 + 1);
    let sack = (0..n)
        .map(|i| {
            let start = cumulative + gap + skew + i * (held + gap);
            start..start + held
        })
        .collect();
    AckFrame {
        cumulative,
        window: window(c, v),
        timestamp_echo: echo(c, v),
        ack_delay_us: 0,
        sack,
    }
}

fn claim(c: &mut Cursor<'_>) -> u64 {
    match c.u8() % 6 {
        0 => 0,
        1 => 1,
        2 => c.below(64) + 2,
        3 => u64::from(c.u16()),
        4 => VARINT_MAX,
        _ => clamp(c.u64()),
    }
}

impl Attackers {
    fn roster(&mut self, c: &mut Cursor<'_>, v: &View) -> RosterFrame {
        let receivers = claim(c);
        let fan_in = claim(c);
        let total = claim(c);
        let first = if c.one_in(2) { 0 } else { claim(c) };
        let n = c.below(MAX_ROSTER_PAGE as u64 + 1);
        let how = c.u8();
        let entries = (0..n)
            .map(|i| {
                let addr = match how % 4 {
                    // Fresh addresses: fill the store.
                    0 | 1 => {
                        self.invented = self.invented.wrapping_add(1);
                        let [a, b, d, e] = self.invented.to_be_bytes();
                        let port = u16::from_be_bytes([a, b]) ^ 0x4000;
                        SocketAddr::from(([10, 77, d, e], port))
                    }
                    // The honest peers, by the attacker's account.
                    2 if !v.honest.is_empty() => v.honest[(i as usize) % v.honest.len()],
                    // A few addresses again and again.
                    _ => stranger(i as usize),
                };
                RosterEntry {
                    addr,
                    cumulative: offset(c, v),
                }
            })
            .collect();
        RosterFrame {
            receivers,
            fan_in,
            total,
            first,
            entries,
        }
    }

    /// The header of attacker `who`'s next datagram: mostly the session's
    /// id and the next packet number.
    fn header(&mut self, who: usize, c: &mut Cursor<'_>, v: &View, out: &mut Vec<u8>) {
        let sel = c.u8();
        let own = v.tokens.get(&stranger(who)).copied();
        let session_id = match sel & 7 {
            4 => v.session,
            5 => 0,
            6 => v.session ^ 1,
            7 => c.u64(),
            // Its own token once it joined, else the session's id.
            _ => own.unwrap_or(v.session),
        };
        let pn = &mut self.pn[who % STRANGERS];
        *pn = if sel & 8 != 0 {
            c.u32()
        } else {
            pn.wrapping_add(1)
        };
        let flags = match sel >> 4 {
            1 => HeaderFlags::default().with(HeaderFlags::MULTICAST),
            2 => HeaderFlags::default().with(HeaderFlags::SEALED),
            _ => HeaderFlags::default(),
        };
        Header {
            flags,
            session_id,
            packet_number: *pn,
        }
        .encode(out);
    }

    /// One attacker datagram of kind `attack`: (its source, its bytes).
    pub fn datagram(
        &mut self,
        attack: Attack,
        c: &mut Cursor<'_>,
        v: &View,
    ) -> (SocketAddr, Vec<u8>) {
        let who = usize::from(c.u8());
        let mut out = Vec::new();
        if attack == Attack::Raw {
            out.extend_from_slice(c.rest());
            return (stranger(who), out);
        }
        self.header(who, c, v, &mut out);
        match attack {
            Attack::RawFrames => out.extend_from_slice(c.rest()),
            Attack::Mixed => {
                for _ in 0..c.below(4) + 2 {
                    let kind = match c.u8() % 9 {
                        0 => Attack::Connect,
                        1 => Attack::Resume,
                        2 => Attack::Ack,
                        3 => Attack::AckPattern,
                        4 => Attack::Roster,
                        5 => Attack::Upstream,
                        6 => Attack::Close,
                        7 => Attack::SenderFrames,
                        _ => Attack::Mimic,
                    };
                    self.frame(kind, c, v, &mut out);
                }
            }
            _ => self.frame(attack, c, v, &mut out),
        }
        (stranger(who), out)
    }

    fn frame(&mut self, attack: Attack, c: &mut Cursor<'_>, v: &View, out: &mut Vec<u8>) {
        let payload: Vec<u8> = (0..c.u16() % 1500).map(|i| i as u8 ^ 0x5a).collect();
        match attack {
            Attack::Raw | Attack::RawFrames | Attack::Mixed => {}
            Attack::Connect if c.one_in(16) => handshake_misfit(c, v).encode(out),
            Attack::Connect => {
                Frame::Connect(connect(c, v, false)).encode(out);
                if c.one_in(2) {
                    Frame::Roster(self.roster(c, v)).encode(out);
                }
            }
            Attack::Resume => Frame::Connect(connect(c, v, true)).encode(out),
            Attack::Ack => Frame::Ack(ack(c, v)).encode(out),
            Attack::AckPattern => {
                for _ in 0..c.below(3) + 1 {
                    Frame::Ack(ack_pattern(c, v)).encode(out);
                }
            }
            Attack::Roster => Frame::Roster(self.roster(c, v)).encode(out),
            Attack::Upstream => {
                let offset = match c.u8() % 4 {
                    0 | 1 => u64::from(c.u16()),
                    2 => (64 << 10) - u64::from(c.u8()),
                    _ => clamp(c.u64()),
                };
                let offset = offset.min(VARINT_MAX - 1 - payload.len() as u64);
                Frame::Upstream(UpstreamFrame {
                    offset,
                    timestamp: echo(c, v),
                    fin: c.one_in(4),
                    payload: &payload,
                })
                .encode(out);
            }
            Attack::Close => {
                let reason = String::from_utf8_lossy(c.rest()).into_owned();
                let f = CloseFrame {
                    code: u64::from(reason.len() as u8 % 3),
                    reason: &reason,
                };
                if reason.len().is_multiple_of(2) {
                    Frame::Reset(f).encode(out);
                } else {
                    Frame::Close(f).encode(out);
                }
            }
            Attack::SenderFrames => match c.u8() % 8 {
                0 => {
                    let offset = offset(c, v).min(VARINT_MAX - payload.len() as u64);
                    Frame::Data(DataFrame {
                        offset,
                        timestamp: echo(c, v),
                        fin: c.one_in(2),
                        message_end: false,
                        payload: &payload,
                    })
                    .encode(out);
                }
                1 => {
                    let k = c.below(MAX_SOURCE_SYMBOLS as u64) as usize + 1;
                    let len = v.mss as usize;
                    let start = offset(c, v).min(VARINT_MAX / 2);
                    let block = BlockGeometry::new(start, k, len, len, VARINT_MAX);
                    if let Some(block) = block {
                        let symbol = vec![c.u8(); len];
                        Frame::Repair(RepairFrame {
                            block,
                            id: c.u8() % (MAX_REPAIR_ID + 1),
                            symbol: &symbol,
                        })
                        .encode(out);
                    }
                }
                2 => Frame::Accept(AcceptFrame {
                    max_payload: max_payload(c, v),
                    timestamp_echo: echo(c, v),
                    member_id: clamp(c.u64()).max(1),
                    start_offset: offset(c, v),
                    token: c.u64().max(1),
                })
                .encode(out),
                3 => Frame::AckFrequency(AckFrequencyFrame {
                    every: u32::from(c.u8()),
                    min_interval_us: c.u32(),
                    max_ack_delay_us: c.u32(),
                })
                .encode(out),
                4 => Frame::Skip(SkipFrame {
                    offset: offset(c, v) / 2,
                    len: length(c, v) / 2,
                    ends_message: c.u8() & 1 == 1,
                })
                .encode(out),
                5 => Frame::UpstreamAck(UpstreamAckFrame {
                    cumulative: offset(c, v),
                    window: window(c, v),
                    timestamp_echo: echo(c, v),
                })
                .encode(out),
                6 => Frame::Ping.encode(out),
                _ => Frame::Padding.encode(out),
            },
            Attack::Mimic => Frame::Ack(AckFrame {
                cumulative: v.snd_nxt,
                window: 64 << 10,
                timestamp_echo: WireTimestamp(
                    wire_timestamp(v.now).wrapping_sub(u32::from(c.u16())),
                ),
                ack_delay_us: 0,
                sack: Vec::new(),
            })
            .encode(out),
        }
    }
}
