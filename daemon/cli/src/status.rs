//! `sluice status`: the daemon's whole status, however many clients.
//!
//! One status reply must fit in a control frame, so the daemon pages its
//! client list (see `shm_proto::control`, "Status at any scale"). This
//! module asks for page after page, one connection each, until the daemon
//! names no next page, and returns one [`Status`] with every client: the
//! counters are those of the first page, the clients those of all pages
//! (a client that connects or leaves meanwhile may be missed or seen, never
//! seen twice, since pages go by ascending id).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use shm_proto::control::{MAX_FRAME, Msg};
use sluice_service::Status;

/// Why the status could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// No daemon answers at the socket.
    #[error(
        "cannot connect to sluiced at {path}: is it running, and may this user open its \
         socket (mode 0660, group access.socket_group)?"
    )]
    Connect {
        /// The socket.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The connection failed mid-way.
    #[error("status query to sluiced failed")]
    Io(#[from] std::io::Error),
    /// The daemon refused the query.
    #[error("sluiced refused the status query (code {code}): {message}")]
    Refused {
        /// A `shm_proto::control::refused` code.
        code: u32,
        /// The daemon's reason.
        message: String,
    },
    /// Something other than a status reply came back.
    #[error("sluiced sent something other than a status reply: {0}")]
    Protocol(String),
    /// The reply is not the status document this `sluice` knows.
    #[error("unexpected status document")]
    Json(#[from] serde_json::Error),
    /// The daemon keeps naming pages (a guard against a loop).
    #[error("sluiced sent over {0} status pages; giving up")]
    TooManyPages(usize),
}

/// Most pages read (4096 clients need a handful; this only stops a loop).
const MAX_PAGES: usize = 10_000;

/// One page: the clients with id `from_id` or more, as many as fit.
pub fn query_page(socket: &Path, from_id: u32) -> Result<Status, StatusError> {
    let mut sock = UnixStream::connect(socket).map_err(|source| StatusError::Connect {
        path: socket.display().to_string(),
        source,
    })?;
    sock.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut buf = [0u8; 64];
    let n = Msg::StatusPage { from_id }
        .encode(&mut buf)
        .map_err(|e| StatusError::Protocol(format!("cannot encode a request ({e:?})")))?;
    sock.write_all(&buf[..n])?;
    let mut prefix = [0u8; 4];
    sock.read_exact(&mut prefix)?;
    let len = Msg::body_len(prefix).map_err(|e| StatusError::Protocol(e.to_string()))?;
    debug_assert!(len <= MAX_FRAME);
    let mut body = vec![0u8; len];
    sock.read_exact(&mut body)?;
    match Msg::decode(&body) {
        Ok(Msg::StatusReply { json }) => Ok(serde_json::from_str(json)?),
        Ok(Msg::Refused { code, message }) => Err(StatusError::Refused {
            code,
            message: message.to_owned(),
        }),
        Ok(other) => Err(StatusError::Protocol(format!("{other:?}"))),
        Err(e) => Err(StatusError::Protocol(e.to_string())),
    }
}

/// The whole status: the first page's counters with every page's clients.
pub fn query_all(socket: &Path) -> Result<Status, StatusError> {
    let mut status = query_page(socket, 0)?;
    let mut next = status.next_client_id.take();
    let mut pages = 1;
    while let Some(from) = next {
        if pages >= MAX_PAGES {
            return Err(StatusError::TooManyPages(MAX_PAGES));
        }
        let page = query_page(socket, from)?;
        pages += 1;
        // Ids only grow; a page that does not advance would loop.
        next = page.next_client_id.filter(|&n| n > from);
        status.clients.extend(page.clients);
    }
    status.clients_total = status.clients_total.max(status.clients.len() as u64);
    Ok(status)
}

/// Each model's id, version and source (`  fc v3 (id 0): /models/fc.onnx`),
/// whether reloads are supported, and the last reload's errors; nothing
/// from a daemon that predates them.
pub fn versions_lines(s: &Status) -> String {
    let mut out = String::new();
    for m in &s.model_versions {
        out.push_str(&format!(
            "  {} v{} (id {}): {}\n",
            m.name, m.version, m.id, m.source
        ));
    }
    if s.model_versions.len() < s.models.len() && !s.model_versions.is_empty() {
        out.push_str(&format!(
            "  ... {} more: `sluice models list`\n",
            s.models.len() - s.model_versions.len()
        ));
    }
    if !s.models_reload.is_empty() {
        out.push_str(&format!("model reloads: {}\n", s.models_reload));
    }
    for e in &s.models_errors {
        out.push_str(&format!("last reload failed: {e}\n"));
    }
    out
}

/// `sluice status`'s table: the daemon, its counters, the `[cluster]`
/// part when it serves one ([`cluster_table`]), every client, and the
/// control socket's counters.
pub fn table(s: &Status) -> String {
    let mut out = format!(
        "sluiced pid {} v{} (protocol {}), up {:.0} s, socket {}\n\
         device: {}   dispatcher: {}\n{}\
         kill mechanism: {}\n{}\
         models: {}\n{}\
         requests: {} submitted, {} completed, {} errors; {} on the device\n\
         {}\
         sessions refused: {}, clients dropped for corrupting their region: {}\n\
         dispatcher parks: {}, client wake-ups sent: {}\n\n",
        s.pid,
        s.version,
        s.protocol,
        s.uptime_s,
        s.socket,
        s.device,
        s.dispatcher,
        if s.dispatcher_warning.is_empty() {
            String::new()
        } else {
            format!("WARNING: {}\n", s.dispatcher_warning)
        },
        s.kill_mechanism,
        if s.metrics.is_empty() {
            String::new()
        } else {
            format!("metrics: GET /metrics on {}\n", s.metrics)
        },
        s.models.join(", "),
        versions_lines(s),
        s.submitted,
        s.completed,
        s.errors,
        s.device_queued,
        missed_line(&s.deadline_missed),
        s.refused,
        s.dropped_clients,
        s.parks,
        s.wakes
    );
    if let Some(c) = &s.cluster {
        out += &cluster_table(c);
        out.push('\n');
    }
    out += &format!(
        "{:>4} {:<20} {:>8} {:>6} {:>10} {:>10} {:>8} {:>9} {:>10}\n",
        "id", "name", "pid", "uid", "submitted", "completed", "errors", "on device", "connected"
    );
    for c in &s.clients {
        out += &format!(
            "{:>4} {:<20} {:>8} {:>6} {:>10} {:>10} {:>8} {:>9} {:>9.0}s\n",
            c.id,
            c.name,
            c.pid,
            c.uid,
            c.submitted,
            c.completed,
            c.errors,
            c.on_device,
            c.connected_s
        );
    }
    if s.clients.is_empty() {
        out += "(no clients connected)\n";
    }
    let c = &s.control;
    out += &format!(
        "\ncontrol socket: {} connections open ({} in handshake, this query among them); closed at accept (not \
         allowed): {}, handshake timeouts: {}, handshakes evicted: {}, out of fds: {} \
         ({} shed), RLIMIT_NOFILE {}\n",
        c.open_connections,
        c.handshaking,
        c.not_allowed,
        c.handshake_timeouts,
        c.handshakes_evicted,
        c.fd_exhausted,
        c.shed,
        c.nofile_limit
            .map_or_else(|| "unlimited".to_owned(), |n| n.to_string())
    );
    out
}

/// The deadline line of `sluice status`: requests not started because
/// their deadline had passed, by class and by model.
pub fn missed_line(m: &sluice_service::MissedStatus) -> String {
    let mut line = format!(
        "deadline missed (not started): {} ({} real-time, {} best-effort)",
        m.total, m.real_time, m.best_effort
    );
    if !m.by_model.is_empty() {
        let by: Vec<String> = m.by_model.iter().map(|(k, n)| format!("{k} {n}")).collect();
        line += &format!("; by model: {}", by.join(", "));
    }
    line + "\n"
}

/// The `[cluster]` part of `sluice status`: the placement in force, each
/// GPU's partitions with what they serve, each model's load, and what
/// switching placements has cost the dispatcher.
pub fn cluster_table(c: &sluice_backend::Layout) -> String {
    let mut out = if c.switches == 0 {
        format!(
            "cluster (simulated GPUs), planner {}: no plan yet (every GPU whole, serving every \
             model, until rates are seen)\n",
            c.planner
        )
    } else {
        format!(
            "cluster (simulated GPUs), planner {}: {} placements applied; dispatcher time per \
             switch median {:.1} µs, p99 {:.1} µs, longest {:.1} µs; last planner run {:.1} µs\n",
            c.planner,
            c.switches,
            c.switch_p50_ns as f64 / 1e3,
            c.switch_p99_ns as f64 / 1e3,
            c.max_switch_ns as f64 / 1e3,
            c.last_plan_ns as f64 / 1e3,
        )
    };
    if let Some(e) = &c.plan_error {
        out += &format!(
            "WARNING: the planner found no placement ({e}); every GPU serves every model\n"
        );
    }
    // A daemon that predates these fields sends 0 and no plans; 0 after a
    // plan means no model has a rate: every GPU idle.
    if c.gpus_in_use > 0 || !c.recent_plans.is_empty() {
        out += &format!(
            "  GPUs in use: {} of {}{}\n",
            c.gpus_in_use,
            c.gpus.len(),
            if (c.gpus_in_use as usize) < c.gpus.len() {
                " (the rest idle)"
            } else {
                ""
            }
        );
    }
    if !c.recent_plans.is_empty() {
        let plans: Vec<String> = c
            .recent_plans
            .iter()
            .map(|p| {
                format!(
                    "{:.1} s: {} GPU{}{} ({:.0} µs)",
                    p.at_ms as f64 / 1e3,
                    p.gpus_in_use,
                    if p.gpus_in_use == 1 { "" } else { "s" },
                    if p.fallback { " FALLBACK" } else { "" },
                    p.plan_ns as f64 / 1e3
                )
            })
            .collect();
        out += &format!(
            "  last {} plans (time since start: GPUs in use (planner time)): {}\n",
            plans.len(),
            plans.join(", ")
        );
    }
    for g in &c.gpus {
        out += &format!(
            "  GPU {} ({}, {} CUs){}\n",
            g.index,
            g.profile,
            g.compute_units,
            if g.partitions.is_empty() {
                ": idle, no partition"
            } else {
                ""
            }
        );
        for p in &g.partitions {
            let models: Vec<String> = p
                .models
                .iter()
                .map(|(m, b, r)| format!("{m} (batch ≤{b}, {r:.1} req/s planned)"))
                .collect();
            out += &format!(
                "    {:>3} % CUs {}..{}{}: {} batch(es) running; {}\n",
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
            );
        }
    }
    out += &format!(
        "  {:<20} {:>8} {:>10} {:>10} {:>7} {:>10} {:>8} {:>8} {:>9}\n",
        "model",
        "SLO ms",
        "rate/s",
        "planned/s",
        "queued",
        "completed",
        "over SLO",
        "batches",
        "max batch"
    );
    for m in &c.models {
        out += &format!(
            "  {:<20} {:>8.1} {:>10.1} {:>10.1} {:>7} {:>10} {:>8} {:>8} {:>9}\n",
            m.name,
            m.slo_ms,
            m.rate_rps,
            m.planned_rps,
            m.queued,
            m.completed,
            m.slo_violations,
            m.batches,
            m.max_batch
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_backend::{GpuLayout, Layout, ModelLoad, PartitionLayout, PlanRecord};

    #[test]
    fn the_missed_line_counts_by_class_and_model() {
        let m = sluice_service::MissedStatus {
            total: 3,
            real_time: 2,
            best_effort: 1,
            by_model: [("resnet152".to_owned(), 2), ("vgg19".to_owned(), 1)].into(),
        };
        assert_eq!(
            missed_line(&m),
            "deadline missed (not started): 3 (2 real-time, 1 best-effort); by model: resnet152 2, vgg19 1\n"
        );
        let none = sluice_service::MissedStatus::default();
        assert_eq!(
            missed_line(&none),
            "deadline missed (not started): 0 (0 real-time, 0 best-effort)\n"
        );
    }

    #[test]
    fn the_cluster_table_names_every_partition_and_model() {
        let l = Layout {
            planner: "greedy-best-fit".into(),
            gpus: vec![GpuLayout {
                index: 0,
                profile: "mi50".into(),
                compute_units: 60,
                partitions: vec![
                    PartitionLayout {
                        size_pct: 40,
                        first_cu: 0,
                        cus: 24,
                        draining: false,
                        in_flight: 1,
                        models: vec![("resnet18".into(), 8, 120.0)],
                    },
                    PartitionLayout {
                        size_pct: 100,
                        first_cu: 0,
                        cus: 60,
                        draining: true,
                        in_flight: 2,
                        models: vec![],
                    },
                ],
            }],
            models: vec![ModelLoad {
                name: "resnet18".into(),
                slo_ms: 50.0,
                max_batch: 8,
                ..ModelLoad::default()
            }],
            switches: 3,
            plan_error: Some("needs 3 GPUs".into()),
            gpus_in_use: 1,
            recent_plans: vec![
                PlanRecord {
                    at_ms: 1500,
                    gpus_in_use: 2,
                    plan_ns: 42_000,
                    fallback: false,
                },
                PlanRecord {
                    at_ms: 2500,
                    gpus_in_use: 1,
                    plan_ns: 7_000,
                    fallback: true,
                },
            ],
            ..Layout::default()
        };
        let t = cluster_table(&l);
        for want in [
            "GPU 0 (mi50, 60 CUs)",
            "40 % CUs 0..24",
            "DRAINING",
            "resnet18 (batch ≤8",
            "needs 3 GPUs",
            "3 placements",
            "GPUs in use: 1 of 1",
            "last 2 plans",
            "1.5 s: 2 GPUs (42 µs)",
            "2.5 s: 1 GPU FALLBACK (7 µs)",
        ] {
            assert!(t.contains(want), "{want:?} missing from\n{t}");
        }
        // A status from a daemon without the fields parses, and shows
        // neither line.
        let mut json: serde_json::Value = serde_json::to_value(&l).unwrap();
        let obj = json.as_object_mut().unwrap();
        obj.remove("gpus_in_use");
        obj.remove("recent_plans");
        let old: Layout = serde_json::from_value(json).unwrap();
        let t = cluster_table(&old);
        assert!(!t.contains("GPUs in use") && !t.contains(" plans ("), "{t}");
    }
}

#[cfg(test)]
mod version_tests {
    use super::*;

    #[test]
    fn the_table_shows_each_models_version_and_the_reload_state() {
        let json = r#"{"pid":1,"version":"0.1.0","protocol":3,"uptime_s":1.0,"socket":"/s",
            "device":"cpu (1 worker thread)","dispatcher":"d","models":["fc","gx"],
            "model_versions":[{"id":0,"name":"fc","version":3,"source":"/m/fc.onnx (+ /m/fc.toml)"}],
            "models_reload":"supported","models_errors":["/m/gx.onnx: cannot import the ONNX model"],
            "device_queued":0,"submitted":0,"completed":0,"errors":0,"refused":0,
            "dropped_clients":0,"wakes":0,"parks":0,"clients":[]}"#;
        let s: Status = serde_json::from_str(json).unwrap();
        let t = table(&s);
        assert!(
            t.contains("  fc v3 (id 0): /m/fc.onnx (+ /m/fc.toml)\n"),
            "{t}"
        );
        assert!(t.contains("  ... 1 more: `sluice models list`\n"), "{t}");
        assert!(t.contains("model reloads: supported\n"), "{t}");
        assert!(
            t.contains("last reload failed: /m/gx.onnx: cannot import the ONNX model\n"),
            "{t}"
        );
        // A daemon that predates versions: no such lines.
        let old: Status = serde_json::from_str(
            &json
                .replace(r#""model_versions":[{"id":0,"name":"fc","version":3,"source":"/m/fc.onnx (+ /m/fc.toml)"}],"#, "")
                .replace(r#""models_reload":"supported","models_errors":["/m/gx.onnx: cannot import the ONNX model"],"#, ""),
        )
        .unwrap();
        let t = table(&old);
        assert!(!t.contains("model reloads") && !t.contains(" v3 "), "{t}");
    }
}
