//! SVG bar charts of a results file (plotters, SVG backend): per scenario
//! one bar per tool, for wall time, wire bytes per file byte and sender CPU.

use super::report::{median, Stats, PLOTS};
use super::results::Results;
use plotters::prelude::*;
use std::io;
use std::path::Path;

fn to_io<E: std::fmt::Display>(e: E) -> io::Error {
    io::Error::other(e.to_string())
}

/// Writes the charts named in [`PLOTS`] into `dir`.
pub fn write_all(res: &Results, dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let pick: [fn(&Stats) -> Option<f64>; 3] = [
        |s| median(&s.wall),
        |s| median(&s.wire),
        |s| median(&s.sender_cpu),
    ];
    for ((file, caption), f) in PLOTS.iter().zip(pick) {
        let values: Vec<Vec<Option<f64>>> = res
            .scenarios
            .iter()
            .map(|s| {
                res.tools
                    .iter()
                    .map(|t| {
                        f(&Stats::of(
                            res.results
                                .iter()
                                .filter(|r| r.scenario == s.name && r.tool == t.name),
                        ))
                    })
                    .collect()
            })
            .collect();
        bars(&dir.join(file), caption, res, &values)?;
    }
    Ok(())
}

/// Grouped bars: `values[scenario][tool]` (missing values leave a gap).
fn bars(path: &Path, caption: &str, res: &Results, values: &[Vec<Option<f64>>]) -> io::Result<()> {
    let tools = res.tools.len().max(1);
    // Each scenario takes `tools` slots plus one as a gap.
    let group = tools as i32 + 1;
    let slots = group * res.scenarios.len().max(1) as i32;
    let y_max = values
        .iter()
        .flatten()
        .flatten()
        .copied()
        .fold(0.0f64, f64::max);
    let y_max = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
    let root = SVGBackend::new(path, (900, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(to_io)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0..slots, 0.0..y_max)
        .map_err(to_io)?;
    let names: Vec<String> = res
        .scenarios
        .iter()
        .map(|s| format!("({})", s.name))
        .collect();
    let middle = (tools as i32) / 2;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(slots as usize + 1)
        .x_label_formatter(&|x| {
            let (g, k) = (x / group, x % group);
            if k == middle {
                names.get(g as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc("scenario")
        .draw()
        .map_err(to_io)?;
    for (ti, tool) in res.tools.iter().enumerate() {
        let color = Palette99::pick(ti).to_rgba();
        let rects: Vec<Rectangle<(i32, f64)>> = values
            .iter()
            .enumerate()
            .filter_map(|(si, row)| {
                let v = row.get(ti).copied().flatten()?;
                let x = si as i32 * group + ti as i32;
                Some(Rectangle::new([(x, 0.0), (x + 1, v)], color.filled()))
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(to_io)?
            .label(tool.name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(to_io)?;
    root.present().map_err(to_io)?;
    Ok(())
}
