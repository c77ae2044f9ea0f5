//! A session member's upstream byte stream (session relay, TCP-SMO §IV.B:
//! "each receiver can send any data back to the source server through the
//! individual connection"):
//! the sending half, run inside the member's [`crate::Receiver`].
//!
//! Reliable and flow-controlled, deliberately simple (upstream traffic is a
//! question, a vote, a chat line — not a bulk transfer):
//!
//! * a bounded send buffer ([`UPSTREAM_SEND_BUFFER`] bytes, written without
//!   blocking), cut into UPSTREAM frames of at most one MSS;
//! * in flight at most min(the sender's advertised upstream window, a
//!   congestion window that starts at [`UPSTREAM_INITIAL_WINDOW`], grows by
//!   the bytes acknowledged and falls to one MSS on a timeout);
//! * paced at twice that window per smoothed RTT, in bursts of at most two
//!   segments ([`fanout_core::pacing`]);
//! * one retransmission timer (RFC 6298: RTT samples from the timestamps
//!   UPSTREAM_ACK echoes, exponential back-off); on expiry it goes back to
//!   the first unacknowledged byte (go-back-N: the sender keeps what it
//!   already holds out of order, so resent bytes it has are only counted
//!   as duplicates). While the window is closed with nothing in flight the
//!   same timer sends an empty UPSTREAM as a window probe. After
//!   [`MAX_UPSTREAM_RTO_BACKOFFS`] expiries in a row without any
//!   UPSTREAM_ACK the upstream stream fails (the session itself goes on).

use crate::wire::{Frame, UpstreamAckFrame, UpstreamFrame, WireTimestamp};
use fanout_core::pacing::Pacer;
use fanout_core::rtt::{RtoConfig, RttEstimator};
use fanout_core::time::Instant;
use std::collections::VecDeque;
use std::time::Duration;

/// Bytes a member buffers upstream (written, not yet acknowledged).
pub const UPSTREAM_SEND_BUFFER: usize = 64 << 10;
/// Upstream bytes a member may have in flight before the sender's first
/// UPSTREAM_ACK names its window (`docs/wire.md` §4.7).
pub const UPSTREAM_INITIAL_WINDOW: u64 = 4096;
/// Consecutive retransmission timeouts, with no UPSTREAM_ACK in between,
/// after which the upstream stream fails (with RFC 6298 back-off from a
/// 1 s initial RTO: about 8.5 minutes at most with the default 60 s cap).
pub const MAX_UPSTREAM_RTO_BACKOFFS: u32 = 8;

/// Where a member's upstream stream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamStatus {
    /// Nothing written yet.
    Idle,
    /// Bytes (or the end) still to send or unacknowledged.
    Sending,
    /// Everything written is acknowledged (more may be written).
    Acked,
    /// The end was acknowledged: the sender has the whole upstream stream.
    Finished,
    /// Not available: the peer is a plain unicast sender, the session
    /// ended, or the sender stopped answering (too many timeouts).
    Failed,
}

/// Upstream counters of one member.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpstreamSendStats {
    /// Bytes written by the application and accepted.
    pub bytes_written: u64,
    /// Bytes the sender acknowledged.
    pub bytes_acked: u64,
    /// UPSTREAM frames sent (retransmissions and probes included).
    pub frames_sent: u64,
    /// Payload bytes sent again after a timeout.
    pub retransmitted_bytes: u64,
    /// Retransmission timeouts.
    pub rto_events: u64,
    /// UPSTREAM_ACK frames received.
    pub acks_received: u64,
}

/// The sending half of a member's upstream stream.
#[derive(Debug)]
pub(crate) struct UpstreamOut {
    /// Unacknowledged and unsent bytes, from `base`.
    buf: VecDeque<u8>,
    /// Offset of `buf[0]`.
    base: u64,
    /// First unacknowledged offset (stream length + 1 once the FIN is).
    una: u64,
    /// Next offset to send (goes back to `una` on a timeout).
    nxt: u64,
    /// Highest offset sent + 1 (the FIN counts one).
    high: u64,
    /// The application finished the stream.
    fin: bool,
    /// `cumulative + window` of the newest UPSTREAM_ACK (never lowered).
    limit: u64,
    cwnd: u64,
    mss: u64,
    rtt: RttEstimator,
    pacer: Pacer,
    rto_deadline: Option<Instant>,
    /// Earliest send the pacer allows while data waits.
    pacing_wake: Option<Instant>,
    probe: bool,
    backoffs: u32,
    failed: bool,
    stats: UpstreamSendStats,
}

impl UpstreamOut {
    /// An empty upstream stream sending segments of at most `mss` bytes.
    pub fn new(mss: u64, rto: RtoConfig) -> Self {
        let mss = mss.max(1);
        UpstreamOut {
            buf: VecDeque::new(),
            base: 0,
            una: 0,
            nxt: 0,
            high: 0,
            fin: false,
            limit: UPSTREAM_INITIAL_WINDOW,
            cwnd: UPSTREAM_INITIAL_WINDOW,
            mss,
            rtt: RttEstimator::new(rto),
            pacer: Pacer::new(mss).with_burst(2 * mss),
            rto_deadline: None,
            pacing_wake: None,
            probe: false,
            backoffs: 0,
            failed: false,
            stats: UpstreamSendStats::default(),
        }
    }

    /// Offset just past the last written byte (the FIN's offset).
    fn end(&self) -> u64 {
        self.base + self.buf.len() as u64
    }

    /// Takes what fits of `data`; returns the count (0 once finished or
    /// failed).
    pub fn write(&mut self, data: &[u8]) -> usize {
        if self.fin || self.failed {
            return 0;
        }
        let n = data.len().min(self.writable());
        self.buf.extend(&data[..n]);
        self.stats.bytes_written += n as u64;
        n
    }

    /// Bytes [`UpstreamOut::write`] would take now.
    pub fn writable(&self) -> usize {
        if self.fin || self.failed {
            0
        } else {
            UPSTREAM_SEND_BUFFER - self.buf.len()
        }
    }

    /// Ends the stream after what was written.
    pub fn finish(&mut self) {
        self.fin = true;
    }

    /// Where the stream stands.
    pub fn status(&self) -> UpstreamStatus {
        if self.failed {
            UpstreamStatus::Failed
        } else if self.fin && self.una > self.end() {
            UpstreamStatus::Finished
        } else if self.buf.is_empty() && !self.fin {
            if self.stats.bytes_written == 0 {
                UpstreamStatus::Idle
            } else {
                UpstreamStatus::Acked
            }
        } else {
            UpstreamStatus::Sending
        }
    }

    /// Counters.
    pub fn stats(&self) -> UpstreamSendStats {
        self.stats
    }

    /// Gives up (the session ended or the peer cannot take upstream data).
    pub fn fail(&mut self) {
        self.failed = true;
        self.buf = VecDeque::new();
        self.rto_deadline = None;
        self.pacing_wake = None;
    }

    /// Processes the sender's UPSTREAM_ACK; false if it acknowledges bytes
    /// never sent (ignored).
    pub fn on_ack(&mut self, now: Instant, ack: &UpstreamAckFrame) -> bool {
        if self.failed {
            return true;
        }
        if ack.cumulative > self.high {
            return false;
        }
        self.stats.acks_received += 1;
        // Any answer proves the sender is there: the back-off restarts.
        self.backoffs = 0;
        self.limit = self.limit.max(ack.cumulative.saturating_add(ack.window));
        if ack.cumulative > self.una {
            let drained = ack.cumulative.min(self.end()) - self.base;
            self.buf.drain(..drained as usize);
            self.base += drained;
            self.stats.bytes_acked += drained;
            self.una = ack.cumulative;
            self.nxt = self.nxt.max(self.una);
            // RFC 7323-style sample: the echo is our own clock.
            let rtt = ack.timestamp_echo.elapsed(now);
            if rtt < Duration::from_secs(60) {
                self.rtt.on_sample(rtt);
            }
            self.cwnd = (self.cwnd + drained.max(1)).min(UPSTREAM_SEND_BUFFER as u64);
        }
        self.pacer.set_rate(self.cwnd, self.rtt.srtt(), true);
        self.rearm(now);
        true
    }

    /// Sets the timer for what is outstanding, blocked or unsent.
    fn rearm(&mut self, now: Instant) {
        let pending = self.una < self.end() + u64::from(self.fin);
        self.rto_deadline = pending.then(|| now + self.rtt.rto());
    }

    /// The next time this stream needs [`UpstreamOut::on_timeout`] or a
    /// transmit opportunity.
    pub fn deadline(&self) -> Option<Instant> {
        [self.rto_deadline, self.pacing_wake]
            .into_iter()
            .flatten()
            .min()
    }

    /// The retransmission timer: go back to the first unacknowledged byte
    /// with one MSS of window, or probe a closed window; fail after too
    /// many expiries in a row.
    pub fn on_timeout(&mut self, now: Instant) {
        if self.pacing_wake.is_some_and(|t| t <= now) {
            self.pacing_wake = None;
        }
        if self.failed || self.rto_deadline.is_none_or(|t| t > now) {
            return;
        }
        self.backoffs += 1;
        if self.backoffs > MAX_UPSTREAM_RTO_BACKOFFS {
            self.fail();
            return;
        }
        self.stats.rto_events += 1;
        self.rtt.on_timeout();
        self.cwnd = self.mss;
        self.pacer.set_rate(self.cwnd, self.rtt.srtt(), true);
        if self.nxt > self.una {
            self.nxt = self.una;
        } else {
            self.probe = true;
        }
        self.rto_deadline = Some(now + self.rtt.rto());
    }

    /// The next UPSTREAM frame, encoded, if the windows and the pacer allow
    /// one now.
    pub fn poll_frame(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.failed {
            return None;
        }
        let end = self.end();
        let limit = self.limit.min(self.una.saturating_add(self.cwnd));
        let len = (end.saturating_sub(self.nxt))
            .min(self.mss)
            .min(limit.saturating_sub(self.nxt));
        let send_fin = self.fin && self.nxt + len == end && self.nxt <= end;
        if len == 0 && !send_fin && !self.probe {
            if self.nxt < end && self.rto_deadline.is_none() {
                // Blocked by the window with nothing in flight: the timer
                // probes it.
                self.rearm(now);
            }
            return None;
        }
        let release = self.pacer.next_send_time(now, len.max(1));
        if release > now {
            self.pacing_wake = Some(release);
            return None;
        }
        self.pacing_wake = None;
        let probe = len == 0 && !send_fin;
        self.probe = false;
        let start = (self.nxt.min(end) - self.base) as usize;
        // One MSS at most, copied once (upstream traffic is small).
        let bytes: Vec<u8> = self
            .buf
            .range(start..start + len as usize)
            .copied()
            .collect();
        let mut out = Vec::with_capacity(bytes.len() + 16);
        Frame::Upstream(UpstreamFrame {
            offset: self.nxt,
            timestamp: WireTimestamp::at(now),
            fin: send_fin,
            payload: &bytes,
        })
        .encode(&mut out);
        if self.nxt < self.high {
            self.stats.retransmitted_bytes += len.min(self.high - self.nxt);
        }
        if !probe {
            self.nxt += len + u64::from(send_fin);
            self.high = self.high.max(self.nxt);
        }
        self.pacer.on_sent(now, len.max(1));
        self.stats.frames_sent += 1;
        if self.rto_deadline.is_none() {
            self.rearm(now);
        }
        Some(out)
    }
}
