//! `[cluster]` → [`ClusterBackend`]: each served model's `L(b, p)` measured
//! on the GPU model of the cluster's profile ([`sluice_gpusim::lbp`]), its
//! SLO and memory, and the planner (for `gpulet+int`, with gpulet's
//! interference model from `cluster.interference_data`: built in or read
//! from a folder).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_model::{Model, ModelRegistry};
use sluice_planner::{
    GPULET_DATA, GpuletInt, GreedyBestFit, LatencyTable, LinearCoefficients, LinearInterference,
    PartitionSizes, Planner, Sbp, parse_util_csv,
};
use sluice_sched::PolicyKind;

use super::{ClusterBackend, ClusterError, ClusterSetup, ServedModel};
use crate::config::{Config, PlannerKind, Scheduler};

/// Memory of one GPU of a built-in profile, MB: the vendor's figure for
/// the board the profile models (MI50 32 GB, V100 32 GB, A100 40 GB as
/// InSS's testbed, H100 80 GB).
pub fn gpu_mem_mb(profile: &str) -> u64 {
    match profile {
        "h100" => 80 * 1024,
        "a100" => 40 * 1024,
        _ => 32 * 1024,
    }
}

/// GPU memory one copy of `m` takes, MB: the end of the highest byte range
/// its kernels touch (weights, activations and workspace of one request),
/// at least 1.
pub fn model_mem_mb(m: &Model) -> u64 {
    let top = m
        .memory
        .iter()
        .flat_map(|k| k.reads.iter().chain(&k.writes))
        .map(|r| r.end)
        .max()
        .unwrap_or(0)
        .max(m.input_bytes + m.output_bytes);
    top.div_ceil(1 << 20).max(1)
}

/// The partition sizes of a `step` % grid: step, 2·step, ..., 100.
pub fn partition_sizes(step: u32) -> Vec<u32> {
    (1..=100 / step.max(1)).map(|i| i * step).collect()
}

/// The rows `L(b, p)` for `batches` × `parts` from the model's manifest,
/// when it has a simulated table of `device` listing all of them
/// (`sluice profile --device <device> MODEL --out FILE`).
pub fn from_manifest(
    m: &Model,
    device: &str,
    batches: &[u32],
    parts: &[u32],
) -> Option<Vec<Vec<f64>>> {
    let t = m
        .manifest
        .lbp
        .iter()
        .find(|t| t.simulated && t.device == device)?;
    batches
        .iter()
        .map(|b| {
            let bi = t.batches.iter().position(|x| x == b)?;
            parts
                .iter()
                .map(|p| {
                    let pi = t.partitions_pct.iter().position(|x| x == p)?;
                    Some(t.latency_ms[bi][pi])
                })
                .collect()
        })
        .collect()
}

/// Makes measured rows obey the planner's table rules: a partition may
/// leave CUs idle, so `L(b, p)` is at most `L(b, p′)` for every smaller
/// `p′`; and a batch is never counted faster than a smaller one, so
/// `L(b, p)` is at least `L(b′, p)` for every smaller `b′`. The GPU model's
/// wave quantisation breaks the first now and then by a few µs.
pub fn monotone_rows(mut rows: Vec<Vec<f64>>) -> Vec<Vec<f64>> {
    for r in &mut rows {
        for j in 1..r.len() {
            r[j] = r[j].min(r[j - 1]);
        }
    }
    for i in 1..rows.len() {
        for j in 0..rows[i].len() {
            rows[i][j] = rows[i][j].max(rows[i - 1][j]);
        }
    }
    rows
}

/// The policy inside each partition: `device.scheduler`, with `fifo`
/// (the default, which is not a policy of the GPU model) read as `seq`,
/// its GPU-model counterpart: one request at a time, real-time first.
pub fn partition_policy(config: &Config) -> PolicyKind {
    match config.device.scheduler {
        Scheduler::Fifo => PolicyKind::Seq,
        Scheduler::Policy(k) => k,
    }
}

/// Builds the cluster `config` asks for, serving every model of `models`
/// (already cut to `cluster.models` by `startup::load_models`); measures
/// the models' tables first, reporting each model to `progress`.
pub fn from_config(
    config: &Config,
    models: Arc<ModelRegistry>,
    now_ns: u64,
    progress: impl FnMut(&str),
) -> Result<ClusterBackend, ClusterError> {
    let setup = cluster_setup(config, &models, progress)?;
    let served: Vec<&str> = setup.models.iter().map(|m| m.name.as_str()).collect();
    let planner = planner(config, &served)?;
    ClusterBackend::new(setup, planner, models, now_ns)
}

/// gpulet's interference coefficients, in `cluster.interference_data`.
pub const COEFFS_FILE: &str = "INT_MODEL_CONSTANT.CSV";
/// gpulet's per-model utilisations, in `cluster.interference_data`.
pub const UTIL_FILE: &str = "UTIL.CSV";

/// The built-in data a `cluster.interference_data` value names:
/// `gpulet-2080ti` and `gpulet-3080` are the gpulet authors' measurements
/// in the repository's `data/gpulet/<gpu>/`, compiled in
/// ([`sluice_planner::GPULET_DATA`]): `(gpu, coefficients, utilisations)`.
/// Any other value is a folder.
pub fn builtin_interference_data(
    value: &Path,
) -> Option<(&'static str, &'static str, &'static str)> {
    let gpu = value.to_str()?.strip_prefix("gpulet-")?;
    GPULET_DATA.iter().find(|(g, _, _)| *g == gpu).copied()
}

/// The planner `cluster.planner` names, for the models `served`. For
/// `gpulet+int` it takes `cluster.interference_data`'s two files, built in
/// ([`builtin_interference_data`]) or read from the folder (once, here),
/// and logs which served models have no utilisation row.
pub fn planner(config: &Config, served: &[&str]) -> Result<Box<dyn Planner + Send>, ClusterError> {
    Ok(match config.cluster.planner {
        PlannerKind::Greedy => Box::new(GreedyBestFit),
        PlannerKind::Sbp => Box::new(Sbp),
        PlannerKind::Gpulet => Box::new(sluice_planner::Gpulet),
        PlannerKind::GpuletInt => {
            let dir = config
                .cluster
                .interference_data
                .as_deref()
                .ok_or(ClusterError::NoInterferenceData)?;
            let read = |name: &str| {
                let path = dir.join(name);
                std::fs::read_to_string(&path).map_err(|e| ClusterError::InterferenceData {
                    file: path.display().to_string(),
                    why: format!(
                        "{e}; cluster.interference_data must be \"gpulet-2080ti\" or \
                         \"gpulet-3080\" (built in) or name a folder holding {COEFFS_FILE} and \
                         {UTIL_FILE} in the format of gpulet's artifact (resource/<gpu>/)"
                    ),
                })
            };
            let (origin, coeffs, util) = match builtin_interference_data(dir) {
                Some((gpu, coeffs, util)) => (
                    PathBuf::from(format!("data/gpulet/{gpu} (built in)")),
                    coeffs.to_owned(),
                    util.to_owned(),
                ),
                None => (dir.to_path_buf(), read(COEFFS_FILE)?, read(UTIL_FILE)?),
            };
            let (model, unmapped) = interference_from_text(
                &origin,
                &coeffs,
                &util,
                &config.cluster.util_names,
                served,
            )?;
            if !unmapped.is_empty() {
                tracing::info!(
                    "cluster: gpulet+int: no cluster.util_names entry for {}; their interference \
                     factor is 1 (they neither slow down nor slow others)",
                    unmapped.join(", ")
                );
            }
            Box::new(GpuletInt::new(model))
        }
        #[cfg(feature = "inss")]
        PlannerKind::Inss => {
            let dir = config
                .cluster
                .inss_agents
                .as_deref()
                .ok_or(ClusterError::NoInssAgents)?;
            let bad = |e| ClusterError::InssAgents(Box::new(e));
            let p = sluice_inss::planner::InssPlanner::load(dir).map_err(bad)?;
            let profiles: Vec<&str> = config.cluster.gpus.iter().map(String::as_str).collect();
            p.check(served, &profiles).map_err(bad)?;
            let (count, group) = (profiles.len(), p.group_gpus());
            if count % group != 0 {
                tracing::warn!(
                    "cluster: inss plans whole groups of {group} GPUs (its agents' group); \
                     cluster.gpus lists {count}, so {} will stay idle: list a multiple of {group} \
                     to use them all",
                    count % group
                );
            }
            tracing::info!(
                "cluster: inss: agents from {} ({} profile; models {})",
                dir.display(),
                p.device(),
                p.models().join(", ")
            );
            Box::new(p)
        }
        #[cfg(not(feature = "inss"))]
        PlannerKind::Inss => return Err(ClusterError::InssNotBuilt),
    })
}

/// gpulet's linear interference model from the text of
/// `INT_MODEL_CONSTANT.CSV` (`coeffs`) and `UTIL.CSV` (`util`) in `dir`
/// (for messages only: nothing is read here), with each served model's
/// utilisation table found under its bench name in `names`; also the
/// served models without one, whose factor is 1. Refuses a bad file
/// (naming it and, for `UTIL.CSV`, the line), a `names` entry for a
/// model not served, and a bench name `UTIL.CSV` lacks.
pub fn interference_from_text(
    dir: &Path,
    coeffs: &str,
    util: &str,
    names: &BTreeMap<String, String>,
    served: &[&str],
) -> Result<(LinearInterference, Vec<String>), ClusterError> {
    let bad = |file: &str, why: String| ClusterError::InterferenceData {
        file: dir.join(file).display().to_string(),
        why,
    };
    let c = LinearCoefficients::parse_csv(coeffs).map_err(|e| bad(COEFFS_FILE, e.to_string()))?;
    let tables = parse_util_csv(util).map_err(|e| bad(UTIL_FILE, e.to_string()))?;
    let listed: Vec<String> = tables.keys().cloned().collect();
    let mut model = LinearInterference::new(c);
    for (m, bench) in names {
        if !served.contains(&m.as_str()) {
            return Err(ClusterError::UtilName {
                model: m.clone(),
                served: served.join(", "),
            });
        }
        let Some(t) = tables.get(bench).cloned() else {
            return Err(bad(
                UTIL_FILE,
                format!(
                    "cluster.util_names.{m} = {bench:?}, but the file has no rows of that bench; \
                     it lists {}",
                    listed.join(", ")
                ),
            ));
        };
        model = model.with_util(m, t);
    }
    let unmapped = served
        .iter()
        .filter(|m| !names.contains_key(**m))
        .map(|m| (*m).to_owned())
        .collect();
    Ok((model, unmapped))
}

/// What `[cluster]` serves, with every model's table measured.
pub fn cluster_setup(
    config: &Config,
    models: &ModelRegistry,
    mut progress: impl FnMut(&str),
) -> Result<ClusterSetup, ClusterError> {
    let c = &config.cluster;
    let profiles = c
        .gpus
        .iter()
        .map(|g| {
            sluice_gpu::DeviceProfile::builtin(g).map_err(|e| ClusterError::Profile {
                profile: g.clone(),
                why: e.to_string(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let first = profiles.first().ok_or(ClusterError::NoGpus)?.clone();
    // With `cluster.partition_sizes`, only those sizes are profiled.
    let parts = c
        .partition_sizes
        .clone()
        .unwrap_or_else(|| partition_sizes(c.partition_step_pct));
    let sizes_pct = match &c.partition_sizes {
        Some(list) => {
            Some(PartitionSizes::new(list).map_err(|e| ClusterError::Sizes(e.to_string()))?)
        }
        None => None,
    };
    let mut served = Vec::new();
    for (id, m) in models.iter() {
        let rows = match from_manifest(m, &first.name, &c.batches, &parts) {
            Some(rows) => {
                progress(&format!("{} (its manifest's table)", m.name()));
                rows
            }
            None => {
                progress(&format!("{} (measuring)", m.name()));
                let points = sluice_gpusim::lbp::measure(&first, m, &c.batches, &parts, |_, _| {})
                    .map_err(|e| ClusterError::Profiling {
                        model: m.name().to_owned(),
                        why: e.to_string(),
                    })?;
                sluice_gpusim::lbp::latency_rows_ms(&points, parts.len())
            }
        };
        let rows = monotone_rows(rows);
        let table = LatencyTable::new(c.batches.clone(), parts.clone(), rows).map_err(|e| {
            ClusterError::Profiling {
                model: m.name().to_owned(),
                why: e.to_string(),
            }
        })?;
        let slo_ms = c.slo_of(m.name());
        let fastest = table.latency_ms(c.batches[0], 100).unwrap_or(f64::INFINITY);
        if slo_ms < 2.0 * fastest {
            return Err(ClusterError::SloUnreachable {
                model: m.name().to_owned(),
                slo_ms,
                fastest_ms: fastest,
                profile: first.name.clone(),
            });
        }
        served.push(ServedModel {
            id,
            name: m.name().to_owned(),
            slo_ms,
            mem_mb: model_mem_mb(m),
            table,
        });
    }
    Ok(ClusterSetup {
        gpu_mem_mb: gpu_mem_mb(&first.name),
        gpus: profiles,
        policy: partition_policy(config),
        models: served,
        partition_step_pct: c.partition_step_pct,
        sizes_pct,
        scaling: c.scaling,
        replan_ns: u64::from(c.replan_ms) * 1_000_000,
        rate_window_ns: u64::from(c.rate_window_ms) * 1_000_000,
        rate_change: c.rate_change,
        headroom: c.headroom,
        burst: c
            .burst_overflow
            .map_or(sluice_planner::Burst::Mean, sluice_planner::Burst::Poisson),
        execution: super::Execution::GpuModel,
    })
}
