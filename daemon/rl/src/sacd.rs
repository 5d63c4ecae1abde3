//! SAC-Discrete: soft actor-critic for a discrete action set (Christodoulou,
//! "Soft Actor-Critic for Discrete Action Settings", arXiv:1910.07207, 2019),
//! the agent of InSS's global stage (model placement, §5.1).
//!
//! * The actor maps a state to one logit per action; the policy π is their
//!   softmax. An optional boolean mask (InSS's "safe action space": the GPUs
//!   with room for the model) sets masked logits to −1e9 before the softmax,
//!   so masked actions get probability exactly 0 and the rest are
//!   renormalised among themselves; a masked action is never chosen.
//! * Twin critics map a state to one Q per action; target critics follow them
//!   by Polyak averaging with factor κ'.
//! * The critic target is `r + γ(1 − d)·Σ_a π(a|s')·(min(Q̂1, Q̂2)(s', a) −
//!   α log π(a|s'))`: the soft state value computed exactly as an
//!   expectation over the discrete policy (Christodoulou's change to SAC),
//!   with clipped double Q, the policy restricted by the next state's mask.
//! * The actor loss is `E_s[Σ_a π(a|s)·(α log π(a|s) − min(Q1, Q2)(s, a))]`,
//!   again an exact expectation over actions, the policy restricted by the
//!   state's mask.
//! * The temperature α is learned in log space: the loss is
//!   `log α · E_s[H(π(·|s)) − H̄]` with the entropy detached (Christodoulou's
//!   `E_s[π(s)ᵀ(−α(log π(s) + H̄))]` with the gradient taken in log α, as
//!   common implementations do), so α falls while the policy's entropy
//!   exceeds the target H̄ and rises when it is below.
//!
//! One [`Sacd::update`] does, in order: a critic step, an actor step (against
//! the just-updated critics), a temperature step, and the soft update of the
//! target critics.
//!
//! Defaults come from InSS Table 2, global stage: learning rate 1e-4 for the
//! actor, critics and temperature, κ' = 0.01, γ = 0.99, initial temperature
//! 1.0, mini-batch 256, replay buffer 100 000, Adam, two hidden layers of 256
//! with ReLU.

use std::path::Path;

use candle_core::{D, Device, Tensor, Var};
use candle_nn::{AdamW, Optimizer, VarMap};
use serde::{Deserialize, Serialize};

use crate::checkpoint::{self, Sidecar};
use crate::common::{allowed, check, finite, state_tensor};
use crate::error::{ActError, BuildError, LoadError, SaveError, UpdateError};
use crate::net::{DEFAULT_HIDDEN, Mlp, adam, digest_varmap, masked_log_softmax};
use crate::replay::{ActionSpec, Batch, ReplayBuffer, ReplaySpec};
use crate::rng::{Draws, Rng, SeedableRng};

/// SAC-Discrete hyperparameters. `Default` gives InSS Table 2's global stage.
///
/// Adam is candle-nn's `AdamW` with weight decay 0, betas 0.9/0.999, eps 1e-8.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SacdHyper {
    /// Actor learning rate ℓ'_π (1e-4).
    pub actor_lr: f64,
    /// Critic learning rate ℓ'_Q (1e-4).
    pub critic_lr: f64,
    /// Temperature learning rate ℓ'_τ (1e-4).
    pub alpha_lr: f64,
    /// Soft update factor κ' for the target critics, in (0, 1] (0.01).
    pub kappa: f64,
    /// Discount γ, in [0, 1] (0.99).
    pub gamma: f64,
    /// Initial temperature τ0 = α0 > 0 (1.0).
    pub initial_alpha: f64,
    /// Target entropy H̄ in nats; `None` takes the default
    /// `−ln(1 + n_actions)`.
    ///
    /// Table 2 gives "−log(1 + ι)" without defining ι; our reading is that ι
    /// is the number of actions. That target is negative, below the entropy
    /// of any policy, so the temperature decays steadily throughout training
    /// rather than settling (the usual SAC-Discrete choice is
    /// `0.98·ln(n_actions)`, a positive target; set it here to use it).
    pub target_entropy: Option<f64>,
    /// Mini-batch size (256); [`ReplayBuffer::sample`] takes it from here.
    pub batch_size: usize,
    /// Replay buffer capacity (100 000), used by [`Sacd::replay_buffer`].
    pub buffer_capacity: usize,
}

impl Default for SacdHyper {
    fn default() -> Self {
        Self {
            actor_lr: 1e-4,
            critic_lr: 1e-4,
            alpha_lr: 1e-4,
            kappa: 0.01,
            gamma: 0.99,
            initial_alpha: 1.0,
            target_entropy: None,
            batch_size: 256,
            buffer_capacity: 100_000,
        }
    }
}

/// What a SAC-Discrete agent is built from.
#[derive(Clone, Debug, PartialEq)]
pub struct SacdConfig {
    /// The state's width.
    pub state_dim: usize,
    /// The number of actions.
    pub n_actions: usize,
    /// Hidden layer widths of the actor and both critics.
    pub hidden: Vec<usize>,
    /// Hyperparameters.
    pub hyper: SacdHyper,
}

impl SacdConfig {
    /// A configuration with Table 2's defaults: hidden `[256, 256]` and
    /// [`SacdHyper::default`].
    pub fn new(state_dim: usize, n_actions: usize) -> Self {
        Self {
            state_dim,
            n_actions,
            hidden: DEFAULT_HIDDEN.to_vec(),
            hyper: SacdHyper::default(),
        }
    }

    /// The target entropy in use: the configured one, or `−ln(1 + n_actions)`.
    pub fn target_entropy(&self) -> f64 {
        self.hyper
            .target_entropy
            .unwrap_or_else(|| -(1.0 + self.n_actions as f64).ln())
    }

    fn validate(&self) -> Result<(), BuildError> {
        if self.state_dim == 0 {
            return Err(BuildError::ZeroDim { what: "state_dim" });
        }
        if self.n_actions == 0 {
            return Err(BuildError::ZeroDim { what: "n_actions" });
        }
        if let Some(index) = self.hidden.iter().position(|&w| w == 0) {
            return Err(BuildError::ZeroHidden { index });
        }
        let h = &self.hyper;
        let positive = "finite and > 0";
        check(h.actor_lr, "actor_lr", positive, |v| v > 0.0)?;
        check(h.critic_lr, "critic_lr", positive, |v| v > 0.0)?;
        check(h.alpha_lr, "alpha_lr", positive, |v| v > 0.0)?;
        check(h.kappa, "kappa", "in (0, 1]", |v| v > 0.0 && v <= 1.0)?;
        check(h.gamma, "gamma", "in [0, 1]", |v| (0.0..=1.0).contains(&v))?;
        check(h.initial_alpha, "initial_alpha", positive, |v| v > 0.0)?;
        check(self.target_entropy(), "target_entropy", "finite", |_| true)?;
        if h.batch_size == 0 {
            return Err(BuildError::ZeroDim { what: "batch_size" });
        }
        if h.buffer_capacity == 0 {
            return Err(BuildError::ZeroDim {
                what: "buffer_capacity",
            });
        }
        Ok(())
    }
}

/// The losses and statistics of one [`Sacd::update`], all batch means.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SacdLosses {
    /// Mean squared TD error of critic 1.
    pub critic1: f32,
    /// Mean squared TD error of critic 2.
    pub critic2: f32,
    /// Actor loss.
    pub actor: f32,
    /// Temperature loss.
    pub temperature: f32,
    /// The temperature α used in this update (before its step).
    pub alpha: f32,
    /// The policy's mean entropy over the batch states, in nats.
    pub entropy: f32,
}

/// A SAC-Discrete agent (see the module docs).
pub struct Sacd {
    config: SacdConfig,
    seed: u64,
    map: VarMap,
    actor: Mlp,
    critic1: Mlp,
    critic2: Mlp,
    target1: Mlp,
    target2: Mlp,
    log_alpha: Var,
    actor_opt: AdamW,
    critic_opt: AdamW,
    alpha_opt: AdamW,
    updates_done: u64,
}

impl std::fmt::Debug for Sacd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sacd")
            .field("config", &self.config)
            .field("seed", &self.seed)
            .field("updates_done", &self.updates_done)
            .finish_non_exhaustive()
    }
}

impl Sacd {
    /// Builds an agent, drawing every initial weight from `seed` (actor, then
    /// critic 1, critic 2; the target critics start as copies).
    pub fn new(config: SacdConfig, seed: u64) -> Result<Self, BuildError> {
        config.validate()?;
        let (s, n, hidden) = (config.state_dim, config.n_actions, &config.hidden);
        let mut rng = Rng::seed_from_u64(seed);
        let map = VarMap::new();
        let build = |name: &str, rng: &mut Rng| Mlp::new(&map, name, s, hidden, n, rng);
        let actor = build("actor", &mut rng).map_err(BuildError::Candle)?;
        let critic1 = build("critic1", &mut rng).map_err(BuildError::Candle)?;
        let critic2 = build("critic2", &mut rng).map_err(BuildError::Candle)?;
        let target1 = build("critic1_target", &mut rng).map_err(BuildError::Candle)?;
        let target2 = build("critic2_target", &mut rng).map_err(BuildError::Candle)?;
        target1.copy_from(&critic1).map_err(BuildError::Candle)?;
        target2.copy_from(&critic2).map_err(BuildError::Candle)?;
        let log_alpha = Tensor::from_vec(
            vec![config.hyper.initial_alpha.ln() as f32],
            1,
            &Device::Cpu,
        )
        .and_then(|t| Var::from_tensor(&t))
        .map_err(BuildError::Candle)?;
        map.data()
            .lock()
            .map_err(|_| {
                BuildError::Candle(candle_core::Error::Msg("VarMap lock poisoned".into()))
            })?
            .insert("log_alpha".to_string(), log_alpha.clone());
        let h = &config.hyper;
        let actor_opt = adam(actor.vars(), h.actor_lr).map_err(BuildError::Candle)?;
        let mut critic_vars = critic1.vars();
        critic_vars.extend(critic2.vars());
        let critic_opt = adam(critic_vars, h.critic_lr).map_err(BuildError::Candle)?;
        let alpha_opt = adam(vec![log_alpha.clone()], h.alpha_lr).map_err(BuildError::Candle)?;
        Ok(Self {
            config,
            seed,
            map,
            actor,
            critic1,
            critic2,
            target1,
            target2,
            log_alpha,
            actor_opt,
            critic_opt,
            alpha_opt,
            updates_done: 0,
        })
    }

    /// The configuration the agent was built with.
    pub fn config(&self) -> &SacdConfig {
        &self.config
    }

    /// The seed the agent was built with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Update steps taken so far.
    pub fn updates_done(&self) -> u64 {
        self.updates_done
    }

    /// The current temperature α (NaN only if the parameter cannot be read,
    /// which does not happen for a CPU `f32` tensor).
    pub fn alpha(&self) -> f64 {
        self.log_alpha_value().map(f64::exp).unwrap_or(f64::NAN)
    }

    fn log_alpha_value(&self) -> candle_core::Result<f64> {
        let v = self.log_alpha.as_tensor().to_vec1::<f32>()?;
        Ok(f64::from(v[0]))
    }

    /// An empty replay buffer sized by the hyperparameters, holding this
    /// agent's states, discrete actions and masks.
    pub fn replay_buffer(&self) -> Result<ReplayBuffer, BuildError> {
        let spec = ReplaySpec {
            state_dim: self.config.state_dim,
            action: ActionSpec::Discrete {
                n: self.config.n_actions,
            },
            mask_len: Some(self.config.n_actions),
        };
        ReplayBuffer::new(spec, self.config.hyper.buffer_capacity)
    }

    /// The actor's logits for one state, and the allowed actions.
    fn logits(
        &self,
        state: &[f32],
        mask: Option<&[bool]>,
    ) -> Result<(Vec<f32>, Vec<bool>), ActError> {
        let n = self.config.n_actions;
        let allowed = allowed(mask, n)?;
        let x = state_tensor(state, self.config.state_dim)?;
        let logits = self
            .actor
            .forward(&x)
            .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
            .map_err(ActError::Candle)?;
        if logits.iter().any(|v| !v.is_finite()) {
            return Err(ActError::NonFiniteOutput);
        }
        Ok((logits, allowed))
    }

    /// π(·|state): one probability per action, exactly 0 for masked actions,
    /// the rest summing to 1.
    pub fn probs(&self, state: &[f32], mask: Option<&[bool]>) -> Result<Vec<f32>, ActError> {
        let (logits, allowed) = self.logits(state, mask)?;
        Ok(masked_softmax(&logits, &allowed)
            .into_iter()
            .map(|p| p as f32)
            .collect())
    }

    /// Chooses an action: a draw from π(·|state) when `explore` (training),
    /// the most probable allowed action otherwise (the lowest index on a
    /// tie). A masked action is never returned.
    pub fn act(
        &self,
        state: &[f32],
        mask: Option<&[bool]>,
        explore: bool,
        rng: &mut Rng,
    ) -> Result<usize, ActError> {
        let (logits, allowed) = self.logits(state, mask)?;
        let allowed_ix: Vec<usize> = (0..logits.len()).filter(|&i| allowed[i]).collect();
        // `allowed` checked that one action is allowed.
        let mut best = allowed_ix[0];
        if explore {
            let p = masked_softmax(&logits, &allowed);
            let u = rng.unit();
            let mut acc = 0.0;
            for &i in &allowed_ix {
                acc += p[i];
                best = i;
                if u < acc {
                    break;
                }
            }
        } else {
            for &i in &allowed_ix {
                if logits[i] > logits[best] {
                    best = i;
                }
            }
        }
        Ok(best)
    }

    /// One SAC-Discrete update on `batch` (see the module docs). The batch
    /// must have this agent's widths; actions are one-hot rows (as
    /// [`ReplayBuffer::sample`] gives them). Absent masks allow every action.
    ///
    /// If a loss is not finite that step is skipped and an error returned;
    /// steps already taken in this update stay applied.
    pub fn update(&mut self, batch: &Batch) -> Result<SacdLosses, UpdateError> {
        let c = &self.config;
        batch.check(c.state_dim, c.n_actions, Some(c.n_actions))?;
        let gamma = c.hyper.gamma;
        let kappa = c.hyper.kappa;
        let target_entropy = c.target_entropy();
        let log_alpha = self.log_alpha_value().map_err(UpdateError::Candle)?;
        let alpha = log_alpha.exp();
        let cd = UpdateError::Candle;

        // Critic step.
        let y = {
            let ns = &batch.next_states;
            let next_logits = self.actor.forward(ns).map_err(cd)?.detach();
            let next_logp =
                masked_log_softmax(&next_logits, batch.next_masks.as_ref()).map_err(cd)?;
            let next_p = next_logp.exp().map_err(cd)?;
            let q1 = self.target1.forward(ns).map_err(cd)?;
            let q2 = self.target2.forward(ns).map_err(cd)?;
            let min_q = q1.minimum(&q2).map_err(cd)?.detach();
            let soft_q = (min_q - next_logp.affine(alpha, 0.0).map_err(cd)?).map_err(cd)?;
            let v_next = (next_p * soft_q)
                .and_then(|t| t.sum_keepdim(D::Minus1))
                .map_err(cd)?;
            let not_done = batch.dones.affine(-1.0, 1.0).map_err(cd)?;
            let boot = (not_done * v_next)
                .and_then(|t| t.affine(gamma, 0.0))
                .map_err(cd)?;
            (&batch.rewards + boot).map_err(cd)?.detach()
        };
        let q_taken = |net: &Mlp| -> candle_core::Result<Tensor> {
            (net.forward(&batch.states)? * &batch.actions)?.sum_keepdim(D::Minus1)
        };
        let mse = |q: Tensor| (q - &y).and_then(|d| d.sqr()?.mean_all());
        let l1 = mse(q_taken(&self.critic1).map_err(cd)?).map_err(cd)?;
        let l2 = mse(q_taken(&self.critic2).map_err(cd)?).map_err(cd)?;
        let critic_loss = (&l1 + &l2).map_err(cd)?;
        finite("critic", &critic_loss)?;
        self.critic_opt.backward_step(&critic_loss).map_err(cd)?;

        // Actor step, against the updated critics.
        let logits = self.actor.forward(&batch.states).map_err(cd)?;
        let logp = masked_log_softmax(&logits, batch.masks.as_ref()).map_err(cd)?;
        let p = logp.exp().map_err(cd)?;
        let min_q = {
            let q1 = self.critic1.forward(&batch.states).map_err(cd)?;
            let q2 = self.critic2.forward(&batch.states).map_err(cd)?;
            q1.minimum(&q2).map_err(cd)?.detach()
        };
        let inside = (logp.affine(alpha, 0.0).map_err(cd)? - min_q).map_err(cd)?;
        let actor_loss = (&p * inside)
            .and_then(|t| t.sum_keepdim(D::Minus1)?.mean_all())
            .map_err(cd)?;
        let actor_value = finite("actor", &actor_loss)?;
        self.actor_opt.backward_step(&actor_loss).map_err(cd)?;

        // Temperature step, with the policy as it was before the actor step.
        let entropy = (&p * &logp)
            .and_then(|t| t.sum_keepdim(D::Minus1)?.neg())
            .map_err(cd)?
            .detach();
        let gap = entropy.affine(1.0, -target_entropy).map_err(cd)?;
        let temp_loss = self
            .log_alpha
            .as_tensor()
            .broadcast_mul(&gap)
            .and_then(|t| t.mean_all())
            .map_err(cd)?;
        let temp_value = finite("temperature", &temp_loss)?;
        self.alpha_opt.backward_step(&temp_loss).map_err(cd)?;

        self.target1
            .soft_update_from(&self.critic1, kappa)
            .map_err(cd)?;
        self.target2
            .soft_update_from(&self.critic2, kappa)
            .map_err(cd)?;
        self.updates_done += 1;

        let scalar = |t: &Tensor| t.to_scalar::<f32>().map_err(cd);
        Ok(SacdLosses {
            critic1: scalar(&l1)?,
            critic2: scalar(&l2)?,
            actor: actor_value,
            temperature: temp_value,
            alpha: alpha as f32,
            entropy: scalar(&entropy.mean_all().map_err(cd)?)?,
        })
    }

    /// FNV-1a digest of every parameter (actor, critics, target critics, log
    /// α) in name order; two agents with equal digests have bitwise-equal
    /// weights. See [`crate`] docs for when runs are reproducible.
    ///
    /// # Panics
    ///
    /// Never for an agent built by this crate: its parameters are `f32` CPU
    /// tensors, which always read back.
    pub fn weights_digest(&self) -> u64 {
        digest_varmap(&self.map).expect("parameters are f32 CPU tensors")
    }

    /// Saves the agent into directory `dir` (see [`crate::checkpoint`]).
    pub fn save(&self, dir: &Path) -> Result<(), SaveError> {
        let c = &self.config;
        let sidecar = Sidecar {
            format: checkpoint::FORMAT.to_string(),
            kind: "sacd".to_string(),
            state_dim: c.state_dim,
            action_dim: c.n_actions,
            hidden: c.hidden.clone(),
            head: None,
            hyperparameters: serde_json::to_value(&c.hyper).map_err(SaveError::Json)?,
            seed: self.seed,
            updates_done: self.updates_done,
            update_rng: None,
            weights: checkpoint::WEIGHTS_FILE.to_string(),
            weights_digest: checkpoint::hex(self.weights_digest()),
        };
        checkpoint::save(dir, &sidecar, &self.map)
    }

    /// Loads an agent saved by [`Sacd::save`], checking that it was built for
    /// `state_dim` and `n_actions`. Adam's moments start afresh.
    pub fn load(dir: &Path, state_dim: usize, n_actions: usize) -> Result<Self, LoadError> {
        let side = checkpoint::read_sidecar(dir, "sacd", state_dim, n_actions)?;
        let config = SacdConfig {
            state_dim,
            n_actions,
            hidden: side.hidden.clone(),
            hyper: checkpoint::parse_field(dir, &side.hyperparameters)?,
        };
        let mut agent = Sacd::new(config, side.seed).map_err(|source| LoadError::Config {
            path: checkpoint::sidecar_path(dir),
            source,
        })?;
        checkpoint::restore_weights(dir, &side, &agent.map)?;
        agent.updates_done = side.updates_done;
        Ok(agent)
    }
}

/// Softmax over the allowed logits in f64: exactly 0 where not allowed.
fn masked_softmax(logits: &[f32], allowed: &[bool]) -> Vec<f64> {
    let max = logits
        .iter()
        .zip(allowed)
        .filter(|(_, a)| **a)
        .map(|(&z, _)| f64::from(z))
        .fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = logits
        .iter()
        .zip(allowed)
        .map(|(&z, &a)| if a { (f64::from(z) - max).exp() } else { 0.0 })
        .collect();
    let sum: f64 = w.iter().sum();
    w.into_iter().map(|x| x / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::{Action, Transition};

    fn small(state_dim: usize, n: usize) -> SacdConfig {
        let mut c = SacdConfig::new(state_dim, n);
        c.hidden = vec![32, 32];
        c.hyper.actor_lr = 1e-2;
        c.hyper.critic_lr = 1e-2;
        c.hyper.alpha_lr = 1e-2;
        c.hyper.batch_size = 32;
        c.hyper.buffer_capacity = 1000;
        c
    }

    fn one_hot(i: usize, n: usize) -> Vec<f32> {
        let mut v = vec![0.0; n];
        v[i] = 1.0;
        v
    }

    /// The masked bandit's mask: in context 1 the right action (1) is
    /// forbidden.
    fn mask_of(ctx: usize) -> Vec<bool> {
        let mut m = vec![true; 4];
        if ctx == 1 {
            m[1] = false;
        }
        m
    }

    /// The best allowed action of the masked bandit: the context, except in
    /// context 1, where action 3 (paying 0.5) is the best allowed one.
    fn best_allowed(ctx: usize) -> usize {
        if ctx == 1 { 3 } else { ctx }
    }

    /// Trains an agent for 80 updates on a one-step contextual bandit: state
    /// the one-hot of 3 contexts, 4 actions, reward 1 for action == context
    /// and 0 otherwise, done. With `masked`, transitions carry
    /// [`mask_of`] and action 3 pays 0.5 in context 1. The data are 600
    /// uniformly random allowed actions.
    fn bandit(seed: u64, masked: bool) -> Sacd {
        let mut agent = Sacd::new(small(3, 4), seed).expect("valid config");
        let mut buf = agent.replay_buffer().expect("valid");
        let mut rng = Rng::seed_from_u64(seed + 1000);
        for _ in 0..600 {
            let ctx = rng.below(3);
            let mask = if masked { mask_of(ctx) } else { vec![true; 4] };
            let allowed: Vec<usize> = (0..4).filter(|&a| mask[a]).collect();
            let a = allowed[rng.below(allowed.len())];
            let reward = match (ctx, a) {
                (c, a) if c == a => 1.0,
                (1, 3) if masked => 0.5,
                _ => 0.0,
            };
            buf.push(Transition {
                state: one_hot(ctx, 3),
                action: Action::Discrete(a),
                reward,
                next_state: one_hot(ctx, 3),
                done: true,
                mask: masked.then(|| mask.clone()),
                next_mask: masked.then_some(mask),
            })
            .expect("valid transition");
        }
        for _ in 0..80 {
            let batch = buf
                .sample(agent.config().hyper.batch_size, &mut rng)
                .expect("sample");
            agent.update(&batch).expect("update");
        }
        agent
    }

    /// Whether the agent's greedy action is right in every context.
    fn solved(agent: &Sacd, masked: bool) -> bool {
        let mut rng = Rng::seed_from_u64(0);
        (0..3).all(|ctx| {
            let (mask, want) = if masked {
                (Some(mask_of(ctx)), best_allowed(ctx))
            } else {
                (None, ctx)
            };
            let s = one_hot(ctx, 3);
            agent.act(&s, mask.as_deref(), false, &mut rng).ok() == Some(want)
        })
    }

    #[test]
    fn learns_a_contextual_bandit() {
        let agent = bandit(0, false);
        let mut rng = Rng::seed_from_u64(0);
        for ctx in 0..3 {
            let s = one_hot(ctx, 3);
            let p = agent.probs(&s, None).expect("probs");
            assert_eq!(
                agent.act(&s, None, false, &mut rng).expect("acts"),
                ctx,
                "context {ctx}: {p:?}"
            );
            assert!(p[ctx] > 0.5, "context {ctx}: probs {p:?}");
        }
        // The temperature target is negative, so α fell.
        assert!(agent.alpha() < 1.0, "alpha {}", agent.alpha());
        assert_eq!(agent.updates_done(), 80);
    }

    #[test]
    fn masked_actions_are_never_chosen_and_the_best_allowed_one_is() {
        let agent = bandit(0, true);
        let mut rng = Rng::seed_from_u64(0);
        let s1 = one_hot(1, 3);
        let m1 = mask_of(1);
        let p = agent.probs(&s1, Some(&m1)).expect("probs");
        assert_eq!(p[1], 0.0, "masked action has probability {}", p[1]);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        assert_eq!(
            agent.act(&s1, Some(&m1), false, &mut rng).expect("acts"),
            3,
            "probs {p:?}"
        );
        for _ in 0..500 {
            assert_ne!(agent.act(&s1, Some(&m1), true, &mut rng).expect("acts"), 1);
        }
        assert!(
            solved(&agent, true),
            "some context's greedy action is not its best allowed one"
        );
    }

    /// How often the bandit tests' settings succeed across seeds (they use
    /// seed 0). At the time of writing: 8 of 8 for both.
    #[test]
    #[ignore = "slow seed sweep; run with --ignored --nocapture"]
    fn bandit_is_solved_across_seeds() {
        let plain = (0..8).filter(|&s| solved(&bandit(s, false), false)).count();
        let masked = (0..8).filter(|&s| solved(&bandit(s, true), true)).count();
        println!("SACD bandit solved: plain {plain}/8 seeds, masked {masked}/8 seeds");
        assert!(plain >= 7 && masked >= 7);
    }

    #[test]
    fn act_rejects_bad_input() {
        let agent = Sacd::new(small(3, 4), 0).expect("valid config");
        let mut rng = Rng::seed_from_u64(0);
        let e = agent
            .act(&[0.0; 3], Some(&[false; 4]), true, &mut rng)
            .unwrap_err();
        assert!(matches!(e, ActError::AllMasked { len: 4 }), "{e}");
        let e = agent.act(&[0.0; 2], None, true, &mut rng).unwrap_err();
        assert!(
            e.to_string().contains("state has 2 entries") && e.to_string().contains("3"),
            "{e}"
        );
        let e = agent
            .act(&[0.0, f32::NAN, 0.0], None, true, &mut rng)
            .unwrap_err();
        assert!(
            matches!(e, ActError::NonFiniteState { index: 1, .. }),
            "{e}"
        );
        let e = agent.probs(&[0.0; 3], Some(&[true; 3])).unwrap_err();
        assert!(
            matches!(
                e,
                ActError::MaskLen {
                    expected: 4,
                    got: 3
                }
            ),
            "{e}"
        );
        // Only one action allowed: it is always the one.
        let only = [false, false, true, false];
        for explore in [true, false] {
            assert_eq!(
                agent
                    .act(&[1.0, 0.0, 0.0], Some(&only), explore, &mut rng)
                    .unwrap(),
                2
            );
        }
    }

    #[test]
    fn random_masks_are_always_respected() {
        let agent = Sacd::new(small(3, 4), 3).expect("valid config");
        let mut rng = Rng::seed_from_u64(8);
        for _ in 0..300 {
            let s: Vec<f32> = (0..3).map(|_| rng.uniform(-3.0, 3.0) as f32).collect();
            let mut mask: Vec<bool> = (0..4).map(|_| rng.below(2) == 0).collect();
            if !mask.iter().any(|&m| m) {
                mask[rng.below(4)] = true;
            }
            let p = agent.probs(&s, Some(&mask)).expect("probs");
            for (a, &allowed) in mask.iter().enumerate() {
                if !allowed {
                    assert_eq!(p[a], 0.0);
                }
            }
            for explore in [false, true] {
                let a = agent.act(&s, Some(&mask), explore, &mut rng).expect("acts");
                assert!(
                    mask[a],
                    "chose masked action {a} (mask {mask:?}, probs {p:?})"
                );
            }
        }
    }

    #[test]
    fn config_is_validated_and_defaults_follow_table_2() {
        let c = SacdConfig::new(40, 4);
        assert_eq!(c.hidden, vec![256, 256]);
        assert_eq!(c.hyper.actor_lr, 1e-4);
        assert_eq!(c.hyper.kappa, 0.01);
        assert_eq!(c.hyper.batch_size, 256);
        assert_eq!(c.hyper.buffer_capacity, 100_000);
        assert!((c.target_entropy() + 5f64.ln()).abs() < 1e-12);
        let mut bad = small(3, 4);
        bad.hyper.kappa = 0.0;
        let e = Sacd::new(bad, 0).unwrap_err();
        assert!(e.to_string().contains("kappa = 0"), "{e}");
        let mut bad = small(3, 4);
        bad.hidden = vec![32, 0];
        assert!(matches!(
            Sacd::new(bad, 0),
            Err(BuildError::ZeroHidden { index: 1 })
        ));
        assert!(matches!(
            Sacd::new(small(3, 0), 0),
            Err(BuildError::ZeroDim { .. })
        ));
    }

    #[test]
    fn update_rejects_batches_of_the_wrong_shape() {
        let mut agent = Sacd::new(small(3, 4), 0).expect("valid config");
        let mut buf = agent.replay_buffer().expect("valid");
        let t = Transition {
            state: one_hot(0, 3),
            action: Action::Discrete(0),
            reward: 1.0,
            next_state: one_hot(0, 3),
            done: true,
            mask: None,
            next_mask: None,
        };
        buf.push(t).expect("valid");
        let mut batch = buf.sample(4, &mut Rng::seed_from_u64(0)).expect("sample");
        batch.states = Tensor::zeros((4, 2), candle_core::DType::F32, &Device::Cpu).unwrap();
        let before = agent.weights_digest();
        let e = agent.update(&batch).unwrap_err();
        assert!(
            matches!(e, UpdateError::Shape { what: "states", .. }),
            "{e}"
        );
        assert_eq!(agent.weights_digest(), before);
    }
}
