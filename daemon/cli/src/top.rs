//! `sluice top`: a live view of a running daemon, drawn from its status
//! document ([`crate::status::query_all`]) a few times a second.
//!
//! Two pure parts, tested without a terminal:
//!
//! - [`Window`] keeps the status documents of the last few seconds and
//!   turns the difference of the daemon's latency histograms between the
//!   newest and the oldest of them into per-model rates and percentiles
//!   ([`LatencyRow`]), estimated within a bucket as Prometheus'
//!   `histogram_quantile` does;
//! - [`render`] draws one [`Screen`] (a status, its latency rows, the
//!   clients' scroll position, and whether the daemon has gone away) into a
//!   ratatui [`Buffer`].
//!
//! The command (`src/command/top.rs`) owns the terminal, the keys and the
//! polling thread.
//!
//! Client and model names come from other processes: control characters in
//! them are drawn as `?`, so a name cannot move the cursor or change the
//! terminal, and a name wider than its column ends in `…`.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, Widget};
use sluice_service::{LatencyStatus, Status};
use unicode_width::UnicodeWidthChar;

/// Width of the name columns (clients and models), in terminal cells.
pub const NAME_WIDTH: usize = 24;
/// Most rows the models table takes; more models scroll off its end (the
/// title says how many are shown).
pub const MODEL_ROWS: usize = 12;
/// Most lines the partitions box takes.
pub const PARTITION_LINES: usize = 8;

/// The latency percentiles [`LatencyRow`] holds.
pub const QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

/// One model in one priority class over the window.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyRow {
    /// The model's name.
    pub model: String,
    /// `rt` or `be`.
    pub priority: String,
    /// OK completions in the window.
    pub completed: u64,
    /// Those per second of the window.
    pub per_s: f64,
    /// Latency at each of [`QUANTILES`], ns; `None` without completions in
    /// the window; `f64::INFINITY` above the largest bucket bound.
    pub quantiles: [Option<f64>; 3],
}

/// The status documents of the last `span` (plus the one just before it,
/// the baseline the newest is compared with).
#[derive(Debug)]
pub struct Window {
    span: Duration,
    samples: VecDeque<(Instant, Sample)>,
}

#[derive(Debug)]
struct Sample {
    pid: u32,
    uptime_s: f64,
    bounds: Vec<u64>,
    latency: Vec<LatencyStatus>,
}

impl Window {
    /// An empty window of `span`.
    pub fn new(span: Duration) -> Self {
        Self {
            span,
            samples: VecDeque::new(),
        }
    }

    /// Adds the status read at `at`. A daemon that restarted (another pid,
    /// or less uptime) starts the window afresh.
    pub fn push(&mut self, at: Instant, s: &Status) {
        if let Some((_, last)) = self.samples.back()
            && (last.pid != s.pid || last.uptime_s > s.uptime_s)
        {
            self.samples.clear();
        }
        self.samples.push_back((
            at,
            Sample {
                pid: s.pid,
                uptime_s: s.uptime_s,
                bounds: s.latency_bounds_ns.clone(),
                latency: s.latency.clone(),
            },
        ));
        // Keep one sample at or before `at - span` as the baseline.
        while self.samples.len() > 2 && at.duration_since(self.samples[1].0) >= self.span {
            self.samples.pop_front();
        }
    }

    /// Time between the baseline and the newest sample: what the rows
    /// cover (less than the span while `top` has run less than it).
    pub fn covered(&self) -> Duration {
        match (self.samples.front(), self.samples.back()) {
            (Some((a, _)), Some((b, _))) => b.duration_since(*a),
            _ => Duration::ZERO,
        }
    }

    /// Each (model, class) of the newest sample, with what completed since
    /// the baseline; empty until there are two samples.
    pub fn rows(&self) -> Vec<LatencyRow> {
        let (Some((_, old)), Some((_, new))) = (self.samples.front(), self.samples.back()) else {
            return Vec::new();
        };
        if self.samples.len() < 2 {
            return Vec::new();
        }
        let secs = self.covered().as_secs_f64();
        let before: BTreeMap<(&str, &str), &[u64]> = old
            .latency
            .iter()
            .map(|l| ((l.model.as_str(), l.priority.as_str()), l.counts.as_slice()))
            .collect();
        new.latency
            .iter()
            .map(|l| {
                let base = before
                    .get(&(l.model.as_str(), l.priority.as_str()))
                    .copied()
                    .unwrap_or_default();
                let counts: Vec<u64> = l
                    .counts
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| n.saturating_sub(base.get(i).copied().unwrap_or(0)))
                    .collect();
                let completed: u64 = counts.iter().sum();
                LatencyRow {
                    model: l.model.clone(),
                    priority: l.priority.clone(),
                    completed,
                    per_s: if secs > 0.0 {
                        completed as f64 / secs
                    } else {
                        0.0
                    },
                    quantiles: QUANTILES.map(|q| quantile(&new.bounds, &counts, q)),
                }
            })
            .collect()
    }
}

/// The `q` quantile of a histogram (`counts[i]` observations up to
/// `bounds[i]`, the last bucket unbounded), interpolated linearly within
/// its bucket (the first bucket from 0). `None` when empty;
/// `f64::INFINITY` when it falls in the unbounded bucket.
pub fn quantile(bounds: &[u64], counts: &[u64], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut below = 0u64;
    for (i, &n) in counts.iter().enumerate() {
        if n > 0 && (below + n) as f64 >= rank {
            let Some(&upper) = bounds.get(i) else {
                return Some(f64::INFINITY);
            };
            let lower = if i == 0 { 0 } else { bounds[i - 1] };
            let frac = ((rank - below as f64) / n as f64).clamp(0.0, 1.0);
            return Some(lower as f64 + (upper - lower) as f64 * frac);
        }
        below += n;
    }
    Some(f64::INFINITY)
}

/// A latency for the screen: `850 µs`, `12.3 ms`, `1.20 s`, `-` for none,
/// `> 10 s` above the largest bound.
pub fn fmt_latency(ns: Option<f64>, largest_bound_ns: u64) -> String {
    match ns {
        None => "-".to_owned(),
        Some(v) if v.is_infinite() => format!("> {}", fmt_ns(largest_bound_ns as f64)),
        Some(v) => fmt_ns(v),
    }
}

fn fmt_ns(v: f64) -> String {
    if v < 1e3 {
        format!("{v:.0} ns")
    } else if v < 1e6 {
        format!("{:.0} µs", v / 1e3)
    } else if v < 1e9 {
        format!("{:.1} ms", v / 1e6)
    } else {
        format!("{:.2} s", v / 1e9)
    }
}

/// `s` for a column `width` cells wide: control characters as `?`, and cut
/// with a trailing `…` when wider.
pub fn fit(s: &str, width: usize) -> String {
    let clean: String = s
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    let w = |c: char| c.width().unwrap_or(0);
    if clean.chars().map(w).sum::<usize>() <= width {
        return clean;
    }
    let mut out = String::new();
    let mut used = 0;
    for c in clean.chars() {
        if used + w(c) + 1 > width {
            break;
        }
        used += w(c);
        out.push(c);
    }
    out.push('…');
    out
}

/// What one frame shows.
#[derive(Debug, Clone, Copy)]
pub struct Screen<'a> {
    /// The last status read (kept on screen while the daemon is gone).
    pub status: Option<&'a Status>,
    /// Its latency rows ([`Window::rows`]).
    pub latency: &'a [LatencyRow],
    /// What the latency rows cover ([`Window::covered`]).
    pub covered: Duration,
    /// The refresh interval.
    pub interval: Duration,
    /// Why the last query failed, when it did.
    pub gone: Option<&'a str>,
    /// The first client row asked for (clamped by [`render`]).
    pub scroll: usize,
}

/// What [`render`] drew of the clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drawn {
    /// The first client row shown.
    pub scroll: usize,
    /// Client rows that fit.
    pub client_rows: usize,
}

const DIM: Style = Style::new().fg(Color::DarkGray);

/// Draws `screen` into `area` of `buf`: the daemon's header, its models
/// with latency over the window, its GPU partitions, and its clients from
/// row `screen.scroll`.
pub fn render(screen: &Screen<'_>, area: Rect, buf: &mut Buffer) -> Drawn {
    let s = screen.status;
    let model_rows = s.map_or(0, |s| model_table_rows(s, screen.latency).len());
    let parts_text = s.map(partition_lines).unwrap_or_default();
    let [head, models, parts, clients] = Layout::vertical([
        Constraint::Length(if screen.gone.is_some() { 4 } else { 3 }),
        Constraint::Length(model_rows.clamp(1, MODEL_ROWS) as u16 + 3),
        Constraint::Length(parts_text.len().clamp(1, PARTITION_LINES) as u16 + 2),
        Constraint::Min(4),
    ])
    .areas(area);
    render_header(screen, head, buf);
    let Some(s) = s else {
        return Drawn {
            scroll: 0,
            client_rows: 0,
        };
    };
    render_models(screen, s, models, buf);
    let lines: Vec<Line> = parts_text.into_iter().map(Line::from).collect();
    Paragraph::new(lines)
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(" GPU partitions "),
        )
        .render(parts, buf);
    render_clients(screen, s, clients, buf)
}

fn render_header(screen: &Screen<'_>, area: Rect, buf: &mut Buffer) {
    let mut lines = Vec::new();
    match screen.status {
        Some(s) => {
            lines.push(Line::from(fit(
                &format!(
                    "sluiced pid {} v{} · up {} · device: {} · socket {}",
                    s.pid,
                    s.version,
                    fmt_uptime(s.uptime_s),
                    s.device,
                    s.socket
                ),
                area.width as usize,
            )));
            lines.push(Line::from(format!(
                "requests: {} submitted, {} completed, {} errors · on the device: {} · \
                 deadline missed: {} · clients: {} · sessions refused: {}",
                s.submitted,
                s.completed,
                s.errors,
                s.device_queued,
                s.deadline_missed.total,
                s.clients_total.max(s.clients.len() as u64),
                s.refused
            )));
        }
        None => {
            lines.push(Line::from("sluiced: not reached yet"));
            lines.push(Line::from(""));
        }
    }
    let [top, bottom] = Layout::vertical([Constraint::Length(2), Constraint::Min(1)]).areas(area);
    Paragraph::new(lines).render(top, buf);
    match screen.gone {
        Some(why) => {
            // The banner wraps over its lines; a reason too long for them
            // is cut, never the ", retrying" after it.
            let (head, tail) = ("daemon gone: ", ", retrying");
            let room = (bottom.width as usize * bottom.height as usize)
                .saturating_sub(head.len() + tail.len() + 1);
            let text = format!("{head}{}{tail}", fit(why, room));
            let lines: Vec<Line> = hard_wrap(&text, bottom.width as usize)
                .into_iter()
                .map(Line::from)
                .collect();
            Paragraph::new(lines)
                .style(
                    Style::new()
                        .fg(Color::White)
                        .bg(Color::Red)
                        .add_modifier(Modifier::BOLD),
                )
                .render(bottom, buf);
        }
        None => Paragraph::new(Line::styled(
            format!(
                "every {} ms · latency of OK requests over the last {:.1} s · q quit · \
                 ↑↓ PgUp PgDn Home End scroll clients",
                screen.interval.as_millis(),
                screen.covered.as_secs_f64()
            ),
            DIM,
        ))
        .render(bottom, buf),
    }
}

/// `s` cut into lines of at most `width` cells, anywhere (a reason is one
/// long line of paths and OS errors, not prose).
fn hard_wrap(s: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    let mut used = 0;
    for c in s.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > width.max(1) {
            lines.push(String::new());
            used = 0;
        }
        used += w;
        if let Some(l) = lines.last_mut() {
            l.push(c);
        }
    }
    lines
}

fn fmt_uptime(s: f64) -> String {
    let s = s.max(0.0) as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// One row of the models table: (model, version, class, per second, p50,
/// p90, p99, deadline missed, waiting).
type ModelRow = [String; 9];

fn model_table_rows(s: &Status, latency: &[LatencyRow]) -> Vec<ModelRow> {
    let largest = s.latency_bounds_ns.last().copied().unwrap_or(0);
    let version: BTreeMap<&str, u32> = s
        .model_versions
        .iter()
        .map(|m| (m.name.as_str(), m.version))
        .collect();
    let waiting: BTreeMap<&str, u64> = s
        .cluster
        .iter()
        .flat_map(|c| &c.models)
        .map(|m| (m.name.as_str(), m.queued))
        .collect();
    let mut rows = Vec::new();
    for name in &s.models {
        let mine: Vec<&LatencyRow> = latency.iter().filter(|r| &r.model == name).collect();
        let first = |i: usize| i == 0;
        let model_cols = |i: usize| {
            if first(i) {
                (
                    fit(name, NAME_WIDTH),
                    version
                        .get(name.as_str())
                        .map_or_else(String::new, |v| format!("v{v}")),
                    s.deadline_missed
                        .by_model
                        .get(name)
                        .copied()
                        .unwrap_or(0)
                        .to_string(),
                    waiting
                        .get(name.as_str())
                        .map_or_else(|| "-".to_owned(), u64::to_string),
                )
            } else {
                Default::default()
            }
        };
        if mine.is_empty() {
            let (n, v, missed, wait) = model_cols(0);
            let dash = || "-".to_owned();
            rows.push([n, v, dash(), dash(), dash(), dash(), dash(), missed, wait]);
        }
        for (i, r) in mine.into_iter().enumerate() {
            let (n, v, missed, wait) = model_cols(i);
            rows.push([
                n,
                v,
                r.priority.clone(),
                format!("{:.1}", r.per_s),
                fmt_latency(r.quantiles[0], largest),
                fmt_latency(r.quantiles[1], largest),
                fmt_latency(r.quantiles[2], largest),
                missed,
                wait,
            ]);
        }
    }
    rows
}

fn render_models(screen: &Screen<'_>, s: &Status, area: Rect, buf: &mut Buffer) {
    let rows = model_table_rows(s, screen.latency);
    let fits = (area.height as usize).saturating_sub(3);
    let title = if rows.len() > fits {
        format!(
            " models: {} ({} of {} rows shown) ",
            s.models.len(),
            fits,
            rows.len()
        )
    } else {
        format!(" models: {} ", s.models.len())
    };
    let header = Row::new(
        [
            "model", "ver", "class", "done/s", "p50", "p90", "p99", "missed", "waiting",
        ]
        .map(Cell::from),
    )
    .style(Style::new().add_modifier(Modifier::BOLD));
    let body: Vec<Row> = if rows.is_empty() {
        vec![Row::new([Cell::from("(no models served)")])]
    } else {
        rows.into_iter().take(fits).map(Row::new).collect()
    };
    Table::new(
        body,
        [
            Constraint::Length(NAME_WIDTH as u16),
            Constraint::Length(5),
            Constraint::Length(5),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(7),
            Constraint::Length(7),
        ],
    )
    .header(header)
    .block(Block::default().borders(Borders::ALL).title(title))
    .render(area, buf);
}

/// The partitions box's lines: one per partition with `[cluster]`, else
/// one saying there are none.
fn partition_lines(s: &Status) -> Vec<String> {
    let Some(c) = &s.cluster else {
        return vec![format!(
            "one device, not partitioned ({}); partitions are shown for [cluster]",
            s.device
        )];
    };
    let mut out = Vec::new();
    for g in &c.gpus {
        if g.partitions.is_empty() {
            out.push(format!(
                "GPU {} ({}, {} CUs): idle, no partition",
                g.index, g.profile, g.compute_units
            ));
        }
        for p in &g.partitions {
            let models: Vec<String> = p
                .models
                .iter()
                .map(|(m, b, r)| format!("{} (batch ≤{b}, {r:.1}/s)", fit(m, NAME_WIDTH)))
                .collect();
            out.push(format!(
                "GPU {} ({}): {:>3} % CUs {}..{}{} · {} running · {}",
                g.index,
                g.profile,
                p.size_pct,
                p.first_cu,
                p.first_cu + p.cus,
                if p.draining { " DRAINING" } else { "" },
                p.in_flight,
                if models.is_empty() {
                    "no models".to_owned()
                } else {
                    models.join(", ")
                }
            ));
        }
    }
    if out.is_empty() {
        out.push(format!("planner {}: no GPUs", c.planner));
    }
    out
}

fn render_clients(screen: &Screen<'_>, s: &Status, area: Rect, buf: &mut Buffer) -> Drawn {
    let fits = (area.height as usize).saturating_sub(3);
    let n = s.clients.len();
    let scroll = screen.scroll.min(n.saturating_sub(fits));
    let shown = n.saturating_sub(scroll).min(fits);
    let title = if n == 0 {
        " clients: 0 ".to_owned()
    } else if shown < n {
        format!(" clients {}–{} of {} ", scroll + 1, scroll + shown, n)
    } else {
        format!(" clients: {n} ")
    };
    let header = Row::new(
        [
            "id",
            "name",
            "pid",
            "uid",
            "submitted",
            "completed",
            "errors",
            "on dev",
            "connected",
        ]
        .map(Cell::from),
    )
    .style(Style::new().add_modifier(Modifier::BOLD));
    let body: Vec<Row> = if n == 0 {
        vec![Row::new([
            Cell::from(""),
            Cell::from("(no clients connected)"),
        ])]
    } else {
        s.clients
            .iter()
            .skip(scroll)
            .take(fits)
            .map(|c| {
                Row::new([
                    c.id.to_string(),
                    fit(&c.name, NAME_WIDTH),
                    c.pid.to_string(),
                    c.uid.to_string(),
                    c.submitted.to_string(),
                    c.completed.to_string(),
                    c.errors.to_string(),
                    c.on_device.to_string(),
                    fmt_uptime(c.connected_s),
                ])
            })
            .collect()
    };
    Table::new(
        body,
        [
            Constraint::Length(6),
            Constraint::Length(NAME_WIDTH as u16),
            Constraint::Length(8),
            Constraint::Length(6),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Length(6),
            Constraint::Length(9),
        ],
    )
    .header(header)
    .block(Block::default().borders(Borders::ALL).title(title))
    .render(area, buf);
    Drawn {
        scroll,
        client_rows: fits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use sluice_service::server::ClientStatus;

    const BOUNDS: [u64; 4] = [1_000, 10_000, 100_000, 1_000_000];

    /// A daemon's status with `clients` clients (`client-<id>`) and the
    /// models `models`.
    fn status(clients: u32, models: &[&str]) -> Status {
        let mut s: Status = serde_json::from_str(
            r#"{"pid":7,"version":"0.1.0","protocol":3,"uptime_s":75.0,"socket":"/run/s.sock",
            "device":"sim (mi50)","dispatcher":"d","models":[],"device_queued":2,
            "submitted":10,"completed":9,"errors":1,"refused":0,"dropped_clients":0,
            "wakes":0,"parks":0,"clients":[]}"#,
        )
        .unwrap();
        s.models = models.iter().map(|m| (*m).to_owned()).collect();
        s.latency_bounds_ns = BOUNDS.to_vec();
        s.clients = (1..=clients)
            .map(|id| client(id, &format!("client-{id}")))
            .collect();
        s.clients_total = u64::from(clients);
        s
    }

    fn client(id: u32, name: &str) -> ClientStatus {
        ClientStatus {
            id,
            name: name.to_owned(),
            pid: 1000 + id as i32,
            uid: 1000,
            connected_s: 5.0,
            submitted: 42,
            completed: 40,
            errors: 3,
            on_device: 1,
        }
    }

    fn draw(screen: &Screen<'_>, w: u16, h: u16) -> (Vec<String>, Drawn) {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        let mut drawn = None;
        t.draw(|f| drawn = Some(render(screen, f.area(), f.buffer_mut())))
            .unwrap();
        let buf = t.backend().buffer();
        let lines = (0..h)
            .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>())
            .collect();
        (lines, drawn.unwrap())
    }

    fn screen<'a>(s: Option<&'a Status>, rows: &'a [LatencyRow]) -> Screen<'a> {
        Screen {
            status: s,
            latency: rows,
            covered: Duration::from_secs(10),
            interval: Duration::from_millis(250),
            gone: None,
            scroll: 0,
        }
    }

    fn line_with<'a>(lines: &'a [String], what: &str) -> &'a str {
        lines
            .iter()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no line with {what:?} in\n{}", lines.join("\n")))
    }

    /// Column (in cells) where `what` starts in `line`.
    fn col(line: &str, what: &str) -> usize {
        let at = line
            .find(what)
            .unwrap_or_else(|| panic!("{what:?} not in {line:?}"));
        line[..at].chars().count()
    }

    #[test]
    fn a_quantile_is_interpolated_within_its_bucket() {
        // 10 in (0, 1 µs], 80 in (1, 10 µs], 10 in (10, 100 µs].
        let counts = [10, 80, 10];
        assert_eq!(quantile(&BOUNDS, &counts, 0.1), Some(1_000.0));
        assert_eq!(quantile(&BOUNDS, &counts, 0.5), Some(5_500.0));
        assert_eq!(quantile(&BOUNDS, &counts, 0.99), Some(91_000.0));
        assert_eq!(quantile(&BOUNDS, &[], 0.5), None);
        assert_eq!(
            quantile(&BOUNDS, &[0, 0, 0, 0, 3], 0.5),
            Some(f64::INFINITY)
        );
        assert_eq!(
            fmt_latency(Some(f64::INFINITY), 10_000_000_000),
            "> 10.00 s"
        );
        assert_eq!(fmt_latency(Some(5_500.0), 0), "6 µs");
        assert_eq!(fmt_latency(Some(12_340_000.0), 0), "12.3 ms");
        assert_eq!(fmt_latency(None, 0), "-");
    }

    #[test]
    fn the_window_counts_what_completed_since_its_baseline() {
        let t0 = Instant::now();
        let mut w = Window::new(Duration::from_secs(10));
        let mut s = status(0, &["fc"]);
        let hist = |counts: Vec<u64>| LatencyStatus {
            model: "fc".into(),
            priority: "rt".into(),
            counts,
            sum_ns: 0,
        };
        s.latency = vec![hist(vec![100])];
        w.push(t0, &s);
        assert!(w.rows().is_empty(), "one sample is no window");
        s.latency = vec![hist(vec![100, 20])];
        w.push(t0 + Duration::from_secs(2), &s);
        let rows = w.rows();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            rows[0].completed, 20,
            "the 100 before the window are not in it"
        );
        assert_eq!(rows[0].per_s, 10.0);
        assert_eq!(rows[0].quantiles[0], Some(5_500.0));
        // Past the span the oldest samples go; the baseline is the last one
        // at least `span` old.
        s.latency = vec![hist(vec![100, 30])];
        w.push(t0 + Duration::from_secs(13), &s);
        assert_eq!(w.covered(), Duration::from_secs(11));
        assert_eq!(w.rows()[0].completed, 10);
        // A restarted daemon (another pid) starts the window again.
        s.pid = 8;
        w.push(t0 + Duration::from_secs(14), &s);
        assert!(w.rows().is_empty());
    }

    #[test]
    fn columns_line_up_and_show_each_figure() {
        let s = status(2, &["resnet18"]);
        let rows = [LatencyRow {
            model: "resnet18".into(),
            priority: "rt".into(),
            completed: 50,
            per_s: 5.0,
            quantiles: [Some(5_500.0), Some(9_000.0), Some(f64::INFINITY)],
        }];
        let (lines, _) = draw(&screen(Some(&s), &rows), 120, 30);
        let text = lines.join("\n");
        assert!(
            lines[0].contains("sluiced pid 7 v0.1.0 · up 1m15s · device: sim (mi50)"),
            "{text}"
        );
        assert!(
            lines[1].contains("10 submitted, 9 completed, 1 errors · on the device: 2"),
            "{text}"
        );
        assert!(
            lines[2].contains("every 250 ms") && lines[2].contains("last 10.0 s"),
            "{text}"
        );
        let head = line_with(&lines, "done/s");
        let row = line_with(&lines, "resnet18");
        for (h, v) in [
            ("model", "resnet18"),
            ("class", "rt"),
            ("done/s", "5.0"),
            ("p50", "6 µs"),
            ("p99", "> 1.0 ms"),
        ] {
            assert_eq!(col(head, h), col(row, v), "{h} over {v}\n{text}");
        }
        let head = line_with(&lines, "connected");
        let row = line_with(&lines, "client-2");
        for (h, v) in [
            ("name", "client-2"),
            ("pid", "1002"),
            ("submitted", "42"),
            ("errors", "3 "),
        ] {
            assert_eq!(col(head, h), col(row, v), "{h} over {v}\n{text}");
        }
        assert!(line_with(&lines, "client-1").contains("5 s"), "{text}");
        assert!(
            text.contains("one device, not partitioned (sim (mi50))"),
            "{text}"
        );
    }

    #[test]
    fn long_and_hostile_names_are_cut_to_their_column() {
        let mut s = status(0, &[&"m".repeat(40)]);
        s.clients = vec![
            client(1, &format!("{}-tail", "a".repeat(40))),
            client(2, "evil\u{1b}[2Jname\u{7}"),
            client(3, "short"),
        ];
        let (lines, _) = draw(&screen(Some(&s), &[]), 120, 30);
        let text = lines.join("\n");
        let long = line_with(&lines, "aaaa");
        assert!(
            long.contains(&format!("{}… ", "a".repeat(NAME_WIDTH - 1))),
            "{text}"
        );
        assert!(!text.contains("-tail"), "{text}");
        assert!(
            line_with(&lines, "evil").contains("evil?[2Jname?"),
            "{text}"
        );
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text}"
        );
        // The next column stays where it is.
        let head = line_with(&lines, "connected");
        assert_eq!(col(head, "pid"), col(long, "1001"), "{text}");
        assert_eq!(
            col(head, "pid"),
            col(line_with(&lines, "short"), "1003"),
            "{text}"
        );
        let model = line_with(&lines, "mmmm");
        assert!(
            model.contains(&format!("{}…", "m".repeat(NAME_WIDTH - 1))),
            "{text}"
        );
        assert_eq!(fit("ok", 4), "ok");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(
            fit("日本語です", 5),
            "日本…",
            "wide characters count two cells"
        );
    }

    #[test]
    fn an_empty_daemon_and_no_daemon_say_so() {
        let s = status(0, &[]);
        let (lines, _) = draw(&screen(Some(&s), &[]), 100, 24);
        let text = lines.join("\n");
        assert!(text.contains("(no clients connected)"), "{text}");
        assert!(text.contains("(no models served)"), "{text}");
        assert!(
            text.contains(" clients: 0 ") && text.contains(" models: 0 "),
            "{text}"
        );
        let mut gone = screen(None, &[]);
        gone.gone = Some("cannot connect to sluiced at /run/s.sock: Connection refused");
        let (lines, d) = draw(&gone, 100, 24);
        assert!(
            lines[2].starts_with(
                "daemon gone: cannot connect to sluiced at /run/s.sock: Connection refused, retrying"
            ),
            "{}",
            lines.join("\n")
        );
        assert_eq!(d.client_rows, 0);
        // A reason too long for the banner's two lines is cut before
        // ", retrying".
        let long = format!("{}: Connection refused (os error 111)", "x y".repeat(100));
        gone.gone = Some(&long);
        let (lines, _) = draw(&gone, 100, 24);
        assert!(
            lines[2].starts_with("daemon gone: x yx y"),
            "{}",
            lines.join("\n")
        );
        assert!(
            lines[3].trim_end().ends_with("…, retrying"),
            "{}",
            lines.join("\n")
        );
        gone.gone = Some("cannot connect to sluiced at /run/s.sock: Connection refused");
        // Gone after being seen: the last figures stay under the banner.
        let mut stale = screen(Some(&s), &[]);
        stale.gone = gone.gone;
        let (lines, _) = draw(&stale, 100, 24);
        assert!(lines[0].contains("sluiced pid 7") && lines[2].starts_with("daemon gone: "));
        // A tiny terminal draws what fits without panicking.
        draw(&stale, 10, 3);
        draw(&screen(Some(&status(50, &["a", "b"])), &[]), 1, 1);
    }

    #[test]
    fn many_clients_scroll_and_the_scroll_is_clamped() {
        let s = status(300, &["fc"]);
        let mut sc = screen(Some(&s), &[]);
        let (lines, d) = draw(&sc, 120, 40);
        let text = lines.join("\n");
        assert!(d.client_rows > 10 && d.client_rows < 300, "{d:?}");
        assert!(
            text.contains(&format!(" clients 1–{} of 300 ", d.client_rows)),
            "{text}"
        );
        assert!(
            text.contains("client-1 ") && !text.contains("client-300"),
            "{text}"
        );
        sc.scroll = 100;
        let (lines, d) = draw(&sc, 120, 40);
        let text = lines.join("\n");
        assert_eq!(d.scroll, 100);
        assert!(text.contains(" clients 101–"), "{text}");
        assert!(
            text.contains("client-101 ") && !text.contains("client-100 "),
            "{text}"
        );
        // Past the end: the last page, the last client on it.
        sc.scroll = usize::MAX;
        let (lines, d) = draw(&sc, 120, 40);
        let text = lines.join("\n");
        assert_eq!(d.scroll, 300 - d.client_rows);
        assert!(
            text.contains("client-300 ") && text.contains(" of 300 "),
            "{text}"
        );
    }

    #[test]
    fn cluster_partitions_and_waiting_requests_are_shown() {
        use sluice_backend::{GpuLayout, Layout, ModelLoad, PartitionLayout};
        let mut s = status(0, &["resnet18"]);
        s.cluster = Some(Layout {
            planner: "greedy".into(),
            gpus: vec![
                GpuLayout {
                    index: 0,
                    profile: "mi50".into(),
                    compute_units: 60,
                    partitions: vec![PartitionLayout {
                        size_pct: 40,
                        first_cu: 0,
                        cus: 24,
                        draining: true,
                        in_flight: 3,
                        models: vec![("resnet18".into(), 8, 120.0)],
                    }],
                },
                GpuLayout {
                    index: 1,
                    profile: "mi50".into(),
                    compute_units: 60,
                    partitions: vec![],
                },
            ],
            models: vec![ModelLoad {
                name: "resnet18".into(),
                queued: 17,
                ..ModelLoad::default()
            }],
            ..Layout::default()
        });
        let (lines, _) = draw(&screen(Some(&s), &[]), 140, 30);
        let text = lines.join("\n");
        assert!(
            text.contains(
                "GPU 0 (mi50):  40 % CUs 0..24 DRAINING · 3 running · resnet18 (batch ≤8, 120.0/s)"
            ),
            "{text}"
        );
        assert!(
            text.contains("GPU 1 (mi50, 60 CUs): idle, no partition"),
            "{text}"
        );
        let head = line_with(&lines, "waiting");
        let row = line_with(&lines, "resnet18   ");
        assert_eq!(col(head, "waiting"), col(row, "17"), "{text}");
    }
}
