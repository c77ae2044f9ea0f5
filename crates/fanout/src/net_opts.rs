//! Transport and impairment flags shared by `send` and `recv`.

use crate::security_opts::{SecurityOpts, Side};
use anyhow::Context;
use clap::Args;
use fanout_core::cc::CcAlgorithm;
use fanout_io::{Clock, Driver, DriverConfig, ImpairConfig, UdpEndpoint};
use fanout_transport::TransportConfig;
use serde::Serialize;
use std::net::SocketAddr;
use std::time::Duration;

/// Default `--timer-slack-us`: at 100 Mbit/s about thirteen 1452-byte
/// datagrams fall due per wake-up and leave in one GSO send, so a sender
/// wakes ~700 times a second instead of ~2 000 with the driver's 0.5 ms
/// (each wake-up is a timer and two context switches: tens of µs of CPU on
/// a virtual machine). Measured in the lab (200 MiB to 4 receivers behind
/// 100 Mbit/s, docs/benchmarks.md): sender CPU 1.44 → 1.04 s, wall time
/// unchanged. The price is burstier sending: see [`pacing_burst`].
const DEFAULT_TIMER_SLACK_US: u64 = 1500;

/// Default `--rx-coalesce-us`: input moderation as long as the timer slack,
/// so input and pacing deadlines share wake-ups; a receiver at 100 Mbit/s
/// reads ~13 datagrams per wake-up. Reactions to input are late by at most
/// this much; round-trip samples keep the kernel's arrival times.
const DEFAULT_RX_COALESCE_US: u64 = 1500;

/// Headroom of the pacer's bucket over the timer slack, for the scheduler's
/// own lateness on a busy host.
const PACING_BURST_MARGIN: Duration = Duration::from_micros(500);

/// The pacer's bucket for a runtime waking up to `timer_slack` late: that
/// much sending time plus [`PACING_BURST_MARGIN`], so late wake-ups lose no
/// sending credit. With the default slack it is 2 ms of sending (17 full
/// datagrams at 100 Mbit/s, never fewer than 10): twice the ~1 ms bursts
/// of Linux TCP's TSO autosizing (`sk_pacing_shift` = 10).
fn pacing_burst(timer_slack: Duration) -> Duration {
    timer_slack + PACING_BURST_MARGIN
}

/// Flags tuning the transport.
#[derive(Debug, Clone, Args)]
pub struct TransportOpts {
    /// Congestion control: cubic or newreno.
    #[arg(
        help_heading = "Tuning",
        long,
        default_value = "cubic",
        value_name = "ALGO"
    )]
    pub cc: CcAlgorithm,
    /// Largest UDP payload, in bytes. Default: what the route toward the
    /// peer or group carries (its MTU − 48 bytes of IPv6 and UDP headers),
    /// at most 1452 (a 1500-byte MTU); a session sender makes it smaller,
    /// down to 1232, for receivers whose path carries less that join before
    /// data starts.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(256..=65_000))]
    pub max_datagram: Option<u64>,
    /// Send buffer / receive window, in MiB.
    #[arg(help_heading = "Tuning", long, default_value_t = 8, value_name = "MIB", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub window_mib: u32,
    /// Give up after this many seconds without hearing the peer.
    #[arg(long, default_value_t = 30, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub idle_timeout: u64,
    /// Disable pacing (send bursts as the window allows).
    #[arg(help_heading = "Tuning", long)]
    pub no_pacing: bool,
    /// Never send faster than this, whatever congestion control allows:
    /// bits per second of IP packets (headers and repairs count), with an SI
    /// prefix, e.g. `200M`, `1.5Gbit`, `800k`. A unicast fan-out caps each
    /// receiver's copy.
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    pub max_rate: Option<u64>,
    /// Mark every datagram with this DSCP (RFC 2474): a code point 0-63 or
    /// a name: `ef`, `af11`...`af43`, `cs0`...`cs7`, `le` (lower effort).
    #[arg(long, value_name = "DSCP", value_parser = fanout_io::parse_dscp)]
    pub dscp: Option<u8>,
    /// Kernel socket buffer in each direction, e.g. `16MiB` (default: 8 MiB
    /// asked, as much as `net.core.rmem_max`/`wmem_max` allow). With
    /// CAP_NET_ADMIN the limits are passed; otherwise a smaller grant is
    /// reported with the sysctl that allows more.
    #[arg(help_heading = "Tuning", long, value_name = "BYTES", value_parser = parse_buffer)]
    pub socket_buffer: Option<usize>,
    /// How late the event loop may wake for a timer, in microseconds, so one
    /// wake-up sends several paced datagrams (in one GSO send); 0: on time.
    #[arg(help_heading = "Tuning", long, default_value_t = DEFAULT_TIMER_SLACK_US, value_name = "US",
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub timer_slack_us: u64,
    /// Input coalescing, in microseconds: after handling input, sleep this
    /// long without waking for more, then read it all at once (datagrams
    /// keep their kernel arrival times); 0: wake for every arrival.
    #[arg(help_heading = "Tuning", long, default_value_t = DEFAULT_RX_COALESCE_US, value_name = "US",
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub rx_coalesce_us: u64,
    /// Drop this fraction of received datagrams in user space (0–1), to test
    /// recovery without netem.
    #[arg(help_heading = "Testing", long, default_value_t = 0.0, value_name = "P", value_parser = parse_probability)]
    pub inject_loss: f64,
    /// Seed of the injected loss.
    #[arg(help_heading = "Testing", long, default_value_t = 1, value_name = "N")]
    pub loss_seed: u64,
    /// Keys that protect the session.
    #[command(flatten)]
    pub security: SecurityOpts,
}

/// A rate in bits per second, as `200M` or `150k` say it.
pub(crate) fn parse_rate(s: &str) -> Result<u64, String> {
    fanout_sim::units::parse_rate_bps(s).map_err(|e| e.to_string())
}

/// A socket buffer size: `16MiB`, between 4 KiB and 2 GiB.
pub(crate) fn parse_buffer(s: &str) -> Result<usize, String> {
    let bytes = fanout_sim::units::parse_bytes(s).map_err(|e| e.to_string())?;
    match usize::try_from(bytes) {
        Ok(b) if (4096..=1 << 31).contains(&b) => Ok(b),
        _ => Err(format!("`{s}`: between 4KiB and 2GiB")),
    }
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
    /// The transport configuration these flags describe, for an engine
    /// of `side` (its keys checked and given fresh randomness).
    pub fn transport(&self, side: Side) -> anyhow::Result<TransportConfig> {
        let mut t = TransportConfig {
            protection: self.security.protection(side)?,
            ..self.unprotected()
        };
        self.cap_rate(&mut t);
        Ok(t)
    }

    /// Sets `t.max_rate` (stream bytes per second) from `--max-rate`, which
    /// counts whole IP packets: each datagram of `max_payload` stream
    /// bytes costs `max_datagram` + 48 bytes of IPv6 and UDP header on
    /// the wire (IPv4's 28 leave a little room).
    fn cap_rate(&self, t: &mut TransportConfig) {
        t.max_rate = self.max_rate.map(|bps| {
            let packet = (t.max_datagram + 48) as u128;
            let payload = u128::from(t.max_payload());
            (u128::from(bps) / 8 * payload / packet).max(1) as u64
        });
    }

    /// The transport configuration without keys.
    fn unprotected(&self) -> TransportConfig {
        let window = (self.window_mib as usize) << 20;
        TransportConfig {
            max_datagram: self
                .max_datagram
                .map_or(fanout_transport::DEFAULT_MAX_DATAGRAM, |m| m as usize),
            send_buffer_bytes: window,
            recv_window_bytes: window,
            cc: self.cc,
            pacing: !self.no_pacing,
            pacing_burst: pacing_burst(Duration::from_micros(self.timer_slack_us)),
            idle_timeout: Duration::from_secs(self.idle_timeout),
            ..TransportConfig::default()
        }
    }

    /// The transport configuration for an engine of `side` whose datagram
    /// size was fitted to a route ([`TransportOpts::fit_path`]; `None`:
    /// the flag or the default).
    pub fn transport_on(
        &self,
        side: Side,
        path: Option<&PathReport>,
    ) -> anyhow::Result<TransportConfig> {
        let mut t = self.transport(side)?;
        if let Some(p) = path {
            t.max_datagram = p.max_datagram;
        }
        self.cap_rate(&mut t);
        Ok(t)
    }

    /// Fits the datagram size to the route from `endpoint` toward
    /// `destination` (a peer or a group): without `--max-datagram`, the
    /// largest payload its MTU carries ([`datagram_for_mtu`]), at most the
    /// default; with it, the flag's value and a warning on stderr when the
    /// route carries less (the kernel then fragments the datagrams or
    /// refuses them). The report says what was chosen and why.
    pub fn fit_path(&self, endpoint: &UdpEndpoint, destination: SocketAddr) -> PathReport {
        let route_mtu = match endpoint.route_mtu(destination) {
            Ok(mtu) => Some(mtu),
            Err(e) => {
                tracing::debug!("no route MTU toward {destination}: {e}");
                None
            }
        };
        let fits = route_mtu.map(datagram_for_mtu);
        let max_datagram = match (self.max_datagram, fits) {
            (Some(flag), Some(fits)) if flag as usize > fits => {
                eprintln!(
                    "fanout: warning: --max-datagram {flag} is more than the route toward \
                     {destination} carries (MTU {}, at most {fits}-byte datagrams)",
                    route_mtu.unwrap_or_default()
                );
                flag as usize
            }
            (Some(flag), _) => flag as usize,
            (None, Some(fits)) => fits.min(fanout_transport::DEFAULT_MAX_DATAGRAM),
            (None, None) => fanout_transport::DEFAULT_MAX_DATAGRAM,
        };
        PathReport {
            toward: destination.to_string(),
            route_mtu,
            max_datagram,
            probed: None,
            fitted_to: None,
        }
    }

    /// The event loop over `endpoint`, its socket marked (`--dscp`) and
    /// its buffers sized (`--socket-buffer`, with a warning on stderr when
    /// the kernel grants less).
    pub fn driver_on(&self, endpoint: UdpEndpoint, clock: Clock) -> anyhow::Result<Driver> {
        self.tune(&endpoint)?;
        Ok(Driver::new(endpoint, clock, self.driver())?)
    }

    /// The event loop of a session member: its unicast socket as the main
    /// one ([`TransportOpts::driver_on`]), and the group's port, if any, read
    /// alongside.
    pub fn member_driver(
        &self,
        sockets: crate::session_net::MemberSockets,
        clock: Clock,
    ) -> anyhow::Result<Driver> {
        let mut driver = self.driver_on(sockets.unicast, clock)?;
        if let Some(group) = sockets.group {
            self.tune(&group)?;
            driver.add_receive_socket(group)?;
        }
        Ok(driver)
    }

    /// Applies `--dscp` and `--socket-buffer` to `endpoint`.
    pub fn tune(&self, endpoint: &UdpEndpoint) -> anyhow::Result<()> {
        if let Some(dscp) = self.dscp {
            endpoint
                .set_dscp(dscp)
                .with_context(|| format!("cannot mark datagrams with DSCP {dscp}"))?;
        }
        if let Some(bytes) = self.socket_buffer {
            warn_if_clamped(&endpoint.set_buffers(bytes)?);
        }
        Ok(())
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

/// The largest UDP payload a route of `mtu` bytes carries without
/// fragmentation, for either IP version: the MTU less 40 bytes of IPv6
/// header and 8 of UDP (1500 → 1452, the default; 1280, IPv6's minimum,
/// → 1232), never below the 256 bytes the protocol needs.
pub fn datagram_for_mtu(mtu: usize) -> usize {
    mtu.saturating_sub(48).max(256)
}

/// The datagram size a command chose, in the `--json` report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathReport {
    /// The peer or group whose route was measured.
    pub toward: String,
    /// The route's MTU, bytes of IP packet (`None`: unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route_mtu: Option<usize>,
    /// The largest UDP payload sent, bytes.
    pub max_datagram: usize,
    /// A receiver's: the largest of the sender's path probes that arrived,
    /// when its data-sized ones did not (a smaller link on the way).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probed: Option<usize>,
    /// A sender's: the receiver whose path made the session's datagrams
    /// smaller than the route's (`max_datagram` is then that size).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fitted_to: Option<String>,
}

/// A fresh random 64-bit session id.
/// A PRNG seeded from the OS (session ids of catch-up transfers).
pub fn random_rng() -> fanout_core::Rng {
    fanout_core::Rng::new(random_session_id())
}

/// A random session id from the OS.
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

/// Says on stderr, naming the sysctl that allows more, where the kernel
/// granted less `--socket-buffer` than asked.
pub(crate) fn warn_if_clamped(grant: &fanout_io::BufferGrant) {
    if !grant.clamped() {
        return;
    }
    let limit = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
            .map_or_else(|_| "?".into(), |v| v.trim().to_owned())
    };
    let bytes = grant.asked;
    eprintln!(
        "fanout: warning: --socket-buffer: the kernel {grant} (its limits: \
         net.core.rmem_max = {}, wmem_max = {}); `sysctl -w net.core.rmem_max={bytes} \
         net.core.wmem_max={bytes}` allows the full size",
        limit("rmem_max"),
        limit("wmem_max")
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        net: TransportOpts,
    }

    fn parse(args: &[&str]) -> TransportOpts {
        Wrap::parse_from(std::iter::once("t").chain(args.iter().copied())).net
    }

    /// A pacer whose bucket held less sending time than the driver may
    /// oversleep would lose credit on every late wake-up.
    #[test]
    fn the_pacing_bucket_outlasts_the_timer_slack() {
        for args in [
            &[][..],
            &["--timer-slack-us", "0"],
            &["--timer-slack-us", "5000"],
        ] {
            let net = parse(args);
            let slack = net.driver().timer_slack;
            assert_eq!(net.unprotected().pacing_burst, slack + PACING_BURST_MARGIN);
        }
        let defaults = parse(&[]);
        assert_eq!(defaults.driver().timer_slack, Duration::from_micros(1500));
        assert_eq!(defaults.driver().rx_coalesce, Duration::from_micros(1500));
    }
}
