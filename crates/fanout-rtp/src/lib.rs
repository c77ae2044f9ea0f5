//! RTP and RTCP (RFC 3550) for fanout's media sessions, sans-IO.
//!
//! The packet formats come from well-kept crates made for them
//! (`rtp-types`, `rtcp-types`, `sdp-types`, from the GStreamer Rust
//! bindings' authors); this crate adds what a media sender and its
//! receivers compute around them, each in a file of its own:
//!
//! - [`sequence`]: a source's sequence numbers, validated and extended,
//!   and the losses a reception report states (RFC 3550 A.1, A.3);
//! - [`jitter`]: interarrival jitter, exactly as RFC 3550 A.8 computes it;
//! - [`ntp`]: NTP timestamps and the round trip a sender reads from a
//!   report block (RFC 3550 §6.4.1: A − LSR − DLSR);
//! - [`interval`]: when RTCP reports go out (RFC 3550 §6.2, §6.3, A.7):
//!   5% of the session's bandwidth, a quarter of it for senders, the
//!   reduced minimum interval, randomised and compensated;
//! - [`report`]: compound RTCP packets read into owned, bounded values and
//!   written from them;
//! - [`app`]: the APP parts fanout's rate control speaks (ASMP's rate
//!   reports and the sender's per-receiver round trips);
//! - [`tfmcc`]: TFMCC's fields in RTP header extensions and APP parts
//!   (RFC 4654);
//! - [`pgmcc`]: PGMCC's packet numbers, ACKs and NAKs in RTP header
//!   extensions and APP parts;
//! - [`mp2t`]: MPEG-TS carried in RTP (RFC 2250 §2);
//! - [`sdp`]: a session description (RFC 8866) with which ffmpeg, VLC and
//!   GStreamer receive a stream.
//!
//! Nothing here reads a clock or a socket: times come in as
//! [`fanout_core::Instant`]s, randomness from a seeded
//! [`fanout_core::Rng`].

pub mod app;
pub mod interval;
pub mod jitter;
pub mod mp2t;
pub mod ntp;
pub mod pgmcc;
pub mod report;
pub mod sdp;
pub mod sequence;
pub mod tfmcc;

pub use rtcp_types;
pub use rtp_types;
pub use sdp_types;
