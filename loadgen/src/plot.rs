//! `loadgen plot A.json [B.json ...] --out chart.svg`: one SVG of several
//! runs overlaid, each in its own colour with a legend:
//!
//! 1. the latency percentile curve, HdrHistogram style: x is 1/(1-q) on a
//!    log axis labelled as percentiles (0%, 90%, 99%, 99.9%, ...), y is the
//!    latency in ms on a log axis, from each report's histogram;
//! 2. the achieved rate per second of the measured window (and, dashed,
//!    failed appends per second where there were any);
//! 3. p99 (solid) and p50 (dashed) latency per second.
//!
//! Panels 2 and 3 need `time_series` (schema version 2); older reports
//! draw only the curve.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::{histogram_from_base64, Report};

/// Chart size in pixels.
const WIDTH: u32 = 1100;
const HEIGHT: u32 = 1200;
/// Smallest latency drawn on the log axes (ms): 1 µs.
const MIN_MS: f64 = 0.001;

#[derive(clap::Args, Debug)]
pub struct PlotArgs {
    /// JSON reports written by `loadgen --out`, drawn in this order.
    #[arg(required = true, value_name = "REPORT.json")]
    pub reports: Vec<PathBuf>,

    /// The SVG file to write.
    #[arg(long, value_name = "CHART.svg")]
    pub out: PathBuf,

    /// Legend name of each report, in order (default: the report's `label`,
    /// else its file name without `.json`).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,

    /// Title above the panels [default: the first report's workload].
    #[arg(long)]
    pub title: Option<String>,
}

/// One report, ready to draw.
struct Run {
    name: String,
    report: Report,
    /// (1/(1-q), latency ms) of the percentile curve.
    curve: Vec<(f64, f64)>,
}

/// Checks what does not need the reports (a usage error: exit 2).
pub fn check_args(a: &PlotArgs) -> anyhow::Result<()> {
    if a.out.extension().and_then(|e| e.to_str()) != Some("svg") {
        bail!(
            "--out must name an .svg file (got {}); only SVG is drawn: convert it with e.g. `rsvg-convert -o chart.png chart.svg`",
            a.out.display()
        );
    }
    if !a.labels.is_empty() && a.labels.len() != a.reports.len() {
        bail!("give one --label per report ({} labels for {} reports)", a.labels.len(), a.reports.len());
    }
    Ok(())
}

/// Reads the reports and draws the chart.
pub fn plot(a: &PlotArgs) -> anyhow::Result<()> {
    let mut runs = Vec::new();
    for (i, path) in a.reports.iter().enumerate() {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let report: Report = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let name = match a.labels.get(i) {
            Some(l) => l.clone(),
            None if !report.label.is_empty() => report.label.clone(),
            None => path.file_stem().map_or_else(|| format!("run {i}"), |s| s.to_string_lossy().into_owned()),
        };
        let curve = percentile_curve(&report).with_context(|| format!("{}: histogram", path.display()))?;
        runs.push(Run { name, report, curve });
    }
    let title = a.title.clone().unwrap_or_else(|| describe(&runs[0].report));
    draw(&a.out, &title, &runs).map_err(|e| anyhow::anyhow!("drawing {}: {e}", a.out.display()))
}

/// "v1, 128 connections, open loop 5000/s, 1024 B" for the default title.
fn describe(r: &Report) -> String {
    let mode = if r.target_rate > 0.0 { format!("open loop {}/s", r.target_rate) } else { "closed loop".into() };
    format!(
        "{} surface, {} connections, {mode}, {} B appends, {:.0} s",
        r.surface, r.connections, r.payload_bytes, r.duration_s
    )
}

/// The histogram's percentile distribution as (1/(1-q), ms) points; the
/// 100th percentile (x infinite) is left out, as in HdrHistogram plots.
fn percentile_curve(r: &Report) -> anyhow::Result<Vec<(f64, f64)>> {
    let h = histogram_from_base64(&r.histogram_v2_base64)?;
    if h.is_empty() {
        return Ok(Vec::new());
    }
    Ok(h.iter_quantiles(5)
        .map(|v| (v.quantile_iterated_to(), v.value_iterated_to()))
        .filter(|&(q, _)| q < 1.0)
        .map(|(q, us)| (1.0 / (1.0 - q), (us as f64 / 1000.0).max(MIN_MS)))
        .collect())
}

/// `1/(1-q)` as a percentile label: 1 -> 0%, 10 -> 90%, 1000 -> 99.9%.
pub fn percentile_label(x: f64) -> String {
    if x < 1.0 {
        return String::new();
    }
    let p = 100.0 * (1.0 - 1.0 / x);
    let decimals = (x.log10().ceil() as i32 - 2).max(0) as usize;
    format!("{p:.decimals$}%")
}

/// Powers of ten that bracket `lo..hi` (both > 0).
fn decades(lo: f64, hi: f64) -> (f64, f64) {
    let lo = 10f64.powf(lo.max(MIN_MS).log10().floor());
    let hi = 10f64.powf(hi.max(lo * 10.0).log10().ceil());
    (lo, hi)
}

fn draw(out: &Path, title: &str, runs: &[Run]) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(out, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let panels = root.split_evenly((3, 1));
    curve_panel(&panels[0], runs)?;
    rate_panel(&panels[1], runs)?;
    latency_panel(&panels[2], runs)?;
    root.present()?;
    Ok(())
}

fn colour(i: usize) -> RGBColor {
    // Distinct, readable on white (Tableau 10).
    const C: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    let (r, g, b) = C[i % C.len()];
    RGBColor(r, g, b)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), Box<dyn std::error::Error>> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn curve_panel(area: &Area, runs: &[Run]) -> Result<(), Box<dyn std::error::Error>> {
    let pts = runs.iter().flat_map(|r| r.curve.iter());
    let x_max = pts.clone().map(|p| p.0).fold(10.0, f64::max);
    let (y_lo, y_hi) =
        decades(pts.clone().map(|p| p.1).fold(f64::INFINITY, f64::min), pts.map(|p| p.1).fold(MIN_MS, f64::max));
    let x_hi = 10f64.powf(x_max.log10().ceil());
    let mut chart = ChartBuilder::on(area)
        .caption("Append latency by percentile (HdrHistogram)", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((1f64..x_hi).log_scale(), (y_lo..y_hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (ms)")
        .x_label_formatter(&|x| percentile_label(*x))
        .y_label_formatter(&|y| format!("{y}"))
        .draw()?;
    for (i, r) in runs.iter().enumerate() {
        let c = colour(i);
        chart
            .draw_series(LineSeries::new(r.curve.iter().copied(), c.stroke_width(2)))?
            .label(format!("{}  (p99 {:.2} ms)", r.name, r.report.latency_us.p99 as f64 / 1000.0))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    legend(&mut chart)
}

fn window(runs: &[Run]) -> f64 {
    runs.iter().map(|r| r.report.duration_s).fold(1.0, f64::max).ceil()
}

fn rate_panel(area: &Area, runs: &[Run]) -> Result<(), Box<dyn std::error::Error>> {
    let y_max = runs.iter().flat_map(|r| &r.report.time_series).map(|s| s.rate).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption("Achieved rate per second", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..window(runs), 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("seconds into the measured window")
        .y_desc("appends/s")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for (i, r) in runs.iter().enumerate() {
        let c = colour(i);
        // Each second drawn at its middle.
        let at = |t: f64| t + 0.5;
        let rate = r.report.time_series.iter().map(|s| (at(s.t_s), s.rate));
        chart
            .draw_series(LineSeries::new(rate, c.stroke_width(2)))?
            .label(format!("{}  ({:.0}/s)", r.name, r.report.achieved_rate))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        if r.report.time_series.iter().any(|s| s.errors > 0) {
            let errors = r.report.time_series.iter().map(|s| (at(s.t_s), s.errors as f64));
            chart
                .draw_series(DashedLineSeries::new(errors, 6, 4, c.stroke_width(1)))?
                .label(format!("{} errors/s", r.name))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(1)));
        }
    }
    legend(&mut chart)
}

fn latency_panel(area: &Area, runs: &[Run]) -> Result<(), Box<dyn std::error::Error>> {
    let series = || runs.iter().flat_map(|r| &r.report.time_series).filter(|s| s.requests > 0);
    let lo = series().map(|s| s.p50_us as f64 / 1000.0).fold(f64::INFINITY, f64::min);
    let (y_lo, y_hi) = decades(lo, series().map(|s| s.p99_us as f64 / 1000.0).fold(MIN_MS, f64::max));
    let mut chart = ChartBuilder::on(area)
        .caption("Latency per second: p99 (solid), p50 (dashed)", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..window(runs), (y_lo..y_hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("seconds into the measured window")
        .y_desc("latency (ms)")
        .y_label_formatter(&|y| format!("{y}"))
        .draw()?;
    for (i, r) in runs.iter().enumerate() {
        let c = colour(i);
        let ms = |us: u64| (us as f64 / 1000.0).max(MIN_MS);
        let busy = || r.report.time_series.iter().filter(|s| s.requests > 0);
        chart
            .draw_series(LineSeries::new(busy().map(|s| (s.t_s + 0.5, ms(s.p99_us))), c.stroke_width(2)))?
            .label(r.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart.draw_series(DashedLineSeries::new(
            busy().map(|s| (s.t_s + 0.5, ms(s.p50_us))),
            6,
            4,
            c.stroke_width(1),
        ))?;
    }
    legend(&mut chart)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_labels() {
        assert_eq!(percentile_label(1.0), "0%");
        assert_eq!(percentile_label(2.0), "50%");
        assert_eq!(percentile_label(10.0), "90%");
        assert_eq!(percentile_label(100.0), "99%");
        assert_eq!(percentile_label(1000.0), "99.9%");
        assert_eq!(percentile_label(100_000.0), "99.999%");
        assert_eq!(decades(0.35, 12.0), (0.1, 100.0));
    }
}
