//! The metrics endpoint (`[metrics] listen`): one thread, `sluice-metrics`,
//! that answers `GET /metrics` with the OpenMetrics text exposition that
//! `prometheus-client` encodes; docs/metrics.md lists every metric.
//!
//! The dispatcher never serves a scrape. It records into
//! [`crate::metrics::RequestMetrics`] and the daemon's counters (relaxed
//! stores it alone makes); this thread reads them at scrape time through a
//! `prometheus-client` [`Collector`] and writes the response.
//!
//! The endpoint is unauthenticated: bind it to loopback, or to a Unix
//! socket (mode 0660). A hostile local client gets little: one connection
//! is served at a time, its request must arrive whole within
//! [`REQUEST_TIMEOUT`] and [`MAX_REQUEST_BYTES`], the response must be
//! taken within [`WRITE_TIMEOUT`], and then the connection is closed.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use shm_proto::{Priority, status};

use super::{Shared, StartError};
use crate::config::MetricsListen;
use crate::metrics::{
    BATCH_BOUNDS, HistogramSnapshot, LATENCY_BOUNDS_NS, STATUS_SLOTS, status_name,
};

/// Longest a connection may take to send its request, from accept.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest a connection may take to read the response.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest request head read; a longer one is answered 431.
pub const MAX_REQUEST_BYTES: usize = 8192;
/// Longest the endpoint reads and drops what a peer sends after the answer.
const LINGER: Duration = Duration::from_millis(200);
/// Most bytes it reads and drops then.
const LINGER_BYTES: usize = 256 * 1024;
/// How often the thread looks at the stop flag while no one connects.
const STOP_POLL: Duration = Duration::from_millis(100);
/// The content type of `prometheus-client`'s text encoding.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A bound endpoint.
#[derive(Debug)]
pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Listener {
    /// Binds `listen`; returns the listener and the address it is on (the
    /// port bound when 0 was asked for).
    pub(crate) fn bind(listen: &MetricsListen) -> Result<(Self, String), StartError> {
        let err = |source| StartError::Metrics {
            listen: listen.to_string(),
            source,
        };
        match listen {
            MetricsListen::Tcp(addr) => {
                let l = TcpListener::bind(addr).map_err(err)?;
                l.set_nonblocking(true).map_err(err)?;
                let at = l.local_addr().map_err(err)?.to_string();
                Ok((Self::Tcp(l), at))
            }
            MetricsListen::Unix(path) => {
                if path.exists() {
                    if UnixStream::connect(path).is_ok() {
                        return Err(err(std::io::Error::new(
                            std::io::ErrorKind::AddrInUse,
                            "another process answers on it",
                        )));
                    }
                    // Left by a daemon that died: nobody answers on it.
                    std::fs::remove_file(path).map_err(err)?;
                }
                let l = UnixListener::bind(path).map_err(err)?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
                    .map_err(err)?;
                l.set_nonblocking(true).map_err(err)?;
                Ok((Self::Unix(l, path.clone()), listen.to_string()))
            }
        }
    }
}

/// The endpoint's thread: serves scrapes one connection at a time until
/// the daemon stops.
pub(crate) fn serve(listener: Listener, shared: Arc<Shared>) {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(DaemonCollector {
        shared: shared.clone(),
    }));
    let mut body = String::new();
    while !shared.shutdown.load(Ordering::Relaxed) {
        let accepted = match &listener {
            Listener::Tcp(l) => l.accept().map(|(s, _)| Stream::Tcp(s)),
            Listener::Unix(l, _) => l.accept().map(|(s, _)| Stream::Unix(s)),
        };
        match accepted {
            Ok(s) => {
                if let Err(e) = answer(s, &registry, &mut body) {
                    tracing::debug!("metrics connection: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => wait_readable(&listener),
            Err(e) => {
                // Out of descriptors or similar: do not spin.
                tracing::warn!("metrics endpoint: accept failed: {e}");
                std::thread::sleep(STOP_POLL);
            }
        }
    }
    if let Listener::Unix(_, path) = &listener {
        let _ = std::fs::remove_file(path);
    }
}

/// Waits until a connection arrives or [`STOP_POLL`] passes.
fn wait_readable(listener: &Listener) {
    let fd = match listener {
        Listener::Tcp(l) => l.as_fd(),
        Listener::Unix(l, _) => l.as_fd(),
    };
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let timeout = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: STOP_POLL.as_nanos() as i64,
    };
    let _ = rustix::event::poll(&mut fds, Some(&timeout));
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn set_timeouts(&self, read: Duration, write: Duration) -> std::io::Result<()> {
        match self {
            Self::Tcp(s) => {
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(read))?;
                s.set_write_timeout(Some(write))
            }
            Self::Unix(s) => {
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(read))?;
                s.set_write_timeout(Some(write))
            }
        }
    }
    /// Ends the connection gently: no more writes, then what the peer
    /// still sends is read and dropped (at most [`LINGER_BYTES`], for at
    /// most [`LINGER`]), so closing with unread input does not reset the
    /// connection before the peer has read the answer.
    fn linger(&mut self) {
        let _ = match self {
            Self::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            Self::Unix(s) => s.shutdown(std::net::Shutdown::Write),
        };
        let start = Instant::now();
        let mut buf = [0u8; 4096];
        let mut drained = 0;
        while drained < LINGER_BYTES {
            let left = LINGER.saturating_sub(start.elapsed());
            if left.is_zero() || self.set_timeouts(left, WRITE_TIMEOUT).is_err() {
                break;
            }
            match self.io().read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    }
    fn io(&mut self) -> &mut dyn ReadWrite {
        match self {
            Self::Tcp(s) => s,
            Self::Unix(s) => s,
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// What a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// `GET /metrics` (a query string is ignored).
    Metrics,
    /// `HEAD /metrics`.
    Head,
    /// Another path.
    NotFound,
    /// Another method.
    BadMethod,
    /// Not an HTTP/1.x request line.
    Malformed,
}

/// Reads the request line of `head` (the bytes up to the blank line).
pub(crate) fn parse_request(head: &[u8]) -> Ask {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else {
        return Ask::Malformed;
    };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Ask::Malformed;
    };
    if !version.starts_with("HTTP/1.") || target.is_empty() {
        return Ask::Malformed;
    }
    let path = target.split('?').next().unwrap_or_default();
    match (method, path) {
        ("GET", "/metrics") => Ask::Metrics,
        ("HEAD", "/metrics") => Ask::Head,
        ("GET" | "HEAD", _) => Ask::NotFound,
        _ => Ask::BadMethod,
    }
}

/// Reads one request head from `s` within the limits, answers it, closes.
fn answer(mut s: Stream, registry: &Registry, body: &mut String) -> std::io::Result<()> {
    let start = Instant::now();
    s.set_timeouts(REQUEST_TIMEOUT, WRITE_TIMEOUT)?;
    let mut head = [0u8; MAX_REQUEST_BYTES];
    let mut len = 0;
    let complete = loop {
        if head[..len].windows(4).any(|w| w == b"\r\n\r\n")
            || head[..len].windows(2).any(|w| w == b"\n\n")
        {
            break true;
        }
        if len == head.len() {
            break false;
        }
        // The whole request within REQUEST_TIMEOUT, however it trickles.
        let left = REQUEST_TIMEOUT.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "request not complete in time; closed",
            ));
        }
        s.set_timeouts(left, WRITE_TIMEOUT)?;
        match s.io().read(&mut head[len..]) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "closed before the end of its request",
                ));
            }
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    let r = reply(s.io(), complete.then_some(&head[..len]), registry, body);
    s.linger();
    r
}

/// Answers a request head (`None`: it did not fit).
fn reply(
    io: &mut dyn ReadWrite,
    head: Option<&[u8]>,
    registry: &Registry,
    body: &mut String,
) -> std::io::Result<()> {
    let Some(head) = head else {
        return respond(
            io,
            "431 Request Header Fields Too Large",
            "text/plain",
            "request head too large\n",
            true,
        );
    };
    match parse_request(head) {
        ask @ (Ask::Metrics | Ask::Head) => {
            body.clear();
            if prometheus_client::encoding::text::encode(body, registry).is_err() {
                return respond(
                    io,
                    "500 Internal Server Error",
                    "text/plain",
                    "encoding failed\n",
                    true,
                );
            }
            respond(io, "200 OK", CONTENT_TYPE, body, ask == Ask::Metrics)
        }
        Ask::NotFound => respond(
            io,
            "404 Not Found",
            "text/plain",
            "only /metrics is served\n",
            true,
        ),
        Ask::BadMethod => respond(
            io,
            "405 Method Not Allowed",
            "text/plain",
            "use GET /metrics\n",
            true,
        ),
        Ask::Malformed => respond(
            io,
            "400 Bad Request",
            "text/plain",
            "not an HTTP/1.x request\n",
            true,
        ),
    }
}

fn respond(
    io: &mut dyn ReadWrite,
    status_line: &str,
    content_type: &str,
    body: &str,
    with_body: bool,
) -> std::io::Result<()> {
    let mut allow = "";
    if status_line.starts_with("405") {
        allow = "Allow: GET, HEAD\r\n";
    }
    let head = format!(
        "HTTP/1.1 {status_line}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         {allow}Connection: close\r\n\r\n",
        body.len()
    );
    io.write_all(head.as_bytes())?;
    if with_body {
        io.write_all(body.as_bytes())?;
    }
    io.flush()
}

/// Reads the daemon's figures at scrape time.
#[derive(Debug)]
struct DaemonCollector {
    shared: Arc<Shared>,
}

fn counter(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    v: u64,
) -> Result<(), std::fmt::Error> {
    ConstCounter::new(v).encode(e.encode_descriptor(name, help, None, MetricType::Counter)?)
}

fn gauge(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    v: u64,
) -> Result<(), std::fmt::Error> {
    ConstGauge::new(v).encode(e.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

const CLASSES: [Priority; 2] = [Priority::RealTime, Priority::BestEffort];

impl Collector for DaemonCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let sh = &self.shared;
        let c = &sh.counters;
        let served = sh.models.current();
        let rm = &c.requests;
        let models: Vec<(&str, &crate::metrics::ModelMetrics)> = served
            .registry
            .iter()
            .filter_map(|(id, m)| Some((m.name(), rm.model(id)?)))
            .collect();

        counter(
            &mut e,
            "sluice_requests_received",
            "Requests taken off the clients' submission rings (sluice status: submitted).",
            c.submitted.load(Ordering::Relaxed),
        )?;
        {
            let mut m = e.encode_descriptor(
                "sluice_requests_completed",
                "Completions the device posted, by model, priority class and status \
                 (status=\"ok\" summed is sluice status: completed).",
                None,
                MetricType::Counter,
            )?;
            for (name, mm) in &models {
                for p in CLASSES {
                    let cm = mm.of(p);
                    for slot in 0..STATUS_SLOTS {
                        let n = cm.completed[slot].load(Ordering::Relaxed);
                        // `ok` always; an error status once it has happened.
                        if slot == status::OK as usize || n > 0 {
                            let labels = [
                                ("model", *name),
                                ("priority", p.as_str()),
                                ("status", status_name(slot)),
                            ];
                            ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
                        }
                    }
                }
            }
        }
        {
            let mut m = e.encode_descriptor(
                "sluice_requests_refused",
                "Requests refused before reaching the device (the request was malformed), \
                 by status.",
                None,
                MetricType::Counter,
            )?;
            for slot in 0..STATUS_SLOTS {
                let n = rm.refused[slot].load(Ordering::Relaxed);
                if n > 0 {
                    ConstCounter::new(n)
                        .encode(m.encode_family(&[("status", status_name(slot))])?)?;
                }
            }
        }
        {
            let mut m = e.encode_descriptor(
                "sluice_deadline_missed",
                "Requests not started because their deadline had passed, by model and class \
                 (sluice status: deadline_missed).",
                None,
                MetricType::Counter,
            )?;
            for (name, mm) in &models {
                for p in CLASSES {
                    let n = mm.of(p).completed(status::DEADLINE_MISSED);
                    ConstCounter::new(n)
                        .encode(m.encode_family(&[("model", *name), ("priority", p.as_str())])?)?;
                }
            }
        }
        let histograms = [
            HistFamily {
                name: "sluice_request_latency",
                help: "Received (taken off the ring) to finished on the device, of requests \
                       completed OK, by model and class.",
                unit: Some(Unit::Seconds),
                bounds: &LATENCY_BOUNDS_NS,
                per_unit: 1e9,
                pick: |c| &c.latency as &dyn Snap,
            },
            HistFamily {
                name: "sluice_request_queue_wait",
                help: "Received to started on the device, of requests completed OK, by model \
                       and class.",
                unit: Some(Unit::Seconds),
                bounds: &LATENCY_BOUNDS_NS,
                per_unit: 1e9,
                pick: |c| &c.queue_wait as &dyn Snap,
            },
            HistFamily {
                name: "sluice_request_batch_size",
                help: "Batch of each request handed to the device (an untyped request is 1), \
                       by model and class.",
                unit: None,
                bounds: &BATCH_BOUNDS,
                per_unit: 1.0,
                pick: |c| &c.batch as &dyn Snap,
            },
        ];
        for h in &histograms {
            let mut m =
                e.encode_descriptor(h.name, h.help, h.unit.as_ref(), MetricType::Histogram)?;
            for (model, mm) in &models {
                for p in CLASSES {
                    let s = (h.pick)(mm.of(p)).snap(h.bounds, h.per_unit);
                    // A series appears with its first observation: a
                    // daemon with many models, each used in one class,
                    // does not send ~60 lines of zeros for every other.
                    if s.count == 0 {
                        continue;
                    }
                    m.encode_family(&[("model", *model), ("priority", p.as_str())])?
                        .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                            s.sum, s.count, &s.buckets, None,
                        )?;
                }
            }
        }
        gauge(
            &mut e,
            "sluice_device_queued",
            "Jobs queued or running on the device.",
            sh.device_queued.load(Ordering::Relaxed),
        )?;
        gauge(
            &mut e,
            "sluice_models",
            "Models served.",
            served.registry.iter().len() as u64,
        )?;
        gauge(
            &mut e,
            "sluice_clients",
            "Clients connected.",
            sh.clients.lock().map_or(0, |v| v.len() as u64),
        )?;
        counter(
            &mut e,
            "sluice_clients_dropped",
            "Clients dropped for corrupting their region.",
            c.dropped_clients.load(Ordering::Relaxed),
        )?;
        counter(
            &mut e,
            "sluice_sessions_refused",
            "Sessions refused at the handshake.",
            c.refused.load(Ordering::Relaxed),
        )?;
        counter(
            &mut e,
            "sluice_connections_not_allowed",
            "Control-socket connections closed at accept: [access] does not allow the peer.",
            sh.control_counters.not_allowed.load(Ordering::Relaxed),
        )?;
        counter(
            &mut e,
            "sluice_client_wakes",
            "Futex wakes sent to sleeping clients.",
            c.wakes.load(Ordering::Relaxed),
        )?;
        counter(
            &mut e,
            "sluice_dispatcher_parks",
            "Times the dispatcher parked (slept in epoll_wait).",
            c.parks.load(Ordering::Relaxed),
        )?;
        if let Some(layout) = sh
            .layout
            .as_ref()
            .and_then(|l| l.lock().ok().map(|l| l.clone()))
        {
            encode_layout(&mut e, &layout)?;
        }
        Ok(())
    }
}

/// One histogram family of [`DaemonCollector`]: its name, help and unit,
/// its bucket bounds and their divisor into the unit, and which histogram
/// of a model's class it reads.
struct HistFamily {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    bounds: &'static [u64],
    per_unit: f64,
    pick: fn(&crate::metrics::ClassMetrics) -> &dyn Snap,
}

/// A histogram of either bucket count, read as a snapshot.
trait Snap {
    fn snap(&self, bounds: &[u64], per_unit: f64) -> HistogramSnapshot;
}

impl<const S: usize> Snap for crate::metrics::Histogram<S> {
    fn snap(&self, bounds: &[u64], per_unit: f64) -> HistogramSnapshot {
        self.snapshot(bounds, per_unit)
    }
}

/// With `[cluster]`: partitions, batches and placement switches, as the
/// backend reports them for `sluice status`.
fn encode_layout(
    e: &mut DescriptorEncoder<'_>,
    layout: &sluice_backend::Layout,
) -> Result<(), std::fmt::Error> {
    {
        let mut m = e.encode_descriptor(
            "sluice_partitions",
            "Partitions on each GPU (draining ones included).",
            None,
            MetricType::Gauge,
        )?;
        for g in &layout.gpus {
            let gpu = g.index.to_string();
            ConstGauge::new(g.partitions.len() as u64)
                .encode(m.encode_family(&[("gpu", gpu.as_str())])?)?;
        }
    }
    {
        let mut m = e.encode_descriptor(
            "sluice_partition_batches_in_flight",
            "Batches running in each partition now.",
            None,
            MetricType::Gauge,
        )?;
        for g in &layout.gpus {
            let gpu = g.index.to_string();
            for p in &g.partitions {
                let first = p.first_cu.to_string();
                let draining = if p.draining { "true" } else { "false" };
                ConstGauge::new(p.in_flight).encode(m.encode_family(&[
                    ("gpu", gpu.as_str()),
                    ("first_cu", first.as_str()),
                    ("draining", draining),
                ])?)?;
            }
        }
    }
    counter(
        e,
        "sluice_placement_switches",
        "Placements applied since start (the first included).",
        layout.switches,
    )?;
    for (name, help, kind, get) in [
        (
            "sluice_model_batches",
            "Batches the cluster backend ran, by model.",
            MetricType::Counter,
            (|l: &sluice_backend::ModelLoad| l.batches) as fn(&sluice_backend::ModelLoad) -> u64,
        ),
        (
            "sluice_model_batch_max",
            "Largest batch the cluster backend ran, by model.",
            MetricType::Gauge,
            |l| u64::from(l.max_batch),
        ),
        (
            "sluice_model_slo_violations",
            "Requests completed later than the model's SLO after they arrived, by model.",
            MetricType::Counter,
            |l| l.slo_violations,
        ),
        (
            "sluice_model_waiting",
            "Requests waiting for a batch, by model.",
            MetricType::Gauge,
            |l| l.queued,
        ),
    ] {
        let mut m = e.encode_descriptor(name, help, None, kind)?;
        for l in &layout.models {
            let labels = [("model", l.name.as_str())];
            if matches!(kind, MetricType::Counter) {
                ConstCounter::new(get(l)).encode(m.encode_family(&labels)?)?;
            } else {
                ConstGauge::new(get(l)).encode(m.encode_family(&labels)?)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines() {
        let p = |s: &str| parse_request(s.as_bytes());
        assert_eq!(p("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), Ask::Metrics);
        assert_eq!(p("GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Ask::Metrics);
        assert_eq!(p("HEAD /metrics HTTP/1.1\r\n\r\n"), Ask::Head);
        assert_eq!(p("GET / HTTP/1.1\r\n\r\n"), Ask::NotFound);
        assert_eq!(p("GET /metricsx HTTP/1.1\r\n\r\n"), Ask::NotFound);
        assert_eq!(p("POST /metrics HTTP/1.1\r\n\r\n"), Ask::BadMethod);
        assert_eq!(p("GET /metrics\r\n\r\n"), Ask::Malformed);
        assert_eq!(p("GET /metrics HTTP/2\r\n\r\n"), Ask::Malformed);
        assert_eq!(p("GET  /metrics HTTP/1.1\r\n\r\n"), Ask::Malformed);
        assert_eq!(p("\u{0}\u{1}\u{2}\r\n\r\n"), Ask::Malformed);
        assert_eq!(parse_request(&[0xff, 0xfe, b'\n']), Ask::Malformed);
        assert_eq!(p(""), Ask::Malformed);
    }
}
