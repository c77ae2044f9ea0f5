//! Frames: the units inside a datagram after the header (`docs/wire.md` §3).

use super::repair::RepairFrame;
use super::roster::RosterFrame;
use super::timestamp::WireTimestamp;
use fanout_core::codec::{DecodeError, Reader, Writer, VARINT_MAX};
use std::ops::Range;

/// Most SACK ranges one ACK may carry. Bounds the work and memory a peer can
/// force per ACK (every peer-controlled count is bounded,
/// `docs/architecture.md`).
pub const MAX_SACK_RANGES: usize = 32;
/// Longest close/reset reason, in bytes.
pub const MAX_REASON_BYTES: usize = 256;

const T_PADDING: u8 = 0x00;
const T_PING: u8 = 0x01;
const T_CONNECT: u8 = 0x02;
const T_ACCEPT: u8 = 0x03;
const T_ACK: u8 = 0x04;
const T_SKIP: u8 = 0x05;
const T_CLOSE: u8 = 0x06;
const T_RESET: u8 = 0x07;
const T_ACK_FREQUENCY: u8 = 0x08;
const T_ROSTER: u8 = 0x09;
const T_REPAIR: u8 = 0x0a;
pub(super) const T_OFFER: u8 = 0x0b;
const T_CATCH_UP: u8 = 0x0c;
const T_SENT: u8 = 0x0d;
const T_HANDSHAKE: u8 = 0x0e;
const T_GROUP_KEY: u8 = 0x0f;
const T_DATA: u8 = 0x10;
const DATA_FIN: u8 = 0x01;
const DATA_MSG_END: u8 = 0x02;
const T_UPSTREAM: u8 = 0x14;
const UPSTREAM_FIN: u8 = 0x01;
const T_UPSTREAM_ACK: u8 = 0x16;
const T_SIGNATURE: u8 = 0x17;
const T_SOURCE_KEY: u8 = 0x18;
const T_GROUP_KEY_ACK: u8 = 0x19;
const T_SEGMENTS: u8 = 0x1a;
const T_SEGMENTS_REQUEST: u8 = 0x1b;
const T_RETRY: u8 = 0x1c;
const T_REKEY: u8 = 0x1d;
const T_DEADLINE: u8 = 0x1e;
const T_RENEGE: u8 = 0x1f;

/// Bytes a DEADLINE frame takes (type and `deadline:u32`): a real-time
/// sender whose messages carry deadlines keeps them free in every DATA
/// datagram.
pub const DEADLINE_FRAME_LEN: usize = 5;

/// SEGMENTS_REQUEST: what a member asks its sender for about the listed
/// segment at `offset` (`docs/wire.md` §4.12, listed data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentsRequestFrame {
    /// A stream offset: a segment's, or the start of a run.
    pub offset: u64,
    /// The detail of the run starting there (a list naming each of its
    /// segments by its own hash), not the list naming the segment.
    pub detail: bool,
}

/// GROUP_KEY: the key multicast datagrams of one epoch are sealed under.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct GroupKeyFrame {
    /// Counts the session's group keys from 0; its low bit is the
    /// [`super::HeaderFlags::KEY_PHASE`] of datagrams sealed under `key`.
    pub epoch: u64,
    /// The AES-128-GCM key's secret.
    pub key: [u8; 32],
}

impl std::fmt::Debug for GroupKeyFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself in a log.
        f.debug_struct("GroupKeyFrame")
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

/// CONNECT (receiver → session sender or ACK merger): asks to join, or —
/// with `resume_from` — to re-attach after a merger crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectFrame {
    /// Largest DATA payload the joiner accepts, in bytes.
    pub max_payload: u64,
    /// Receive window the joiner offers, in bytes from the start of its
    /// delivery.
    pub window: u64,
    /// The joiner's clock, echoed in the ACCEPT (its first RTT sample).
    pub timestamp: WireTimestamp,
    /// 0 for a fresh join; `P > 0`: "I hold `[0, P)`, continue from P"
    /// (`docs/wire.md` §3.2, resume CONNECT).
    pub resume_from: u64,
}

/// ACCEPT (session sender or ACK merger → joiner): the join is admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptFrame {
    /// Largest DATA payload the sender will send, in bytes.
    pub max_payload: u64,
    /// The CONNECT's timestamp, echoed.
    pub timestamp_echo: WireTimestamp,
    /// The id the accepting side gives this member (never 0).
    pub member_id: u64,
    /// Stream offset at which this member's delivery starts (a late joiner
    /// of a live stream starts at the current position; 0 otherwise).
    pub start_offset: u64,
    /// The id this member puts in the header of every datagram it sends
    /// to the accepting side from now on, in place of the session id: an
    /// unpredictable value only the member's address received, so nobody
    /// else can speak for it (`docs/wire.md` §4.10). Never 0.
    pub token: u64,
}

/// OFFER (sender → a listening receiver): "I have data for you, join me"
/// — how a transfer to one known receiver starts (a session of one). The
/// listener answers with a CONNECT to the offering address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OfferFrame {
    /// Largest DATA payload the sender will send, in bytes.
    pub max_payload: u64,
    /// The sender's clock.
    pub timestamp: WireTimestamp,
}

/// CATCH_UP (a late joiner → the session sender, from its catch-up
/// socket): "send me the stream bytes `[from, end)` I missed" (`from` 0
/// for a joiner with nothing; a resuming one already holds `[0, from)`).
/// The sender answers with an OFFER to the requesting address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUpFrame {
    /// The requester's member id in the session (never 0).
    pub member_id: u64,
    /// End of the prefix wanted: the member's start offset.
    pub end: u64,
    /// First stream byte wanted (below `end`).
    pub from: u64,
}

/// SENT (session sender → a merger member, merger → a child merger), the
/// answer to the first ROSTER page of each cycle: "the stream was sent up
/// to `end`". A merger never learns the stream from the data, so it bounds
/// its children's claims with this (what any child can have acknowledged)
/// before it lets them decide who is stalled or where a late child starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentFrame {
    /// `SND.NXT` as the answering node knows it: the sender's own, a
    /// merger's the latest SENT from its parent. Stale by at most a round
    /// trip and a roster cycle, never ahead of the sender.
    pub end: u64,
}

/// A piece of the byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataFrame<'a> {
    /// Stream offset of the first byte.
    pub offset: u64,
    /// Sender's clock, echoed in ACKs (RFC 7323 style RTT measurement,
    /// free of Karn's ambiguity).
    pub timestamp: WireTimestamp,
    /// The stream ends after this payload.
    pub fin: bool,
    /// An application message ends after this payload.
    pub message_end: bool,
    /// The bytes.
    pub payload: &'a [u8],
}

impl DataFrame<'_> {
    /// Stream range covered.
    pub fn range(&self) -> Range<u64> {
        self.offset..self.offset + self.payload.len() as u64
    }
}

/// Session relay (TCP-SMO §IV.B): a piece of a member's upstream byte stream,
/// member → session sender, on the member's own unicast connection. Offsets
/// count in the upstream stream's own space, from 0; as with DATA the end (FIN)
/// occupies one offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamFrame<'a> {
    /// Upstream offset of the first byte.
    pub offset: u64,
    /// The member's clock, echoed in UPSTREAM_ACK for the member's RTT
    /// samples.
    pub timestamp: WireTimestamp,
    /// The upstream stream ends after this payload.
    pub fin: bool,
    /// The bytes.
    pub payload: &'a [u8],
}

impl UpstreamFrame<'_> {
    /// Upstream range covered (the FIN's offset excluded).
    pub fn range(&self) -> Range<u64> {
        self.offset..self.offset + self.payload.len() as u64
    }
}

/// Session sender → one member (unicast): acknowledgement of its upstream
/// stream and the upstream window the sender offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamAckFrame {
    /// Every upstream offset below this was received (plus one for the FIN).
    pub cumulative: u64,
    /// Upstream bytes beyond `cumulative` the sender accepts.
    pub window: u64,
    /// Timestamp of the UPSTREAM frame this acknowledgement answers.
    pub timestamp_echo: WireTimestamp,
}

/// Cumulative + selective acknowledgement (RFC 2018 semantics on byte
/// offsets), receive window and timestamp echo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckFrame {
    /// Every byte below this offset was received.
    pub cumulative: u64,
    /// Bytes beyond `cumulative` the receiver will accept.
    pub window: u64,
    /// Timestamp of the data segment this ACK answers (RFC 7323 TS.Recent).
    pub timestamp_echo: WireTimestamp,
    /// Microseconds from the arrival of the segment whose timestamp is
    /// echoed to this ACK's transmission (RFC 9002 §5.3 ACK delay).
    pub ack_delay_us: u64,
    /// Received ranges above `cumulative`, disjoint, at most
    /// [`MAX_SACK_RANGES`]; the first holds the most recent arrival.
    pub sack: Vec<Range<u64>>,
}

/// "These stream bytes will never come" (real-time modes: TCP-RTM, TCP-CM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkipFrame {
    /// First skipped offset.
    pub offset: u64,
    /// Number of skipped bytes.
    pub len: u64,
    /// A message ends where the skipped bytes end (the sender widens a
    /// skip to whole messages; `docs/wire.md` §4.5).
    pub ends_message: bool,
}

/// Graceful close or abortive reset, with a code and a human reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseFrame<'a> {
    /// 0 = no error; otherwise an application or transport error code.
    pub code: u64,
    /// UTF-8, at most [`MAX_REASON_BYTES`].
    pub reason: &'a str,
}

/// Whether `frames` (a datagram's, after the header) start with a signed
/// list, SIGNATURE or SEGMENTS (a signed list is not itself listed).
pub fn starts_with_signed_list(frames: &[u8]) -> bool {
    matches!(frames.first(), Some(&T_SIGNATURE | &T_SEGMENTS))
}

/// Longest HANDSHAKE message, in bytes.
pub const MAX_HANDSHAKE_BYTES: usize = crate::protection::noise::MAX_HANDSHAKE_MESSAGE;

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Ignored filler.
    Padding,
    /// Elicits an ACK; keeps an idle session alive.
    Ping,
    /// Asks to join a session.
    Connect(ConnectFrame),
    /// Admits a joiner.
    Accept(AcceptFrame),
    /// Invites a listening receiver to join (a transfer to one receiver).
    Offer(OfferFrame),
    /// Asks the session sender for a missed prefix.
    CatchUp(CatchUpFrame),
    /// How far the stream was sent (to mergers).
    Sent(SentFrame),
    /// Acknowledgement.
    Ack(AckFrame),
    /// Stream data.
    Data(DataFrame<'a>),
    /// Abandoned stream bytes.
    Skip(SkipFrame),
    /// The deadline, on the sender's timestamp clock, of the message the
    /// DATA frame after it in the same datagram belongs to (real-time
    /// modes, `docs/wire.md` §4.5).
    Deadline(WireTimestamp),
    /// Graceful close.
    Close(CloseFrame<'a>),
    /// Abortive reset.
    Reset(CloseFrame<'a>),
    /// A Noise handshake message (`docs/wire.md` §4.12): the joiner's
    /// first carries its CONNECT inside, the sender's answer the ACCEPT
    /// (or the refusal) and the group key.
    Handshake(&'a [u8]),
    /// A group key and its epoch (sender → member, inside a handshake
    /// answer or sealed under the member's pair key, `docs/wire.md`
    /// §4.12): multicast datagrams sealed under it carry the epoch's low
    /// bit as [`super::HeaderFlags::KEY_PHASE`].
    GroupKey(GroupKeyFrame),
    /// A member has the group key of this epoch (member → sender, under
    /// its pair key).
    GroupKeyAck(u64),
    /// A signed list of the next segments' hashes, sent ahead of them
    /// (sender → members, `docs/wire.md` §4.12, listed data).
    Segments(crate::protection::segments::SegmentList),
    /// A member asks for the list naming the segment at an offset, or for
    /// the detail of the run starting there (member → sender, under its
    /// pair key).
    SegmentsRequest(SegmentsRequestFrame),
    /// A member below this merger left before the end and knows the group
    /// key: draw a new one (merger → parent, under its pair key).
    Rekey,
    /// Ranges the member acknowledged selectively and no longer holds:
    /// held, unchecked, segments of a run that proved forged (a rogue
    /// member's copies) with no copy of the sender's beside them (member or
    /// merger → its sender, under its pair key, `docs/wire.md` §4.12):
    /// send them again. Each a whole number of segments, increasing, at
    /// most [`MAX_SACK_RANGES`].
    Renege(Vec<Range<u64>>),
    /// Join again under this token as the header's id (sender → joiner,
    /// unprotected, under a join flood, `docs/wire.md` §4.11): the sender
    /// keeps no state until a CONNECT proves the joiner received it.
    Retry(u64),
    /// A signed list of the sender's multicast datagrams (source
    /// authentication, `docs/wire.md` §4.12).
    Signature(crate::protection::source::SignedList),
    /// The sender's Ed25519 key its lists verify under (only inside a
    /// handshake answer).
    SourceKey([u8; 32]),
    /// Sender steers a receiver's ACK schedule (TCP-SMO adaptive ACKs, feedback
    /// pacing).
    AckFrequency(AckFrequencyFrame),
    /// Member's upstream bytes (session relay).
    Upstream(UpstreamFrame<'a>),
    /// Sender's acknowledgement of a member's upstream bytes.
    UpstreamAck(UpstreamAckFrame),
    /// A merger's page of its subtree's roster (receiver count and
    /// per-receiver progress, [`super::RosterFrame`]).
    Roster(RosterFrame),
    /// A coded repair symbol of a block of stream bytes (session
    /// sender → members, [`RepairFrame`], `docs/wire.md` §4.9).
    Repair(RepairFrame<'a>),
}

/// Most a sender may space one receiver's ACKs: 1 s (µs).
pub const MAX_ACK_INTERVAL_US: u32 = 1_000_000;

/// ACK_FREQUENCY: acknowledge every `every` segments (1 ≤ every ≤ 64) and
/// send data-triggered ACKs at most once per `min_interval_us` µs (0 = no
/// limit, at most [`MAX_ACK_INTERVAL_US`]) — `every` = 0 leaves both as the
/// receiver has them — and leave arrived input unread
/// (or an ACK it calls for unsent) no longer than `max_ack_delay_us` µs (as
/// the Requested Max Ack Delay of QUIC's ACK_FREQUENCY extension; at most
/// [`MAX_ACK_INTERVAL_US`], which asks nothing of the receiver's runtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckFrequencyFrame {
    /// Segments per ACK; 0: the receiver's own count and spacing.
    pub every: u32,
    /// Minimum spacing of data-triggered ACKs, µs.
    pub min_interval_us: u32,
    /// Longest the receiver may hold input or an ACK, µs.
    pub max_ack_delay_us: u32,
}

fn offset_range(r: &mut Reader<'_>, field: &'static str) -> Result<(u64, u64), DecodeError> {
    let start = r.varint()?;
    let len = r.varint()?;
    if start.checked_add(len).is_none_or(|end| end > VARINT_MAX) {
        return Err(DecodeError::Invalid(field));
    }
    Ok((start, len))
}

fn decode_connect(r: &mut Reader<'_>) -> Result<ConnectFrame, DecodeError> {
    Ok(ConnectFrame {
        max_payload: r.varint()?,
        window: r.varint()?,
        timestamp: WireTimestamp(r.u32()?),
        resume_from: r.varint()?,
    })
}

fn decode_accept(r: &mut Reader<'_>) -> Result<AcceptFrame, DecodeError> {
    let f = AcceptFrame {
        max_payload: r.varint()?,
        timestamp_echo: WireTimestamp(r.u32()?),
        member_id: r.varint()?,
        start_offset: r.varint()?,
        token: r.u64()?,
    };
    if f.member_id == 0 {
        return Err(DecodeError::Invalid("accept.member_id"));
    }
    if f.token == 0 {
        return Err(DecodeError::Invalid("accept.token"));
    }
    Ok(f)
}

fn decode_catch_up(r: &mut Reader<'_>) -> Result<CatchUpFrame, DecodeError> {
    let f = CatchUpFrame {
        member_id: r.varint()?,
        end: r.varint()?,
        from: r.varint()?,
    };
    if f.member_id == 0 {
        return Err(DecodeError::Invalid("catch_up.member_id"));
    }
    if f.from >= f.end {
        return Err(DecodeError::Invalid("catch_up.from"));
    }
    Ok(f)
}

fn decode_ack(r: &mut Reader<'_>) -> Result<AckFrame, DecodeError> {
    let cumulative = r.varint()?;
    let window = r.varint()?;
    let timestamp_echo = WireTimestamp(r.u32()?);
    let ack_delay_us = r.varint()?;
    let n = r.varint_len("ack.sack_count", MAX_SACK_RANGES)?;
    let mut sack = Vec::with_capacity(n);
    for _ in 0..n {
        let (start, len) = offset_range(r, "ack.sack")?;
        // A block reports only what lies above the cumulative point: one
        // reaching below it is clipped, one wholly below it (or empty)
        // dropped — a bad block never costs the rest of the ACK.
        let end = start + len;
        let start = start.max(cumulative);
        if start < end {
            sack.push(start..end);
        }
    }
    Ok(AckFrame {
        cumulative,
        window,
        timestamp_echo,
        ack_delay_us,
        sack,
    })
}

fn decode_close<'a>(r: &mut Reader<'a>) -> Result<CloseFrame<'a>, DecodeError> {
    let code = r.varint()?;
    let n = r.varint_len("close.reason", MAX_REASON_BYTES)?;
    let reason =
        std::str::from_utf8(r.bytes(n)?).map_err(|_| DecodeError::Invalid("close.reason"))?;
    Ok(CloseFrame {
        code,
        reason: printable_prefix(reason),
    })
}

/// `text` up to its first control character: a peer's reason is printed to
/// people, and an escape sequence in it must not reach their terminal.
fn printable_prefix(text: &str) -> &str {
    match text.find(char::is_control) {
        Some(at) => &text[..at],
        None => text,
    }
}

impl<'a> Frame<'a> {
    /// Decodes one frame from the front of `r`.
    pub fn decode(r: &mut Reader<'a>) -> Result<Frame<'a>, DecodeError> {
        let ty = r.u8()?;
        Ok(match ty {
            T_PADDING => Frame::Padding,
            T_PING => Frame::Ping,
            T_CONNECT => Frame::Connect(decode_connect(r)?),
            T_ACCEPT => Frame::Accept(decode_accept(r)?),
            T_OFFER => Frame::Offer(OfferFrame {
                max_payload: r.varint()?,
                timestamp: WireTimestamp(r.u32()?),
            }),
            T_CATCH_UP => Frame::CatchUp(decode_catch_up(r)?),
            T_SENT => Frame::Sent(SentFrame { end: r.varint()? }),
            T_HANDSHAKE => {
                let n = r.varint_len("handshake.len", MAX_HANDSHAKE_BYTES)?;
                Frame::Handshake(r.bytes(n)?)
            }
            T_SIGNATURE => Frame::Signature(crate::protection::source::decode_list(r)?),
            T_SOURCE_KEY => Frame::SourceKey(
                r.bytes(32)?
                    .try_into()
                    .map_err(|_| DecodeError::Invalid("source_key"))?,
            ),
            T_GROUP_KEY => Frame::GroupKey(GroupKeyFrame {
                epoch: r.varint()?,
                key: r
                    .bytes(32)?
                    .try_into()
                    .map_err(|_| DecodeError::Invalid("group_key"))?,
            }),
            T_GROUP_KEY_ACK => Frame::GroupKeyAck(r.varint()?),
            T_SEGMENTS => Frame::Segments(crate::protection::segments::SegmentList::decode(r)?),
            T_SEGMENTS_REQUEST => {
                let offset = r.varint()?;
                let detail = match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(DecodeError::Invalid("segments_request.flags")),
                };
                Frame::SegmentsRequest(SegmentsRequestFrame { offset, detail })
            }
            T_RETRY => Frame::Retry(r.u64()?),
            T_REKEY => Frame::Rekey,
            T_DEADLINE => Frame::Deadline(WireTimestamp(r.u32()?)),
            T_RENEGE => {
                let n = r.varint_len("renege.count", MAX_SACK_RANGES)?;
                if n == 0 {
                    return Err(DecodeError::Invalid("renege.count"));
                }
                let mut ranges: Vec<Range<u64>> = Vec::with_capacity(n);
                for _ in 0..n {
                    let (start, len) = offset_range(r, "renege")?;
                    if len == 0 || ranges.last().is_some_and(|p| start < p.end) {
                        return Err(DecodeError::Invalid("renege"));
                    }
                    ranges.push(start..start + len);
                }
                Frame::Renege(ranges)
            }
            T_ACK => Frame::Ack(decode_ack(r)?),
            T_SKIP => {
                let (offset, len) = offset_range(r, "skip")?;
                let ends_message = match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(DecodeError::Invalid("skip.flags")),
                };
                Frame::Skip(SkipFrame {
                    offset,
                    len,
                    ends_message,
                })
            }
            T_CLOSE => Frame::Close(decode_close(r)?),
            T_RESET => Frame::Reset(decode_close(r)?),
            T_ACK_FREQUENCY => {
                let n = r.varint()?;
                let interval = r.varint()?;
                let max_delay = r.varint()?;
                let limit = u64::from(MAX_ACK_INTERVAL_US);
                if n > 64 || interval > limit || max_delay > limit {
                    return Err(DecodeError::Invalid("ack_frequency"));
                }
                Frame::AckFrequency(AckFrequencyFrame {
                    every: n as u32,
                    min_interval_us: interval as u32,
                    max_ack_delay_us: max_delay as u32,
                })
            }
            T_ROSTER => Frame::Roster(RosterFrame::decode(r)?),
            T_REPAIR => Frame::Repair(RepairFrame::decode(r)?),
            T_UPSTREAM_ACK => Frame::UpstreamAck(UpstreamAckFrame {
                cumulative: r.varint()?,
                window: r.varint()?,
                timestamp_echo: WireTimestamp(r.u32()?),
            }),
            t if t & !UPSTREAM_FIN == T_UPSTREAM => {
                let offset = r.varint()?;
                let timestamp = WireTimestamp(r.u32()?);
                let len = r.varint_len("upstream.len", r.remaining())?;
                if offset
                    .checked_add(len as u64)
                    .is_none_or(|e| e >= VARINT_MAX)
                {
                    return Err(DecodeError::Invalid("upstream.offset"));
                }
                Frame::Upstream(UpstreamFrame {
                    offset,
                    timestamp,
                    fin: t & UPSTREAM_FIN != 0,
                    payload: r.bytes(len)?,
                })
            }
            t if t & !(DATA_FIN | DATA_MSG_END) == T_DATA => {
                let offset = r.varint()?;
                let timestamp = WireTimestamp(r.u32()?);
                let len = r.varint_len("data.len", r.remaining())?;
                if offset
                    .checked_add(len as u64)
                    .is_none_or(|e| e > VARINT_MAX)
                {
                    return Err(DecodeError::Invalid("data.offset"));
                }
                Frame::Data(DataFrame {
                    offset,
                    timestamp,
                    fin: t & DATA_FIN != 0,
                    message_end: t & DATA_MSG_END != 0,
                    payload: r.bytes(len)?,
                })
            }
            _ => return Err(DecodeError::Invalid("frame type")),
        })
    }

    /// Appends the encoded frame.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Frame::Padding => out.put_u8(T_PADDING),
            Frame::Ping => out.put_u8(T_PING),
            Frame::Connect(c) => {
                out.put_u8(T_CONNECT);
                out.put_varint(c.max_payload);
                out.put_varint(c.window);
                out.put_u32(c.timestamp.0);
                out.put_varint(c.resume_from);
            }
            Frame::Accept(a) => {
                out.put_u8(T_ACCEPT);
                out.put_varint(a.max_payload);
                out.put_u32(a.timestamp_echo.0);
                out.put_varint(a.member_id);
                out.put_varint(a.start_offset);
                out.put_u64(a.token);
            }
            Frame::Offer(o) => {
                out.put_u8(T_OFFER);
                out.put_varint(o.max_payload);
                out.put_u32(o.timestamp.0);
            }
            Frame::CatchUp(c) => {
                out.put_u8(T_CATCH_UP);
                out.put_varint(c.member_id);
                out.put_varint(c.end);
                out.put_varint(c.from);
            }
            Frame::Sent(f) => {
                out.put_u8(T_SENT);
                out.put_varint(f.end);
            }
            Frame::Handshake(m) => {
                out.put_u8(T_HANDSHAKE);
                out.put_varint(m.len() as u64);
                out.put_bytes(m);
            }
            Frame::GroupKey(k) => {
                out.put_u8(T_GROUP_KEY);
                out.put_varint(k.epoch);
                out.put_bytes(&k.key);
            }
            Frame::GroupKeyAck(epoch) => {
                out.put_u8(T_GROUP_KEY_ACK);
                out.put_varint(*epoch);
            }
            Frame::Segments(list) => {
                out.put_u8(T_SEGMENTS);
                list.encode(out);
            }
            Frame::SegmentsRequest(q) => {
                out.put_u8(T_SEGMENTS_REQUEST);
                out.put_varint(q.offset);
                out.put_u8(u8::from(q.detail));
            }
            Frame::Retry(token) => {
                out.put_u8(T_RETRY);
                out.put_u64(*token);
            }
            Frame::Rekey => out.put_u8(T_REKEY),
            Frame::Renege(ranges) => {
                out.put_u8(T_RENEGE);
                out.put_varint(ranges.len() as u64);
                for r in ranges {
                    out.put_varint(r.start);
                    out.put_varint(r.end - r.start);
                }
            }
            Frame::Deadline(t) => {
                out.put_u8(T_DEADLINE);
                out.put_u32(t.0);
            }
            Frame::Signature(list) => {
                out.put_u8(T_SIGNATURE);
                crate::protection::source::encode_list(list, out);
            }
            Frame::SourceKey(k) => {
                out.put_u8(T_SOURCE_KEY);
                out.put_bytes(k);
            }
            Frame::Ack(a) => {
                out.put_u8(T_ACK);
                out.put_varint(a.cumulative);
                out.put_varint(a.window);
                out.put_u32(a.timestamp_echo.0);
                out.put_varint(a.ack_delay_us);
                let n = a.sack.len().min(MAX_SACK_RANGES);
                out.put_varint(n as u64);
                for r in &a.sack[..n] {
                    out.put_varint(r.start);
                    out.put_varint(r.end - r.start);
                }
            }
            Frame::Data(d) => {
                encode_data_header(
                    out,
                    d.offset,
                    d.timestamp,
                    d.fin,
                    d.message_end,
                    d.payload.len(),
                );
                out.put_bytes(d.payload);
            }
            Frame::Skip(s) => {
                out.put_u8(T_SKIP);
                out.put_varint(s.offset);
                out.put_varint(s.len);
                out.put_u8(u8::from(s.ends_message));
            }
            Frame::Close(c) | Frame::Reset(c) => {
                out.put_u8(if matches!(self, Frame::Close(_)) {
                    T_CLOSE
                } else {
                    T_RESET
                });
                out.put_varint(c.code);
                let reason = truncate_utf8(c.reason, MAX_REASON_BYTES);
                out.put_varint(reason.len() as u64);
                out.put_bytes(reason.as_bytes());
            }
            Frame::AckFrequency(f) => {
                out.put_u8(T_ACK_FREQUENCY);
                out.put_varint(u64::from(f.every.min(64)));
                out.put_varint(u64::from(f.min_interval_us.min(MAX_ACK_INTERVAL_US)));
                out.put_varint(u64::from(f.max_ack_delay_us.min(MAX_ACK_INTERVAL_US)));
            }
            Frame::Upstream(u) => {
                out.put_u8(if u.fin {
                    T_UPSTREAM | UPSTREAM_FIN
                } else {
                    T_UPSTREAM
                });
                out.put_varint(u.offset);
                out.put_u32(u.timestamp.0);
                out.put_varint(u.payload.len() as u64);
                out.put_bytes(u.payload);
            }
            Frame::UpstreamAck(a) => {
                out.put_u8(T_UPSTREAM_ACK);
                out.put_varint(a.cumulative);
                out.put_varint(a.window);
                out.put_u32(a.timestamp_echo.0);
            }
            Frame::Roster(r) => {
                out.put_u8(T_ROSTER);
                r.encode_fields(out);
            }
            Frame::Repair(r) => {
                out.put_u8(T_REPAIR);
                r.encode_fields(out);
            }
        }
    }
}

/// Appends a DATA frame's fields up to its payload; the caller appends
/// exactly `payload_len` bytes next (lets a sender copy straight from its
/// send buffer into the datagram).
pub fn encode_data_header(
    out: &mut Vec<u8>,
    offset: u64,
    timestamp: WireTimestamp,
    fin: bool,
    message_end: bool,
    payload_len: usize,
) {
    let mut t = T_DATA;
    if fin {
        t |= DATA_FIN;
    }
    if message_end {
        t |= DATA_MSG_END;
    }
    out.put_u8(t);
    out.put_varint(offset);
    out.put_u32(timestamp.0);
    out.put_varint(payload_len as u64);
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char
/// boundary.
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Iterates the frames of a datagram body; stops at the first error.
#[derive(Debug, Clone)]
pub struct FrameIter<'a> {
    reader: Reader<'a>,
    failed: bool,
}

impl<'a> Iterator for FrameIter<'a> {
    type Item = Result<Frame<'a>, DecodeError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.reader.is_empty() {
            return None;
        }
        let f = Frame::decode(&mut self.reader);
        self.failed = f.is_err();
        Some(f)
    }
}

/// The frames of a datagram body (the bytes after the header).
pub fn decode_frames(body: &[u8]) -> FrameIter<'_> {
    FrameIter {
        reader: Reader::new(body),
        failed: false,
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_reason_ends_at_its_first_control_character() {
        let mut out = Vec::new();
        Frame::Reset(CloseFrame {
            code: 3,
            reason: "disk full\u{1b}[2J\nrm -rf",
        })
        .encode(&mut out);
        let mut r = Reader::new(&out);
        match Frame::decode(&mut r) {
            Ok(Frame::Reset(c)) => assert_eq!((c.code, c.reason), (3, "disk full")),
            other => panic!("{other:?}"),
        }
    }

    use super::super::roster::{RosterEntry, MAX_ROSTER_PAGE};
    use super::*;
    use proptest::prelude::*;

    fn arb_reason() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9 éß]{0,40}"
    }

    fn arb_ack() -> impl Strategy<Value = AckFrame> {
        (
            0u64..1 << 40,
            0u64..1 << 40,
            any::<u32>(),
            0u64..1 << 30,
            proptest::collection::vec((1u64..1000, 1u64..1000), 0..MAX_SACK_RANGES),
        )
            .prop_map(|(cumulative, window, timestamp_echo, ack_delay_us, gaps)| {
                let mut at = cumulative;
                let sack = gaps
                    .into_iter()
                    .map(|(gap, len)| {
                        at += gap;
                        let r = at..at + len;
                        at += len;
                        r
                    })
                    .collect();
                AckFrame {
                    cumulative,
                    window,
                    timestamp_echo: WireTimestamp(timestamp_echo),
                    ack_delay_us,
                    sack,
                }
            })
    }

    fn roundtrip(f: &Frame<'_>) {
        let mut out = Vec::new();
        f.encode(&mut out);
        let mut r = Reader::new(&out);
        assert_eq!(&Frame::decode(&mut r).unwrap(), f);
        assert!(r.is_empty());
    }

    proptest! {
        #[test]
        fn ack_roundtrip(a in arb_ack()) {
            roundtrip(&Frame::Ack(a));
        }

        #[test]
        fn data_roundtrip(offset in 0u64..1 << 50, timestamp: u32, fin: bool, message_end: bool,
                          payload in proptest::collection::vec(any::<u8>(), 0..200)) {
            roundtrip(&Frame::Data(DataFrame { offset, timestamp: WireTimestamp(timestamp), fin, message_end, payload: &payload }));
        }

        #[test]
        fn control_roundtrip(max_payload in 0u64..1 << 20, window in 0u64..1 << 40,
                             timestamp: u32, member_id in 0u64..1 << 40, code in 0u64..1 << 40,
                             reason in arb_reason(), n in 0u32..=64, iv in 0u32..=MAX_ACK_INTERVAL_US, off in 0u64..1 << 40, len in 0u64..1 << 40) {
            let timestamp = WireTimestamp(timestamp);
            roundtrip(&Frame::Connect(ConnectFrame { max_payload, window, timestamp, resume_from: off }));
            roundtrip(&Frame::Accept(AcceptFrame { max_payload, timestamp_echo: timestamp, member_id: member_id + 1, start_offset: off, token: off | 1 }));
            roundtrip(&Frame::Offer(OfferFrame { max_payload, timestamp }));
            roundtrip(&Frame::CatchUp(CatchUpFrame { member_id: member_id + 1, end: off + 1, from: off / 2 }));
            roundtrip(&Frame::Sent(SentFrame { end: off }));
            roundtrip(&Frame::GroupKey(GroupKeyFrame { epoch: off, key: [off as u8; 32] }));
            roundtrip(&Frame::GroupKeyAck(off));
            roundtrip(&Frame::SegmentsRequest(SegmentsRequestFrame { offset: off, detail: off % 2 == 0 }));
            roundtrip(&Frame::Retry(off | 1 << 63));
            roundtrip(&Frame::Rekey);
            roundtrip(&Frame::Renege(vec![off..off + len + 1, off + len + 5..off + 2 * len + 9]));
            roundtrip(&Frame::Deadline(timestamp));
            roundtrip(&Frame::Segments(crate::protection::segments::SegmentList {
                start: off,
                entries: vec![
                    crate::protection::segments::ListEntry { len: 1400, count: 16, hash: [3; 16] },
                    crate::protection::segments::ListEntry::single(0, [4; 16]),
                ],
                signature: [off as u8; 64],
            }));
            roundtrip(&Frame::SourceKey([off as u8; 32]));
            roundtrip(&Frame::Signature(crate::protection::source::SignedList {
                entries: vec![(off, [1; 16]), (off + 3, [2; 16])],
                signature: [off as u8; 64],
            }));
            roundtrip(&Frame::Handshake(&[off as u8; 48]));
            roundtrip(&Frame::Close(CloseFrame { code, reason: &reason }));
            roundtrip(&Frame::Reset(CloseFrame { code, reason: &reason }));
            roundtrip(&Frame::AckFrequency(AckFrequencyFrame { every: n, min_interval_us: iv, max_ack_delay_us: MAX_ACK_INTERVAL_US - iv }));
            roundtrip(&Frame::Skip(SkipFrame { offset: off, len, ends_message: len % 2 == 0 }));
            roundtrip(&Frame::UpstreamAck(UpstreamAckFrame { cumulative: off, window: len, timestamp_echo: timestamp }));
            roundtrip(&Frame::Ping);
            roundtrip(&Frame::Padding);
        }

        #[test]
        fn upstream_roundtrip(offset in 0u64..1 << 50, timestamp: u32, fin: bool,
                              payload in proptest::collection::vec(any::<u8>(), 0..200)) {
            let f = Frame::Upstream(UpstreamFrame { offset, timestamp: WireTimestamp(timestamp), fin, payload: &payload });
            roundtrip(&f);
            // Every strict prefix is an error, never a shorter frame.
            let mut out = Vec::new();
            f.encode(&mut out);
            for cut in 0..out.len() {
                prop_assert!(Frame::decode(&mut Reader::new(&out[..cut])).is_err());
            }
        }

        #[test]
        fn roster_roundtrip(receivers in 0u64..1 << 40, fan_in in 0u64..300, total in 0u64..1 << 20,
                            first in 0u64..1 << 20,
                            entries in proptest::collection::vec((any::<bool>(), any::<u128>(), any::<u16>(), 0u64..1 << 50), 0..=MAX_ROSTER_PAGE)) {
            let entries = entries.into_iter().map(|(v6, ip, port, cumulative)| {
                let ip = if v6 {
                    std::net::IpAddr::V6(std::net::Ipv6Addr::from(ip))
                } else {
                    std::net::IpAddr::V4(std::net::Ipv4Addr::from(ip as u32))
                };
                RosterEntry { addr: std::net::SocketAddr::new(ip, port), cumulative }
            }).collect();
            let f = Frame::Roster(RosterFrame { receivers, fan_in, total, first, entries });
            roundtrip(&f);
            let mut out = Vec::new();
            f.encode(&mut out);
            for cut in 0..out.len() {
                prop_assert!(Frame::decode(&mut Reader::new(&out[..cut])).is_err());
            }
        }

        /// Arbitrary bytes never panic the frame decoder, and a decoded ACK
        /// always respects the SACK bound.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            for f in decode_frames(&bytes) {
                if let Ok(Frame::Ack(a)) = &f {
                    prop_assert!(a.sack.len() <= MAX_SACK_RANGES);
                }
                if let Ok(Frame::Roster(r)) = &f {
                    prop_assert!(r.entries.len() <= MAX_ROSTER_PAGE);
                }
            }
        }

        /// Every strict prefix of a valid frame is rejected, never misread.
        #[test]
        fn truncation_is_an_error(a in arb_ack()) {
            let mut out = Vec::new();
            Frame::Ack(a).encode(&mut out);
            for cut in 0..out.len() {
                prop_assert!(Frame::decode(&mut Reader::new(&out[..cut])).is_err());
            }
        }
    }

    /// An ACK frame's bytes up to its SACK blocks: `cumulative`, a window
    /// of 5000, no timestamp or delay, `sack_count`.
    fn ack_prefix(cumulative: u64, sack_count: u64) -> Vec<u8> {
        let mut out = vec![T_ACK];
        out.put_varint(cumulative);
        out.put_varint(5000); // window
        out.put_u32(0); // timestamp echo
        out.put_varint(0); // ack delay
        out.put_varint(sack_count);
        out
    }

    #[test]
    fn sack_blocks_below_the_cumulative_point_are_clipped_or_dropped() {
        let mut out = ack_prefix(1000, 4);
        for (start, len) in [(900u64, 200u64), (500, 100), (1500, 0), (2000, 100)] {
            out.put_varint(start);
            out.put_varint(len);
        }
        let Ok(Frame::Ack(a)) = Frame::decode(&mut Reader::new(&out)) else {
            panic!("the ACK decodes");
        };
        assert_eq!(a.cumulative, 1000);
        assert_eq!(a.sack, [1000..1100, 2000..2100]);
    }

    #[test]
    fn rejects_bad_values() {
        // SACK count above the bound.
        let out = ack_prefix(0, (MAX_SACK_RANGES + 1) as u64);
        assert_eq!(
            Frame::decode(&mut Reader::new(&out)),
            Err(DecodeError::TooLarge("ack.sack_count"))
        );
        // Member id 0 in ACCEPT and CATCH_UP (never assigned), token 0.
        let accept = |member_id: u8, token: u8| {
            let mut b = vec![T_ACCEPT, 1, 0, 0, 0, 0, member_id, 0];
            b.extend_from_slice(&u64::from(token).to_be_bytes());
            Frame::decode(&mut Reader::new(&b)).map(|_| ())
        };
        assert_eq!(accept(0, 1), Err(DecodeError::Invalid("accept.member_id")));
        assert_eq!(accept(1, 0), Err(DecodeError::Invalid("accept.token")));
        assert_eq!(accept(1, 1), Ok(()));
        assert_eq!(
            Frame::decode(&mut Reader::new(&[T_CATCH_UP, 0, 5, 0])),
            Err(DecodeError::Invalid("catch_up.member_id"))
        );
        // An empty or inverted CATCH_UP range.
        for from in [5, 6] {
            assert_eq!(
                Frame::decode(&mut Reader::new(&[T_CATCH_UP, 1, 5, from])),
                Err(DecodeError::Invalid("catch_up.from"))
            );
        }
        // Unknown frame type.
        assert_eq!(
            Frame::decode(&mut Reader::new(&[0x3f])),
            Err(DecodeError::Invalid("frame type"))
        );
        // Upstream length beyond the datagram; an offset whose FIN would
        // not be representable.
        let mut u = vec![T_UPSTREAM, 0, 0, 0, 0, 0];
        u.put_varint(3);
        u.push(1);
        assert_eq!(
            Frame::decode(&mut Reader::new(&u)),
            Err(DecodeError::TooLarge("upstream.len"))
        );
        let mut u = vec![T_UPSTREAM | UPSTREAM_FIN];
        u.put_varint(VARINT_MAX);
        u.put_u32(0);
        u.put_varint(0);
        assert_eq!(
            Frame::decode(&mut Reader::new(&u)),
            Err(DecodeError::Invalid("upstream.offset"))
        );
        // Roster: more entries than a page holds; an unknown address family.
        let mut ro = vec![T_ROSTER, 1, 1, 1, 0];
        ro.put_varint((MAX_ROSTER_PAGE + 1) as u64);
        assert_eq!(
            Frame::decode(&mut Reader::new(&ro)),
            Err(DecodeError::TooLarge("roster.count"))
        );
        let ro = [T_ROSTER, 1, 1, 1, 0, 1, 5, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            Frame::decode(&mut Reader::new(&ro)),
            Err(DecodeError::Invalid("roster.family"))
        );
        // Unassigned neighbours of the upstream types.
        for t in [0x17u8, 0x18] {
            assert!(Frame::decode(&mut Reader::new(&[t, 0, 0, 0, 0, 0, 0])).is_err());
        }
        // Data length beyond the datagram.
        let mut d = vec![T_DATA, 0];
        d.extend_from_slice(&[0, 0, 0, 0]);
        d.put_varint(10);
        d.extend_from_slice(&[1, 2]);
        assert!(Frame::decode(&mut Reader::new(&d)).is_err());
    }

    #[test]
    fn reason_truncated_on_char_boundary() {
        let long = "é".repeat(200);
        let mut out = Vec::new();
        Frame::Close(CloseFrame {
            code: 1,
            reason: &long,
        })
        .encode(&mut out);
        match Frame::decode(&mut Reader::new(&out)).unwrap() {
            Frame::Close(c) => assert_eq!(c.reason.len(), MAX_REASON_BYTES),
            other => panic!("{other:?}"),
        }
    }
}
