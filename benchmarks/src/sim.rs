//! `sluice bench sim`: what the GPU model itself costs to run.
//!
//! Every scheduling figure sluice reports comes from the GPU model
//! (`sluice-gpusim`), and the multi-GPU planners need it to run many
//! devices and many clients fast. This benchmark runs one real-time client
//! (VGG-19, uniform arrivals at [`WORKLOAD_C_RT_LOAD`] of its standalone
//! rate, as DISB workload C) beside `N` closed-loop best-effort clients
//! (the DISB models in turn) under a policy, and reports the wall-clock
//! time the run took per simulated second, with the device events the
//! policy saw. Wall time is this machine's: compare rows of one run only.
//!
//! The simulated time of a row is from the first arrival to the last task
//! finished: arrivals stop after `--sim-ms`, tasks in flight then finish
//! (the workload driver's drain).

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use shm_proto::Priority;
use sluice_gpu::ProfileError;
use sluice_gpu::{DeviceProfile, Ns};
use sluice_gpusim::GpuSim;
use sluice_model::ModelRegistry;
use sluice_sched::workload::{self, Arrival, ClientSpec, Workload};
use sluice_sched::{PolicyKind, make_policy};

use crate::disb::{DISB_MODELS, WORKLOAD_C_RT_LOAD, standalone_ns};

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct SimBenchOptions {
    /// Device profiles.
    pub devices: Vec<String>,
    /// Policies.
    pub policies: Vec<PolicyKind>,
    /// Numbers of best-effort clients.
    pub clients: Vec<u32>,
    /// Virtual time during which clients issue tasks, ms.
    pub sim_ms: u64,
}

impl Default for SimBenchOptions {
    fn default() -> Self {
        Self {
            devices: vec!["mi50".into(), "gv100".into()],
            policies: vec![PolicyKind::Reef, PolicyKind::Streams],
            clients: vec![1, 5, 20, 100],
            sim_ms: 200,
        }
    }
}

/// One run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimRow {
    /// Device profile.
    pub device: String,
    /// Policy.
    pub policy: String,
    /// Best-effort clients (plus one real-time client).
    pub clients: u32,
    /// Simulated seconds, first arrival to the last task finished.
    pub sim_s: f64,
    /// Wall-clock seconds the run took on this machine.
    pub wall_s: f64,
    /// `wall_s / sim_s`.
    pub wall_per_sim_s: f64,
    /// Device events delivered to the policy.
    pub events: u64,
    /// The GPU model's internal events (host pushes, fetches, launches,
    /// block groups finishing, ...): what its cost grows with.
    pub model_events: u64,
    /// Distinct virtual times among them (one dispatcher pass each).
    pub model_times: u64,
    /// Tasks finished.
    pub tasks: u64,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimReport {
    /// Always true: the figures are the GPU model's cost, not a GPU's.
    pub simulated: bool,
    /// One row per device, policy and client count.
    pub rows: Vec<SimRow>,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimBenchError {
    /// A device name with no built-in profile.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// A DISB model is missing from the built-in registry, or cannot run
    /// alone on the device.
    #[error(transparent)]
    Model(#[from] crate::ModelError),
}

/// The workload of one row: one RT VGG-19 at DISB C's load, `n` closed-loop
/// BE clients cycling through the DISB models.
fn workload(
    models: &ModelRegistry,
    profile: &DeviceProfile,
    n: u32,
    sim_ms: u64,
) -> Result<Workload, SimBenchError> {
    let id = |name: &str| {
        models
            .lookup(name)
            .map(|(id, _)| id)
            .ok_or_else(|| crate::ModelError::Missing(name.to_owned()))
    };
    let rt = id("vgg19")?;
    let rt_model = models
        .get(rt)
        .ok_or_else(|| crate::ModelError::Missing("vgg19".into()))?;
    let alone =
        standalone_ns(profile, rt_model).map_err(|source| crate::ModelError::Standalone {
            model: "vgg19".into(),
            device: profile.name.clone(),
            source,
        })?;
    let period_ns = ((alone.max(1) as f64) / WORKLOAD_C_RT_LOAD).round() as Ns;
    let mut clients = vec![ClientSpec {
        priority: Priority::RealTime,
        model: rt,
        arrival: Arrival::Uniform {
            period_ns,
            offset_ns: 0,
        },
    }];
    for i in 0..n as usize {
        clients.push(ClientSpec {
            priority: Priority::BestEffort,
            model: id(DISB_MODELS[i % DISB_MODELS.len()])?,
            arrival: Arrival::ClosedLoop,
        });
    }
    Ok(Workload {
        clients,
        duration_ns: sim_ms.saturating_mul(1_000_000),
    })
}

/// Runs every row; `progress` hears about each before it starts.
pub fn run(
    opts: &SimBenchOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<SimReport, SimBenchError> {
    let models = Arc::new(ModelRegistry::builtin());
    let mut rows = Vec::new();
    let total = opts.devices.len() * opts.policies.len() * opts.clients.len();
    for device in &opts.devices {
        let profile = DeviceProfile::builtin(device)?;
        for &policy in &opts.policies {
            for &n in &opts.clients {
                progress(&format!(
                    "[{}/{total}] {device} {policy} 1 RT + {n} BE",
                    rows.len() + 1
                ));
                let w = workload(&models, &profile, n, opts.sim_ms)?;
                let mut p = make_policy(policy, &models);
                let mut gpu = GpuSim::new(profile.clone());
                let t0 = Instant::now();
                let r = workload::run_on(&mut gpu, &models, p.as_mut(), &w);
                let wall_s = t0.elapsed().as_secs_f64();
                let sim_s = r.end_ns as f64 / 1e9;
                rows.push(SimRow {
                    device: device.clone(),
                    policy: policy.to_string(),
                    clients: n,
                    sim_s,
                    wall_s,
                    wall_per_sim_s: if sim_s > 0.0 { wall_s / sim_s } else { 0.0 },
                    events: gpu.counts().delivered,
                    model_events: gpu.counts().events,
                    model_times: gpu.counts().times,
                    tasks: r.done.len() as u64,
                });
            }
        }
    }
    Ok(SimReport {
        simulated: true,
        rows,
    })
}

/// The report as a table.
pub fn table(r: &SimReport) -> String {
    use std::fmt::Write;
    let mut s = String::from(
        "GPU model cost (wall clock on this machine per simulated second; \
         simulated devices)\n",
    );
    let _ = writeln!(
        s,
        "{:<7} {:<8} {:>7} {:>8} {:>8} {:>10} {:>10} {:>12} {:>10} {:>8}",
        "device",
        "policy",
        "BE",
        "sim s",
        "wall s",
        "wall/sim",
        "events",
        "model events",
        "times",
        "tasks"
    );
    for row in &r.rows {
        let _ = writeln!(
            s,
            "{:<7} {:<8} {:>7} {:>8.3} {:>8.3} {:>10.3} {:>10} {:>12} {:>10} {:>8}",
            row.device,
            row.policy,
            row.clients,
            row.sim_s,
            row.wall_s,
            row.wall_per_sim_s,
            row.events,
            row.model_events,
            row.model_times,
            row.tasks
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_reports_every_row_with_work_done() {
        let opts = SimBenchOptions {
            devices: vec!["mi50".into()],
            policies: vec![PolicyKind::Reef, PolicyKind::Streams],
            clients: vec![1, 3],
            sim_ms: 20,
        };
        let mut heard = 0;
        let r = run(&opts, &mut |_| heard += 1).unwrap();
        assert_eq!(heard, 4);
        assert_eq!(r.rows.len(), 4);
        for row in &r.rows {
            assert!(row.sim_s >= 0.02, "{row:?}");
            assert!(row.events > 0 && row.tasks > 0, "{row:?}");
            assert!(
                row.model_events >= row.model_times && row.model_times > 0,
                "{row:?}"
            );
            assert!(row.wall_s > 0.0, "{row:?}");
        }
        let json = serde_json::to_value(&r).unwrap();
        let first = &json["rows"][0];
        for key in ["device", "policy", "clients", "sim_s", "wall_s", "events"] {
            assert!(!first[key].is_null(), "{key} missing in {first}");
        }
        assert!(table(&r).contains("reef"));
    }

    #[test]
    fn an_unknown_device_is_named() {
        let opts = SimBenchOptions {
            devices: vec!["mi9000".into()],
            ..SimBenchOptions::default()
        };
        let e = run(&opts, &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains("mi9000"), "{e}");
    }
}
