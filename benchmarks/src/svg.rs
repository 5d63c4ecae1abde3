//! Hand-written SVG for the benchmark plots: a few primitives ([`Svg`]) and
//! two charts, a CDF line chart with a logarithmic x axis
//! ([`cdf_chart`]) and a bar chart ([`bar_chart`]).
//!
//! No dependency: the output is plain SVG 1.1 text that browsers and
//! `rsvg-convert` render. Every attribute value that comes from data is
//! escaped, and every number is written with a fixed number of decimals so
//! the same input gives the same file.

use std::fmt::Write as _;

/// Colours for series, in order (colour-blind-safe, Okabe–Ito).
pub const PALETTE: [&str; 8] = [
    "#000000", "#e69f00", "#56b4e9", "#009e73", "#d55e00", "#0072b2", "#cc79a7", "#f0e442",
];

/// Escapes text for an SVG text node or attribute value.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// Horizontal alignment of a text's anchor point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// The text starts at the point.
    Start,
    /// The text is centred on the point.
    Middle,
    /// The text ends at the point.
    End,
}

impl Anchor {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Middle => "middle",
            Self::End => "end",
        }
    }
}

/// An SVG document being written.
#[derive(Debug)]
pub struct Svg {
    out: String,
}

impl Svg {
    /// A `width` × `height` document (user units = pixels) on a white
    /// background.
    pub fn new(width: f64, height: f64) -> Self {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{width:.0}\" \
             height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" \
             font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"11\">"
        );
        let mut s = Self { out };
        s.rect(0.0, 0.0, width, height, "#ffffff", None);
        s
    }

    /// A rectangle, optionally outlined.
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, stroke: Option<&str>) {
        let _ = write!(
            self.out,
            "<rect x=\"{x:.2}\" y=\"{y:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{}\"",
            w.max(0.0),
            h.max(0.0),
            escape(fill)
        );
        if let Some(s) = stroke {
            let _ = write!(self.out, " stroke=\"{}\" stroke-width=\"1\"", escape(s));
        }
        self.out.push_str("/>\n");
    }

    /// A straight line; `dash` is an SVG dash array such as `"4 3"`.
    #[allow(clippy::too_many_arguments)]
    pub fn line(
        &mut self,
        x1: f64,
        y1: f64,
        x2: f64,
        y2: f64,
        stroke: &str,
        width: f64,
        dash: Option<&str>,
    ) {
        let _ = write!(
            self.out,
            "<line x1=\"{x1:.2}\" y1=\"{y1:.2}\" x2=\"{x2:.2}\" y2=\"{y2:.2}\" stroke=\"{}\" \
             stroke-width=\"{width:.2}\"",
            escape(stroke)
        );
        if let Some(d) = dash {
            let _ = write!(self.out, " stroke-dasharray=\"{}\"", escape(d));
        }
        self.out.push_str("/>\n");
    }

    /// An open polyline through `points`; `dash` as for [`Svg::line`].
    pub fn polyline(
        &mut self,
        points: &[(f64, f64)],
        stroke: &str,
        width: f64,
        dash: Option<&str>,
    ) {
        if points.is_empty() {
            return;
        }
        self.out.push_str("<polyline points=\"");
        for (i, (x, y)) in points.iter().enumerate() {
            if i > 0 {
                self.out.push(' ');
            }
            let _ = write!(self.out, "{x:.2},{y:.2}");
        }
        let _ = write!(
            self.out,
            "\" fill=\"none\" stroke=\"{}\" stroke-width=\"{width:.2}\" stroke-linejoin=\"round\"",
            escape(stroke)
        );
        if let Some(d) = dash {
            let _ = write!(self.out, " stroke-dasharray=\"{}\"", escape(d));
        }
        self.out.push_str("/>\n");
    }

    /// A text label; `size` in pixels, `bold` for titles.
    pub fn text(&mut self, x: f64, y: f64, s: &str, anchor: Anchor, size: f64, bold: bool) {
        let _ = writeln!(
            self.out,
            "<text x=\"{x:.2}\" y=\"{y:.2}\" text-anchor=\"{}\" font-size=\"{size:.1}\"{}>{}</text>",
            anchor.as_str(),
            if bold { " font-weight=\"bold\"" } else { "" },
            escape(s)
        );
    }

    /// A text label rotated 90° counter-clockwise about its anchor point (a
    /// y-axis title).
    pub fn vtext(&mut self, x: f64, y: f64, s: &str, size: f64) {
        let _ = writeln!(
            self.out,
            "<text x=\"{x:.2}\" y=\"{y:.2}\" text-anchor=\"middle\" font-size=\"{size:.1}\" \
             transform=\"rotate(-90 {x:.2} {y:.2})\">{}</text>",
            escape(s)
        );
    }

    /// Closes the document and returns its text.
    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

/// Where a chart goes, in document coordinates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Frame {
    /// Left edge.
    pub x: f64,
    /// Top edge.
    pub y: f64,
    /// Width.
    pub w: f64,
    /// Height.
    pub h: f64,
}

/// Margins a chart keeps inside its frame for titles, ticks and labels.
const LEFT: f64 = 46.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 22.0;
const BOTTOM: f64 = 34.0;

/// One line of a [`cdf_chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Stroke colour.
    pub color: String,
    /// Sorted sample values; the chart draws their empirical CDF.
    pub sorted: Vec<f64>,
    /// Dashed (a reference line, drawn over the others so that a series
    /// equal to it still shows).
    pub dashed: bool,
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

/// Draws the empirical CDFs of `series` in `frame`: x logarithmic from
/// `x_lo` to `x_hi` (values outside are clamped to the edges), y the
/// fraction of samples at or below x, with a legend in the lower right.
pub fn cdf_chart(
    svg: &mut Svg,
    frame: Frame,
    title: &str,
    x_label: &str,
    series: &[Series],
    (x_lo, x_hi): (f64, f64),
) {
    let (x0, y0) = (frame.x + LEFT, frame.y + TOP);
    let (pw, ph) = (frame.w - LEFT - RIGHT, frame.h - TOP - BOTTOM);
    let x_lo = x_lo.max(1e-9);
    let x_hi = x_hi.max(x_lo * 1.01);
    let (l_lo, l_hi) = (x_lo.ln(), x_hi.ln());
    let sx = |v: f64| x0 + (v.clamp(x_lo, x_hi).ln() - l_lo) / (l_hi - l_lo) * pw;
    let sy = |f: f64| y0 + (1.0 - f.clamp(0.0, 1.0)) * ph;
    svg.text(
        frame.x + frame.w / 2.0,
        frame.y + 14.0,
        title,
        Anchor::Middle,
        12.0,
        true,
    );
    svg.rect(x0, y0, pw, ph, "#ffffff", Some("#888888"));
    for f in [0.0, 0.25, 0.5, 0.75, 0.9, 1.0] {
        let y = sy(f);
        svg.line(x0, y, x0 + pw, y, "#e4e4e4", 1.0, None);
        svg.text(x0 - 4.0, y + 4.0, &tick_label(f), Anchor::End, 10.0, false);
    }
    for v in log_ticks(x_lo, x_hi) {
        let x = sx(v);
        svg.line(x, y0, x, y0 + ph, "#e4e4e4", 1.0, None);
        svg.text(
            x,
            y0 + ph + 13.0,
            &tick_label(v),
            Anchor::Middle,
            10.0,
            false,
        );
    }
    svg.text(
        x0 + pw / 2.0,
        y0 + ph + 27.0,
        x_label,
        Anchor::Middle,
        10.5,
        false,
    );
    svg.vtext(frame.x + 12.0, y0 + ph / 2.0, "CDF", 10.5);
    let solid_first = series
        .iter()
        .filter(|s| !s.dashed)
        .chain(series.iter().filter(|s| s.dashed));
    for s in solid_first {
        let n = s.sorted.len();
        if n == 0 {
            continue;
        }
        // Step function, thinned to at most ~400 steps.
        let stride = n.div_ceil(400).max(1);
        let mut pts = vec![(sx(s.sorted[0]), sy(0.0))];
        let mut i = 0;
        while i < n {
            let j = (i + stride).min(n) - 1;
            let x = sx(s.sorted[j]);
            pts.push((x, sy(i as f64 / n as f64)));
            pts.push((x, sy((j + 1) as f64 / n as f64)));
            i = j + 1;
        }
        let dash = s.dashed.then_some("5 4");
        svg.polyline(&pts, &s.color, if s.dashed { 2.0 } else { 1.6 }, dash);
    }
    let (lx, mut ly) = (
        x0 + pw - 8.0,
        y0 + ph - 8.0 - 13.0 * (series.len() as f64 - 1.0),
    );
    for s in series {
        let dash = s.dashed.then_some("5 3");
        svg.line(
            lx - 86.0,
            ly - 4.0,
            lx - 70.0,
            ly - 4.0,
            &s.color,
            2.5,
            dash,
        );
        svg.text(lx - 66.0, ly, &s.name, Anchor::Start, 10.0, false);
        ly += 13.0;
    }
}

/// One bar of a [`bar_chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// Label under the bar.
    pub label: String,
    /// Height in data units.
    pub value: f64,
    /// Fill colour.
    pub color: String,
}

/// Draws `bars` in `frame`, y from 0 to `y_max` (or the largest bar, if
/// larger), each bar labelled with its value, with a dashed reference line
/// at `reference` if given.
pub fn bar_chart(
    svg: &mut Svg,
    frame: Frame,
    title: &str,
    y_label: &str,
    bars: &[Bar],
    y_max: f64,
    reference: Option<f64>,
) {
    let (x0, y0) = (frame.x + LEFT, frame.y + TOP);
    let (pw, ph) = (frame.w - LEFT - RIGHT, frame.h - TOP - BOTTOM);
    let top = bars
        .iter()
        .map(|b| b.value)
        .filter(|v| v.is_finite())
        .fold(y_max, f64::max)
        .max(1e-9)
        * 1.08;
    let sy = |v: f64| y0 + ph - (v.clamp(0.0, top) / top) * ph;
    svg.text(
        frame.x + frame.w / 2.0,
        frame.y + 14.0,
        title,
        Anchor::Middle,
        12.0,
        true,
    );
    svg.rect(x0, y0, pw, ph, "#ffffff", Some("#888888"));
    let step = nice_step(top / 5.0);
    let mut v = 0.0;
    while v <= top {
        let y = sy(v);
        svg.line(x0, y, x0 + pw, y, "#e4e4e4", 1.0, None);
        svg.text(x0 - 4.0, y + 4.0, &tick_label(v), Anchor::End, 10.0, false);
        v += step;
    }
    svg.vtext(frame.x + 12.0, y0 + ph / 2.0, y_label, 10.5);
    if let Some(r) = reference
        && r <= top
    {
        svg.line(x0, sy(r), x0 + pw, sy(r), "#555555", 1.0, Some("4 3"));
    }
    let n = bars.len().max(1) as f64;
    let slot = pw / n;
    for (i, b) in bars.iter().enumerate() {
        let x = x0 + slot * i as f64;
        let v = if b.value.is_finite() { b.value } else { 0.0 };
        let (bx, bw) = (x + slot * 0.15, slot * 0.7);
        svg.rect(bx, sy(v), bw, sy(0.0) - sy(v), &b.color, None);
        svg.text(
            x + slot / 2.0,
            sy(v) - 3.0,
            &format!("{v:.2}"),
            Anchor::Middle,
            9.5,
            false,
        );
        svg.text(
            x + slot / 2.0,
            y0 + ph + 13.0,
            &b.label,
            Anchor::Middle,
            9.5,
            false,
        );
    }
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

/// Checks that `svg` is one well-formed `<svg>` element: every tag closed
/// in order, attribute quotes balanced, no stray `<` or `&` in text.
/// Enough to catch a writer bug; not a full XML parser.
#[cfg(test)]
pub(crate) fn check_well_formed(svg: &str) -> Result<(), String> {
    let s = svg.trim();
    if !s.starts_with("<svg") {
        return Err("does not start with <svg".into());
    }
    let mut stack: Vec<&str> = Vec::new();
    let mut rest = s;
    let mut seen_root = false;
    while let Some(lt) = rest.find('<') {
        let text = &rest[..lt];
        if let Some(a) = text.find('&') {
            let ent = &text[a..];
            if !["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                .iter()
                .any(|e| ent.starts_with(e))
            {
                return Err(format!("bad entity in text: {}", &ent[..ent.len().min(10)]));
            }
        }
        if seen_root && stack.is_empty() && !text.trim().is_empty() {
            return Err("text after the root element".into());
        }
        let gt = rest[lt..]
            .find('>')
            .ok_or_else(|| "unterminated tag".to_owned())?
            + lt;
        let tag = &rest[lt + 1..gt];
        if tag.contains('<') {
            return Err(format!("'<' inside tag {tag:.40}"));
        }
        if tag.matches('"').count() % 2 != 0 {
            return Err(format!("unbalanced quotes in tag {tag:.40}"));
        }
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(open) if open == name.trim() => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().unwrap_or("");
            if seen_root && stack.is_empty() {
                return Err("second root element".into());
            }
            stack.push(name);
            seen_root = true;
        }
        rest = &rest[gt + 1..];
    }
    if !stack.is_empty() {
        return Err(format!("unclosed elements {stack:?}"));
    }
    if !rest.trim().is_empty() {
        return Err("trailing text".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> String {
        let mut svg = Svg::new(640.0, 240.0);
        let series = vec![
            Series {
                name: "a <&> \"b\"".into(),
                color: PALETTE[1].into(),
                sorted: (1..=1000).map(|i| 1.0 + i as f64 / 1000.0).collect(),
                dashed: false,
            },
            Series {
                name: "empty".into(),
                color: PALETTE[2].into(),
                sorted: vec![],
                dashed: true,
            },
        ];
        cdf_chart(
            &mut svg,
            Frame {
                x: 0.0,
                y: 0.0,
                w: 320.0,
                h: 240.0,
            },
            "CDF",
            "x",
            &series,
            (0.9, 3.0),
        );
        let bars = vec![
            Bar {
                label: "x".into(),
                value: 1.5,
                color: PALETTE[3].into(),
            },
            Bar {
                label: "nan".into(),
                value: f64::NAN,
                color: PALETTE[4].into(),
            },
        ];
        bar_chart(
            &mut svg,
            Frame {
                x: 320.0,
                y: 0.0,
                w: 320.0,
                h: 240.0,
            },
            "bars",
            "y",
            &bars,
            1.0,
            Some(1.0),
        );
        svg.finish()
    }

    #[test]
    fn svg_output_is_well_formed_and_escaped() {
        let s = sample();
        check_well_formed(&s).unwrap();
        assert!(s.starts_with("<svg"));
        assert!(s.contains("a &lt;&amp;&gt; &quot;b&quot;"));
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
    }
}
