//! SVG plots of the sampled time series (plotters, SVG backend).

use crate::metrics::Metrics;
use plotters::prelude::*;
use std::io;
use std::path::Path;

/// At most this many series per plot (the busiest ones), to stay legible.
pub const MAX_SERIES_PER_PLOT: usize = 12;

/// One named line: (x seconds, y) points.
pub type Line = (String, Vec<(f64, f64)>);

/// Writes `throughput.svg`, `queue.svg`, `goodput.svg` and (if any app
/// reports one) `rate.svg` and `cwnd.svg` into `dir`. Plots with no data
/// are skipped.
pub fn write_all(m: &Metrics, dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let busiest = |mut lines: Vec<(f64, Line)>| {
        lines.retain(|(k, _)| *k > 0.0);
        lines.sort_by(|a, b| b.0.total_cmp(&a.0));
        lines.truncate(MAX_SERIES_PER_PLOT);
        lines.into_iter().map(|(_, l)| l).collect::<Vec<_>>()
    };
    let links = |f: fn(&crate::metrics::LinkSample) -> f64| {
        busiest(
            m.links
                .iter()
                .map(|s| {
                    let pts: Vec<(f64, f64)> = s
                        .samples
                        .iter()
                        .map(|x| (x.at.as_secs_f64(), f(x)))
                        .collect();
                    let key = pts.iter().map(|p| p.1).fold(0.0, f64::max);
                    (key, (s.label.clone(), pts))
                })
                .collect(),
        )
    };
    line_chart(
        &dir.join("throughput.svg"),
        "Link throughput",
        "Mbit/s",
        &links(|x| x.throughput_bps / 1e6),
    )?;
    line_chart(
        &dir.join("queue.svg"),
        "Queue length",
        "packets",
        &links(|x| f64::from(x.queue_packets)),
    )?;
    let apps = |f: fn(&crate::metrics::AppSample) -> Option<f64>| {
        busiest(
            m.apps
                .iter()
                .map(|s| {
                    let pts: Vec<(f64, f64)> = s
                        .samples
                        .iter()
                        .filter_map(|x| f(x).map(|y| (x.at.as_secs_f64(), y)))
                        .collect();
                    let key = pts.iter().map(|p| p.1).fold(0.0, f64::max);
                    (key, (s.label.clone(), pts))
                })
                .collect(),
        )
    };
    line_chart(
        &dir.join("goodput.svg"),
        "Goodput per app",
        "Mbit/s",
        &apps(|x| Some(x.goodput_bps / 1e6)),
    )?;
    line_chart(
        &dir.join("rate.svg"),
        "Rate of rate-based senders (and the rates their receivers compute)",
        "Mbit/s",
        &apps(|x| x.rate_bps.map(|r| r as f64 / 1e6)),
    )?;
    line_chart(
        &dir.join("cwnd.svg"),
        "Congestion window",
        "bytes",
        &apps(|x| x.cwnd_bytes.map(|c| c as f64)),
    )?;
    Ok(())
}

fn to_io(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// Draws `lines` into an SVG at `path`; does nothing if there is no point.
pub fn line_chart(path: &Path, title: &str, y_label: &str, lines: &[Line]) -> io::Result<()> {
    let pts = lines.iter().flat_map(|l| l.1.iter());
    let (mut x_max, mut y_max) = (0.0f64, 0.0f64);
    let mut any = false;
    for &(x, y) in pts {
        any = true;
        x_max = x_max.max(x);
        y_max = y_max.max(y);
    }
    if !any {
        return Ok(());
    }
    let x_max = if x_max > 0.0 { x_max } else { 1.0 };
    let y_max = if y_max > 0.0 { y_max * 1.05 } else { 1.0 };
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(to_io)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(to_io)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc(y_label)
        .draw()
        .map_err(to_io)?;
    for (i, (label, points)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(to_io)?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(to_io)?;
    root.present().map_err(to_io)?;
    Ok(())
}
