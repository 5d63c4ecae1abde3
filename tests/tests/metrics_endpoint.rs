//! The metrics endpoint (`[metrics] listen`) of a live daemon (in this
//! process, on the simulated GPU): a client sends requests of both classes,
//! some malformed, some past their deadline; a plain HTTP/1.1 GET over TCP
//! (or a Unix socket) scrapes `/metrics`; the exposition text is parsed
//! here and its counters checked against the requests sent and against
//! `sluice status`. Hostile scrapers (garbage, oversized heads, a
//! slowloris, other methods and paths) get an error or are closed, and the
//! endpoint and the request path go on serving.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sluice_client::{Client, Priority, Submit, status};
use sluice_service::config::{Config, MetricsListen};
use sluice_tests::{TestDir, connect, lookup, secs, slot_spans, test_input};

struct InProcess {
    daemon: sluice_service::Daemon,
    socket: PathBuf,
    _dir: TestDir,
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.daemon.shutdown();
    }
}

fn config(dir: &TestDir, listen: &str) -> Config {
    let mut config = Config::default();
    config.daemon.socket = dir.join("sluiced.sock");
    config.daemon.realtime_priority = 0;
    config.daemon.lock_memory = false;
    config.daemon.dispatcher_core = None;
    config.clients.arena_bytes = 1 << 20;
    config.metrics.listen = Some(MetricsListen::parse(listen).expect("a valid listen value"));
    config
}

fn start_with(dir: TestDir, config: Config) -> Result<InProcess, sluice_service::StartError> {
    let socket = config.daemon.socket.clone();
    let models = Arc::new(sluice_model::ModelRegistry::builtin());
    let device = sluice_service::startup::make_device(&config, models.clone())
        .expect("the simulated device starts");
    let daemon = sluice_service::Daemon::start(config, models, device)?;
    Ok(InProcess {
        daemon,
        socket,
        _dir: dir,
    })
}

fn start(tag: &str, listen: &str) -> InProcess {
    let dir = TestDir::new(tag);
    let config = config(&dir, listen);
    start_with(dir, config).expect("daemon starts")
}

/// The daemon's `metrics` status field: where it serves.
fn metrics_at(d: &InProcess) -> String {
    let at = d.daemon.shared().status().metrics;
    assert!(!at.is_empty(), "status names no metrics endpoint");
    at
}

/// An HTTP response: status code, headers (lower-case names), body.
#[derive(Debug)]
struct Response {
    code: u32,
    headers: BTreeMap<String, String>,
    body: String,
}

fn parse_response(raw: &[u8]) -> Response {
    let text = String::from_utf8(raw.to_vec()).expect("a UTF-8 response");
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head in {text:?}"));
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let code = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.split(' ').next())
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers = lines
        .map(|l| {
            let (k, v) = l.split_once(':').expect("a header line");
            (k.trim().to_ascii_lowercase(), v.trim().to_owned())
        })
        .collect::<BTreeMap<_, _>>();
    // (A HEAD answer states the length of the body it leaves out.)
    if let Some(len) = headers.get("content-length").filter(|_| !body.is_empty()) {
        assert_eq!(len.parse::<usize>().unwrap(), body.len(), "Content-Length");
    }
    Response {
        code,
        headers,
        body: body.to_owned(),
    }
}

/// Sends `request` and reads until the server closes.
fn exchange<S: Read + Write>(mut s: S, request: &[u8]) -> Vec<u8> {
    // The server may answer and close before reading everything.
    let _ = s.write_all(request);
    let mut got = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("reading the endpoint's answer: {e} (after {got:?})"),
        }
    }
    got
}

fn tcp(at: &str) -> TcpStream {
    let s = TcpStream::connect(at).unwrap_or_else(|e| panic!("connect {at}: {e}"));
    s.set_read_timeout(Some(secs(30))).unwrap();
    s
}

fn get(at: &str, path: &str) -> Response {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {at}\r\nAccept: */*\r\n\r\n");
    parse_response(&exchange(tcp(at), req.as_bytes()))
}

/// One sample of the exposition: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses OpenMetrics / Prometheus text: `# TYPE` lines give each family's
/// type; every other non-comment line is a sample. Label values are
/// unescaped (`\\`, `\"`, `\n`). Panics on anything malformed.
fn parse_exposition(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
    let mut types = BTreeMap::new();
    let mut samples = Vec::new();
    assert!(
        text.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF"
    );
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            assert!(
                ["counter", "gauge", "histogram", "info", "unknown"].contains(&kind),
                "{line}"
            );
            assert!(
                types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "{line}"
            );
            continue;
        }
        if line.starts_with('#') {
            assert!(
                line.starts_with("# HELP ") || line.starts_with("# UNIT ") || line == "# EOF",
                "{line}"
            );
            continue;
        }
        let name_end = line.find(['{', ' ']).expect("a sample line");
        let name = &line[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line:?}"
        );
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices().peekable();
            let end;
            loop {
                // key="value" then , or }
                let (start, c) = chars.next().expect("unterminated labels");
                if c == '}' {
                    end = start + 1;
                    break;
                }
                let mut key = String::from(c);
                for (_, c) in chars.by_ref() {
                    if c == '=' {
                        break;
                    }
                    key.push(c);
                }
                assert_eq!(chars.next().map(|x| x.1), Some('"'), "{line}");
                let mut value = String::new();
                loop {
                    match chars.next().expect("unterminated label value").1 {
                        '\\' => match chars.next().expect("escape").1 {
                            'n' => value.push('\n'),
                            c => value.push(c),
                        },
                        '"' => break,
                        c => value.push(c),
                    }
                }
                labels.insert(key.trim_start_matches(',').to_owned(), value);
                if let Some(&(i, '}')) = chars.peek() {
                    end = i + 1;
                    break;
                }
                assert_eq!(chars.next().map(|x| x.1), Some(','), "{line}");
            }
            rest = &r[end..];
        }
        let value = rest.trim_start().split(' ').next().unwrap();
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    (types, samples)
}

struct Scrape {
    types: BTreeMap<String, String>,
    samples: Vec<Sample>,
}

impl Scrape {
    fn of(r: &Response) -> Self {
        assert_eq!(r.code, 200, "{r:?}");
        assert!(
            r.headers
                .get("content-type")
                .is_some_and(|t| t.starts_with("application/openmetrics-text")),
            "{:?}",
            r.headers
        );
        let (types, samples) = parse_exposition(&r.body);
        Self { types, samples }
    }

    /// The sum of `name`'s samples whose labels include all of `want`.
    fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                want.iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            .sum()
    }

    fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }

    /// Checks one histogram series: buckets cumulative, ascending, `+Inf`
    /// last and equal to `_count`. Returns the count.
    fn histogram(&self, family: &str, want: &[(&str, &str)]) -> f64 {
        let buckets = self.buckets(family, want);
        let last = buckets.last().unwrap();
        assert_eq!(last.0, f64::INFINITY);
        let count = self.sum(&format!("{family}_count"), want);
        assert_eq!(last.1, count, "{family} {want:?}: +Inf bucket is the count");
        count
    }

    /// The cumulative count of the bucket whose bound is `le`.
    fn bucket(&self, family: &str, want: &[(&str, &str)], le: f64) -> f64 {
        let b = self.buckets(family, want);
        b.iter()
            .find(|(bound, _)| (bound - le).abs() <= le * 1e-9)
            .unwrap_or_else(|| panic!("{family}: no bucket le={le}: {b:?}"))
            .1
    }

    /// One histogram series' `(le, cumulative count)`, checked ascending
    /// and cumulative.
    fn buckets(&self, family: &str, want: &[(&str, &str)]) -> Vec<(f64, f64)> {
        assert_eq!(
            self.types.get(family).map(String::as_str),
            Some("histogram")
        );
        let matches = |s: &&Sample| {
            want.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        };
        let buckets: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|s| s.name == format!("{family}_bucket"))
            .filter(matches)
            .map(|s| {
                let le = &s.labels["le"];
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                (le, s.value)
            })
            .collect();
        assert!(buckets.len() > 2, "{family} {want:?}: {buckets:?}");
        for w in buckets.windows(2) {
            assert!(w[0].0 < w[1].0, "{family}: bounds ascend: {buckets:?}");
            assert!(
                w[0].1 <= w[1].1,
                "{family}: buckets cumulative: {buckets:?}"
            );
        }
        buckets
    }
}

/// Submits a request of `model` in class `p` (slot 0 of the arena), waits
/// for it and returns its status.
fn run(
    c: &mut Client,
    model: &sluice_client::ModelInfo,
    p: Priority,
    deadline_ns: u64,
    i: u64,
) -> u32 {
    let (input, output) = slot_spans(model, 0);
    c.write_arena(input.off, &test_input(7, i, model.input_bytes as usize))
        .unwrap();
    let t = c
        .submit(&Submit {
            model_id: model.id,
            priority: p,
            deadline_ns,
            input,
            output,
        })
        .unwrap();
    c.wait_timeout(t, Some(secs(30))).unwrap().status
}

#[test]
fn a_scrape_matches_the_requests_sent_and_sluice_status() {
    let _w = sluice_tests::watchdog("a_scrape_matches_the_requests_sent_and_sluice_status", 120);
    let d = start("metrics", "127.0.0.1:0");
    let at = metrics_at(&d);
    assert!(at.starts_with("127.0.0.1:") && !at.ends_with(":0"), "{at}");
    // Before any request: the counters at zero, both classes of every
    // model present; no histogram series until its first observation.
    let s0 = Scrape::of(&get(&at, "/metrics"));
    assert_eq!(s0.sum("sluice_requests_received_total", &[]), 0.0);
    assert_eq!(
        s0.types.get("sluice_requests_received").map(String::as_str),
        Some("counter")
    );
    for p in ["rt", "be"] {
        let ok = [("model", "echo_small"), ("priority", p), ("status", "ok")];
        assert!(
            s0.samples
                .iter()
                .any(|x| x.name == "sluice_requests_completed_total"
                    && ok.iter().all(|(k, v)| x.labels[*k] == *v)
                    && x.value == 0.0),
            "{p}"
        );
    }
    assert_eq!(
        s0.types
            .get("sluice_request_latency_seconds")
            .map(String::as_str),
        Some("histogram")
    );
    assert!(!s0.has("sluice_request_latency_seconds_count"));

    let mut c = connect(&d.socket, "metrics");
    let echo = lookup(&mut c, "echo_small");
    let null = lookup(&mut c, "null");
    const RT: u64 = 40;
    const BE: u64 = 25;
    const LATE: u64 = 3;
    let mut i = 0;
    for _ in 0..RT {
        assert_eq!(run(&mut c, &echo, Priority::RealTime, 0, i), status::OK);
        i += 1;
    }
    for _ in 0..BE {
        assert_eq!(run(&mut c, &null, Priority::BestEffort, 0, i), status::OK);
        i += 1;
    }
    // Past their deadline when submitted: never started.
    for _ in 0..LATE {
        assert_eq!(
            run(&mut c, &echo, Priority::RealTime, 1, i),
            status::DEADLINE_MISSED
        );
        i += 1;
    }
    // A model id the daemon does not have: refused at validation.
    const BAD: u64 = 2;
    for _ in 0..BAD {
        let (input, output) = slot_spans(&echo, 0);
        let t = c
            .submit(&Submit {
                model_id: 9999,
                priority: Priority::RealTime,
                deadline_ns: 0,
                input,
                output,
            })
            .unwrap();
        let done = c.wait_timeout(t, Some(secs(30))).unwrap();
        assert_eq!(done.status, status::UNKNOWN_MODEL);
    }
    let sent = RT + BE + LATE + BAD;

    let st = d.daemon.shared().status();
    let s = Scrape::of(&get(&at, "/metrics"));
    let n = |v: u64| v as f64;
    // Against the requests sent...
    assert_eq!(s.sum("sluice_requests_received_total", &[]), n(sent));
    assert_eq!(
        s.sum(
            "sluice_requests_completed_total",
            &[
                ("model", "echo_small"),
                ("priority", "rt"),
                ("status", "ok")
            ]
        ),
        n(RT)
    );
    assert_eq!(
        s.sum(
            "sluice_requests_completed_total",
            &[("model", "null"), ("priority", "be"), ("status", "ok")]
        ),
        n(BE)
    );
    assert_eq!(
        s.sum(
            "sluice_requests_completed_total",
            &[("model", "echo_small"), ("status", "deadline_missed")]
        ),
        n(LATE)
    );
    assert_eq!(
        s.sum(
            "sluice_requests_refused_total",
            &[("status", "unknown_model")]
        ),
        n(BAD)
    );
    assert_eq!(
        s.sum(
            "sluice_deadline_missed_total",
            &[("model", "echo_small"), ("priority", "rt")]
        ),
        n(LATE)
    );
    // ...and against sluice status.
    assert_eq!(st.submitted, sent);
    assert_eq!(
        s.sum("sluice_requests_received_total", &[]),
        n(st.submitted)
    );
    assert_eq!(
        s.sum("sluice_requests_completed_total", &[("status", "ok")]),
        n(st.completed)
    );
    let errors = s.sum("sluice_requests_completed_total", &[])
        - s.sum("sluice_requests_completed_total", &[("status", "ok")])
        + s.sum("sluice_requests_refused_total", &[]);
    assert_eq!(errors, n(st.errors));
    assert_eq!(
        s.sum("sluice_deadline_missed_total", &[]),
        n(st.deadline_missed.total)
    );
    assert_eq!(s.sum("sluice_clients", &[]), 1.0);
    assert_eq!(s.sum("sluice_device_queued", &[]), n(st.device_queued));
    // Histograms: one observation per request the device completed OK.
    let rt = [("model", "echo_small"), ("priority", "rt")];
    let be = [("model", "null"), ("priority", "be")];
    assert_eq!(s.histogram("sluice_request_latency_seconds", &rt), n(RT));
    assert_eq!(s.histogram("sluice_request_latency_seconds", &be), n(BE));
    assert_eq!(s.histogram("sluice_request_queue_wait_seconds", &rt), n(RT));
    assert_eq!(s.histogram("sluice_request_queue_wait_seconds", &be), n(BE));
    // echo_small takes 50 µs on the simulated device: every latency is at
    // least that, so the sum is too.
    assert!(
        s.sum("sluice_request_latency_seconds_sum", &rt) >= n(RT) * 50e-6,
        "{}",
        s.sum("sluice_request_latency_seconds_sum", &rt)
    );
    assert_eq!(
        s.bucket("sluice_request_latency_seconds", &rt, 25e-6),
        0.0,
        "no echo_small request finished within 25 µs of arriving"
    );
    // sluice status carries the same latency histograms (what `sluice
    // top` reads): the same counts per bucket, the classes with an OK
    // completion only.
    assert_eq!(
        st.latency_bounds_ns,
        sluice_service::metrics::LATENCY_BOUNDS_NS
    );
    for (model, p, want) in [("echo_small", "rt", RT), ("null", "be", BE)] {
        let h = st
            .latency
            .iter()
            .find(|h| h.model == model && h.priority == p)
            .unwrap_or_else(|| panic!("no {model} {p} latency in {:?}", st.latency));
        assert_eq!(h.counts.iter().sum::<u64>(), want, "{model} {p}");
        let labels = [("model", model), ("priority", p)];
        let mut below = 0;
        for (i, &c) in h.counts.iter().enumerate() {
            below += c;
            let Some(&bound) = st.latency_bounds_ns.get(i) else {
                continue;
            };
            let le = bound as f64 / 1e9;
            assert_eq!(
                s.bucket("sluice_request_latency_seconds", &labels, le),
                n(below),
                "{model} {p} le {le}"
            );
        }
    }
    assert!(
        !st.latency
            .iter()
            .any(|h| h.model == "echo_small" && h.priority == "be"),
        "a class without OK completions has no histogram"
    );
    // Batch: every request handed to the device, batch 1.
    assert_eq!(
        s.histogram(
            "sluice_request_batch_size",
            &[("model", "echo_small"), ("priority", "rt")]
        ),
        n(RT + LATE)
    );
    assert_eq!(
        s.bucket("sluice_request_batch_size", &rt, 1.0),
        n(RT + LATE)
    );
    // One device, no cluster: no partition figures that would look measured.
    assert!(!s.has("sluice_partitions"));
    // HEAD: the headers alone.
    let head = parse_response(&exchange(tcp(&at), b"HEAD /metrics HTTP/1.1\r\n\r\n"));
    assert_eq!(head.code, 200);
    assert!(head.body.is_empty());
}

#[test]
fn hostile_scrapers_are_closed_and_the_endpoint_goes_on() {
    let _w = sluice_tests::watchdog("hostile_scrapers_are_closed_and_the_endpoint_goes_on", 120);
    let d = start("metrics-hostile", "127.0.0.1:0");
    let at = metrics_at(&d);
    let code = |raw: &[u8]| parse_response(&exchange(tcp(&at), raw)).code;
    assert_eq!(code(b"\x00\x01\x02garbage\r\n\r\n"), 400);
    assert_eq!(code(b"GET /metrics\r\n\r\n"), 400);
    assert_eq!(
        code(b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
        405
    );
    assert_eq!(get(&at, "/").code, 404);
    assert_eq!(get(&at, "/metrics/../secret").code, 404);
    // A head larger than the endpoint reads: refused, not buffered.
    let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    big.resize(64 * 1024, b'a');
    assert_eq!(code(&big), 431);
    // Connect and go away at once.
    drop(tcp(&at));
    // A slowloris: half a request line, then nothing. The endpoint closes
    // it (no answer); a scrape waiting behind it is served afterwards.
    let mut slow = tcp(&at);
    slow.write_all(b"GET /met").unwrap();
    let scraper = {
        let at = at.clone();
        std::thread::spawn(move || get(&at, "/metrics"))
    };
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    assert!(rest.is_empty(), "a slow request gets no answer: {rest:?}");
    let r = scraper.join().unwrap();
    Scrape::of(&r);
    // One byte at a time, slower than the endpoint allows in all.
    let mut drip = tcp(&at);
    let mut closed = false;
    for b in b"GET /metrics HTTP/1.1\r\n\r\n" {
        if drip.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    let mut rest = Vec::new();
    let _ = drip.read_to_end(&mut rest);
    assert!(
        closed || rest.is_empty(),
        "a request trickling in past the limit is not answered: {:?}",
        String::from_utf8_lossy(&rest)
    );
    // The request path and the endpoint still serve.
    let mut c = connect(&d.socket, "after-hostile");
    let echo = lookup(&mut c, "echo_small");
    assert_eq!(run(&mut c, &echo, Priority::RealTime, 0, 0), status::OK);
    let s = Scrape::of(&get(&at, "/metrics"));
    assert_eq!(
        s.sum("sluice_requests_completed_total", &[("status", "ok")]),
        1.0
    );
}

#[test]
fn a_unix_socket_endpoint_serves_and_is_removed_at_shutdown() {
    let _w = sluice_tests::watchdog(
        "a_unix_socket_endpoint_serves_and_is_removed_at_shutdown",
        60,
    );
    let dir = TestDir::new("metrics-unix");
    let path = dir.join("metrics.sock");
    let cfg = config(&dir, &format!("unix:{}", path.display()));
    let mut d = start_with(dir, cfg).expect("daemon starts");
    assert_eq!(metrics_at(&d), format!("unix:{}", path.display()));
    let mut c = connect(&d.socket, "metrics-unix");
    let echo = lookup(&mut c, "echo_small");
    for i in 0..5 {
        assert_eq!(run(&mut c, &echo, Priority::BestEffort, 0, i), status::OK);
    }
    let s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(secs(30))).unwrap();
    let r = parse_response(&exchange(s, b"GET /metrics HTTP/1.0\r\n\r\n"));
    let s = Scrape::of(&r);
    assert_eq!(
        s.histogram(
            "sluice_request_latency_seconds",
            &[("model", "echo_small"), ("priority", "be")]
        ),
        5.0
    );
    drop(c);
    d.daemon.shutdown();
    assert!(
        !path.exists(),
        "the endpoint's socket is removed on a clean stop"
    );
}

#[test]
fn an_address_in_use_stops_the_start_naming_it() {
    let _w = sluice_tests::watchdog("an_address_in_use_stops_the_start_naming_it", 60);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = TestDir::new("metrics-inuse");
    let cfg = config(&dir, &addr);
    let e = match start_with(dir, cfg) {
        Ok(_) => panic!("the daemon started on a port already bound"),
        Err(e) => sluice_service::error_chain(&e),
    };
    assert!(e.contains(&addr), "{e}");
    assert!(e.contains("[metrics] listen"), "{e}");
}
