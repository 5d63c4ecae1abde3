//! TS, InSS's two-stage intelligent scheduler (§5, Algorithm 1): a
//! SAC-Discrete agent places each instance on a GPU (global stage), then a
//! TD3 agent chooses, per GPU, each of its instances' share and batch
//! (local stage). Both are trained together in [`Env`] on the latency
//! model.
//!
//! **One network per stage.** §5.1 trains "an actor network for each
//! model"; here one SACD actor (and its critics) serves every instance,
//! told apart by the model one-hot in its observation, and one TD3 agent
//! serves every GPU (the GPUs are alike and their local problems
//! independent, §5.2). Each step gives the global agent one transition per
//! instance and the local agent one per GPU in use, so both see more data
//! per episode than per-model networks would; an update per agent per step
//! follows Algorithm 1 lines 17–25.
//!
//! **Checkpoints** (`sluice train inss --out DIR`): `DIR/inss.json` (format
//! `sluice-inss/1`: the instances, models, environment, seed, episodes
//! trained and the per-episode training record), `DIR/sacd/` and
//! `DIR/td3/` (`sluice-rl` checkpoints: safetensors weights and a JSON
//! sidecar). [`TwoStage::load`] checks the models and dimensions against
//! what the caller serves and names any mismatch.

use sluice_rng::SeedableRng;
use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sluice_rl::{
    Action, Head, Rng, Sacd, SacdConfig, SacdHyper, Td3, Td3Config, Td3Hyper, Transition,
};

use crate::env::{Env, EnvConfig, StepOutcome};
use crate::features::{
    GlobalStage, apply_local, global_dim, local_action_dim, local_dim, local_observe,
};
use crate::types::ExecModel;
use crate::workload::{Decision, Instance};

/// Checkpoint format name.
pub const FORMAT: &str = "sluice-inss/1";

/// Why training, deciding or a checkpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum TsError {
    /// An agent could not be built.
    #[error("cannot build the {stage} agent")]
    Build {
        /// `"global (SACD)"` or `"local (TD3)"`.
        stage: &'static str,
        /// Why.
        #[source]
        source: sluice_rl::BuildError,
    },
    /// An agent could not act.
    #[error("the {stage} agent could not act")]
    Act {
        /// Which.
        stage: &'static str,
        /// Why.
        #[source]
        source: sluice_rl::ActError,
    },
    /// An update failed (non-finite loss).
    #[error("the {stage} agent's update failed in episode {episode}")]
    Update {
        /// Which.
        stage: &'static str,
        /// Episode.
        episode: usize,
        /// Why.
        #[source]
        source: sluice_rl::UpdateError,
    },
    /// Replay push or sample failed.
    #[error("replay buffer of the {stage} agent: {message}")]
    Replay {
        /// Which.
        stage: &'static str,
        /// What went wrong.
        message: String,
    },
    /// A checkpoint could not be written.
    #[error("cannot write the checkpoint in {dir}: {message}")]
    Save {
        /// Directory.
        dir: String,
        /// Why.
        message: String,
    },
    /// A checkpoint could not be read or does not fit.
    #[error("cannot load the InSS agents from {dir}: {message}")]
    Load {
        /// Directory.
        dir: String,
        /// Why, naming the mismatch.
        message: String,
    },
    /// No GPU can take an instance (every GPU full or out of memory).
    #[error(
        "instance {instance:?} fits no GPU: all {gpus} GPUs have {slots} instances or no memory left; add GPUs or raise max_slots"
    )]
    NoSafeGpu {
        /// The instance.
        instance: String,
        /// GPUs.
        gpus: usize,
        /// Slots per GPU.
        slots: usize,
    },
}

/// Training parameters: Table 2 by default.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    /// The environment.
    pub env: EnvConfig,
    /// Episodes (Table 2: E = 1600).
    pub episodes: usize,
    /// Hidden layers of every network (Table 2: two of 256).
    pub hidden: Vec<usize>,
    /// The global stage's hyperparameters (Table 2 defaults).
    pub sacd: SacdHyper,
    /// The local stage's (Table 2 defaults).
    pub td3: Td3Hyper,
    /// Seed of the weights, exploration, replay sampling and the
    /// environment.
    pub seed: u64,
    /// Factor on every reward stored for learning; the episode records
    /// keep Eq. 2's unscaled reward. Table 2 gives none. Eq. 2 with
    /// ω = 40 makes a step's reward reach −40 per instance and the
    /// critics' targets thousands; [`DEFAULT_REWARD_SCALE`] (0.1) brings
    /// a step's reward within a few units without changing which decision is best
    /// (docs/inss.md, "Reward scale", has the runs that chose it).
    pub reward_scale: f64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            env: EnvConfig::default(),
            episodes: 1600,
            hidden: sluice_rl::DEFAULT_HIDDEN.to_vec(),
            sacd: SacdHyper::default(),
            td3: Td3Hyper::default(),
            seed: 1,
            reward_scale: DEFAULT_REWARD_SCALE,
        }
    }
}

/// The factor [`TrainConfig::reward_scale`] defaults to: 4/ω for Eq. 2's
/// ω = 40, so that a step in which every request of an instance is
/// violated costs it −4. Of the scales compared (1, 0.1, 1/ω, 0.005;
/// docs/inss.md, "Reward scale") 0.1 ended highest in training reward.
pub const DEFAULT_REWARD_SCALE: f64 = 0.1;

/// One training episode's record (Fig. 8–9).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EpisodeRecord {
    /// Episode, from 1.
    pub episode: usize,
    /// Mean per-step Eq. 2 reward (sum over instances).
    pub reward: f64,
    /// Mean served throughput, requests/s.
    pub throughput: f64,
    /// Violations (dropped or late) over arrivals.
    pub violation: f64,
    /// The SACD temperature at the episode's end.
    pub alpha: f64,
    /// Wall seconds the episode took.
    pub wall_s: f64,
}

/// The agents' greedy score on the training environment ([`TwoStage::evaluate`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EvalScore {
    /// Mean per-step Eq. 2 reward (sum over instances, unscaled).
    pub reward: f64,
    /// Mean served throughput, requests/s.
    pub throughput: f64,
    /// Violations (dropped or late) over arrivals.
    pub violation: f64,
    /// Episodes run.
    pub episodes: usize,
    /// Seed of their rates and arrivals.
    pub seed: u64,
}

/// What the global agent saw and did for one instance.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalStep {
    /// Its observation.
    pub state: Vec<f32>,
    /// Its safe GPUs.
    pub mask: Vec<bool>,
    /// The GPU chosen.
    pub gpu: usize,
}

/// What the local agent saw and did for one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalStep {
    /// Its observation.
    pub state: Vec<f32>,
    /// Its present slots.
    pub mask: Vec<bool>,
    /// The action (empty for a GPU with no instance).
    pub action: Vec<f32>,
    /// Its instances, in slot order.
    pub members: Vec<usize>,
}

/// What one decision saw and did, for replay.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// Per instance.
    pub global: Vec<GlobalStep>,
    /// Per GPU.
    pub local: Vec<LocalStep>,
}

/// The two agents.
#[derive(Debug)]
pub struct TwoStage {
    sacd: Sacd,
    td3: Td3,
    models: usize,
    env: EnvConfig,
    /// The factor its training put on rewards ([`TrainConfig::reward_scale`]).
    reward_scale: f64,
}

fn unit_scale() -> f64 {
    1.0
}

/// The JSON sidecar of a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Sidecar {
    format: String,
    models: Vec<String>,
    instances: Vec<(String, usize, f64, f64)>,
    gpus: usize,
    max_slots: usize,
    max_batch: u32,
    step_s: f64,
    steps: usize,
    omega: f64,
    rate_low: f64,
    rate_high: f64,
    rate_walk: f64,
    seed: u64,
    episodes: usize,
    hidden: Vec<usize>,
    /// Absent in checkpoints written before it existed: 1.
    #[serde(default = "unit_scale")]
    reward_scale: f64,
    training: Vec<EpisodeRecord>,
}

impl TwoStage {
    /// Fresh agents for `models` models on `env`'s GPUs and slots.
    pub fn new(
        models: usize,
        env: EnvConfig,
        hidden: &[usize],
        sacd: SacdHyper,
        td3: Td3Hyper,
        seed: u64,
    ) -> Result<Self, TsError> {
        let mut sc = SacdConfig::new(global_dim(models, env.gpus), env.gpus);
        sc.hidden = hidden.to_vec();
        sc.hyper = sacd;
        let head = Head::SoftmaxThenSigmoid {
            softmax: env.max_slots,
        };
        let mut tc = Td3Config::new(
            local_dim(models, env.max_slots),
            local_action_dim(env.max_slots),
            head,
        );
        tc.hidden = hidden.to_vec();
        tc.hyper = td3;
        Ok(Self {
            sacd: Sacd::new(sc, seed).map_err(|source| TsError::Build {
                stage: "global (SACD)",
                source,
            })?,
            td3: Td3::new(tc, seed.wrapping_add(1)).map_err(|source| TsError::Build {
                stage: "local (TD3)",
                source,
            })?,
            models,
            env,
            reward_scale: 1.0,
        })
    }

    /// The environment parameters the agents were built for.
    pub fn env_config(&self) -> &EnvConfig {
        &self.env
    }

    /// A digest of both agents' weights (equal runs give equal digests).
    pub fn digest(&self) -> u64 {
        self.sacd.weights_digest() ^ self.td3.weights_digest().rotate_left(1)
    }

    /// Algorithm 1 lines 6–14: places every instance in order with SACD
    /// (masked to its safe GPUs), then sets each GPU's shares and batches
    /// with TD3. `explore` samples SACD's policy and adds TD3's noise;
    /// otherwise both act greedily.
    pub fn decide(
        &self,
        env: &Env,
        exec: &dyn ExecModel,
        prev: &Decision,
        explore: bool,
        rng: &mut Rng,
    ) -> Result<(Decision, Trace), TsError> {
        let n = env.instances().len();
        let gpus = env.config().gpus;
        let mut stage = GlobalStage::new(env, exec, prev);
        let mut global = Vec::with_capacity(n);
        for i in 0..n {
            let s = stage.observe(i);
            let mask = stage.mask(i);
            if !mask.iter().any(|&m| m) {
                return Err(TsError::NoSafeGpu {
                    instance: env.instances()[i].name.clone(),
                    gpus,
                    slots: env.config().max_slots,
                });
            }
            let k = self
                .sacd
                .act(&s, Some(&mask), explore, rng)
                .map_err(|source| TsError::Act {
                    stage: "global (SACD)",
                    source,
                })?;
            stage.place(i, k);
            global.push(GlobalStep {
                state: s,
                mask,
                gpu: k,
            });
        }
        let mut d = Decision {
            slots: vec![None; n],
        };
        let mut local = Vec::with_capacity(gpus);
        for k in 0..gpus {
            let members = stage.on_gpu(k);
            let mem: f64 = members
                .iter()
                .map(|&i| exec.mem_mb(env.instances()[i].model, crate::features::REFERENCE_BATCH))
                .sum();
            let (s, mask) = local_observe(env, exec, &members, mem);
            if members.is_empty() {
                local.push(LocalStep {
                    state: s,
                    mask,
                    action: Vec::new(),
                    members,
                });
                continue;
            }
            let a = self
                .td3
                .act(&s, Some(&mask), explore, rng)
                .map_err(|source| TsError::Act {
                    stage: "local (TD3)",
                    source,
                })?;
            apply_local(&mut d, k, &members, &a, env.config().max_batch);
            local.push(LocalStep {
                state: s,
                mask,
                action: a,
                members,
            });
        }
        Ok((d, Trace { global, local }))
    }

    /// Runs `episodes` episodes of the training environment (the latency
    /// model `exec`, rates drawn as in training from `seed`) under greedy
    /// decisions, re-deciding every step as in training but without
    /// exploration or learning. The same agents and seed give the same
    /// score. Training keeps the checkpoint that scores best (`sluice
    /// train inss --eval-every`): a rule that reads the training
    /// environment only, never the serving benchmark.
    pub fn evaluate(
        &self,
        exec: &dyn ExecModel,
        instances: &[Instance],
        episodes: usize,
        seed: u64,
    ) -> Result<EvalScore, TsError> {
        let mut rng = Rng::seed_from_u64(seed);
        evaluate_decisions(
            self.env,
            exec,
            instances,
            episodes,
            seed,
            &mut |env, prev| Ok(self.decide(env, exec, prev, false, &mut rng)?.0),
        )
    }

    /// The factor its training put on rewards (1 for agents saved before
    /// the factor was recorded).
    pub fn reward_scale(&self) -> f64 {
        self.reward_scale
    }

    /// Saves both agents and the sidecar into `dir`.
    pub fn save(
        &self,
        dir: &Path,
        exec: &dyn ExecModel,
        instances: &[Instance],
        seed: u64,
        training: &[EpisodeRecord],
    ) -> Result<(), TsError> {
        let err = |message: String| TsError::Save {
            dir: dir.display().to_string(),
            message,
        };
        std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
        self.sacd
            .save(&dir.join("sacd"))
            .map_err(|e| err(format!("global (SACD) agent: {e}")))?;
        self.td3
            .save(&dir.join("td3"))
            .map_err(|e| err(format!("local (TD3) agent: {e}")))?;
        let e = &self.env;
        let side = Sidecar {
            format: FORMAT.into(),
            models: (0..exec.model_count())
                .map(|m| exec.model_name(m).to_owned())
                .collect(),
            instances: instances
                .iter()
                .map(|i| (i.name.clone(), i.model, i.slo_ms, i.max_rate_rps))
                .collect(),
            gpus: e.gpus,
            max_slots: e.max_slots,
            max_batch: e.max_batch,
            step_s: e.step_s,
            steps: e.steps,
            omega: e.omega,
            rate_low: e.rate_low,
            rate_high: e.rate_high,
            rate_walk: e.rate_walk,
            seed,
            episodes: training.len(),
            hidden: self.sacd.config().hidden.clone(),
            reward_scale: self.reward_scale,
            training: training.to_vec(),
        };
        let json = serde_json::to_string_pretty(&side).map_err(|e| err(e.to_string()))?;
        std::fs::write(dir.join("inss.json"), json).map_err(|e| err(e.to_string()))
    }

    /// Loads agents saved by [`TwoStage::save`] for `exec`'s models;
    /// returns them with the saved instances and training record.
    pub fn load(
        dir: &Path,
        exec: &dyn ExecModel,
    ) -> Result<(Self, Vec<Instance>, Vec<EpisodeRecord>), TsError> {
        let err = |message: String| TsError::Load {
            dir: dir.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(dir.join("inss.json")).map_err(|e| {
            err(format!(
                "inss.json: {e}; train agents with `sluice train inss --out {}`",
                dir.display()
            ))
        })?;
        let side: Sidecar =
            serde_json::from_str(&text).map_err(|e| err(format!("inss.json: {e}")))?;
        if side.format != FORMAT {
            return Err(err(format!(
                "inss.json has format {:?}, this build reads {FORMAT:?}",
                side.format
            )));
        }
        let models: Vec<String> = (0..exec.model_count())
            .map(|m| exec.model_name(m).to_owned())
            .collect();
        if side.models != models {
            return Err(err(format!(
                "the agents were trained for models {:?}, this latency model has {:?}; retrain",
                side.models, models
            )));
        }
        let env = EnvConfig {
            gpus: side.gpus,
            max_slots: side.max_slots,
            step_s: side.step_s,
            steps: side.steps,
            omega: side.omega,
            max_batch: side.max_batch,
            rate_low: side.rate_low,
            rate_high: side.rate_high,
            rate_walk: side.rate_walk,
        };
        let m = models.len();
        let sacd = Sacd::load(&dir.join("sacd"), global_dim(m, env.gpus), env.gpus)
            .map_err(|e| err(format!("global (SACD) agent: {e}")))?;
        let head = Head::SoftmaxThenSigmoid {
            softmax: env.max_slots,
        };
        let td3 = Td3::load(
            &dir.join("td3"),
            local_dim(m, env.max_slots),
            local_action_dim(env.max_slots),
            head,
        )
        .map_err(|e| err(format!("local (TD3) agent: {e}")))?;
        let instances = side
            .instances
            .iter()
            .map(|(name, model, slo, rate)| Instance {
                name: name.clone(),
                model: *model,
                slo_ms: *slo,
                max_rate_rps: *rate,
            })
            .collect();
        Ok((
            Self {
                sacd,
                td3,
                models: m,
                env,
                reward_scale: side.reward_scale,
            },
            instances,
            side.training,
        ))
    }

    /// The number of models the agents know.
    pub fn models(&self) -> usize {
        self.models
    }
}

/// What [`train`] calls after each episode: the agents and the records so
/// far; an error stops training.
pub type OnEpisode<'a> = dyn FnMut(&TwoStage, &[EpisodeRecord]) -> Result<(), TsError> + 'a;

/// Per-step outcomes summed over steps: what an [`EpisodeRecord`] and an
/// [`EvalScore`] report.
#[derive(Debug, Default)]
struct Tally {
    reward: f64,
    served: u64,
    arrived: u64,
    violated: f64,
    steps: usize,
}

impl Tally {
    /// Adds one step's outcomes and Eq. 2 rewards.
    fn add(&mut self, out: &[StepOutcome], rewards: &[f64]) {
        self.reward += rewards.iter().sum::<f64>();
        for o in out {
            self.served += o.served;
            self.arrived += o.arrived;
            self.violated += o.violation() * o.arrived.max(o.served) as f64;
        }
        self.steps += 1;
    }

    /// (mean reward per step, served requests/s, violations over
    /// arrivals) for steps of `step_s` seconds.
    fn means(&self, step_s: f64) -> (f64, f64, f64) {
        let n = self.steps.max(1) as f64;
        let violation = if self.arrived == 0 {
            0.0
        } else {
            self.violated / self.arrived as f64
        };
        (
            self.reward / n,
            self.served as f64 / (n * step_s),
            violation,
        )
    }
}

/// Scores any decision rule on `episodes` episodes of the environment
/// `cfg` (rates drawn as in training from `seed`): `decide(env, previous)`
/// is asked for a decision at the start and after every step, as the
/// agents are in training. [`TwoStage::evaluate`] passes the agents'
/// greedy decisions; `bench inss` also passes GSLICE's and iGniter's, so
/// the scores compare.
pub fn evaluate_decisions(
    cfg: EnvConfig,
    exec: &dyn ExecModel,
    instances: &[Instance],
    episodes: usize,
    seed: u64,
    decide: &mut dyn FnMut(&Env, &Decision) -> Result<Decision, TsError>,
) -> Result<EvalScore, TsError> {
    let mut env = Env::new(cfg, instances.to_vec(), seed);
    let empty = Decision {
        slots: vec![None; instances.len()],
    };
    let mut tally = Tally::default();
    for _ in 0..episodes {
        env.reset();
        let mut d = decide(&env, &empty)?;
        for _ in 0..cfg.steps {
            let out = env.step(&d, exec);
            tally.add(&out, &env.rewards(&out));
            d = decide(&env, &d)?;
        }
    }
    let (reward, throughput, violation) = tally.means(cfg.step_s);
    Ok(EvalScore {
        reward,
        throughput,
        violation,
        episodes,
        seed,
    })
}

/// Algorithm 1: trains both agents for `cfg.episodes` episodes of
/// `cfg.env.steps` steps on `exec` serving `instances`; `on_episode` gets
/// the agents and the records so far as each episode ends (to report
/// progress or save a checkpoint), and may stop training early with an
/// error.
pub fn train(
    exec: &dyn ExecModel,
    instances: &[Instance],
    cfg: &TrainConfig,
    on_episode: &mut OnEpisode<'_>,
) -> Result<(TwoStage, Vec<EpisodeRecord>), TsError> {
    let mut ts = TwoStage::new(
        exec.model_count(),
        cfg.env,
        &cfg.hidden,
        cfg.sacd.clone(),
        cfg.td3.clone(),
        cfg.seed,
    )?;
    ts.reward_scale = cfg.reward_scale;
    let mut rng = Rng::seed_from_u64(cfg.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5EED);
    let mut env = Env::new(cfg.env, instances.to_vec(), cfg.seed ^ 0xE4F1);
    let replay = |e: String, stage| TsError::Replay { stage, message: e };
    let mut gbuf = ts.sacd.replay_buffer().map_err(|source| TsError::Build {
        stage: "global (SACD)",
        source,
    })?;
    let mut lbuf = ts.td3.replay_buffer().map_err(|source| TsError::Build {
        stage: "local (TD3)",
        source,
    })?;
    let mut records = Vec::with_capacity(cfg.episodes);
    for episode in 1..=cfg.episodes {
        let started = Instant::now();
        env.reset();
        let empty = Decision {
            slots: vec![None; instances.len()],
        };
        let (mut d, mut trace) = ts.decide(&env, exec, &empty, true, &mut rng)?;
        let mut tally = Tally::default();
        for t in 0..cfg.env.steps {
            let out: Vec<StepOutcome> = env.step(&d, exec);
            let r = env.rewards(&out);
            let done = t + 1 == cfg.env.steps;
            let (d2, trace2) = ts.decide(&env, exec, &d, true, &mut rng)?;
            for (i, g) in trace.global.iter().enumerate() {
                let g2 = &trace2.global[i];
                gbuf.push(Transition {
                    state: g.state.clone(),
                    action: Action::Discrete(g.gpu),
                    reward: (r[i] * cfg.reward_scale) as f32,
                    next_state: g2.state.clone(),
                    done,
                    mask: Some(g.mask.clone()),
                    next_mask: Some(g2.mask.clone()),
                })
                .map_err(|e| replay(e.to_string(), "global (SACD)"))?;
            }
            for (k, l) in trace.local.iter().enumerate() {
                if l.members.is_empty() {
                    continue;
                }
                let l2 = &trace2.local[k];
                let rk: f64 = l.members.iter().map(|&i| r[i]).sum();
                // A GPU that empties in the next step has no share to
                // mask: its next state is stored as allowing every share.
                lbuf.push(Transition {
                    state: l.state.clone(),
                    action: Action::Continuous(l.action.clone()),
                    reward: (rk * cfg.reward_scale) as f32,
                    next_state: l2.state.clone(),
                    done,
                    mask: Some(l.mask.clone()),
                    next_mask: l2.mask.iter().any(|&m| m).then(|| l2.mask.clone()),
                })
                .map_err(|e| replay(e.to_string(), "local (TD3)"))?;
            }
            if gbuf.len() >= cfg.sacd.batch_size {
                let b = gbuf
                    .sample(cfg.sacd.batch_size, &mut rng)
                    .map_err(|e| replay(e.to_string(), "global (SACD)"))?;
                ts.sacd.update(&b).map_err(|source| TsError::Update {
                    stage: "global (SACD)",
                    episode,
                    source,
                })?;
            }
            if lbuf.len() >= cfg.td3.batch_size {
                let b = lbuf
                    .sample(cfg.td3.batch_size, &mut rng)
                    .map_err(|e| replay(e.to_string(), "local (TD3)"))?;
                ts.td3.update(&b).map_err(|source| TsError::Update {
                    stage: "local (TD3)",
                    episode,
                    source,
                })?;
            }
            tally.add(&out, &r);
            d = d2;
            trace = trace2;
        }
        let (reward, throughput, violation) = tally.means(cfg.env.step_s);
        let rec = EpisodeRecord {
            episode,
            reward,
            throughput,
            violation,
            alpha: ts.sacd.alpha(),
            wall_s: started.elapsed().as_secs_f64(),
        };
        records.push(rec);
        on_episode(&ts, &records)?;
    }
    Ok((ts, records))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Toy;

    /// Two models; `t = b × k_m × 100 / sms` ms, 5 % slower per co-runner.
    fn toy() -> Toy {
        Toy {
            names: vec!["fast", "slow"],
            k: vec![0.5, 2.0],
            batch_ms: 0.0,
            per_corunner: 0.05,
            mem_mb: 100.0,
            mem_per_batch_mb: 1.0,
            gpu_mem_mb: 1000.0,
            dram: vec![0.2, 0.4],
        }
    }

    fn instances() -> Vec<Instance> {
        (0..4)
            .map(|i| Instance {
                name: format!("m{i}"),
                model: i % 2,
                slo_ms: 50.0,
                max_rate_rps: 200.0,
            })
            .collect()
    }

    fn small() -> TrainConfig {
        let mut c = TrainConfig {
            env: EnvConfig {
                gpus: 2,
                max_slots: 3,
                steps: 6,
                ..EnvConfig::default()
            },
            episodes: 3,
            hidden: vec![16, 16],
            seed: 11,
            ..TrainConfig::default()
        };
        c.sacd.batch_size = 8;
        c.td3.batch_size = 8;
        c
    }

    #[test]
    fn training_is_reproducible_and_records_every_episode() {
        let cfg = small();
        let mut seen = 0;
        let (a, ra) = train(&toy(), &instances(), &cfg, &mut |_, _| {
            seen += 1;
            Ok(())
        })
        .unwrap();
        let (b, rb) = train(&toy(), &instances(), &cfg, &mut |_, _| Ok(())).unwrap();
        assert_eq!(seen, 3);
        assert_eq!(ra.len(), 3);
        assert_eq!(a.digest(), b.digest());
        let strip = |r: &[EpisodeRecord]| {
            r.iter()
                .map(|e| (e.reward, e.throughput, e.violation))
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(&ra), strip(&rb));
        // Updates ran: the weights moved away from a fresh agent's.
        let fresh = TwoStage::new(
            2,
            cfg.env,
            &cfg.hidden,
            cfg.sacd.clone(),
            cfg.td3.clone(),
            cfg.seed,
        )
        .unwrap();
        assert_ne!(fresh.digest(), a.digest());
        let mut other = cfg.clone();
        other.seed = 12;
        let (c, _) = train(&toy(), &instances(), &other, &mut |_, _| Ok(())).unwrap();
        assert_ne!(c.digest(), a.digest());
        // Greedy evaluation is deterministic and does not train.
        let e1 = a.evaluate(&toy(), &instances(), 2, 9).unwrap();
        let e2 = a.evaluate(&toy(), &instances(), 2, 9).unwrap();
        assert_eq!(e1, e2);
        assert_eq!(a.digest(), b.digest());
        assert!(e1.reward.is_finite() && (0.0..=1.0).contains(&e1.violation));
        assert_ne!(a.evaluate(&toy(), &instances(), 2, 10).unwrap(), e1);
        // The reward scale reaches the learners.
        let mut unscaled = cfg.clone();
        unscaled.reward_scale = 1.0;
        let (u, _) = train(&toy(), &instances(), &unscaled, &mut |_, _| Ok(())).unwrap();
        assert_ne!(u.digest(), a.digest());
        assert_eq!(u.reward_scale(), 1.0);
        assert_eq!(a.reward_scale(), DEFAULT_REWARD_SCALE);
    }

    #[test]
    fn decisions_respect_slots_and_shares_and_checkpoints_round_trip() {
        let cfg = small();
        let (ts, rec) = train(&toy(), &instances(), &cfg, &mut |_, _| Ok(())).unwrap();
        let mut env = Env::new(cfg.env, instances(), 3);
        env.reset();
        let mut rng = Rng::seed_from_u64(5);
        let empty = Decision {
            slots: vec![None; 4],
        };
        let (d, trace) = ts.decide(&env, &toy(), &empty, false, &mut rng).unwrap();
        for g in 0..2 {
            let n = d.slots.iter().flatten().filter(|s| s.gpu == g).count();
            assert!(n <= 3);
        }
        assert!(d.used_pct(2).iter().all(|&u| u <= 100));
        assert!(
            d.slots
                .iter()
                .all(|s| s.is_some_and(|s| (1..=32).contains(&s.batch)))
        );
        assert_eq!(trace.global.len(), 4);

        let dir = std::env::temp_dir().join(format!("sluice-inss-ts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        ts.save(&dir, &toy(), &instances(), cfg.seed, &rec).unwrap();
        let (back, inst, rec2) = TwoStage::load(&dir, &toy()).unwrap();
        assert_eq!(back.digest(), ts.digest());
        assert_eq!(back.reward_scale(), ts.reward_scale());
        assert_eq!(inst, instances());
        assert_eq!(rec2.len(), rec.len());
        for (a, b) in rec2.iter().zip(&rec) {
            assert_eq!(a.episode, b.episode);
            assert!((a.reward - b.reward).abs() < 1e-9 && (a.alpha - b.alpha).abs() < 1e-12);
        }
        let (d2, _) = back
            .decide(&env, &toy(), &empty, false, &mut Rng::seed_from_u64(5))
            .unwrap();
        assert_eq!(d2, d);
        // Another model set is refused, naming both.
        let other = Toy {
            names: vec!["fast", "other"],
            ..toy()
        };
        let e = TwoStage::load(&dir, &other).unwrap_err().to_string();
        assert!(e.contains("\"slow\"") && e.contains("\"other\""), "{e}");
        // A sidecar written before the reward scale existed reads as 1.
        let side = dir.join("inss.json");
        let mut j: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&side).unwrap()).unwrap();
        j.as_object_mut().unwrap().remove("reward_scale").unwrap();
        std::fs::write(&side, j.to_string()).unwrap();
        assert_eq!(TwoStage::load(&dir, &toy()).unwrap().0.reward_scale(), 1.0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
