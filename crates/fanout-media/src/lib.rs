//! fanout's single-rate multicast media rate control over RTP/RTCP
//! (`fanout_rtp`), sans-IO.
//!
//! [`asmp`]: the Adaptive Smooth Multicast Protocol as its paper describes
//! it (ASMP §3): each receiver computes a smooth TCP-friendly rate from its
//! reception statistics and reports it in an RTCP APP part; the sender
//! sends at the least of the latest reports.

pub mod asmp;
