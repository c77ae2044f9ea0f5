//! Session controllers: how fast the session sends, from its members'
//! feedback (TCP-SMO §II: the master block's window `G` of the children's
//! windows). A controller names the member figures it reads
//! ([`SessionController::indexes`]; the member set keeps an ordered index
//! of each), may take every member's feedback as it happens
//! ([`SessionController::on_feedback`]), and answers with a send limit
//! (the highest offset new data may reach), a window (which, over the
//! session RTT, sets the pacing rate) and optionally a rate cap.
//!
//! Built in: [`MinimumWindow`] (the smallest member window),
//! [`AckerWindow`] (the worst member's window), [`EssentiallyFair`] and
//! [`EquationRate`]. A new controller is one file implementing the
//! trait, plus a line in [`build`] to make it a [`WindowPolicy`] — or,
//! without touching this crate, [`super::SessionSender::with_controller`].

mod acker;
mod equation;
mod fair;
mod minimum;

pub use acker::AckerWindow;
pub use equation::EquationRate;
pub use fair::EssentiallyFair;
pub use minimum::MinimumWindow;

use super::member::Member;
use super::members::{IndexSpec, MemberView};
use super::policy::WindowPolicy;
use super::MemberId;
use fanout_core::cc::CcAlgorithm;
use fanout_core::time::Instant;

/// How a session's sending follows its members.
pub trait SessionController: std::fmt::Debug + Send {
    /// The member figures it reads through [`MemberView`]; asked once,
    /// when the session starts.
    fn indexes(&self) -> Vec<IndexSpec>;

    /// Per-member feedback: called after every change of a member (an ACK,
    /// a loss, a timeout), with the member as it is now.
    fn on_feedback(&mut self, _now: Instant, _member: &Member) {}

    /// The session's segments are now `mss` bytes (made smaller for a
    /// member's path before any data went out).
    fn set_segment_size(&mut self, _mss: u64) {}

    /// A member left the session.
    fn on_member_left(&mut self, _id: MemberId) {}

    /// Members acknowledge at most every `interval` (the session's time
    /// thinning, [`crate::session::feedback::ack_interval_us`]): between
    /// two of a member's ACKs its pipe grows by what the session sends in
    /// that time. Told whenever it changes.
    fn set_feedback_interval(&mut self, _interval: std::time::Duration) {}

    /// The member whose ACKs clock the session window, if one does (the
    /// acker): its ACKs are not thinned by time, as PGMCC's acker
    /// acknowledges every packet; thinned like every other member's (one
    /// every 41 ms at N = 1000 on a 100 Mbit/s sender link), they would
    /// clock the session at a fraction of its path's rate.
    fn clocking_member(&self) -> Option<MemberId> {
        None
    }

    /// The session window in bytes: with the session RTT it sets the
    /// pacing rate (and it is what reports show as the session's cwnd).
    fn window(&self, members: &MemberView<'_>) -> u64;

    /// The highest stream offset new data may reach now, given the
    /// session `window` just computed.
    fn send_limit(&self, members: &MemberView<'_>, window: u64) -> u64;

    /// A cap on the sending rate, bytes per second (`None`: the window's
    /// pacing alone).
    fn rate_cap(&self) -> Option<u64> {
        None
    }
}

/// The controller a [`WindowPolicy`] names (the registry of built-in
/// controllers), for a session whose messages carry `deadlines` or not,
/// whose own window (where it has one) runs `cc` over `mss`-byte segments.
pub fn build(
    policy: WindowPolicy,
    deadlines: bool,
    cc: CcAlgorithm,
    mss: u64,
) -> Box<dyn SessionController> {
    match policy.resolve(deadlines) {
        WindowPolicy::Minimum => Box::new(MinimumWindow),
        WindowPolicy::Auto | WindowPolicy::Acker => Box::new(AckerWindow::new(cc, mss)),
        WindowPolicy::Equation {
            percentile,
            b,
            scaling,
        } => Box::new(EquationRate::new(percentile, b, scaling)),
        WindowPolicy::EssentiallyFair {
            percentile,
            a,
            b,
            scaling,
        } => Box::new(EssentiallyFair {
            percentile,
            a,
            b,
            scaling,
        }),
    }
}
