//! The MDP of InSS §3.3 and §5 on the latency model: the environment both
//! agents are trained in (the paper trains on its analytical model, not on
//! the cluster, §4).
//!
//! # One step
//!
//! A step is `step_s` seconds (1 s by default) of Poisson arrivals of every
//! instance at its current rate. At the start of the step the scheduler
//! has decided, for every instance, its GPU, its MPS share and its batch
//! ([`Decision`]); sluice repartitions in place, so a new decision takes
//! effect at once. Each served instance runs in its own partition, with the
//! batch latency `t_inf` the latency model predicts for its share beside the
//! instances sharing its GPU ([`Decision::exec_ms`]).
//!
//! Each arriving task is judged by InSS's Eq. 3 against the instance's
//! queue at that moment: `w` queued tasks including itself, `exec` left of
//! the running batch; a task whose Eq. 3 latency exceeds its SLO is dropped
//! at once (Fig. 12's *Drop*), others join the FIFO queue. A batch of
//! exactly `b` tasks starts as soon as the partition is free and `b` tasks
//! are queued (InSS's buffer waits for a batch to fill, Eq. 3's second
//! case); its tasks complete `t_inf` later, late if their latency exceeds
//! the SLO. Queues and the running batch carry over from step to step.
//! Rates follow a bounded random walk between steps.
//!
//! # Reward
//!
//! Eq. 2: `r = Σ_i (ĥ_i − ω v_i)` with ω = 40, where `h_i` is the tasks of
//! instance `i` whose batch started in the step, per second, and `v_i` the
//! fraction of its tasks of the step that were dropped or late. *Root mean
//! square normalisation* (§3.3) is read as dividing by the RMS of the
//! instance's rate under the training distribution, so `ĥ ≈ 1` means
//! "served a typical rate". The global agent's reward for instance `i` is
//! its own term (§5.1 `r'`), the local agent's for GPU `k` the sum over the
//! instances on `k` (§5.2 `r''`).

use std::collections::VecDeque;

use sluice_rng::{Draws, SeedableRng, SplitMix64};

use crate::latency::task_latency_ms;
use crate::types::ExecModel;
use crate::workload::{Decision, Instance};

/// Environment parameters (InSS gives ω = 40 and T = 100 steps; the rest
/// are sluice's choices, stated in `docs/inss.md`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EnvConfig {
    /// GPUs.
    pub gpus: usize,
    /// Most instances on one GPU (the local agent's slots).
    pub max_slots: usize,
    /// Seconds of arrivals per step.
    pub step_s: f64,
    /// Steps per episode (Table 2: T = 100).
    pub steps: usize,
    /// Penalty factor ω of Eq. 2 (§6.1: 40).
    pub omega: f64,
    /// Largest batch.
    pub max_batch: u32,
    /// Training rates are drawn uniformly in `[low, high] × max_rate_rps`.
    pub rate_low: f64,
    /// See `rate_low`.
    pub rate_high: f64,
    /// Each step a rate moves by a uniform factor in `1 ± walk`, kept in
    /// the range.
    pub rate_walk: f64,
}

impl Default for EnvConfig {
    fn default() -> Self {
        Self {
            gpus: 4,
            max_slots: 4,
            step_s: 1.0,
            steps: 100,
            omega: 40.0,
            max_batch: 32,
            rate_low: 0.2,
            rate_high: 1.0,
            rate_walk: 0.1,
        }
    }
}

/// One instance's queue.
#[derive(Debug, Clone, Default, PartialEq)]
struct Queue {
    /// Arrival times (s) of queued tasks, oldest first.
    tasks: VecDeque<f64>,
    /// When the running batch ends (s).
    busy_until: f64,
}

/// One instance's outcome in one step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepOutcome {
    /// Tasks that arrived.
    pub arrived: u64,
    /// Tasks whose batch started (served).
    pub served: u64,
    /// Of those, late.
    pub late: u64,
    /// Tasks dropped on arrival (Eq. 3 over the SLO).
    pub dropped: u64,
}

impl StepOutcome {
    /// Dropped or late over arrived-or-served (0 with neither).
    pub fn violation(&self) -> f64 {
        let n = self.arrived.max(self.served);
        if n == 0 {
            0.0
        } else {
            ((self.dropped + self.late) as f64 / n as f64).min(1.0)
        }
    }
}

/// The environment.
#[derive(Debug, Clone)]
pub struct Env {
    cfg: EnvConfig,
    instances: Vec<Instance>,
    rng: SplitMix64,
    rates: Vec<f64>,
    queues: Vec<Queue>,
    now_s: f64,
    step: usize,
}

impl Env {
    /// An environment over `instances`, seeded; call [`Env::reset`] first.
    pub fn new(cfg: EnvConfig, instances: Vec<Instance>, seed: u64) -> Self {
        let n = instances.len();
        Self {
            cfg,
            instances,
            rng: SplitMix64::seed_from_u64(seed),
            rates: vec![0.0; n],
            queues: vec![Queue::default(); n],
            now_s: 0.0,
            step: 0,
        }
    }

    /// Its parameters.
    pub fn config(&self) -> &EnvConfig {
        &self.cfg
    }

    /// Its instances.
    pub fn instances(&self) -> &[Instance] {
        &self.instances
    }

    /// Current rates, requests/s.
    pub fn rates(&self) -> &[f64] {
        &self.rates
    }

    /// Queued tasks per instance.
    pub fn queued(&self) -> Vec<u64> {
        self.queues.iter().map(|q| q.tasks.len() as u64).collect()
    }

    /// Steps taken in this episode.
    pub fn step_index(&self) -> usize {
        self.step
    }

    /// Whether the episode is over.
    pub fn done(&self) -> bool {
        self.step >= self.cfg.steps
    }

    /// The RMS of instance `i`'s rate under the training distribution
    /// (uniform in `[low, high] × max`): the normaliser of `λ̂` and `ĥ`.
    pub fn rate_scale(&self, i: usize) -> f64 {
        let (l, h) = (self.cfg.rate_low, self.cfg.rate_high);
        ((l * l + l * h + h * h) / 3.0).sqrt() * self.instances[i].max_rate_rps
    }

    /// Starts an episode: empty queues, rates drawn uniformly in range.
    pub fn reset(&mut self) {
        for i in 0..self.instances.len() {
            let m = self.instances[i].max_rate_rps;
            self.rates[i] = self.rng.uniform(self.cfg.rate_low, self.cfg.rate_high) * m;
        }
        self.reset_with_rates(&self.rates.clone());
    }

    /// Starts an episode at the given rates (evaluation).
    pub fn reset_with_rates(&mut self, rates: &[f64]) {
        self.rates.copy_from_slice(rates);
        for q in &mut self.queues {
            *q = Queue::default();
        }
        self.now_s = 0.0;
        self.step = 0;
    }

    /// Sets the rates of the next steps (evaluation on a trace).
    pub fn set_rates(&mut self, rates: &[f64]) {
        self.rates.copy_from_slice(rates);
    }

    /// Runs one step under `d` and returns each instance's outcome; then
    /// moves the rates by the random walk.
    pub fn step(&mut self, d: &Decision, exec: &dyn ExecModel) -> Vec<StepOutcome> {
        let t_inf = d.exec_ms(&self.instances, exec);
        let (t0, t1) = (self.now_s, self.now_s + self.cfg.step_s);
        let mut out = vec![StepOutcome::default(); self.instances.len()];
        for i in 0..self.instances.len() {
            let slo_s = self.instances[i].slo_ms / 1e3;
            let rate = self.rates[i];
            let b = d.slots[i].map_or(0, |s| s.batch);
            let o = &mut out[i];
            let q = &mut self.queues[i];
            let t_inf_s = t_inf[i].map(|t| t / 1e3);
            let mut t = t0;
            loop {
                t += if rate > 0.0 {
                    self.rng.exp(rate)
                } else {
                    f64::INFINITY
                };
                let until = t.min(t1);
                if let Some(ts) = t_inf_s {
                    run_batches(q, b, ts, until, slo_s, o);
                }
                if t >= t1 {
                    break;
                }
                o.arrived += 1;
                let Some(ts) = t_inf_s else {
                    o.dropped += 1;
                    continue;
                };
                let w = q.tasks.len() as u64 + 1;
                let exec_ms = (q.busy_until - t).max(0.0) * 1e3;
                if task_latency_ms(w as f64, exec_ms, ts * 1e3, b, rate / 1e3)
                    > self.instances[i].slo_ms
                {
                    o.dropped += 1;
                } else {
                    q.tasks.push_back(t);
                }
            }
            // Tasks stuck in a partial batch past their SLO can no longer
            // make it: count them dropped now rather than never.
            while q.tasks.front().is_some_and(|&a| t1 - a > slo_s) {
                q.tasks.pop_front();
                o.dropped += 1;
            }
        }
        self.now_s = t1;
        self.step += 1;
        for i in 0..self.instances.len() {
            let m = self.instances[i].max_rate_rps;
            let f = self
                .rng
                .uniform(1.0 - self.cfg.rate_walk, 1.0 + self.cfg.rate_walk);
            self.rates[i] =
                (self.rates[i] * f).clamp(self.cfg.rate_low * m, self.cfg.rate_high * m);
        }
        out
    }

    /// Eq. 2 per instance: `ĥ_i − ω v_i`.
    pub fn rewards(&self, out: &[StepOutcome]) -> Vec<f64> {
        out.iter()
            .enumerate()
            .map(|(i, o)| {
                let h = o.served as f64 / self.cfg.step_s;
                h / self.rate_scale(i) - self.cfg.omega * o.violation()
            })
            .collect()
    }
}

/// Starts every batch of exactly `b` that can start before `until`.
fn run_batches(q: &mut Queue, b: u32, t_inf_s: f64, until: f64, slo_s: f64, o: &mut StepOutcome) {
    let b = b as usize;
    if b == 0 {
        return;
    }
    while q.tasks.len() >= b {
        let start = q.busy_until.max(q.tasks[b - 1]);
        if start > until {
            break;
        }
        let end = start + t_inf_s;
        for _ in 0..b {
            let a = q.tasks.pop_front().expect("b tasks queued");
            o.served += 1;
            if end - a > slo_s {
                o.late += 1;
            }
        }
        q.busy_until = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Toy;
    use crate::workload::Slot;

    fn one(slo: f64, rate: f64) -> Env {
        let cfg = EnvConfig {
            gpus: 1,
            rate_low: 1.0,
            rate_high: 1.0,
            ..EnvConfig::default()
        };
        let inst = vec![Instance {
            name: "toy".into(),
            model: 0,
            slo_ms: slo,
            max_rate_rps: rate,
        }];
        let mut e = Env::new(cfg, inst, 7);
        e.reset();
        e
    }

    #[test]
    fn a_fast_partition_serves_everything_and_an_unserved_instance_drops_all() {
        let mut e = one(50.0, 200.0);
        let d = Decision {
            slots: vec![Some(Slot {
                gpu: 0,
                pct: 100,
                batch: 2,
            })],
        };
        let mut arrived = 0;
        let mut served = 0;
        for _ in 0..5 {
            let o = e.step(&d, &Toy::one())[0];
            arrived += o.arrived;
            served += o.served;
            assert_eq!(o.late + o.dropped, 0, "{o:?}");
        }
        // ~1000 arrivals in 5 s; at most one task waits for its pair.
        assert!(arrived > 800 && served + 1 >= arrived, "{arrived} {served}");
        let none = Decision { slots: vec![None] };
        let o = e.step(&none, &Toy::one())[0];
        assert!(o.dropped >= o.arrived && o.served == 0, "{o:?}");
        assert!(e.rewards(&[o])[0] < -39.0);
    }

    #[test]
    fn an_overloaded_partition_drops_and_a_huge_batch_never_fills() {
        // 200 rps on 1 % (t_inf = 100 ms × b): far over capacity.
        let mut e = one(50.0, 200.0);
        let slow = Decision {
            slots: vec![Some(Slot {
                gpu: 0,
                pct: 1,
                batch: 1,
            })],
        };
        let o = e.step(&slow, &Toy::one())[0];
        assert!(o.violation() > 0.9, "{o:?}");
        // Batch 32 at 200 rps takes 160 ms to fill: over a 50 ms SLO.
        let mut e = one(50.0, 200.0);
        let big = Decision {
            slots: vec![Some(Slot {
                gpu: 0,
                pct: 100,
                batch: 32,
            })],
        };
        let o = e.step(&big, &Toy::one())[0];
        assert_eq!(o.served, 0);
        assert_eq!(o.dropped, o.arrived);
    }

    #[test]
    fn same_seed_same_outcomes() {
        let d = Decision {
            slots: vec![Some(Slot {
                gpu: 0,
                pct: 30,
                batch: 4,
            })],
        };
        let run = || {
            let mut e = one(40.0, 300.0);
            (0..3)
                .map(|_| e.step(&d, &Toy::one())[0])
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }
}
