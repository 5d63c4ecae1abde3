//! TD3: twin delayed deep deterministic policy gradient (Fujimoto, van Hoof
//! and Meger, "Addressing Function Approximation Error in Actor-Critic
//! Methods", ICML 2018), the agent of InSS's local stage (per-GPU resource
//! shares and batch sizes, §5.2).
//!
//! * The actor maps a state to an action in `[0, 1]^action_dim` through its
//!   output [`Head`]: a sigmoid on every output, or — as InSS does so that a
//!   GPU's shares sum to 100% — a softmax over the first `softmax` outputs
//!   (the shares) and a sigmoid on the rest (the batch sizes). An optional
//!   mask over the shares gives masked ones exactly 0.
//! * Twin critics map state ‖ action to a Q value; the actor and both critics
//!   have target copies that follow by Polyak averaging with factor κ''.
//! * Exploration adds N(0, σ1²) noise to the actor's output, clips it to
//!   `[0, 1]`, and renormalises the shares to sum to 1 over the unmasked ones
//!   (falling back to the noiseless shares in the rare case that noise
//!   clipped every unmasked share to 0).
//! * Target policy smoothing: the target action is the target actor's output
//!   plus `clip(N(0, σ2²), −c, c)`, then clipped and renormalised likewise;
//!   the critic target is `r + γ(1 − d)·min(Q̂1, Q̂2)(s', â')`.
//! * Delayed policy updates: every critic update steps both critics; every
//!   ν-th one (the ν-th, 2ν-th, … since the agent was built or loaded) also
//!   steps the actor on `−Q1(s, π(s))` and soft-updates all three targets.
//!
//! The noise is drawn from the agent's own generator (forked from the seed),
//! so training is a function of the seed and the batches.
//!
//! Defaults come from InSS Table 2, local stage: learning rate 3e-4 for actor
//! and critics, κ'' = 0.005, γ = 0.99, σ1 = 0.1, σ2 = 0.2, c = 0.5, ν = 2,
//! mini-batch 256, replay buffer 100 000, Adam, two hidden layers of 256 with
//! ReLU.

use std::path::Path;

use candle_core::{D, Device, Tensor};
use candle_nn::{AdamW, Optimizer, VarMap};
use serde::{Deserialize, Serialize};

use crate::checkpoint::{self, Sidecar};
use crate::common::{allowed, check, finite, state_tensor};
use crate::error::{ActError, BuildError, LoadError, SaveError, UpdateError};
use crate::net::{DEFAULT_HIDDEN, Mlp, adam, digest_varmap, masked_log_softmax};
use crate::replay::{ActionSpec, Batch, ReplayBuffer, ReplaySpec};
use crate::rng::{Draws, Rng, SeedableRng};

pub use crate::head::Head;

/// TD3 hyperparameters. `Default` gives InSS Table 2's local stage.
///
/// Adam is candle-nn's `AdamW` with weight decay 0, betas 0.9/0.999, eps 1e-8.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Td3Hyper {
    /// Actor learning rate ℓ''_π (3e-4).
    pub actor_lr: f64,
    /// Critic learning rate ℓ''_Q (3e-4).
    pub critic_lr: f64,
    /// Soft update factor κ'' for the target actor and critics, in (0, 1]
    /// (0.005).
    pub kappa: f64,
    /// Discount γ, in [0, 1] (0.99).
    pub gamma: f64,
    /// Exploration noise σ1 ≥ 0, in action units (0.1).
    pub explore_noise: f64,
    /// Target policy noise σ2 ≥ 0 (0.2).
    pub policy_noise: f64,
    /// Target policy noise clip c ≥ 0 (0.5).
    pub noise_clip: f64,
    /// Policy delay ν ≥ 1: the actor and targets update every ν critic
    /// updates (2).
    pub policy_delay: u64,
    /// Mini-batch size (256).
    pub batch_size: usize,
    /// Replay buffer capacity (100 000), used by [`Td3::replay_buffer`].
    pub buffer_capacity: usize,
}

impl Default for Td3Hyper {
    fn default() -> Self {
        Self {
            actor_lr: 3e-4,
            critic_lr: 3e-4,
            kappa: 0.005,
            gamma: 0.99,
            explore_noise: 0.1,
            policy_noise: 0.2,
            noise_clip: 0.5,
            policy_delay: 2,
            batch_size: 256,
            buffer_capacity: 100_000,
        }
    }
}

/// What a TD3 agent is built from.
#[derive(Clone, Debug, PartialEq)]
pub struct Td3Config {
    /// The state's width.
    pub state_dim: usize,
    /// The action's width.
    pub action_dim: usize,
    /// The actor's output head.
    pub head: Head,
    /// Hidden layer widths of the actor and both critics.
    pub hidden: Vec<usize>,
    /// Hyperparameters.
    pub hyper: Td3Hyper,
}

impl Td3Config {
    /// A configuration with Table 2's defaults: hidden `[256, 256]` and
    /// [`Td3Hyper::default`].
    pub fn new(state_dim: usize, action_dim: usize, head: Head) -> Self {
        Self {
            state_dim,
            action_dim,
            head,
            hidden: DEFAULT_HIDDEN.to_vec(),
            hyper: Td3Hyper::default(),
        }
    }

    fn validate(&self) -> Result<(), BuildError> {
        if self.state_dim == 0 {
            return Err(BuildError::ZeroDim { what: "state_dim" });
        }
        if self.action_dim == 0 {
            return Err(BuildError::ZeroDim { what: "action_dim" });
        }
        if let Head::SoftmaxThenSigmoid { softmax } = self.head {
            if softmax == 0 || softmax > self.action_dim {
                return Err(BuildError::Head {
                    softmax,
                    action_dim: self.action_dim,
                });
            }
        }
        if let Some(index) = self.hidden.iter().position(|&w| w == 0) {
            return Err(BuildError::ZeroHidden { index });
        }
        let h = &self.hyper;
        let positive = "finite and > 0";
        let nonneg = "finite and >= 0";
        check(h.actor_lr, "actor_lr", positive, |v| v > 0.0)?;
        check(h.critic_lr, "critic_lr", positive, |v| v > 0.0)?;
        check(h.kappa, "kappa", "in (0, 1]", |v| v > 0.0 && v <= 1.0)?;
        check(h.gamma, "gamma", "in [0, 1]", |v| (0.0..=1.0).contains(&v))?;
        check(h.explore_noise, "explore_noise", nonneg, |v| v >= 0.0)?;
        check(h.policy_noise, "policy_noise", nonneg, |v| v >= 0.0)?;
        check(h.noise_clip, "noise_clip", nonneg, |v| v >= 0.0)?;
        if h.policy_delay == 0 {
            return Err(BuildError::ZeroDim {
                what: "policy_delay",
            });
        }
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

/// The losses of one [`Td3::update`], batch means.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Td3Losses {
    /// Mean squared TD error of critic 1.
    pub critic1: f32,
    /// Mean squared TD error of critic 2.
    pub critic2: f32,
    /// The actor loss `−mean Q1(s, π(s))`, on updates that stepped the actor.
    pub actor: Option<f32>,
}

/// A TD3 agent (see the module docs).
pub struct Td3 {
    config: Td3Config,
    seed: u64,
    map: VarMap,
    actor: Mlp,
    actor_target: Mlp,
    critic1: Mlp,
    critic2: Mlp,
    target1: Mlp,
    target2: Mlp,
    actor_opt: AdamW,
    critic_opt: AdamW,
    /// Draws the target-policy noise.
    pub(crate) rng: Rng,
    updates_done: u64,
}

impl std::fmt::Debug for Td3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Td3")
            .field("config", &self.config)
            .field("seed", &self.seed)
            .field("updates_done", &self.updates_done)
            .finish_non_exhaustive()
    }
}

impl Td3 {
    /// Builds an agent, drawing every initial weight from `seed` (actor,
    /// critic 1, critic 2; the targets start as copies); the generator for
    /// target-policy noise is forked from the same seed.
    pub fn new(config: Td3Config, seed: u64) -> Result<Self, BuildError> {
        config.validate()?;
        let (s, a, hidden) = (config.state_dim, config.action_dim, &config.hidden);
        let mut rng = Rng::seed_from_u64(seed);
        let map = VarMap::new();
        let cd = BuildError::Candle;
        let actor = Mlp::new(&map, "actor", s, hidden, a, &mut rng).map_err(cd)?;
        let critic1 = Mlp::new(&map, "critic1", s + a, hidden, 1, &mut rng).map_err(cd)?;
        let critic2 = Mlp::new(&map, "critic2", s + a, hidden, 1, &mut rng).map_err(cd)?;
        let actor_target = Mlp::new(&map, "actor_target", s, hidden, a, &mut rng).map_err(cd)?;
        let target1 = Mlp::new(&map, "critic1_target", s + a, hidden, 1, &mut rng).map_err(cd)?;
        let target2 = Mlp::new(&map, "critic2_target", s + a, hidden, 1, &mut rng).map_err(cd)?;
        actor_target.copy_from(&actor).map_err(cd)?;
        target1.copy_from(&critic1).map_err(cd)?;
        target2.copy_from(&critic2).map_err(cd)?;
        let h = &config.hyper;
        let actor_opt = adam(actor.vars(), h.actor_lr).map_err(cd)?;
        let mut critic_vars = critic1.vars();
        critic_vars.extend(critic2.vars());
        let critic_opt = adam(critic_vars, h.critic_lr).map_err(cd)?;
        let update_rng = crate::rng::fork(&mut rng);
        Ok(Self {
            config,
            seed,
            map,
            actor,
            actor_target,
            critic1,
            critic2,
            target1,
            target2,
            actor_opt,
            critic_opt,
            rng: update_rng,
            updates_done: 0,
        })
    }

    /// The configuration the agent was built with.
    pub fn config(&self) -> &Td3Config {
        &self.config
    }

    /// The seed the agent was built with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Critic updates taken so far.
    pub fn updates_done(&self) -> u64 {
        self.updates_done
    }

    /// An empty replay buffer sized by the hyperparameters, holding this
    /// agent's states, continuous actions, and share masks if the head has a
    /// softmax part.
    pub fn replay_buffer(&self) -> Result<ReplayBuffer, BuildError> {
        let k = self.config.head.softmax_len();
        let spec = ReplaySpec {
            state_dim: self.config.state_dim,
            action: ActionSpec::Continuous {
                dim: self.config.action_dim,
            },
            mask_len: (k > 0).then_some(k),
        };
        ReplayBuffer::new(spec, self.config.hyper.buffer_capacity)
    }

    /// The head applied to a `[B, state_dim]` batch through `net`.
    fn policy(
        &self,
        net: &Mlp,
        states: &Tensor,
        mask: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        let raw = net.forward(states)?;
        match self.config.head {
            Head::Sigmoid => candle_nn::ops::sigmoid(&raw),
            Head::SoftmaxThenSigmoid { softmax: k } => {
                let a = self.config.action_dim;
                let shares = masked_log_softmax(&raw.narrow(D::Minus1, 0, k)?, mask)?.exp()?;
                if k == a {
                    Ok(shares)
                } else {
                    let rest = candle_nn::ops::sigmoid(&raw.narrow(D::Minus1, k, a - k)?)?;
                    Tensor::cat(&[&shares, &rest], D::Minus1)
                }
            }
        }
    }

    /// Chooses an action in `[0, 1]^action_dim` for one state: the actor's
    /// output, plus N(0, σ1²) exploration noise when `explore` (see the
    /// module docs). With a softmax head the shares sum to 1 and masked
    /// shares are exactly 0; `mask` has one entry per share and must be
    /// `None` for [`Head::Sigmoid`].
    pub fn act(
        &self,
        state: &[f32],
        mask: Option<&[bool]>,
        explore: bool,
        rng: &mut Rng,
    ) -> Result<Vec<f32>, ActError> {
        let k = self.config.head.softmax_len();
        let allowed: Option<Vec<f32>> = match (mask, k) {
            (Some(_), 0) => return Err(ActError::MaskWithoutSoftmax),
            (None, _) => None,
            (Some(m), _) => {
                let m = allowed(Some(m), k)?;
                Some(m.iter().map(|&b| if b { 1.0 } else { 0.0 }).collect())
            }
        };
        let x = state_tensor(state, self.config.state_dim)?;
        let mask_t = match &allowed {
            Some(m) => Some(Tensor::from_slice(m, (1, k), &Device::Cpu).map_err(ActError::Candle)?),
            None => None,
        };
        let base = self
            .policy(&self.actor, &x, mask_t.as_ref())
            .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
            .map_err(ActError::Candle)?;
        if base.iter().any(|v| !v.is_finite()) {
            return Err(ActError::NonFiniteOutput);
        }
        let sigma = self.config.hyper.explore_noise;
        let mut a = base.clone();
        if explore {
            for v in a.iter_mut() {
                *v += (sigma * rng.normal()) as f32;
            }
        }
        finish_action(&mut a, &base, k, allowed.as_deref());
        Ok(a)
    }

    /// One TD3 update on `batch`: a critic step, and on every ν-th call an
    /// actor step and the soft update of the targets (see the module docs).
    /// The batch must have this agent's widths; absent masks allow every
    /// share.
    ///
    /// If a loss is not finite that step is skipped and an error returned;
    /// steps already taken in this update stay applied.
    pub fn update(&mut self, batch: &Batch) -> Result<Td3Losses, UpdateError> {
        let c = &self.config;
        let k = c.head.softmax_len();
        let a_dim = c.action_dim;
        let b = batch.check(c.state_dim, a_dim, (k > 0).then_some(k))?;
        let h = c.hyper.clone();
        let cd = UpdateError::Candle;

        // Target actions with clipped smoothing noise, built on the host.
        let base = self
            .policy(
                &self.actor_target,
                &batch.next_states,
                batch.next_masks.as_ref(),
            )
            .and_then(|t| t.detach().to_vec2::<f32>())
            .map_err(cd)?;
        let next_masks = match &batch.next_masks {
            Some(m) => Some(m.to_vec2::<f32>().map_err(cd)?),
            None => None,
        };
        let mut noisy = Vec::with_capacity(b * a_dim);
        for (row, base_row) in base.iter().enumerate() {
            let mut x = base_row.clone();
            for v in x.iter_mut() {
                let n = (h.policy_noise * self.rng.normal()).clamp(-h.noise_clip, h.noise_clip);
                *v += n as f32;
            }
            finish_action(
                &mut x,
                base_row,
                k,
                next_masks.as_ref().map(|m| m[row].as_slice()),
            );
            noisy.extend_from_slice(&x);
        }
        let next_actions = Tensor::from_vec(noisy, (b, a_dim), &Device::Cpu).map_err(cd)?;

        let y = {
            let sa = Tensor::cat(&[&batch.next_states, &next_actions], D::Minus1).map_err(cd)?;
            let q1 = self.target1.forward(&sa).map_err(cd)?;
            let q2 = self.target2.forward(&sa).map_err(cd)?;
            let min_q = q1.minimum(&q2).map_err(cd)?.detach();
            let not_done = batch.dones.affine(-1.0, 1.0).map_err(cd)?;
            let boot = (not_done * min_q)
                .and_then(|t| t.affine(h.gamma, 0.0))
                .map_err(cd)?;
            (&batch.rewards + boot).map_err(cd)?.detach()
        };
        let sa = Tensor::cat(&[&batch.states, &batch.actions], D::Minus1).map_err(cd)?;
        let mse = |net: &Mlp| (net.forward(&sa)? - &y)?.sqr()?.mean_all();
        let l1 = mse(&self.critic1).map_err(cd)?;
        let l2 = mse(&self.critic2).map_err(cd)?;
        let critic_loss = (&l1 + &l2).map_err(cd)?;
        finite("critic", &critic_loss)?;
        self.critic_opt.backward_step(&critic_loss).map_err(cd)?;
        self.updates_done += 1;

        let mut actor = None;
        if self.updates_done % h.policy_delay == 0 {
            let pi = self
                .policy(&self.actor, &batch.states, batch.masks.as_ref())
                .map_err(cd)?;
            let s_pi = Tensor::cat(&[&batch.states, &pi], D::Minus1).map_err(cd)?;
            let loss = self
                .critic1
                .forward(&s_pi)
                .and_then(|q| q.mean_all()?.neg())
                .map_err(cd)?;
            actor = Some(finite("actor", &loss)?);
            self.actor_opt.backward_step(&loss).map_err(cd)?;
            self.actor_target
                .soft_update_from(&self.actor, h.kappa)
                .map_err(cd)?;
            self.target1
                .soft_update_from(&self.critic1, h.kappa)
                .map_err(cd)?;
            self.target2
                .soft_update_from(&self.critic2, h.kappa)
                .map_err(cd)?;
        }
        let scalar = |t: &Tensor| t.to_scalar::<f32>().map_err(cd);
        Ok(Td3Losses {
            critic1: scalar(&l1)?,
            critic2: scalar(&l2)?,
            actor,
        })
    }

    /// FNV-1a digest of every parameter (actor, critics and their targets) in
    /// name order; two agents with equal digests have bitwise-equal weights.
    /// See the [`crate`] docs for when runs are reproducible.
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
            kind: "td3".to_string(),
            state_dim: c.state_dim,
            action_dim: c.action_dim,
            hidden: c.hidden.clone(),
            head: Some(c.head),
            hyperparameters: serde_json::to_value(&c.hyper).map_err(SaveError::Json)?,
            seed: self.seed,
            updates_done: self.updates_done,
            update_rng: Some(checkpoint::rng_to_hex(&self.rng)),
            weights: checkpoint::WEIGHTS_FILE.to_string(),
            weights_digest: checkpoint::hex(self.weights_digest()),
        };
        checkpoint::save(dir, &sidecar, &self.map)
    }

    /// Loads an agent saved by [`Td3::save`], checking that it was built for
    /// `state_dim`, `action_dim` and `head`. Adam's moments start afresh; the
    /// update counter (policy delay phase) and the noise generator are
    /// restored.
    pub fn load(
        dir: &Path,
        state_dim: usize,
        action_dim: usize,
        head: Head,
    ) -> Result<Self, LoadError> {
        let side = checkpoint::read_sidecar(dir, "td3", state_dim, action_dim)?;
        let path = checkpoint::sidecar_path(dir);
        let found = side.head.ok_or_else(|| LoadError::Field {
            path: path.clone(),
            field: "head",
            value: "null".to_string(),
            why: "a td3 checkpoint must name its head",
        })?;
        if found != head {
            return Err(LoadError::Head {
                path,
                found: found.to_string(),
                expected: head.to_string(),
            });
        }
        let words = side.update_rng.clone().ok_or_else(|| LoadError::Field {
            path: path.clone(),
            field: "update_rng",
            value: "null".to_string(),
            why: "a td3 checkpoint must hold its noise generator",
        })?;
        let rng = checkpoint::rng_from_hex(dir, &words)?;
        let config = Td3Config {
            state_dim,
            action_dim,
            head,
            hidden: side.hidden.clone(),
            hyper: checkpoint::parse_field(dir, &side.hyperparameters)?,
        };
        let mut agent =
            Td3::new(config, side.seed).map_err(|source| LoadError::Config { path, source })?;
        checkpoint::restore_weights(dir, &side, &agent.map)?;
        agent.updates_done = side.updates_done;
        agent.rng = rng;
        Ok(agent)
    }
}

/// Clips a (possibly noisy) action to `[0, 1]` and, for the first `k`
/// entries (the shares), zeroes masked ones and renormalises the rest to sum
/// to 1; if none of them is positive, the shares are taken from `base` (the
/// noiseless output, whose shares already sum to 1 over the unmasked ones).
fn finish_action(a: &mut [f32], base: &[f32], k: usize, mask: Option<&[f32]>) {
    for v in a.iter_mut() {
        *v = v.clamp(0.0, 1.0);
    }
    if k == 0 || renormalise(&mut a[..k], mask) {
        return;
    }
    // Every unmasked share was clipped to 0: use the noiseless shares.
    for (v, &b) in a[..k].iter_mut().zip(base) {
        *v = b.clamp(0.0, 1.0);
    }
    renormalise(&mut a[..k], mask);
}

/// Zeroes masked shares and scales the rest to sum to 1; returns false (and
/// leaves the shares zeroed) if they sum to 0.
fn renormalise(shares: &mut [f32], mask: Option<&[f32]>) -> bool {
    if let Some(m) = mask {
        for (v, &mv) in shares.iter_mut().zip(m) {
            if mv == 0.0 {
                *v = 0.0;
            }
        }
    }
    let sum: f64 = shares.iter().map(|&v| f64::from(v)).sum();
    if sum > 0.0 {
        for v in shares.iter_mut() {
            *v = (f64::from(*v) / sum) as f32;
        }
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::{Action, Transition};

    fn small(state_dim: usize, action_dim: usize, head: Head) -> Td3Config {
        let mut c = Td3Config::new(state_dim, action_dim, head);
        c.hidden = vec![32, 32];
        c.hyper.actor_lr = 1e-3;
        c.hyper.critic_lr = 1e-3;
        c.hyper.batch_size = 32;
        c.hyper.buffer_capacity = 2000;
        c
    }

    const TARGETS: [[f32; 2]; 2] = [[0.25, 0.75], [0.7, 0.3]];

    fn one_hot(i: usize, n: usize) -> Vec<f32> {
        let mut v = vec![0.0; n];
        v[i] = 1.0;
        v
    }

    /// Trains an agent for 200 updates on a one-step problem: state the
    /// one-hot of 2 contexts, a 2-wide action with a sigmoid head, reward
    /// −‖a − TARGETS[context]‖², done; 1000 uniformly random actions. Returns
    /// the agent, the number of actor steps, and the largest distance (per
    /// coordinate) of its greedy actions from the targets.
    fn regression(seed: u64) -> (Td3, usize, f32) {
        let mut c = small(2, 2, Head::Sigmoid);
        c.hyper.critic_lr = 2e-2;
        c.hyper.actor_lr = 3e-3;
        let mut agent = Td3::new(c, seed).expect("valid config");
        let mut buf = agent.replay_buffer().expect("valid");
        let mut rng = Rng::seed_from_u64(seed + 100);
        for _ in 0..1000 {
            let ctx = rng.below(2);
            let a = vec![rng.unit() as f32, rng.unit() as f32];
            let t = TARGETS[ctx];
            let reward = -((a[0] - t[0]).powi(2) + (a[1] - t[1]).powi(2));
            buf.push(Transition {
                state: one_hot(ctx, 2),
                action: Action::Continuous(a),
                reward,
                next_state: one_hot(ctx, 2),
                done: true,
                mask: None,
                next_mask: None,
            })
            .expect("valid transition");
        }
        let mut actor_steps = 0;
        for _ in 0..200 {
            let batch = buf.sample(32, &mut rng).expect("sample");
            let losses = agent.update(&batch).expect("update");
            actor_steps += usize::from(losses.actor.is_some());
        }
        let mut worst = 0f32;
        for (ctx, t) in TARGETS.iter().enumerate() {
            let a = agent
                .act(&one_hot(ctx, 2), None, false, &mut rng)
                .expect("acts");
            for d in 0..2 {
                worst = worst.max((a[d] - t[d]).abs());
            }
        }
        (agent, actor_steps, worst)
    }

    #[test]
    fn learns_a_one_step_continuous_problem() {
        let (agent, actor_steps, worst) = regression(0);
        assert_eq!(actor_steps, 100, "policy delay 2");
        assert_eq!(agent.updates_done(), 200);
        let mut rng = Rng::seed_from_u64(0);
        let actions: Vec<Vec<f32>> = (0..2)
            .map(|ctx| {
                agent
                    .act(&one_hot(ctx, 2), None, false, &mut rng)
                    .expect("acts")
            })
            .collect();
        assert!(
            worst < 0.1,
            "greedy actions {actions:?}, targets {TARGETS:?}"
        );
    }

    /// How often the settings of `learns_a_one_step_continuous_problem`
    /// (seed 0) reach 0.1 across seeds. At the time of writing: 7 of 8, the
    /// other within 0.15 (the small critic's maximum is off by that much).
    #[test]
    #[ignore = "slow seed sweep; run with --ignored --nocapture"]
    fn continuous_problem_across_seeds() {
        let worst: Vec<f32> = (0..8).map(|s| regression(s).2).collect();
        println!("TD3 one-step problem, worst coordinate error per seed: {worst:?}");
        assert!(worst.iter().filter(|&&w| w < 0.1).count() >= 6);
        assert!(worst.iter().all(|&w| w < 0.2));
    }

    #[test]
    fn softmax_head_shares_sum_to_one_and_masked_shares_are_zero() {
        let head = Head::SoftmaxThenSigmoid { softmax: 3 };
        let mut cfg = small(4, 5, head);
        cfg.hyper.explore_noise = 0.3; // plenty of clipping
        let mut agent = Td3::new(cfg, 8).expect("valid config");
        let mut rng = Rng::seed_from_u64(1);
        let mask = [true, false, true];
        let mut buf = agent.replay_buffer().expect("valid");
        for i in 0..200 {
            let s: Vec<f32> = (0..4).map(|j| ((i * 7 + j) % 5) as f32 / 5.0).collect();
            for (m, explore) in [
                (None, false),
                (None, true),
                (Some(&mask[..]), false),
                (Some(&mask[..]), true),
            ] {
                let a = agent.act(&s, m, explore, &mut rng).expect("acts");
                assert_eq!(a.len(), 5);
                assert!(a.iter().all(|v| (0.0..=1.0).contains(v)), "{a:?}");
                let sum: f32 = a[..3].iter().sum();
                assert!(
                    (sum - 1.0).abs() < 1e-5,
                    "shares {:?} sum to {sum}",
                    &a[..3]
                );
                if m.is_some() {
                    assert_eq!(a[1], 0.0, "masked share is {}", a[1]);
                }
            }
            let a = agent.act(&s, Some(&mask), true, &mut rng).expect("acts");
            buf.push(Transition {
                state: s.clone(),
                action: Action::Continuous(a),
                reward: 0.5,
                next_state: s,
                done: i % 3 == 0,
                mask: Some(mask.to_vec()),
                next_mask: Some(mask.to_vec()),
            })
            .expect("valid");
        }
        for _ in 0..20 {
            let batch = buf.sample(16, &mut rng).expect("sample");
            agent.update(&batch).expect("update");
        }
        let a = agent
            .act(&[0.1, 0.2, 0.3, 0.4], Some(&mask), false, &mut rng)
            .expect("acts");
        assert_eq!(a[1], 0.0);
        assert!((a[..3].iter().sum::<f32>() - 1.0).abs() < 1e-5);

        let e = agent
            .act(&[0.0; 4], Some(&[false; 3]), false, &mut rng)
            .unwrap_err();
        assert!(matches!(e, ActError::AllMasked { len: 3 }), "{e}");
        let e = agent
            .act(&[0.0; 4], Some(&[true; 2]), false, &mut rng)
            .unwrap_err();
        assert!(
            matches!(
                e,
                ActError::MaskLen {
                    expected: 3,
                    got: 2
                }
            ),
            "{e}"
        );
        let sig = Td3::new(small(4, 2, Head::Sigmoid), 0).expect("valid");
        let e = sig
            .act(&[0.0; 4], Some(&[true]), false, &mut rng)
            .unwrap_err();
        assert!(matches!(e, ActError::MaskWithoutSoftmax), "{e}");
    }

    #[test]
    fn finish_action_falls_back_when_noise_zeroes_every_share() {
        let base = [0.25, 0.0, 0.75, 0.4];
        let mut a = [-0.3, 0.9, -0.1, 1.7];
        finish_action(&mut a, &base, 3, Some(&[1.0, 0.0, 1.0]));
        assert_eq!(a, [0.25, 0.0, 0.75, 1.0]);
        let mut a = [0.5, 0.9, 0.5, 0.2];
        finish_action(&mut a, &base, 3, Some(&[1.0, 0.0, 1.0]));
        assert_eq!(a, [0.5, 0.0, 0.5, 0.2]);
    }

    #[test]
    fn config_is_validated_and_defaults_follow_table_2() {
        let c = Td3Config::new(40, 8, Head::SoftmaxThenSigmoid { softmax: 4 });
        assert_eq!(c.hyper.actor_lr, 3e-4);
        assert_eq!(c.hyper.kappa, 0.005);
        assert_eq!(c.hyper.policy_delay, 2);
        assert_eq!(
            (
                c.hyper.explore_noise,
                c.hyper.policy_noise,
                c.hyper.noise_clip
            ),
            (0.1, 0.2, 0.5)
        );
        let e = Td3::new(small(2, 2, Head::SoftmaxThenSigmoid { softmax: 3 }), 0).unwrap_err();
        assert!(
            e.to_string().contains("softmax = 3") && e.to_string().contains("action_dim = 2"),
            "{e}"
        );
        let mut bad = small(2, 2, Head::Sigmoid);
        bad.hyper.policy_delay = 0;
        assert!(matches!(
            Td3::new(bad, 0),
            Err(BuildError::ZeroDim {
                what: "policy_delay"
            })
        ));
        let mut bad = small(2, 2, Head::Sigmoid);
        bad.hyper.gamma = 1.5;
        assert!(
            Td3::new(bad, 0)
                .unwrap_err()
                .to_string()
                .contains("gamma = 1.5")
        );
    }
}
