//! The agents' observations and how their actions become a [`Decision`]:
//! InSS §5.1 (global stage, one observation per instance, in instance
//! order, each seeing the placements made before it in the same step) and
//! §5.2 (local stage, one observation per GPU).
//!
//! **Global** (SACD), for instance `i`, `M` models, `K` GPUs:
//! `[one-hot model (M), λ̂_i, ĝ_i, W_i, then per GPU k: u_k / M_k, L_{i,k},
//! E_{i,k}, n_k / S]`, length `M + 3 + 4K`. `p_i` of §5.1's state is not
//! defined in the paper; it is read as the model's identity (the one-hot).
//! `λ̂` is the rate over its training RMS, `ĝ` the queued tasks over the
//! largest batch, `W_i = Σ_{i' ≥ i} λ̂_{i'} + ĝ_i` (the load not yet
//! placed), `u_k` the memory already placed on GPU `k` in this step,
//! `L`/`E` the L2 and DRAM utilisation of what is placed there, and `n_k`
//! how many instances, out of the local stage's `S` slots. An instance's
//! utilisation and memory are taken at its previous decision's batch and
//! share, or at batch 8 on `100 / S` % before it has one. Action: a GPU,
//! masked to the *safe action space*: GPUs with a free slot and memory
//! for the instance (§5.1).
//!
//! **Local** (TD3), for GPU `k`: per slot `s < S` (its instances in index
//! order) `[one-hot model (M), λ̂, ĝ, present]`, then `u_k / M_k`: length
//! `S (M + 3) + 1`. Action (length `2S`): the first `S` through a softmax
//! over the present slots are the shares (summing to 100 %, rounded down
//! to whole percent as MPS takes them), the next `S` in `[0, 1]` the
//! batches, `1 + round(a × (B − 1))`.

use crate::env::Env;
use crate::types::{ExecModel, sms_of_pct};
use crate::workload::{Decision, Slot};

/// The batch and share an instance's features assume before it has a
/// decision.
pub const REFERENCE_BATCH: u32 = 8;

/// Length of a global observation.
pub fn global_dim(models: usize, gpus: usize) -> usize {
    models + 3 + 4 * gpus
}

/// Length of a local observation.
pub fn local_dim(models: usize, slots: usize) -> usize {
    slots * (models + 3) + 1
}

/// Length of a local action.
pub fn local_action_dim(slots: usize) -> usize {
    2 * slots
}

/// Builds the global observations one instance at a time.
#[derive(Clone)]
pub struct GlobalStage<'a> {
    env: &'a Env,
    exec: &'a dyn ExecModel,
    prev: &'a Decision,
    /// GPU chosen per instance so far.
    pub chosen: Vec<Option<usize>>,
    mem: Vec<f64>,
    l2: Vec<f64>,
    dram: Vec<f64>,
    count: Vec<usize>,
}

impl std::fmt::Debug for GlobalStage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalStage")
            .field("chosen", &self.chosen)
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

impl<'a> GlobalStage<'a> {
    /// A new step's global stage; `prev` is the previous decision (empty at
    /// the start of an episode).
    pub fn new(env: &'a Env, exec: &'a dyn ExecModel, prev: &'a Decision) -> Self {
        let k = env.config().gpus;
        Self {
            env,
            exec,
            prev,
            chosen: vec![None; env.instances().len()],
            mem: vec![0.0; k],
            l2: vec![0.0; k],
            dram: vec![0.0; k],
            count: vec![0; k],
        }
    }

    /// Instance `i`'s (batch, SMs) for its features.
    fn reference(&self, i: usize) -> (u32, u32) {
        let c = self.exec.gpu_sms();
        match self.prev.slots.get(i).copied().flatten() {
            Some(s) if s.pct > 0 => (s.batch, sms_of_pct(s.pct, c)),
            _ => (
                REFERENCE_BATCH,
                sms_of_pct(100 / self.env.config().max_slots.max(1) as u32, c),
            ),
        }
    }

    /// The observation of instance `i` given the placements so far.
    pub fn observe(&self, i: usize) -> Vec<f32> {
        let env = self.env;
        let inst = env.instances();
        let m = self.exec.model_count();
        let mut s = vec![0.0f32; global_dim(m, env.config().gpus)];
        s[inst[i].model] = 1.0;
        let lam = |j: usize| env.rates()[j] / env.rate_scale(j);
        let q = env.queued();
        let g = q[i] as f64 / f64::from(env.config().max_batch);
        s[m] = lam(i) as f32;
        s[m + 1] = g as f32;
        s[m + 2] = ((i..inst.len()).map(lam).sum::<f64>() + g) as f32;
        let cap = self.exec.gpu_mem_mb();
        for k in 0..env.config().gpus {
            let o = m + 3 + 4 * k;
            s[o] = (self.mem[k] / cap) as f32;
            s[o + 1] = self.l2[k] as f32;
            s[o + 2] = self.dram[k] as f32;
            s[o + 3] = self.count[k] as f32 / env.config().max_slots as f32;
        }
        s
    }

    /// The safe action space of instance `i`: GPUs with a free slot and
    /// room for its memory.
    pub fn mask(&self, i: usize) -> Vec<bool> {
        let (b, _) = self.reference(i);
        let need = self.exec.mem_mb(self.env.instances()[i].model, b);
        (0..self.env.config().gpus)
            .map(|k| {
                self.count[k] < self.env.config().max_slots
                    && self.mem[k] + need <= self.exec.gpu_mem_mb()
            })
            .collect()
    }

    /// Records instance `i` on GPU `k`.
    pub fn place(&mut self, i: usize, k: usize) {
        let (b, sms) = self.reference(i);
        let model = self.env.instances()[i].model;
        let (l2, dram) = self.exec.util(model, b, sms);
        self.mem[k] += self.exec.mem_mb(model, b);
        self.l2[k] += l2;
        self.dram[k] += dram;
        self.count[k] += 1;
        self.chosen[i] = Some(k);
    }

    /// Instances placed on GPU `k`, in index order.
    pub fn on_gpu(&self, k: usize) -> Vec<usize> {
        (0..self.chosen.len())
            .filter(|&i| self.chosen[i] == Some(k))
            .collect()
    }
}

/// The local observation of a GPU holding `members` (instance indices, at
/// most `S`), and the mask of its present slots.
pub fn local_observe(
    env: &Env,
    exec: &dyn ExecModel,
    members: &[usize],
    mem_used_mb: f64,
) -> (Vec<f32>, Vec<bool>) {
    let m = exec.model_count();
    let slots = env.config().max_slots;
    let mut s = vec![0.0f32; local_dim(m, slots)];
    let mut mask = vec![false; slots];
    let q = env.queued();
    for (k, &i) in members.iter().take(slots).enumerate() {
        let o = k * (m + 3);
        s[o + env.instances()[i].model] = 1.0;
        s[o + m] = (env.rates()[i] / env.rate_scale(i)) as f32;
        s[o + m + 1] = (q[i] as f64 / f64::from(env.config().max_batch)) as f32;
        s[o + m + 2] = 1.0;
        mask[k] = true;
    }
    s[slots * (m + 3)] = (mem_used_mb / exec.gpu_mem_mb()) as f32;
    (s, mask)
}

/// Writes a local action for GPU `gpu` into `d`: shares from the first
/// half (renormalised over the present slots, rounded down to percent),
/// batches from the second.
pub fn apply_local(
    d: &mut Decision,
    gpu: usize,
    members: &[usize],
    action: &[f32],
    max_batch: u32,
) {
    let slots = action.len() / 2;
    let n = members.len().min(slots);
    let total: f64 = action[..n].iter().map(|&a| f64::from(a.max(0.0))).sum();
    for (k, &i) in members.iter().take(n).enumerate() {
        let share = if total > 0.0 {
            f64::from(action[k].max(0.0)) / total
        } else {
            1.0 / n as f64
        };
        let pct = ((share * 100.0) + 1e-9).floor() as u32;
        let a = f64::from(action[slots + k].clamp(0.0, 1.0));
        let batch = 1 + (a * f64::from(max_batch - 1)).round() as u32;
        d.slots[i] = Some(Slot { gpu, pct, batch });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inverse of [`apply_local`] up to rounding.
    fn local_action_of(d: &Decision, members: &[usize], slots: usize, max_batch: u32) -> Vec<f32> {
        let mut a = vec![0.0f32; 2 * slots];
        for (k, &i) in members.iter().take(slots).enumerate() {
            if let Some(s) = d.slots[i] {
                a[k] = s.pct as f32 / 100.0;
                a[slots + k] = (s.batch.saturating_sub(1)) as f32 / (max_batch - 1) as f32;
            }
        }
        a
    }

    #[test]
    fn dims() {
        assert_eq!(global_dim(8, 4), 8 + 3 + 16);
        assert_eq!(local_dim(8, 4), 4 * 11 + 1);
        assert_eq!(local_action_dim(4), 8);
    }

    #[test]
    fn local_actions_become_shares_summing_to_at_most_100_and_batches() {
        let mut d = Decision {
            slots: vec![None; 3],
        };
        // Slots 0 and 1 present (instances 2 and 0); slot 2, 3 absent.
        apply_local(
            &mut d,
            1,
            &[2, 0],
            &[0.3, 0.6, 0.1, 0.0, 0.0, 1.0, 0.5, 0.5],
            32,
        );
        let a = d.slots[2].unwrap();
        let b = d.slots[0].unwrap();
        assert_eq!((a.gpu, a.pct, a.batch), (1, 33, 1));
        assert_eq!((b.gpu, b.pct, b.batch), (1, 66, 32));
        assert!(d.slots[1].is_none());
        assert!(a.pct + b.pct <= 100);
        let back = local_action_of(&d, &[2, 0], 4, 32);
        assert_eq!(back[5], 1.0);
    }
}
