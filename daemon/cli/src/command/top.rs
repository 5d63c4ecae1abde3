//! `sluice top`: a live view of a running daemon.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use sluice_cli::top::{Drawn, Screen, Window, render};
use sluice_cli::{error_chain, status};
use sluice_service::Status;

use super::fail;

/// A live view of a running daemon, redrawn every --interval-ms.
///
/// The screen, top to bottom:
///
/// - the daemon: pid, version, uptime, device, socket; its request
///   counters (submitted, completed, errors, jobs on the device now,
///   requests whose deadline passed before they started, clients, refused
///   sessions);
///
/// - models: one row per model and priority class (rt real-time, be
///   best-effort) with OK completions per second and latency percentiles
///   p50/p90/p99 (received off the ring to finished on the device) over
///   the last --window-s seconds, estimated from the daemon's latency
///   histogram (the metrics endpoint's buckets: 1, 2.5, 5 per decade, so
///   a percentile is within its bucket); `missed` counts deadline misses
///   since start, `waiting` the requests waiting for a batch ([cluster]
///   only);
///
/// - GPU partitions ([cluster]): each partition's share of the GPU's
///   compute units, batches running in it, and the models it serves;
///
/// - clients: id, name, pid, uid, requests submitted, completed OK and in
///   error, requests on the device now, and time connected.
///
/// Keys: q, Esc or Ctrl-C quits; ↑ ↓ PgUp PgDn Home End scroll the
/// clients. When the daemon stops answering, the last figures stay on the
/// screen under "daemon gone: <reason>, retrying", and the view comes
/// back when a daemon answers again.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Daemon socket (default: $SLUICE_SOCKET, else the per-user default).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Milliseconds between two status queries (and redraws).
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(20..=60_000))]
    interval_ms: u64,
    /// Seconds of the window the latency percentiles and rates cover.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    window_s: u64,
}

/// A query's outcome: the status, or why there is none.
type Polled = (Instant, Result<Status, String>);

/// Restores the terminal when dropped (the panic hook of
/// `ratatui::try_init` does it on a panic).
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Queries the daemon every `interval` on a thread of its own, so a daemon
/// slow to answer never holds up the keys.
fn poll_daemon(socket: PathBuf, interval: Duration) -> Receiver<Polled> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut next = Instant::now();
        loop {
            let r = status::query_all(&socket).map_err(|e| error_chain(&e));
            if tx.send((Instant::now(), r)).is_err() {
                return;
            }
            next += interval;
            let now = Instant::now();
            match next.checked_duration_since(now) {
                Some(wait) => std::thread::sleep(wait),
                None => next = now,
            }
        }
    });
    rx
}

/// Runs the view until a quit key.
pub fn run(args: Args) -> ExitCode {
    let socket = args
        .socket
        .unwrap_or_else(sluice_client::default_socket_path);
    let interval = Duration::from_millis(args.interval_ms);
    let mut terminal = match ratatui::try_init() {
        Ok(t) => t,
        Err(e) => {
            ratatui::restore();
            return fail(format!(
                "sluice top needs a terminal ({e}); from a script use `sluice status` or \
                 `sluice status --json`"
            ));
        }
    };
    let _restore = Restore;
    let rx = poll_daemon(socket, interval);
    let mut window = Window::new(Duration::from_secs(args.window_s));
    let mut status: Option<Status> = None;
    let mut rows = Vec::new();
    let mut gone: Option<String> = None;
    let mut scroll = 0usize;
    let mut drawn = Drawn {
        scroll: 0,
        client_rows: 0,
    };
    let mut dirty = true;
    loop {
        while let Ok((at, r)) = rx.try_recv() {
            match r {
                Ok(s) => {
                    window.push(at, &s);
                    rows = window.rows();
                    status = Some(s);
                    gone = None;
                }
                Err(why) => gone = Some(why),
            }
            dirty = true;
        }
        if dirty {
            let screen = Screen {
                status: status.as_ref(),
                latency: &rows,
                covered: window.covered(),
                interval,
                gone: gone.as_deref(),
                scroll,
            };
            if let Err(e) = terminal.draw(|f| drawn = render(&screen, f.area(), f.buffer_mut())) {
                drop(_restore);
                return fail(format!("cannot draw on the terminal: {e}"));
            }
            scroll = drawn.scroll;
            dirty = false;
        }
        let key = match event::poll(Duration::from_millis(20)).and_then(|ready| {
            if ready {
                event::read().map(Some)
            } else {
                Ok(None)
            }
        }) {
            Ok(Some(Event::Key(k))) if k.kind != KeyEventKind::Release => k,
            Ok(Some(Event::Resize(..))) => {
                dirty = true;
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                drop(_restore);
                return fail(format!("cannot read the terminal's keys: {e}"));
            }
        };
        let page = drawn.client_rows.max(1);
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => break,
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => break,
            KeyCode::Up | KeyCode::Char('k') => scroll = scroll.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => scroll += 1,
            KeyCode::PageUp => scroll = scroll.saturating_sub(page),
            KeyCode::PageDown | KeyCode::Char(' ') => scroll += page,
            KeyCode::Home | KeyCode::Char('g') => scroll = 0,
            KeyCode::End | KeyCode::Char('G') => scroll = usize::MAX,
            _ => continue,
        }
        dirty = true;
    }
    ExitCode::SUCCESS
}
