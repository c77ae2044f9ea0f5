//! Transport and impairment flags shared by `send` and `recv`.

use clap::Args;
use fanout_core::cc::CcAlgorithm;
use fanout_io::{DriverConfig, ImpairConfig};
use fanout_transport::TransportConfig;
use std::time::Duration;

/// Default `--rx-coalesce-us`: half a millisecond of input moderation
/// halves the wake-ups of a receiver at 100 Mbit/s and of a session sender
/// taking ACKs from several receivers, for at most 0.5 ms of extra reaction
/// time (round-trip samples keep the kernel's arrival times).
const DEFAULT_RX_COALESCE_US: u64 = 500;

/// Flags tuning the transport.
#[derive(Debug, Clone, Args)]
pub struct TransportOpts {
    /// Congestion control: cubic or newreno.
    #[arg(long, default_value = "cubic", value_name = "ALGO")]
    pub cc: CcAlgorithm,
    /// Largest UDP payload, in bytes (path MTU − IP/UDP headers).
    #[arg(long, default_value_t = fanout_transport::config::DEFAULT_MAX_DATAGRAM as u64, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(256..=65_000))]
    pub max_datagram: u64,
    /// Send buffer / receive window, in MiB.
    #[arg(long, default_value_t = 8, value_name = "MIB", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub window_mib: u32,
    /// Give up after this many seconds without hearing the peer.
    #[arg(long, default_value_t = 30, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub idle_timeout: u64,
    /// Disable pacing (send bursts as the window allows).
    #[arg(long)]
    pub no_pacing: bool,
    /// How late the event loop may wake for a timer, in microseconds, so one
    /// wake-up sends several paced datagrams (in one GSO send); 0: on time.
    #[arg(long, default_value_t = fanout_io::DEFAULT_TIMER_SLACK.as_micros() as u64, value_name = "US",
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub timer_slack_us: u64,
    /// Input coalescing, in microseconds: after handling input, sleep this
    /// long without waking for more, then read it all at once (datagrams
    /// keep their kernel arrival times); 0: wake for every arrival.
    #[arg(long, default_value_t = DEFAULT_RX_COALESCE_US, value_name = "US",
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub rx_coalesce_us: u64,
    /// Drop this fraction of received datagrams in user space (0–1), to test
    /// recovery without netem.
    #[arg(long, default_value_t = 0.0, value_name = "P", value_parser = parse_probability)]
    pub inject_loss: f64,
    /// Seed of the injected loss.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub loss_seed: u64,
}

fn parse_probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not a probability between 0 and 1"))
    }
}

impl TransportOpts {
    /// The transport configuration these flags describe.
    pub fn transport(&self) -> TransportConfig {
        let window = (self.window_mib as usize) << 20;
        TransportConfig {
            max_datagram: self.max_datagram as usize,
            send_buffer_bytes: window,
            recv_window_bytes: window,
            cc: self.cc,
            pacing: !self.no_pacing,
            idle_timeout: Duration::from_secs(self.idle_timeout),
            ..TransportConfig::default()
        }
    }

    /// The driver configuration these flags describe.
    pub fn driver(&self) -> DriverConfig {
        let mut d = DriverConfig {
            // Pump the engine at least every 256 datagrams so ACKs are not
            // held back by one long receive batch (the sender's window would
            // stall while a whole GRO/recvmmsg run is read).
            max_recv_per_step: 256,
            timer_slack: Duration::from_micros(self.timer_slack_us),
            rx_coalesce: Duration::from_micros(self.rx_coalesce_us),
            ..DriverConfig::default()
        };
        if self.inject_loss > 0.0 {
            d.rx_impairment = ImpairConfig::loss(self.inject_loss, self.loss_seed);
        }
        d
    }
}

/// A fresh random 64-bit session id.
pub fn random_session_id() -> u64 {
    let mut b = [0u8; 8];
    // A failing OS RNG only weakens session-id unpredictability; fall back
    // to the process id and address-space layout.
    if getrandom::fill(&mut b).is_err() {
        let local = 0u8;
        return u64::from(std::process::id()) << 32 ^ (&local as *const u8 as u64);
    }
    u64::from_ne_bytes(b)
}
