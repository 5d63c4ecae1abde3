//! The benchmark figures, drawn with plotters' SVG backend: a CDF chart
//! with a logarithmic x axis ([`cdf_chart`]), a bar chart ([`bar_chart`]),
//! a line chart ([`line_chart`]) and a legend ([`legend`]), on the panels
//! of one document ([`figure`]; split it with plotters' `split_*`).
//!
//! Text is measured with plotters' built-in estimate (no font file is
//! read, no fontconfig), so the same input gives the same file on every
//! machine.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// A panel of a figure.
pub type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// What drawing on an [`Area`] returns.
pub type DrawResult = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// A figure plotters could not lay out.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw the figure {figure}: {why}; make the figure larger or give it fewer panels")]
pub struct PlotError {
    /// The figure (its file name).
    pub figure: String,
    /// What plotters said.
    pub why: String,
}

/// Colours for series, in order (colour-blind-safe: Okabe–Ito's eight,
/// then four of Paul Tol's muted scheme).
pub const PALETTE: [RGBColor; 12] = [
    RGBColor(0x00, 0x00, 0x00),
    RGBColor(0xe6, 0x9f, 0x00),
    RGBColor(0x56, 0xb4, 0xe9),
    RGBColor(0x00, 0x9e, 0x73),
    RGBColor(0xd5, 0x5e, 0x00),
    RGBColor(0x00, 0x72, 0xb2),
    RGBColor(0xcc, 0x79, 0xa7),
    RGBColor(0xf0, 0xe4, 0x42),
    RGBColor(0x88, 0x22, 0x55),
    RGBColor(0x99, 0x99, 0x99),
    RGBColor(0x33, 0x22, 0x88),
    RGBColor(0x44, 0xaa, 0x99),
];

/// The `i`th palette colour, wrapping around.
pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// `n` panels (or bars, or rows) of `each` pixels, saturating.
pub fn span(n: usize, each: u32) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX).saturating_mul(each)
}

const FAMILY: &str = "DejaVu Sans, Helvetica, Arial, sans-serif";
const GRID: RGBColor = RGBColor(0xe4, 0xe4, 0xe4);
const FRAME: RGBColor = RGBColor(0x88, 0x88, 0x88);

/// The font at `px` pixels (plotters writes a font size of `size / 1.24`).
pub fn font(px: f64) -> FontDesc<'static> {
    FontDesc::new(FontFamily::Name(FAMILY), px * 1.24, FontStyle::Normal)
}

/// The bold font at `px` pixels, for titles.
pub fn bold(px: f64) -> FontDesc<'static> {
    font(px).style(FontStyle::Bold)
}

/// An SVG document of `size` pixels on a white background, with `title`
/// across its top if given; `draw` fills the area below the title.
pub fn figure(
    name: &str,
    size: (u32, u32),
    title: Option<&str>,
    draw: impl FnOnce(&Area<'_>) -> DrawResult,
) -> Result<String, PlotError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        let run = || -> DrawResult {
            root.fill(&WHITE)?;
            match title {
                Some(t) => draw(&root.titled(t, bold(13.0))?)?,
                None => draw(&root)?,
            }
            root.present()
        };
        run().map_err(|e| PlotError {
            figure: name.to_owned(),
            why: e.to_string(),
        })?;
    }
    Ok(out)
}

/// A linear axis from `lo` to `hi` with labelled ticks exactly at `keys`
/// (plotters' own linear axes choose their ticks).
#[derive(Debug, Clone)]
struct Ticks {
    lo: f64,
    hi: f64,
    keys: Vec<f64>,
}

impl Ticks {
    fn new((lo, hi): (f64, f64), keys: &[f64]) -> Self {
        let hi = if hi > lo { hi } else { lo + 1.0 };
        Ticks {
            lo,
            hi,
            keys: keys.to_vec(),
        }
    }
}

impl Ranged for Ticks {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, (from, to): (i32, i32)) -> i32 {
        let t = (v - self.lo) / (self.hi - self.lo);
        from + (t * f64::from(to - from)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // Labelled (bold) ticks only; no light grid lines.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.keys.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

/// One line of a [`cdf_chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Stroke colour.
    pub color: RGBColor,
    /// Sorted sample values; the chart draws their empirical CDF.
    pub sorted: Vec<f64>,
    /// Dashed (a reference line, drawn over the others so that a series
    /// equal to it still shows).
    pub dashed: bool,
}

impl Series {
    /// Its entry in a [`legend`].
    pub fn key(&self) -> Key {
        Key {
            name: self.name.clone(),
            color: self.color,
            mark: if self.dashed {
                Mark::Dashed
            } else {
                Mark::Line
            },
        }
    }
}

/// "Nice" tick values for a logarithmic axis from `lo` to `hi` (> 0).
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi * 1.0001 {
        for m in [1.0, 1.2, 1.5, 2.0, 3.0, 5.0] {
            let v = decade * m;
            if v >= lo * 0.9999 && v <= hi * 1.0001 {
                ticks.push(v);
            }
        }
        decade *= 10.0;
    }
    // Keep the axis readable: thin out to at most 9 ticks, keeping 1, 2, 5.
    if ticks.len() > 9 {
        ticks.retain(|v| {
            let m = v / 10f64.powf(v.log10().floor());
            [1.0, 2.0, 5.0].iter().any(|k| (m - k).abs() < 1e-6)
        });
    }
    ticks
}

/// Formats a tick label without trailing zeros.
fn tick_label(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if (v * 10.0 - (v * 10.0).round()).abs() < 1e-9 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Pixels left of a y axis for tick labels `labels` (about 6 px a
/// character at 9.5–10 px) and the axis title beside them.
fn label_area(labels: impl Iterator<Item = String>) -> u32 {
    let chars = labels.map(|l| l.chars().count()).max().unwrap_or(1);
    span(chars, 6).saturating_add(26).max(40)
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&s| s >= raw * 0.9999)
        .unwrap_or(10.0 * p)
}

/// The empirical CDF of `sorted` as a step line, x clamped to `lo..=hi`,
/// thinned to at most ~400 steps.
fn cdf_steps(sorted: &[f64], lo: f64, hi: f64) -> Vec<(f64, f64)> {
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let x = |v: f64| v.clamp(lo, hi);
    let stride = n.div_ceil(400).max(1);
    let mut pts = vec![(x(sorted[0]), 0.0)];
    let mut i = 0;
    while i < n {
        let j = (i + stride).min(n) - 1;
        pts.push((x(sorted[j]), i as f64 / n as f64));
        pts.push((x(sorted[j]), (j + 1) as f64 / n as f64));
        i = j + 1;
    }
    pts
}

/// Draws the empirical CDFs of `series` in `area`: x logarithmic from
/// `x_lo` to `x_hi` (values outside are clamped to the edges), y the
/// fraction of samples at or below x, with a legend in the lower right
/// when `legend_inside` (else draw one beside it with [`legend`] and
/// [`Series::key`]).
pub fn cdf_chart(
    area: &Area<'_>,
    title: &str,
    x_label: &str,
    series: &[Series],
    (x_lo, x_hi): (f64, f64),
    legend_inside: bool,
) -> DrawResult {
    let x_lo = x_lo.max(1e-9);
    let x_hi = x_hi.max(x_lo * 1.01);
    let mut chart = ChartBuilder::on(area)
        .caption(title, bold(12.0))
        .margin(6)
        .margin_right(14)
        .x_label_area_size(36)
        .y_label_area_size(44)
        .build_cartesian_2d(
            (x_lo..x_hi)
                .log_scale()
                .with_key_points(log_ticks(x_lo, x_hi)),
            Ticks::new((0.0, 1.0), &[0.0, 0.25, 0.5, 0.75, 0.9, 1.0]),
        )?;
    chart
        .configure_mesh()
        .bold_line_style(GRID)
        .axis_style(FRAME)
        .x_desc(x_label)
        .y_desc("CDF")
        .x_label_formatter(&|v| tick_label(*v))
        .y_label_formatter(&|v| tick_label(*v))
        .label_style(font(10.0))
        .axis_desc_style(font(10.5))
        .draw()?;
    let solid_first = series
        .iter()
        .filter(|s| !s.dashed)
        .chain(series.iter().filter(|s| s.dashed));
    for s in solid_first {
        let pts = cdf_steps(&s.sorted, x_lo, x_hi);
        let style = s.color.stroke_width(2);
        if s.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts, 5, 4, style))?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 18, y)], 5, 3, style)
                });
        } else {
            chart
                .draw_series(LineSeries::new(pts, style))?
                .label(s.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        }
    }
    if !legend_inside {
        return Ok(());
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .margin(8)
        .legend_area_size(24)
        .label_font(font(10.0))
        .background_style(WHITE.mix(0.85))
        .border_style(FRAME)
        .draw()
}

/// One bar of a [`bar_chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// Label under the bar.
    pub label: String,
    /// Height in data units; a value that is not finite is drawn as 0.
    pub value: f64,
    /// Fill colour.
    pub color: RGBColor,
}

/// Draws `bars` in `area`, y from 0 to `y_max` (or the largest bar, if
/// larger), each bar labelled with its value, with a dashed reference line
/// at `reference` if given.
pub fn bar_chart(
    area: &Area<'_>,
    title: &str,
    y_label: &str,
    bars: &[Bar],
    y_max: f64,
    reference: Option<f64>,
) -> DrawResult {
    let value = |b: &Bar| if b.value.is_finite() { b.value } else { 0.0 };
    let top = bars.iter().map(value).fold(y_max, f64::max).max(1e-9) * 1.08;
    let step = nice_step(top / 5.0);
    let y_ticks: Vec<f64> = (0..)
        .map(|k| f64::from(k) * step)
        .take_while(|v| *v <= top)
        .collect();
    let n = bars.len().max(1) as f64;
    let x_ticks: Vec<f64> = (0..bars.len()).map(|i| i as f64).collect();
    let y_area = label_area(y_ticks.iter().map(|v| tick_label(*v)));
    // Labels under the bars shrink (to 7 px) until each fits its slot and
    // the slots of the unlabelled bars beside it.
    let slot = f64::from(area.dim_in_pixel().0.saturating_sub(y_area + 22)) / n;
    let blank = |i: &usize| bars[*i].label.is_empty();
    let label_px = (0..bars.len())
        .filter(|&i| !bars[i].label.is_empty())
        .map(|i| {
            let left = (0..i).rev().take_while(blank).count();
            let right = (i + 1..bars.len()).take_while(blank).count();
            let room = slot * (1 + left + right) as f64;
            room / (0.6 * bars[i].label.chars().count() as f64)
        })
        .fold(9.5, f64::min);
    // Too long even at 7 px: written downwards instead.
    let rotate = label_px < 7.0;
    let longest = bars
        .iter()
        .map(|b| b.label.chars().count())
        .max()
        .unwrap_or(1);
    let x_area = if rotate {
        span(longest, 5).saturating_add(12)
    } else {
        22
    };
    let x_style = if rotate {
        TextStyle::from(font(8.5))
            .transform(FontTransform::Rotate90)
            .pos(Pos::new(HPos::Left, VPos::Center))
    } else {
        TextStyle::from(font(label_px))
    };
    let mut chart = ChartBuilder::on(area)
        .caption(title, bold(12.0))
        .margin(6)
        .margin_right(16)
        .x_label_area_size(x_area)
        .y_label_area_size(y_area)
        .build_cartesian_2d(
            Ticks::new((-0.5, n - 0.5), &x_ticks),
            Ticks::new((0.0, top), &y_ticks),
        )?;
    // Rotated labels are drawn below (plotters centres an axis label on
    // its tick, which would put half of a rotated one inside the chart).
    let label_of = |x: &f64| match bars.get(x.round() as usize) {
        Some(b) if !rotate => b.label.clone(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .bold_line_style(GRID)
        .axis_style(FRAME)
        .y_desc(y_label)
        .x_label_formatter(&label_of)
        .y_label_formatter(&|v| tick_label(*v))
        .x_label_style(x_style.clone())
        .y_label_style(font(9.5))
        .axis_desc_style(font(10.5))
        .draw()?;
    chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
        let x = i as f64;
        Rectangle::new([(x - 0.35, 0.0), (x + 0.35, value(b))], b.color.filled())
    }))?;
    if rotate {
        chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
            EmptyElement::at((i as f64, 0.0)) + Text::new(b.label.clone(), (0, 6), x_style.clone())
        }))?;
    }
    // The value over each bar, in a font small enough that neighbours do not
    // overlap; a bar without a value (a run that did not happen) says so.
    let texts: Vec<String> = bars.iter().map(|b| bar_value(b.value)).collect();
    let longest_text = texts.iter().map(|t| t.chars().count()).max().unwrap_or(1);
    let above_px = (slot / (0.6 * longest_text as f64)).clamp(6.5, 9.5);
    let above = TextStyle::from(font(above_px)).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart.draw_series(bars.iter().zip(texts).enumerate().map(|(i, (b, t))| {
        EmptyElement::at((i as f64, value(b))) + Text::new(t, (0, -3), above.clone())
    }))?;
    if let Some(r) = reference
        && r <= top
    {
        chart.draw_series(DashedLineSeries::new(
            vec![(-0.5, r), (n - 0.5, r)],
            4,
            3,
            RGBColor(0x55, 0x55, 0x55).stroke_width(1),
        ))?;
    }
    Ok(())
}

/// The text over a bar: two decimals, none from 100 up (a request rate's
/// hundredths only crowd the bar's neighbours); `not run` for a bar without
/// a value.
pub fn bar_value(v: f64) -> String {
    if !v.is_finite() {
        "not run".to_owned()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// One line of a [`line_chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Colour.
    pub color: RGBColor,
    /// `(x, y)` in data units; a point whose y is not finite is left out.
    pub points: Vec<(f64, f64)>,
}

/// The axes of a [`line_chart`].
#[derive(Clone, Copy)]
pub struct Axes<'a> {
    /// x from, to.
    pub x: (f64, f64),
    /// y from, to (values outside are clamped to the edges).
    pub y: (f64, f64),
    /// Where the x axis has a labelled tick.
    pub x_ticks: &'a [f64],
    /// Where the y axis has a labelled tick (and a grid line).
    pub y_ticks: &'a [f64],
    /// Under the x axis.
    pub x_label: &'a str,
    /// Beside the y axis; empty for none.
    pub y_label: &'a str,
    /// Formats a y tick.
    pub y_format: &'a dyn Fn(f64) -> String,
}

impl std::fmt::Debug for Axes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Axes")
            .field("x", &self.x)
            .field("y", &self.y)
            .field("x_label", &self.x_label)
            .field("y_label", &self.y_label)
            .finish_non_exhaustive()
    }
}

/// Draws `lines` in `area` on `axes`, titled.
pub fn line_chart(area: &Area<'_>, title: &str, axes: &Axes<'_>, lines: &[Line]) -> DrawResult {
    let (x, y) = (
        Ticks::new(axes.x, axes.x_ticks),
        Ticks::new(axes.y, axes.y_ticks),
    );
    let (y_lo, y_hi) = (y.lo, y.hi);
    let mut chart = ChartBuilder::on(area)
        .caption(title, bold(11.0))
        .margin(6)
        .margin_right(12)
        .x_label_area_size(34)
        .y_label_area_size(
            label_area(axes.y_ticks.iter().map(|v| (axes.y_format)(*v)))
                + if axes.y_label.is_empty() { 0 } else { 8 },
        )
        .build_cartesian_2d(x, y)?;
    let y_format = |v: &f64| (axes.y_format)(*v);
    let mut mesh = chart.configure_mesh();
    mesh.disable_x_mesh()
        .bold_line_style(GRID)
        .axis_style(FRAME)
        .x_desc(axes.x_label)
        .x_label_formatter(&|v| tick_label(*v))
        .y_label_formatter(&y_format)
        .label_style(font(9.5))
        .axis_desc_style(font(10.0));
    if !axes.y_label.is_empty() {
        mesh.y_desc(axes.y_label);
    }
    mesh.draw()?;
    for l in lines {
        let pts = l
            .points
            .iter()
            .filter(|p| p.1.is_finite())
            .map(|&(x, y)| (x, y.clamp(y_lo, y_hi)));
        chart.draw_series(LineSeries::new(pts, l.color.stroke_width(2)))?;
    }
    Ok(())
}

/// How a [`Key`] marks its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A short line (a line series).
    Line,
    /// A short dashed line (a reference series).
    Dashed,
    /// A filled square (a bar).
    Box,
}

/// One entry of a [`legend`].
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// The text.
    pub name: String,
    /// The colour.
    pub color: RGBColor,
    /// How the colour is shown.
    pub mark: Mark,
}

/// Draws `keys` in `area` from its top left: one a row, or side by side
/// `across` pixels apart.
pub fn legend(area: &Area<'_>, keys: &[Key], across: Option<i32>) -> DrawResult {
    let text = TextStyle::from(font(10.0)).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, k) in keys.iter().enumerate() {
        let i = i32::try_from(i).unwrap_or(i32::MAX);
        let (x, y) = match across {
            Some(dx) => (20 + dx.saturating_mul(i), 9),
            None => (20, 9 + 14 * i),
        };
        match k.mark {
            Mark::Line => {
                area.draw(&PathElement::new(
                    vec![(x, y), (x + 24, y)],
                    k.color.stroke_width(2),
                ))?;
            }
            Mark::Dashed => {
                area.draw(&DashedPathElement::new(
                    vec![(x, y), (x + 24, y)],
                    5,
                    3,
                    k.color.stroke_width(2),
                ))?;
            }
            Mark::Box => {
                area.draw(&Rectangle::new(
                    [(x + 7, y - 5), (x + 17, y + 5)],
                    k.color.filled(),
                ))?;
            }
        }
        area.draw(&Text::new(k.name.clone(), (x + 30, y), text.clone()))?;
    }
    Ok(())
}

/// Checks that `svg` parses as XML with one `<svg>` root.
#[cfg(test)]
pub(crate) fn check_well_formed(svg: &str) -> Result<(), String> {
    let doc = roxmltree::Document::parse(svg).map_err(|e| e.to_string())?;
    let root = doc.root_element();
    if root.tag_name().name() != "svg" {
        return Err(format!("the root element is <{}>", root.tag_name().name()));
    }
    Ok(())
}

/// The text of every `<text>` element of `svg`, in order.
#[cfg(test)]
pub(crate) fn texts(svg: &str) -> Vec<String> {
    roxmltree::Document::parse(svg)
        .map(|doc| {
            doc.descendants()
                .filter(|n| n.has_tag_name("text"))
                .map(|n| n.text().unwrap_or("").trim().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_values_are_short_and_a_missing_one_says_so() {
        assert_eq!(bar_value(0.5), "0.50");
        assert_eq!(bar_value(99.994), "99.99");
        assert_eq!(bar_value(3543.45), "3543");
        assert_eq!(bar_value(f64::NAN), "not run");
    }

    fn sample() -> String {
        let series = vec![
            Series {
                name: "a <&> \"b\"".into(),
                color: PALETTE[1],
                sorted: (1..=1000).map(|i| 1.0 + i as f64 / 1000.0).collect(),
                dashed: false,
            },
            Series {
                name: "empty".into(),
                color: PALETTE[2],
                sorted: vec![],
                dashed: true,
            },
        ];
        let bars = vec![
            Bar {
                label: "x".into(),
                value: 1.5,
                color: PALETTE[3],
            },
            Bar {
                label: "nan".into(),
                value: f64::NAN,
                color: PALETTE[4],
            },
        ];
        figure("sample.svg", (960, 260), Some("sample"), |area| {
            let panels = area.split_evenly((1, 3));
            cdf_chart(&panels[0], "CDF", "x", &series, (0.9, 3.0), true)?;
            bar_chart(&panels[1], "bars", "y", &bars, 1.0, Some(1.0))?;
            line_chart(
                &panels[2],
                "lines",
                &Axes {
                    x: (1.0, 3.0),
                    y: (0.0, 1.0),
                    x_ticks: &[1.0, 3.0],
                    y_ticks: &[0.0, 1.0],
                    x_label: "step",
                    y_label: "share",
                    y_format: &|v| format!("{:.0}%", 100.0 * v),
                },
                &[Line {
                    color: PALETTE[5],
                    points: vec![(1.0, 0.5), (2.0, f64::NAN), (3.0, 0.25)],
                }],
            )?;
            legend(
                &panels[2],
                &[Key {
                    name: "k1".into(),
                    color: PALETTE[1],
                    mark: Mark::Box,
                }],
                Some(100),
            )
        })
        .unwrap()
    }

    #[test]
    fn svg_output_is_well_formed_and_escaped() {
        let s = sample();
        check_well_formed(&s).unwrap();
        let t = texts(&s);
        for want in [
            "sample",
            "CDF",
            "a <&> \"b\"",
            "empty",
            "bars",
            "1.50",
            "not run",
            "nan",
            "lines",
            "100%",
            "k1",
        ] {
            assert!(t.iter().any(|x| x == want), "{want} not in {t:?}");
        }
        assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
    }

    #[test]
    fn svg_checker_rejects_broken_documents() {
        assert!(check_well_formed("<svg><g></svg>").is_err());
        assert!(check_well_formed("<svg><rect/>").is_err());
        assert!(check_well_formed("<g></g>").is_err());
        assert!(check_well_formed("<svg><text>a & b</text></svg>").is_err());
        assert!(check_well_formed("<svg x=\"1></svg>").is_err());
        assert!(check_well_formed("<svg><text>a &amp; b</text></svg>").is_ok());
    }

    #[test]
    fn svg_ticks_are_nice() {
        assert_eq!(
            log_ticks(1.0, 10.0),
            vec![1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0]
        );
        assert!(log_ticks(0.9, 100.0).len() <= 9);
        assert_eq!(nice_step(0.23), 0.5);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(tick_label(1.5), "1.5");
        assert_eq!(tick_label(2.0), "2");
        let steps = cdf_steps(&[1.0, 2.0, 50.0], 0.5, 10.0);
        assert_eq!(steps.first(), Some(&(1.0, 0.0)));
        assert_eq!(steps.last(), Some(&(10.0, 1.0)));
    }
}
