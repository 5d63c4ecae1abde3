//! InSS as a [`sluice_planner::Planner`]: trained agents deciding the
//! placement, share and batch of the models a daemon serves
//! (`cluster.planner = "inss"`).
//!
//! A checkpoint directory written by `sluice train inss` holds the agents
//! ([`TwoStage::save`]) and the latency model they were trained on
//! ([`LATENCY_FILE`], written by [`save_latency`]): the agents' observations
//! (memory, L2/DRAM utilisation per GPU, the safe action space) are that
//! model's predictions, so the planner needs it to observe as in training.
//!
//! **What a plan is.** Every served model with a non-zero rate is one
//! instance (§6.1's instances are copies of models; the daemon serves one
//! queue per model). Instances are spread over groups of the agents' GPU
//! count (§5.1: groups of four GPUs, models spread evenly, each group
//! deciding on its own). A count that is not a multiple of it is planned
//! on its whole groups (the placement covers only those GPUs; the rest
//! stay idle), and fewer GPUs than one group is not schedulable, so
//! gpulet's GPU scaling (`plan_with_scaling`) adds GPUs until a group is
//! whole. In a
//! group the global agent places each instance and the local agent sets
//! shares and batches, greedily (no exploration), exactly as
//! `sluice bench inss` plans. Each instance takes the training rate
//! ceiling of the first trained instance of its model, so its rate is
//! normalised as in training.
//!
//! **On the daemon's grid.** InSS decides shares in whole percent and
//! batches 1–32; the daemon serves partitions of the sizes its tables list
//! (`cluster.partition_step_pct`) and the batch sizes it profiled. Each
//! share is rounded down to an allowed size (at least the smallest), then,
//! while a GPU's partitions sum past 100 %, the largest gives up one step;
//! each batch is rounded down to a profiled batch (at least the smallest).
//! With `partition_step_pct = 1` the plan is InSS's own. The agents do not
//! promise SLOs (nothing here checks the plan against the tables, as
//! gpulet's planners do): what they learned is Eq. 2's trade-off.

use sluice_rng::SeedableRng;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sluice_planner::{GpuPlan, GpuSpec, ModelSpec, Placement, PlanError, Planner};

use crate::env::Env;
use crate::latency::LatencyModel;
use crate::ts::{TsError, TwoStage};
use crate::types::ExecModel;
use crate::workload::{Decision, Instance};

/// The latency model's file in a checkpoint directory.
pub const LATENCY_FILE: &str = "latency.json";
/// Its format tag.
pub const LATENCY_FORMAT: &str = "sluice-inss-latency/1";
/// Seed of the planner's (unused, greedy) random draws: fixed, so the
/// same inputs always give the same placement.
const PLAN_SEED: u64 = 0x1_255;

#[derive(Debug, Serialize, Deserialize)]
struct LatencyFile {
    format: String,
    /// The device profile the model was fitted on.
    device: String,
    model: LatencyModel,
}

/// Why the InSS planner cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum InssPlannerError {
    /// The latency model file is missing or unreadable.
    #[error(
        "cannot read the InSS latency model {path}: {why}; the agents' directory must be one \
         `sluice train inss --out DIR` wrote (DIR or DIR/best)"
    )]
    Latency {
        /// The file.
        path: String,
        /// What went wrong.
        why: String,
    },
    /// The agents do not load.
    #[error(transparent)]
    Agents(#[from] TsError),
    /// A served model the agents were not trained on.
    #[error(
        "the InSS agents in {dir} were trained on models {known}; they cannot place {model:?}: \
         serve only those (cluster.models) or choose another cluster.planner"
    )]
    UnknownModel {
        /// The agents' directory.
        dir: String,
        /// The model.
        model: String,
        /// The models they know.
        known: String,
    },
    /// GPUs of another profile than the agents were trained for.
    #[error(
        "the InSS agents in {dir} were trained on the {trained} profile's latency model; \
         cluster.gpus lists {profile:?}: list only {trained:?} GPUs, or train agents for it \
         (`sluice train inss --device {profile} --out DIR`)"
    )]
    WrongDevice {
        /// The agents' directory.
        dir: String,
        /// Their profile.
        trained: String,
        /// The cluster's.
        profile: String,
    },
}

/// Writes `model`, fitted on device profile `device`, into `dir` as
/// [`LATENCY_FILE`] (creating `dir`).
pub fn save_latency(dir: &Path, device: &str, model: &LatencyModel) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let f = LatencyFile {
        format: LATENCY_FORMAT.into(),
        device: device.into(),
        model: model.clone(),
    };
    let text = serde_json::to_string(&f).map_err(std::io::Error::other)?;
    std::fs::write(dir.join(LATENCY_FILE), text)
}

/// Reads what [`save_latency`] wrote: (device profile, model).
pub fn load_latency(dir: &Path) -> Result<(String, LatencyModel), InssPlannerError> {
    let path = dir.join(LATENCY_FILE);
    let bad = |why: String| InssPlannerError::Latency {
        path: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
    let f: LatencyFile = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if f.format != LATENCY_FORMAT {
        return Err(bad(format!(
            "format {:?}, this build reads {LATENCY_FORMAT:?}",
            f.format
        )));
    }
    let mut model = f.model;
    model.prepare().map_err(|e| bad(e.to_string()))?;
    Ok((f.device, model))
}

/// Trained InSS agents as a planner.
#[derive(Debug)]
pub struct InssPlanner {
    ts: TwoStage,
    latency: LatencyModel,
    device: String,
    trained: Vec<Instance>,
    dir: String,
}

impl InssPlanner {
    /// Loads the agents and their latency model from `dir`.
    pub fn load(dir: &Path) -> Result<Self, InssPlannerError> {
        let (device, latency) = load_latency(dir)?;
        let (ts, trained, _) = TwoStage::load(dir, &latency)?;
        Ok(Self {
            ts,
            latency,
            device,
            trained,
            dir: dir.display().to_string(),
        })
    }

    /// The device profile the agents were trained for.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// GPUs per group: the count the agents were trained on.
    pub fn group_gpus(&self) -> usize {
        self.ts.env_config().gpus
    }

    /// The models the agents know, in their order.
    pub fn models(&self) -> Vec<&str> {
        (0..self.latency.model_count())
            .map(|m| self.latency.model_name(m))
            .collect()
    }

    /// Refuses served models the agents do not know, and GPUs of another
    /// profile than theirs.
    pub fn check(&self, served: &[&str], profiles: &[&str]) -> Result<(), InssPlannerError> {
        let known = self.models();
        if let Some(m) = served.iter().find(|m| !known.contains(m)) {
            return Err(InssPlannerError::UnknownModel {
                dir: self.dir.clone(),
                model: (*m).to_owned(),
                known: known.join(", "),
            });
        }
        if let Some(p) = profiles.iter().find(|&&p| p != self.device) {
            return Err(InssPlannerError::WrongDevice {
                dir: self.dir.clone(),
                trained: self.device.clone(),
                profile: (*p).to_owned(),
            });
        }
        Ok(())
    }

    /// The instance the planner makes of a served model: the agents' model
    /// index and the training rate ceiling of its first trained instance.
    fn instance(&self, m: &ModelSpec) -> Option<Instance> {
        let model =
            (0..self.latency.model_count()).find(|&k| self.latency.model_name(k) == m.name)?;
        let max_rate_rps = self
            .trained
            .iter()
            .find(|i| i.model == model)
            .map_or(m.rate_rps.max(1.0), |i| i.max_rate_rps);
        Some(Instance {
            name: m.name.clone(),
            model,
            slo_ms: m.slo_ms,
            max_rate_rps,
        })
    }
}

impl Planner for InssPlanner {
    fn name(&self) -> &'static str {
        "inss"
    }

    fn plan(&self, models: &[ModelSpec], gpus: &GpuSpec) -> Result<Placement, PlanError> {
        sluice_planner::validate(models, gpus)?;
        // Not empty: `validate` refuses a step or size list that allows none.
        let allowed = gpus.allowed_sizes();
        let group_gpus = self.group_gpus();
        // Whole groups only; GPUs past the last whole group stay idle.
        let groups = gpus.count as usize / group_gpus;
        if groups == 0 {
            return Err(PlanError::NotSchedulable {
                planner: "inss",
                needed: group_gpus as u64,
                available: gpus.count,
            });
        }
        let mut served = Vec::new();
        for m in models.iter().filter(|m| m.rate_rps > 0.0) {
            let Some(inst) = self.instance(m) else {
                return Err(PlanError::UnknownModel {
                    planner: "inss",
                    model: m.name.clone(),
                    known: self.models().join(", "),
                });
            };
            served.push((m, inst));
        }
        let slots = group_gpus * self.ts.env_config().max_slots;
        let mut placement = Placement {
            gpus: vec![GpuPlan::default(); groups * group_gpus],
        };
        let mut rng = sluice_rl::Rng::seed_from_u64(PLAN_SEED);
        for g in 0..groups {
            let members: Vec<usize> = (g..served.len()).step_by(groups).collect();
            if members.is_empty() {
                continue;
            }
            if members.len() > slots {
                return Err(PlanError::NotSchedulable {
                    planner: "inss",
                    needed: (served.len().div_ceil(slots) * group_gpus) as u64,
                    available: gpus.count,
                });
            }
            let group: Vec<Instance> = members.iter().map(|&i| served[i].1.clone()).collect();
            let rates: Vec<f64> = members.iter().map(|&i| served[i].0.rate_rps).collect();
            let mut env = Env::new(*self.ts.env_config(), group.clone(), PLAN_SEED);
            env.reset_with_rates(&rates);
            let empty = Decision {
                slots: vec![None; group.len()],
            };
            let (mut d, _) = self
                .ts
                .decide(&env, &self.latency, &empty, false, &mut rng)
                .map_err(|_| PlanError::NotSchedulable {
                    planner: "inss",
                    needed: u64::from(gpus.count) + 1,
                    available: gpus.count,
                })?;
            for (slot, &i) in d.slots.iter_mut().zip(&members) {
                if let Some(slot) = slot {
                    slot.batch = snap_batch(served[i].0.profile.batches(), slot.batch);
                }
            }
            let p = d.to_placement(&group, &rates, group_gpus);
            for (k, mut gp) in p.gpus.into_iter().enumerate() {
                snap_sizes(&mut gp, &allowed, gpus.partition_step_pct)?;
                placement.gpus[g * group_gpus + k] = gp;
            }
        }
        Ok(placement)
    }
}

/// The largest of `batches` (ascending) at most `b`, else the smallest.
fn snap_batch(batches: &[u32], b: u32) -> u32 {
    batches
        .iter()
        .copied()
        .filter(|&x| x <= b)
        .max()
        .or_else(|| batches.first().copied())
        .unwrap_or(b)
}

/// Rounds every partition of `gp` down to an allowed size (at least the
/// smallest), then takes one step at a time from the largest while the
/// sizes sum past 100 %.
fn snap_sizes(gp: &mut GpuPlan, allowed: &[u32], step: u32) -> Result<(), PlanError> {
    let smallest = allowed[0];
    for p in &mut gp.partitions {
        p.size_pct = allowed
            .iter()
            .copied()
            .filter(|&s| s <= p.size_pct)
            .max()
            .unwrap_or(smallest);
    }
    while gp.partitions.iter().map(|p| p.size_pct).sum::<u32>() > 100 {
        let largest = gp
            .partitions
            .iter_mut()
            .filter(|p| p.size_pct > smallest)
            .max_by_key(|p| p.size_pct);
        let Some(p) = largest else {
            return Err(PlanError::SizeNotAllowed {
                planner: "inss",
                what: format!(
                    "{} partitions on one GPU (each at least {smallest} %)",
                    gp.partitions.len()
                ),
                allowed: allowed.to_vec(),
            });
        };
        let down = p.size_pct.saturating_sub(step.max(1));
        p.size_pct = allowed
            .iter()
            .copied()
            .filter(|&s| s <= down)
            .max()
            .unwrap_or(smallest);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_planner::{LatencyTable, PartitionPlan};

    fn part(pct: u32) -> PartitionPlan {
        PartitionPlan {
            size_pct: pct,
            duty_cycle_ms: 0.0,
            models: Vec::new(),
        }
    }

    #[test]
    fn shares_round_down_to_the_grid_and_fit_the_gpu() {
        let allowed: Vec<u32> = (1..=10).map(|i| i * 10).collect();
        let mut gp = GpuPlan {
            partitions: vec![part(37), part(55), part(8)],
        };
        snap_sizes(&mut gp, &allowed, 10).unwrap();
        let sizes: Vec<u32> = gp.partitions.iter().map(|p| p.size_pct).collect();
        // 37 → 30, 55 → 50, 8 → 10 (the smallest): 90 ≤ 100, kept.
        assert_eq!(sizes, [30, 50, 10]);
        let mut gp = GpuPlan {
            partitions: vec![part(5), part(5), part(91)],
        };
        snap_sizes(&mut gp, &allowed, 10).unwrap();
        let sizes: Vec<u32> = gp.partitions.iter().map(|p| p.size_pct).collect();
        // 10 + 10 + 90 = 110: the largest gives up one step.
        assert_eq!(sizes, [10, 10, 80]);
        let mut gp = GpuPlan {
            partitions: vec![part(30), part(30), part(40)],
        };
        let e = snap_sizes(&mut gp, &[50, 100], 50).unwrap_err();
        assert!(e.to_string().contains("3 partitions on one GPU"), "{e}");
    }

    #[test]
    fn batches_round_down_to_a_profiled_batch() {
        assert_eq!(snap_batch(&[1, 2, 4, 8, 16, 32], 13), 8);
        assert_eq!(snap_batch(&[4, 8], 2), 4);
        assert_eq!(snap_batch(&[1, 2, 4], 32), 4);
    }

    /// A toy latency model, agents trained a few episodes on it, saved
    /// and loaded as the daemon does; the planner places every served
    /// model on the grid, refuses models and GPUs it does not know, and
    /// gives the same placement for the same inputs.
    #[test]
    fn trained_agents_plan_the_served_models_on_the_grid() {
        use crate::latency::{AlonePoint, LwrConfig, MemoryUse, ModelProfile};
        let sms = 100;
        let profiles: Vec<ModelProfile> = [("fast", 0.5), ("slow", 2.0)]
            .iter()
            .map(|&(name, k)| {
                let mut alone = Vec::new();
                for pct in [10u32, 25, 50, 100] {
                    for b in [1u32, 4, 16, 32] {
                        alone.push(AlonePoint {
                            batch: b,
                            sms: pct * sms / 100,
                            upload_ms: 0.0,
                            compute_ms: f64::from(b) * k * 100.0 / f64::from(pct),
                            feedback_ms: 0.0,
                            l2_util: 0.0,
                            dram_util: 0.1,
                        });
                    }
                }
                ModelProfile {
                    name: name.into(),
                    alone,
                    corun: Vec::new(),
                    memory: MemoryUse {
                        fixed_mb: 100.0,
                        per_batch_mb: 1.0,
                    },
                    waves: None,
                }
            })
            .collect();
        let latency = LatencyModel::fit(sms, 10_000.0, &profiles, &LwrConfig::FAITHFUL).unwrap();
        let instances: Vec<Instance> = (0..3)
            .map(|i| Instance {
                name: format!("m{i}"),
                model: i % 2,
                slo_ms: 50.0,
                max_rate_rps: 200.0,
            })
            .collect();
        let mut cfg = crate::ts::TrainConfig {
            episodes: 2,
            hidden: vec![16, 16],
            seed: 5,
            ..Default::default()
        };
        cfg.env.gpus = 2;
        cfg.env.max_slots = 2;
        cfg.env.steps = 4;
        cfg.sacd.batch_size = 4;
        cfg.td3.batch_size = 4;
        let (ts, recs) = crate::ts::train(&latency, &instances, &cfg, &mut |_, _| Ok(())).unwrap();
        let dir = std::env::temp_dir().join(format!("sluice-inss-planner-{}", std::process::id()));
        ts.save(&dir, &latency, &instances, 5, &recs).unwrap();
        // Without the latency model the directory is refused, naming why.
        let e = InssPlanner::load(&dir).unwrap_err().to_string();
        assert!(
            e.contains(LATENCY_FILE) && e.contains("sluice train inss"),
            "{e}"
        );
        save_latency(&dir, "toy", &latency).unwrap();
        let p = InssPlanner::load(&dir).unwrap();
        assert_eq!(p.models(), ["fast", "slow"]);
        p.check(&["slow", "fast"], &["toy", "toy"]).unwrap();
        let e = p
            .check(&["fast", "other"], &["toy"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"other\"") && e.contains("fast, slow"), "{e}");
        let e = p.check(&["fast"], &["h100"]).unwrap_err().to_string();
        assert!(e.contains("toy") && e.contains("h100"), "{e}");

        let table = |k: f64| {
            LatencyTable::from_fn(
                vec![1, 2, 4, 8],
                (1..=10).map(|i| i * 10).collect(),
                |b, p| f64::from(b) * k * 100.0 / f64::from(p),
            )
            .unwrap()
        };
        let specs = vec![
            ModelSpec {
                name: "fast".into(),
                slo_ms: 50.0,
                rate_rps: 150.0,
                mem_mb: 100,
                profile: table(0.5),
            },
            ModelSpec {
                name: "slow".into(),
                slo_ms: 50.0,
                rate_rps: 60.0,
                mem_mb: 100,
                profile: table(2.0),
            },
            ModelSpec {
                name: "idle".into(),
                slo_ms: 50.0,
                rate_rps: 0.0,
                mem_mb: 100,
                profile: table(1.0),
            },
        ];
        let spec = GpuSpec::new(4, 10_000, 10);
        let a = p.plan(&specs, &spec).unwrap();
        assert_eq!(a.gpus.len(), 4);
        let mut placed: Vec<&str> = Vec::new();
        for g in &a.gpus {
            assert!(g.partitions.iter().map(|x| x.size_pct).sum::<u32>() <= 100);
            for x in &g.partitions {
                assert!(spec.allows(x.size_pct), "{}", x.size_pct);
                for m in &x.models {
                    assert!([1, 2, 4, 8].contains(&m.batch), "{}", m.batch);
                    placed.push(m.model.as_str());
                }
            }
        }
        placed.sort_unstable();
        // The rate-0 model is not placed; the other two are, once each.
        assert_eq!(placed, ["fast", "slow"]);
        assert_eq!(p.plan(&specs, &spec).unwrap(), a);
        // Three GPUs hold one whole group of two: the plan covers those two
        // (the same plan as on two GPUs), the third stays idle.
        let on_two = p.plan(&specs, &GpuSpec::new(2, 10_000, 10)).unwrap();
        assert_eq!(on_two.gpus.len(), 2);
        assert_eq!(
            p.plan(&specs, &GpuSpec::new(3, 10_000, 10)).unwrap(),
            on_two
        );
        // One GPU is less than a group: not schedulable, so GPU scaling
        // goes on to two.
        let e = p.plan(&specs, &GpuSpec::new(1, 10_000, 10)).unwrap_err();
        assert!(
            matches!(
                e,
                PlanError::NotSchedulable {
                    needed: 2,
                    available: 1,
                    ..
                }
            ),
            "{e}"
        );
        let (scaled, used) =
            sluice_planner::plan_with_scaling(&p, &specs, &GpuSpec::new(3, 10_000, 10), 1, 3)
                .unwrap();
        assert_eq!((scaled, used), (on_two, 2));
        // A model the agents were not trained on is named, with those they know.
        let mut other = specs.clone();
        other[2].rate_rps = 10.0;
        let e = p.plan(&other, &spec).unwrap_err().to_string();
        assert!(e.contains("\"idle\"") && e.contains("fast, slow"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
