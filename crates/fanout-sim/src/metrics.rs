//! Time series sampled every `sample_interval`: per link (throughput, queue,
//! drops) and per app (goodput, cwnd, srtt, rate), with CSV output.

use crate::app::AppProbe;
use crate::link::Link;
use fanout_core::Instant;
use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::time::Duration;

/// One sample of a link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSample {
    /// Sampling instant.
    pub at: Instant,
    /// Wire bits serialized during the last interval, per second.
    pub throughput_bps: f64,
    /// Packets waiting at the sampling instant.
    pub queue_packets: u32,
    /// Wire bytes waiting at the sampling instant.
    pub queue_bytes: u64,
    /// RED's average queue (packets or bytes), if RED.
    pub red_avg: Option<f64>,
    /// Cumulative drops on the link (all reasons).
    pub drops: u64,
}

/// One sample of an app.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AppSample {
    /// Sampling instant.
    pub at: Instant,
    /// Cumulative delivered application bytes.
    pub delivered_bytes: u64,
    /// Delivered bits during the last interval, per second.
    pub goodput_bps: f64,
    /// Congestion window in bytes, if reported.
    pub cwnd_bytes: Option<u64>,
    /// Smoothed RTT, if reported.
    pub srtt: Option<Duration>,
    /// Sending rate in bit/s, if reported.
    pub rate_bps: Option<u64>,
}

/// A labelled series of samples.
#[derive(Debug, Clone)]
pub struct Series<S> {
    /// Human label (`"a->b"` for links, `"node:port"` for apps).
    pub label: String,
    /// Whether the sampler records this series.
    pub enabled: bool,
    /// Samples in time order.
    pub samples: Vec<S>,
    last_counter: u64,
}

impl<S> Series<S> {
    fn new(label: String) -> Self {
        Series {
            label,
            enabled: true,
            samples: Vec::new(),
            last_counter: 0,
        }
    }
}

/// All time series of a run.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    interval: Option<Duration>,
    last_sample: Instant,
    /// Per link, indexed by `LinkId`.
    pub links: Vec<Series<LinkSample>>,
    /// Per app, indexed by `AppId`.
    pub apps: Vec<Series<AppSample>>,
}

impl Metrics {
    pub(crate) fn new(interval: Option<Duration>) -> Self {
        Metrics {
            interval,
            ..Metrics::default()
        }
    }

    /// The sampling interval (None: sampling off).
    pub fn interval(&self) -> Option<Duration> {
        self.interval
    }

    pub(crate) fn add_link(&mut self, label: String) {
        self.links.push(Series::new(label));
    }

    pub(crate) fn add_app(&mut self, label: String) {
        self.apps.push(Series::new(label));
    }

    pub(crate) fn sample_links(&mut self, now: Instant, links: &[Link]) {
        let secs = (now - self.last_sample).as_secs_f64();
        for (series, link) in self.links.iter_mut().zip(links) {
            if !series.enabled {
                continue;
            }
            let tx = link.stats().tx_bytes;
            let throughput_bps = if secs > 0.0 {
                (tx - series.last_counter) as f64 * 8.0 / secs
            } else {
                0.0
            };
            series.last_counter = tx;
            series.samples.push(LinkSample {
                at: now,
                throughput_bps,
                queue_packets: link.queue_packets() as u32,
                queue_bytes: link.queue_bytes(),
                red_avg: link.red_avg(),
                drops: link.stats().drops.total(),
            });
        }
    }

    pub(crate) fn sample_app(&mut self, index: usize, now: Instant, probe: AppProbe) {
        let secs = (now - self.last_sample).as_secs_f64();
        let series = &mut self.apps[index];
        let goodput_bps = if secs > 0.0 {
            probe.delivered_bytes.saturating_sub(series.last_counter) as f64 * 8.0 / secs
        } else {
            0.0
        };
        series.last_counter = probe.delivered_bytes;
        series.samples.push(AppSample {
            at: now,
            delivered_bytes: probe.delivered_bytes,
            goodput_bps,
            cwnd_bytes: probe.cwnd_bytes,
            srtt: probe.srtt,
            rate_bps: probe.rate_bps,
        });
    }

    pub(crate) fn finish_sample(&mut self, now: Instant) {
        self.last_sample = now;
    }

    /// Mean throughput (bit/s) of link series `index` over samples in
    /// `[from, to]`.
    pub fn mean_link_throughput(&self, index: usize, from: Instant, to: Instant) -> f64 {
        mean(
            self.links[index]
                .samples
                .iter()
                .filter(|s| s.at >= from && s.at <= to)
                .map(|s| s.throughput_bps),
        )
    }

    /// Writes `links.csv` and `apps.csv` into `dir` (created if missing).
    pub fn write_csv(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let opt = |v: Option<String>| v.unwrap_or_default();
        let mut s =
            String::from("time_s,link,throughput_bps,queue_packets,queue_bytes,red_avg,drops\n");
        for series in &self.links {
            for x in &series.samples {
                let _ = writeln!(
                    s,
                    "{:.6},{},{:.0},{},{},{},{}",
                    x.at.as_secs_f64(),
                    series.label,
                    x.throughput_bps,
                    x.queue_packets,
                    x.queue_bytes,
                    opt(x.red_avg.map(|v| format!("{v:.3}"))),
                    x.drops
                );
            }
        }
        std::fs::write(dir.join("links.csv"), s)?;
        let mut s =
            String::from("time_s,app,delivered_bytes,goodput_bps,cwnd_bytes,srtt_ms,rate_bps\n");
        for series in &self.apps {
            for x in &series.samples {
                let _ = writeln!(
                    s,
                    "{:.6},{},{},{:.0},{},{},{}",
                    x.at.as_secs_f64(),
                    series.label,
                    x.delivered_bytes,
                    x.goodput_bps,
                    opt(x.cwnd_bytes.map(|v| v.to_string())),
                    opt(x.srtt.map(|v| format!("{:.3}", v.as_secs_f64() * 1e3))),
                    opt(x.rate_bps.map(|v| v.to_string())),
                );
            }
        }
        std::fs::write(dir.join("apps.csv"), s)
    }
}

fn mean(it: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = it.fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / f64::from(n)
    }
}
