//! `fanout stream` in real time ([`fanout_transport::realtime`]): the
//! flags, the input cut into messages, and the statistics lines.
//!
//! With `--latency`, `--queue` or `--queue-ms`, `stream send` reads its
//! input as messages of `--message-size` bytes (MPEG-TS: 7 packets of 188)
//! that never wait for the network: they go through the pushed queue,
//! and a lost segment is skipped rather than sent again once too late.
//! `stream recv --latency` writes the whole messages that arrived in time,
//! in order; those the sender skipped are left out.

use crate::stats_lines::StatsOpts;
use clap::{Args, ValueEnum};
use fanout_app::StreamSink;
use fanout_core::time::Instant;
use fanout_transport::realtime::{QueueLimit, QueueOrder, RealtimeSend};
use fanout_transport::session::SessionSender;
use fanout_transport::{Receiver, TransportConfig};
use std::time::Duration;

/// Input bytes per message by default: 7 MPEG-TS packets (what SRT and
/// ffmpeg's `udp` output carry per datagram).
pub const DEFAULT_MESSAGE_SIZE: u64 = 7 * 188;

/// Which queued message goes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QueueArg {
    /// Oldest first (P-FIFO): every message in order, later when congested.
    Fifo,
    /// Newest first (P-LIFO): the freshest message first when congested.
    Lifo,
}

/// Real-time flags of `stream send`.
#[derive(Debug, Args)]
pub struct RealtimeSendOpts {
    /// Real time with a latency budget: each message is of use
    /// for MS milliseconds after it is read from the input; a lost segment
    /// is repaired only while the repair can still arrive in time, else
    /// receivers skip it. Every datagram names its message's deadline, so
    /// receivers drop what completes too late; the session sends at a
    /// smooth TCP-friendly rate (`--window-policy auto`). Receivers run
    /// `stream recv --latency MS`.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub latency: Option<u64>,
    /// Real time through a pushed queue: writes never wait for
    /// the network; a full queue drops its oldest message. Without
    /// --latency, a lost segment is never sent again. [default with
    /// --latency: fifo]
    #[arg(long, value_enum, value_name = "ORDER")]
    pub queue: Option<QueueArg>,
    /// Queue length in milliseconds at the current sending rate [default:
    /// 100 datagrams' worth of bytes].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub queue_ms: Option<u64>,
    /// Input bytes per message in real time (a message is never merged
    /// with another; what remains when the input pauses goes as a shorter
    /// one).
    #[arg(long, default_value_t = DEFAULT_MESSAGE_SIZE, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub message_size: u64,
    #[command(flatten)]
    pub stats: StatsOpts,
}

impl RealtimeSendOpts {
    /// Whether any real-time flag was given.
    pub fn enabled(&self) -> bool {
        self.latency.is_some() || self.queue.is_some() || self.queue_ms.is_some()
    }

    /// The session's real-time mode, if enabled.
    pub fn mode(&self, max_datagram: usize) -> Option<RealtimeSend> {
        if !self.enabled() {
            return None;
        }
        let mut mode = RealtimeSend::with_defaults(max_datagram);
        mode.deadlines = self.latency.is_some();
        if self.queue == Some(QueueArg::Lifo) {
            mode.order = QueueOrder::Lifo;
        }
        if let Some(ms) = self.queue_ms {
            mode.limit = QueueLimit::Time(Duration::from_millis(ms));
        }
        Some(mode)
    }

    /// The input cut into messages for `session`.
    pub fn messages(&self) -> Messages {
        Messages {
            size: self.message_size as usize,
            latency: self.latency.map(Duration::from_millis),
            pending: Vec::new(),
            pending_since: None,
        }
    }
}

/// Input bytes waiting to make up a message.
#[derive(Debug)]
pub struct Messages {
    size: usize,
    latency: Option<Duration>,
    pending: Vec<u8>,
    /// When the first pending byte was read from the input.
    pending_since: Option<Instant>,
}

impl Messages {
    /// A sink that writes into `session` at `now`, message by message.
    pub fn sink<'a>(&'a mut self, session: &'a mut SessionSender, now: Instant) -> MessageSink<'a> {
        MessageSink {
            m: self,
            session,
            now,
            read_at: now,
        }
    }
}

/// [`StreamSink`] of a real-time session: takes every byte, cuts it into
/// messages of the configured size, each with its deadline, counted from
/// when its first byte was read from the input.
pub struct MessageSink<'a> {
    m: &'a mut Messages,
    session: &'a mut SessionSender,
    now: Instant,
    /// When the bytes `write` gets were read (at most `now`).
    read_at: Instant,
}

impl MessageSink<'_> {
    fn send(&mut self, len: usize) {
        let origin = self.m.pending_since.unwrap_or(self.read_at);
        let deadline = self.m.latency.map(|l| origin + l);
        let msg: Vec<u8> = self.m.pending.drain(..len).collect();
        // What remains came with the latest read.
        self.m.pending_since = (!self.m.pending.is_empty()).then_some(self.read_at);
        self.session.send_message(self.now, &msg, deadline);
    }

    /// Sends what remains as a shorter message (the input paused).
    pub fn flush(&mut self) {
        if !self.m.pending.is_empty() {
            self.send(self.m.pending.len());
        }
    }
}

impl StreamSink for MessageSink<'_> {
    fn write_message(&mut self, msg: &[u8]) -> bool {
        self.flush();
        let deadline = self.m.latency.map(|l| self.read_at + l);
        self.session.send_message(self.now, msg, deadline)
    }

    fn input_read_at(&mut self, at: Instant) {
        self.read_at = at.min(self.now);
    }

    fn write(&mut self, data: &[u8]) -> usize {
        if self.m.pending.is_empty() {
            self.m.pending_since = Some(self.read_at);
        }
        self.m.pending.extend_from_slice(data);
        while self.m.pending.len() >= self.m.size {
            self.send(self.m.size);
        }
        data.len()
    }

    fn writable(&self) -> usize {
        usize::MAX
    }

    fn finish(&mut self) {
        self.flush();
        self.session.finish();
    }

    fn abort(&mut self, reason: &str) {
        self.session.abort(reason);
    }
}

/// Makes `transport` a real-time receiver's (`stream recv --latency`,
/// `relay --latency`): whole messages, a hole skipped once the data behind
/// it waited `latency`.
pub fn receive_in_real_time(transport: &mut TransportConfig, latency: Duration) {
    transport.realtime = true;
    transport.realtime_latency = Some(latency);
}

/// A real-time sender's counters for its report (none for a reliable
/// session).
pub fn realtime_sender_counters(s: &SessionSender) -> Vec<(&'static str, u64)> {
    let Some(rt) = s.realtime_stats() else {
        return Vec::new();
    };
    let st = s.stats();
    vec![
        ("messages_written", rt.queue.queued),
        ("messages_sent", rt.queue.taken),
        ("queue_discarded", rt.queue.discarded),
        ("queue_expired", rt.queue.expired),
        ("skips_sent", st.skips_sent),
        ("skipped_bytes", st.skipped_bytes),
        ("repair_bytes", st.repair_bytes),
        ("second_copies", st.second_copies),
    ]
}

/// A real-time receiver's counters for its report: messages, jitter and
/// delivery delay percentiles.
pub fn realtime_receiver_counters(r: &Receiver) -> Vec<(&'static str, u64)> {
    let st = r.stats();
    let mut out = vec![
        ("messages_read", st.messages_read),
        ("messages_dropped", st.messages_dropped),
        ("messages_late", st.messages_late),
        ("jitter_us", r.jitter().as_micros() as u64),
        ("skipped_bytes", st.skipped_bytes),
        ("late_skipped_bytes", st.late_skipped_bytes),
    ];
    if let Some(h) = r.delivery_delays() {
        for (name, q) in [("delay_p50_us", 0.5), ("delay_p99_us", 0.99)] {
            if let Some(d) = h.percentile(q) {
                out.push((name, d.as_micros() as u64));
            }
        }
    }
    out
}

/// A statistics line of a real-time sender.
pub fn sender_line(t: f64, s: &SessionSender) -> serde_json::Value {
    let st = s.stats();
    let rt = s.realtime_stats().unwrap_or_default();
    let q = rt.queue;
    let dropped = q.discarded + q.expired;
    serde_json::json!({
        "t": (t * 1000.0).round() / 1000.0,
        "role": "stream-send",
        "messages_written": q.queued,
        "messages_sent": q.taken,
        "queued_messages": rt.queued_messages,
        "queued_bytes": rt.queued_bytes,
        "queue_discarded": q.discarded,
        "queue_expired": q.expired,
        "queue_dropped_mean_age_ms": if dropped == 0 { 0.0 } else { q.discarded_age_us as f64 / dropped as f64 / 1000.0 },
        "queue_dropped_max_age_ms": q.max_discarded_age_us as f64 / 1000.0,
        "data_segments": st.data_segments,
        "repairs": st.unicast_repairs + st.multicast_repairs,
        "repair_bytes": st.repair_bytes,
        "second_copies": st.second_copies,
        "skips_sent": st.skips_sent,
        "skipped_bytes": st.skipped_bytes,
        "rtt_ms": s.session_rtt().as_secs_f64() * 1000.0,
        // null while nothing limits the rate yet (no member acknowledged).
        "allowed_rate_bps": s.allowed_rate_bytes_per_sec().checked_mul(8),
        "members": s.member_count(),
    })
}

/// A statistics line of a real-time receiver (`bytes` written out).
pub fn receiver_line(t: f64, r: &Receiver, bytes: u64) -> serde_json::Value {
    let st = r.stats();
    let ms = |d: Option<Duration>| d.map(|d| (d.as_secs_f64() * 1e6).round() / 1e3);
    let delays = r.delivery_delays();
    serde_json::json!({
        "t": (t * 1000.0).round() / 1000.0,
        "role": "stream-recv",
        "bytes_out": bytes,
        "messages_read": st.messages_read,
        "messages_dropped": st.messages_dropped,
        "messages_late": st.messages_late,
        "delay_p50_ms": ms(delays.and_then(|h| h.percentile(0.5))),
        "delay_p99_ms": ms(delays.and_then(|h| h.percentile(0.99))),
        "delay_max_ms": ms(delays.map(|h| h.max())),
        "jitter_ms": ms(Some(r.jitter())),
        "skipped_bytes": st.skipped_bytes,
        "late_skipped_bytes": st.late_skipped_bytes,
        "payload_bytes_received": st.payload_bytes_received,
        "duplicate_bytes": st.duplicate_bytes,
        "datagrams_received": st.datagrams_received,
        "acks_sent": st.acks_sent,
    })
}
