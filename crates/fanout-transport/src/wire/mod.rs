//! Wire format v2 (`docs/wire.md`): a fixed header followed by frames.
//!
//! Everything here is a pure codec: `decode` functions take untrusted bytes
//! and return `Result`, never panic, and borrow payloads from the input;
//! `encode` functions append to a `Vec<u8>`. Sequence numbers are 64-bit
//! everywhere above this module; only packet numbers are truncated on the
//! wire (to 32 bits) and expanded on receipt.

mod frame;
#[cfg(test)]
mod golden;
mod header;
pub mod path_probe;
mod repair;
mod roster;
mod timestamp;

pub use frame::{
    decode_frames, encode_data_header, starts_with_signed_list, AcceptFrame, AckFrame,
    AckFrequencyFrame, CatchUpFrame, CloseFrame, ConnectFrame, DataFrame, Frame, FrameIter,
    GroupKeyFrame, OfferFrame, SegmentsRequestFrame, SentFrame, SkipFrame, UpstreamAckFrame,
    UpstreamFrame, DEADLINE_FRAME_LEN, MAX_ACK_INTERVAL_US, MAX_REASON_BYTES, MAX_SACK_RANGES,
};
pub use header::{
    accept_header, is_other_version, read_header, Header, HeaderFlags, HEADER_LEN, MAGIC, VERSION,
};
pub use repair::RepairFrame;
pub use roster::{RosterEntry, RosterFrame, MAX_ROSTER_PAGE};
pub use timestamp::WireTimestamp;
