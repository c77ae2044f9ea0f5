//! The simulator's view of an engine: [`SimApp`] adds optional metric probes
//! to [`fanout_core::Engine`], so transport engines can expose cwnd, srtt and
//! delivered bytes to the time-series sampler.

use fanout_core::Engine;
use std::any::Any;
use std::time::Duration;

/// A snapshot of an engine's metrics at a sampling instant. Every field is
/// optional except the cumulative delivered byte count (0 if not tracked).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppProbe {
    /// Application bytes delivered so far (cumulative); goodput is its rate.
    pub delivered_bytes: u64,
    /// Congestion window in bytes.
    pub cwnd_bytes: Option<u64>,
    /// Smoothed round-trip time (RFC 6298 `srtt`).
    pub srtt: Option<Duration>,
    /// Sending rate in bit/s, for rate-based controllers.
    pub rate_bps: Option<u64>,
}

/// Downcasting support for boxed apps; implemented for every `'static` type.
pub trait AsAny: Any {
    /// `self` as `&dyn Any`.
    fn as_any(&self) -> &dyn Any;
    /// `self` as `&mut dyn Any`.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// An engine the simulator can host. Only [`SimApp::probe`] is new, with a
/// default; an engine opts in with `impl SimApp for MyEngine {}`.
pub trait SimApp: Engine + AsAny {
    /// Current metrics, sampled every `sample_interval`.
    fn probe(&self) -> AppProbe {
        AppProbe::default()
    }
}
