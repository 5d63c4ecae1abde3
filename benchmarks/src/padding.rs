//! `sluice bench padding`: REEF §6.5's one-to-one padding matrix on the
//! GPU model.
//!
//! One real-time and one best-effort client, both closed loop ("requests at
//! a high-enough frequency to keep the GPU busy", REEF §6.5), for every
//! ordered pair of models, under four schemes: `streams` (REEF's
//! GPUStreams), `reef` without padding (the baseline the gains are counted
//! from: the real-time task alone keeps the GPU busy), `reef` with dynamic
//! kernel padding but no multi-version selection (DKP) and `reef` as the
//! paper describes it (DKP-MV). Metrics as in DISB (`crate::disb`): the
//! real-time task's mean end-to-end latency over its standalone time, and
//! the overall normalised throughput (each client's requests per second
//! times its standalone time, summed: 1.0 is one GPU's worth of serial
//! work).
//!
//! The published figures REEF gives in the text of §6.5 (MI50) come with
//! the report ([`PUBLISHED`]), so that every simulated figure stands beside
//! the paper's.

use std::sync::{Arc, Mutex};

use serde::Serialize;
use shm_proto::Priority;
use sluice_gpu::{DeviceProfile, Ns, ProfileError};
use sluice_gpusim::GpuSim;
use sluice_model::ModelRegistry;
use sluice_sched::Policy;
use sluice_sched::reef::{Reef, ReefConfig};
use sluice_sched::streams::Streams;
use sluice_sched::workload::{self, Arrival, ClientSpec, Workload};

use crate::disb::{DISB_MODELS, standalone_ns};

/// The schemes, in report order.
pub const SCHEMES: [&str; 4] = ["streams", "reef-nopad", "dkp", "dkp-mv"];

/// REEF's §6.5 figures on the MI50, as the text states them.
pub const PUBLISHED: &[(&str, &str)] = &[
    ("streams_rt_latency_mean", "1.34x (1.10x to 1.62x)"),
    ("streams_throughput_mean", "1.50x"),
    ("dkp_rt_latency_overhead_mean", "1.0% (up to 2.9%)"),
    ("dkp_throughput_mean", "1.12x (up to 1.34x)"),
    ("dkp_mv_throughput_mean", "1.18x (up to 1.57x)"),
    ("dkp_rt_resnet152_be_vgg19_gain", "+19.8%"),
    ("dkp_rt_yolov3_be_vgg19_gain", "+8.1%"),
    ("rt_resnet152_mean_dkp_to_dkp_mv", "1.16x -> 1.29x"),
    (
        "dkp_zero_be_throughput",
        "yolov3-gpt2, bert-resnet152, bert-vgg19, gpt2-yolov3 (RT-BE)",
    ),
];

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct PaddingOptions {
    /// Device profile.
    pub device: String,
    /// Models; every ordered pair runs (a model beside itself included).
    pub models: Vec<String>,
    /// Virtual time of each run, ms.
    pub duration_ms: u64,
    /// Worker threads.
    pub jobs: usize,
}

impl Default for PaddingOptions {
    fn default() -> Self {
        Self {
            device: "mi50".into(),
            models: DISB_MODELS.iter().map(|m| (*m).to_owned()).collect(),
            duration_ms: 1_000,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// One run: a pair under a scheme.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairRow {
    /// The real-time model.
    pub rt: String,
    /// The best-effort model.
    pub be: String,
    /// The scheme.
    pub scheme: String,
    /// Mean RT end-to-end latency / RT standalone time.
    pub rt_latency_norm: f64,
    /// RT normalised throughput.
    pub rt_throughput_norm: f64,
    /// BE normalised throughput.
    pub be_throughput_norm: f64,
    /// Their sum.
    pub throughput_norm: f64,
}

/// Per scheme, over the pairs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchemeSummary {
    /// The scheme.
    pub scheme: String,
    /// Mean of `rt_latency_norm`.
    pub rt_latency_norm_mean: f64,
    /// Largest `rt_latency_norm`.
    pub rt_latency_norm_max: f64,
    /// Mean of `throughput_norm`.
    pub throughput_norm_mean: f64,
    /// Largest `throughput_norm`.
    pub throughput_norm_max: f64,
    /// Pairs in which the BE client finished nothing.
    pub be_starved: Vec<String>,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PaddingReport {
    /// Always true: figures from the GPU model.
    pub simulated: bool,
    /// Device profile.
    pub device: String,
    /// Virtual ms per run.
    pub duration_ms: u64,
    /// Each model's standalone time on the model GPU, ms, and its
    /// provenance (measured, estimated or synthetic).
    pub models: Vec<(String, f64, String)>,
    /// Every run.
    pub rows: Vec<PairRow>,
    /// Per scheme.
    pub summary: Vec<SchemeSummary>,
    /// REEF §6.5's published figures (MI50), for comparison.
    pub published: Vec<(String, String)>,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum PaddingError {
    /// A device with no built-in profile.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// A model not in the built-in registry, or one that cannot run alone
    /// on the device.
    #[error(transparent)]
    Model(#[from] crate::ModelError),
}

fn policy(scheme: &str, models: &Arc<ModelRegistry>) -> Box<dyn Policy> {
    let reef = |padding: bool, multi_version: bool| {
        Box::new(Reef::new(
            Arc::clone(models),
            ReefConfig {
                padding,
                multi_version,
                ..ReefConfig::reef()
            },
        ))
    };
    match scheme {
        "streams" => Box::new(Streams::new()),
        "reef-nopad" => reef(false, false),
        "dkp" => reef(true, false),
        _ => reef(true, true),
    }
}

/// Runs the matrix; `progress` hears of each run as it finishes.
pub fn run(
    opts: &PaddingOptions,
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> Result<PaddingReport, PaddingError> {
    let profile = DeviceProfile::builtin(&opts.device)?;
    let models = Arc::new(ModelRegistry::builtin());
    let mut ids = Vec::new();
    let mut alone = Vec::new();
    let mut info = Vec::new();
    for name in &opts.models {
        let (id, m) = models
            .lookup(name)
            .ok_or_else(|| crate::ModelError::Missing(name.clone()))?;
        let t = standalone_ns(&profile, m)
            .map_err(|source| crate::ModelError::Standalone {
                model: name.clone(),
                device: profile.name.clone(),
                source,
            })?
            .max(1);
        ids.push(id);
        alone.push(t);
        let kind = m
            .manifest
            .provenance
            .split(':')
            .next()
            .unwrap_or("")
            .to_owned();
        info.push((name.clone(), t as f64 / 1e6, kind));
    }
    let mut jobs = Vec::new();
    for r in 0..ids.len() {
        for b in 0..ids.len() {
            for scheme in SCHEMES {
                jobs.push((r, b, scheme));
            }
        }
    }
    let total = jobs.len();
    let duration_ns: Ns = opts.duration_ms.saturating_mul(1_000_000);
    let next = Mutex::new(0usize);
    let rows = Mutex::new(vec![None; total]);
    let progress = Mutex::new(progress);
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.max(1) {
            s.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap_or_else(|e| e.into_inner());
                        let i = *n;
                        *n += 1;
                        i
                    };
                    let Some(&(r, b, scheme)) = jobs.get(i) else {
                        return;
                    };
                    let w = Workload {
                        clients: vec![
                            ClientSpec {
                                priority: Priority::RealTime,
                                model: ids[r],
                                arrival: Arrival::ClosedLoop,
                            },
                            ClientSpec {
                                priority: Priority::BestEffort,
                                model: ids[b],
                                arrival: Arrival::ClosedLoop,
                            },
                        ],
                        duration_ns,
                    };
                    let mut p = policy(scheme, &models);
                    let mut gpu = GpuSim::new(profile.clone());
                    let res = workload::run_on(&mut gpu, &models, p.as_mut(), &w);
                    let secs = duration_ns as f64 / 1e9;
                    let mut lat = 0.0;
                    let mut counts = [0u64; 2];
                    for d in &res.done {
                        // Only tasks that arrived in the window count.
                        if d.task.arrival >= duration_ns {
                            continue;
                        }
                        let c = d.task.client as usize;
                        counts[c] += 1;
                        if c == 0 {
                            lat += (d.finished - d.task.arrival) as f64;
                        }
                    }
                    let rt_lat = if counts[0] > 0 {
                        lat / counts[0] as f64 / alone[r] as f64
                    } else {
                        f64::INFINITY
                    };
                    let rt_thr = counts[0] as f64 / secs * alone[r] as f64 / 1e9;
                    let be_thr = counts[1] as f64 / secs * alone[b] as f64 / 1e9;
                    let row = PairRow {
                        rt: opts.models[r].clone(),
                        be: opts.models[b].clone(),
                        scheme: scheme.to_owned(),
                        rt_latency_norm: rt_lat,
                        rt_throughput_norm: rt_thr,
                        be_throughput_norm: be_thr,
                        throughput_norm: rt_thr + be_thr,
                    };
                    let done = {
                        let mut rows = rows.lock().unwrap_or_else(|e| e.into_inner());
                        rows[i] = Some(row);
                        rows.iter().filter(|r| r.is_some()).count()
                    };
                    let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
                    (*p)(done, total);
                }
            });
        }
    });
    let rows: Vec<PairRow> = rows
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .flatten()
        .collect();
    let summary = SCHEMES
        .iter()
        .map(|&scheme| {
            let of: Vec<&PairRow> = rows.iter().filter(|r| r.scheme == scheme).collect();
            let n = of.len().max(1) as f64;
            SchemeSummary {
                scheme: scheme.to_owned(),
                rt_latency_norm_mean: of.iter().map(|r| r.rt_latency_norm).sum::<f64>() / n,
                rt_latency_norm_max: of.iter().map(|r| r.rt_latency_norm).fold(0.0, f64::max),
                throughput_norm_mean: of.iter().map(|r| r.throughput_norm).sum::<f64>() / n,
                throughput_norm_max: of.iter().map(|r| r.throughput_norm).fold(0.0, f64::max),
                be_starved: of
                    .iter()
                    .filter(|r| r.be_throughput_norm == 0.0)
                    .map(|r| format!("{}-{}", r.rt, r.be))
                    .collect(),
            }
        })
        .collect();
    Ok(PaddingReport {
        simulated: true,
        device: profile.name.clone(),
        duration_ms: opts.duration_ms,
        models: info,
        rows,
        summary,
        published: PUBLISHED
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    })
}

/// The report as tables: overall throughput per pair and scheme, then the
/// per-scheme summary beside REEF's published figures.
pub fn table(r: &PaddingReport) -> String {
    use std::fmt::Write;
    let mut s = format!(
        "REEF §6.5 padding matrix, simulated {} GPU, {} ms virtual per run\n\
         (RT latency = mean end-to-end / standalone; thr = overall normalised throughput)\n\n",
        r.device, r.duration_ms
    );
    let _ = writeln!(
        s,
        "{:<10} {:<10} {:>13} {:>13} {:>13} {:>13}",
        "RT", "BE", "streams", "reef-nopad", "dkp", "dkp-mv"
    );
    let mut pairs: Vec<(&str, &str)> = r
        .rows
        .iter()
        .map(|x| (x.rt.as_str(), x.be.as_str()))
        .collect();
    pairs.dedup();
    for (rt, be) in pairs {
        let _ = write!(s, "{rt:<10} {be:<10}");
        for scheme in SCHEMES {
            match r
                .rows
                .iter()
                .find(|x| x.rt == rt && x.be == be && x.scheme == scheme)
            {
                Some(x) => {
                    let _ = write!(s, " {:>5.2}x {:>5.3}", x.rt_latency_norm, x.throughput_norm);
                }
                None => s.push_str("             -"),
            }
        }
        s.push('\n');
    }
    s.push_str("\nper scheme: RT latency mean (max), throughput mean (max), BE starved\n");
    for m in &r.summary {
        let _ = writeln!(
            s,
            "{:<11} {:.3} ({:.3})  {:.3} ({:.3})  {}",
            m.scheme,
            m.rt_latency_norm_mean,
            m.rt_latency_norm_max,
            m.throughput_norm_mean,
            m.throughput_norm_max,
            if m.be_starved.is_empty() {
                "-".to_owned()
            } else {
                m.be_starved.join(", ")
            }
        );
    }
    s.push_str("\nREEF §6.5 (MI50, published):\n");
    for (k, v) in &r.published {
        let _ = writeln!(s, "  {k}: {v}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_matrix_has_every_pair_and_scheme() {
        let opts = PaddingOptions {
            models: vec!["vgg19".into(), "resnet152".into()],
            duration_ms: 60,
            jobs: 2,
            ..PaddingOptions::default()
        };
        let mut calls = 0;
        let r = run(&opts, &mut |_, _| calls += 1).unwrap();
        assert_eq!(r.rows.len(), 2 * 2 * SCHEMES.len());
        assert_eq!(calls, r.rows.len());
        for row in &r.rows {
            assert!(row.rt_throughput_norm > 0.0, "{row:?}");
            assert!(row.rt_latency_norm >= 0.99, "{row:?}");
        }
        // reef keeps the RT client at its standalone latency with or
        // without padding; streams does not.
        for row in r.rows.iter().filter(|r| r.scheme != "streams") {
            assert!(row.rt_latency_norm < 1.02, "{row:?}");
        }
        let mean = |scheme: &str| {
            let of: Vec<f64> = r
                .rows
                .iter()
                .filter(|x| x.scheme == scheme)
                .map(|x| x.rt_latency_norm)
                .collect();
            of.iter().sum::<f64>() / of.len() as f64
        };
        assert!(mean("streams") > mean("dkp-mv"));
        assert!(table(&r).contains("dkp-mv"));
        assert_eq!(r.summary.len(), SCHEMES.len());
    }

    #[test]
    fn an_unknown_model_is_named() {
        let opts = PaddingOptions {
            models: vec!["vgg99".into()],
            ..PaddingOptions::default()
        };
        let e = run(&opts, &mut |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("vgg99"), "{e}");
    }
}
