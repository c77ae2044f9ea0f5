//! The interface every media rate controller implements, so ASMP, TFMCC
//! and PGMCC run in the same [`MediaSender`](crate::MediaSender) and
//! [`MediaReceiver`](crate::MediaReceiver) engines, under the simulator
//! and the real runtime alike, and can be compared on equal terms.
//!
//! A rate-based controller (ASMP, TFMCC) sets the rate the engine paces
//! at; a window-based one (PGMCC) also holds packets back until its
//! window has room.
//!
//! A controller speaks through three channels the engines carry for it:
//! an RTP header extension on each data packet (sender → receivers), APP
//! parts beside the sender's SRs, and APP parts from receivers, either
//! beside their regular RRs (on RTCP's schedule) or at once, in a compound
//! of an empty RR and the APP part (feedback a controller cannot delay).

use crate::asmp::Variant;
use fanout_core::{Instant, Rng};
use fanout_rtp::report::Block;
use std::fmt;
use std::time::Duration;

/// Which controller a session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    /// ASMP (ASMP §3), in fanout's variant (the default) or the paper's.
    Asmp(Variant),
    /// TFMCC (RFC 4654).
    Tfmcc,
    /// PGMCC (Rizzo, SIGCOMM 2000).
    Pgmcc,
}

impl Default for Controller {
    fn default() -> Self {
        Controller::Asmp(Variant::default())
    }
}

impl Controller {
    /// The names the CLI and scenarios use.
    pub const NAMES: [&'static str; 4] = ["asmp", "asmp-paper", "tfmcc", "pgmcc"];

    /// Reads a name of [`Controller::NAMES`].
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "asmp" => Some(Controller::Asmp(Variant::Improved)),
            "asmp-paper" => Some(Controller::Asmp(Variant::Paper)),
            "tfmcc" => Some(Controller::Tfmcc),
            "pgmcc" => Some(Controller::Pgmcc),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Controller::Asmp(Variant::Improved) => "asmp",
            Controller::Asmp(Variant::Paper) => "asmp-paper",
            Controller::Tfmcc => "tfmcc",
            Controller::Pgmcc => "pgmcc",
        }
    }

    /// A sender's side of it, sending at `initial_rate` bytes per second
    /// until told otherwise.
    pub fn sender(self, ssrc: u32, initial_rate: f64, now: Instant) -> Box<dyn SenderControl> {
        match self {
            Controller::Asmp(_) => Box::new(crate::asmp::AsmpSender::new(ssrc, initial_rate)),
            Controller::Tfmcc => Box::new(crate::tfmcc::TfmccSender::new(initial_rate, now)),
            Controller::Pgmcc => Box::new(crate::pgmcc::PgmccSender::new(initial_rate, now)),
        }
    }

    /// A receiver's side of it.
    pub fn receiver(self, ssrc: u32) -> Box<dyn ReceiverControl> {
        match self {
            Controller::Asmp(v) => Box::new(crate::asmp::AsmpReceiver::new(v, ssrc)),
            Controller::Tfmcc => Box::new(crate::tfmcc::TfmccReceiver::new(ssrc)),
            Controller::Pgmcc => Box::new(crate::pgmcc::PgmccReceiver::new(ssrc)),
        }
    }
}

/// A clock for timestamps on the wire that the other end echoes: µs,
/// wrapping.
pub fn clock_us(now: Instant) -> u32 {
    (now.as_nanos() / 1000) as u32
}

/// The time since `timestamp_us` ([`clock_us`]) was read, less `held_us`
/// the echoing end held it: a round trip, or `None` if implausible (more
/// than a minute: an echo of something else).
pub fn echoed_round_trip(now: Instant, timestamp_us: u32, held_us: u32) -> Option<Duration> {
    let us = clock_us(now)
        .wrapping_sub(timestamp_us)
        .checked_sub(held_us)?;
    (us <= 60_000_000).then(|| Duration::from_micros(u64::from(us)))
}

/// An APP part's name, subtype and data (a multiple of 4 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppData {
    /// Its name.
    pub name: [u8; 4],
    /// Its subtype (0–31).
    pub subtype: u8,
    /// Its data.
    pub data: Vec<u8>,
}

/// An RTP packet from the followed source, as a receiver's controller
/// sees it.
#[derive(Debug, Clone, Copy)]
pub struct Arrival<'a> {
    /// Its sequence number.
    pub seq: u16,
    /// Its RTP timestamp.
    pub timestamp: u32,
    /// The RTP packet's length, bytes.
    pub len: usize,
    /// When it arrived, in RTP timestamp units (any fixed origin).
    pub arrival_ticks: u32,
    /// Its one-way delay, s (arrival less send time, in the two clocks;
    /// NaN before the first SR).
    pub one_way: f64,
    /// Its header extension (profile-defined identifier, data), if any.
    pub extension: Option<(u16, &'a [u8])>,
}

/// When a receiver's RTCP report goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// Now, with this APP part if any.
    Now(Option<AppData>),
    /// At this time (feedback suppression: another receiver's report may
    /// make this one's APP part needless meanwhile).
    Later(Instant),
}

/// What a receiver's controller estimates, for reports and tests.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Estimates {
    /// The rate it last computed, bytes per second.
    pub rate: f64,
    /// Its loss (event) rate, 0–1.
    pub loss: f64,
    /// Its round trip, once known.
    pub rtt: Option<Duration>,
}

/// A sender's rate control.
pub trait SenderControl: fmt::Debug + Send {
    /// The rate allowed now, bytes per second.
    fn rate(&self) -> f64;
    /// The rate packets are paced at, bytes per second (a window-based
    /// controller paces above its window's rate and lets the window
    /// decide).
    fn pacing_rate(&self) -> f64 {
        self.rate()
    }
    /// The session bandwidth RTCP's intervals are sized by, bytes per
    /// second (RFC 3550 §6.2: the data rate expected): the allowed rate,
    /// or for a window-based controller, whose window's rate over a short
    /// round trip says little about what is sent, the rate it sends.
    fn session_bandwidth(&self) -> f64 {
        self.rate()
    }
    /// Whether a packet may go now (a window-based controller's window
    /// has room); rate-based controllers only pace.
    fn may_send(&self) -> bool {
        true
    }
    /// A data packet of `len` bytes with sequence number `seq` goes now:
    /// the header extension to give it, if any.
    fn on_send(&mut self, now: Instant, seq: u16, len: usize) -> Option<(u16, Vec<u8>)>;
    /// A report block from receiver `from`, in a compound that arrived at
    /// `arrival` (the middle 32 bits of the sender's NTP clock then).
    fn on_block(&mut self, now: Instant, from: u32, block: &Block, arrival: u32);
    /// An APP part from receiver `from`; true if it was this controller's.
    fn on_app(&mut self, now: Instant, from: u32, app: &AppData) -> bool;
    /// Receiver `ssrc` said BYE.
    fn on_bye(&mut self, now: Instant, ssrc: u32);
    /// Forgets receivers not heard for `timeout`.
    fn expire(&mut self, now: Instant, timeout: Duration);
    /// APP parts to send beside the next SR.
    fn sr_apps(&mut self, now: Instant) -> Vec<AppData>;
    /// Receivers it knows.
    fn receivers(&self) -> usize;
    /// The receiver that limits the rate, if one does.
    fn limiting_receiver(&self) -> Option<u32>;
    /// When it next needs [`SenderControl::handle_timeout`].
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    /// Its timers.
    fn handle_timeout(&mut self, _now: Instant) {}
}

/// A receiver's rate control.
pub trait ReceiverControl: fmt::Debug + Send {
    /// A data packet from the followed source.
    fn on_rtp(&mut self, now: Instant, packet: &Arrival<'_>);
    /// An APP part from the sender (`from_sender`) or another receiver
    /// (ignored by a controller that takes none).
    fn on_app(&mut self, now: Instant, from_sender: bool, app: &AppData) {
        let _ = (now, from_sender, app);
    }
    /// The receiver's RTCP report is due, `elapsed` since the last and
    /// `interval` until the next: the APP part to send beside its RR now,
    /// or a time within `interval` to send the report at instead
    /// ([`ReceiverControl::deferred_report`] then gives its APP part).
    fn on_report(
        &mut self,
        now: Instant,
        elapsed: Duration,
        interval: Duration,
        rng: &mut Rng,
    ) -> Report;
    /// A report deferred by [`Report::Later`] is due: its APP part, or
    /// none if it became needless (the RR goes either way).
    fn deferred_report(&mut self, _now: Instant) -> Option<AppData> {
        None
    }
    /// Feedback to send now, outside RTCP's schedule.
    fn poll_feedback(&mut self, now: Instant) -> Option<AppData>;
    /// When it next needs [`ReceiverControl::handle_timeout`].
    fn poll_timeout(&self) -> Option<Instant>;
    /// Its timers.
    fn handle_timeout(&mut self, now: Instant, rng: &mut Rng);
    /// What it estimates.
    fn estimates(&self) -> Estimates;
    /// Reports it gave up because another receiver's made them needless.
    fn suppressed(&self) -> u64;
}
