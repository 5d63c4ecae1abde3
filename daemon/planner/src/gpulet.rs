//! gpulet's elastic partitioning (Choi et al., USENIX ATC '22, §4.3
//! Algorithm 1), with and without the §4.4 interference model.
//!
//! Models are taken in ascending `rate × SLO` (ties in input order). For
//! each, while some of its rate is unserved (lines 4–11):
//!
//! 1. `p_eff` (MAXEFFICIENTPARTITION, the knee): per usable size `p`, the
//!    saturated throughput `T(p)` (largest batch with `2·L(b, p) ≤ SLO`,
//!    run back to back); `p_eff` is the smallest `p` with
//!    `T(p) ≥ (1 − 5 %) · max T`. Computed once per model, without
//!    interference ("determined during profiling").
//! 2. `p_req` (MINREQUIREDPARTITION): the smallest usable size on which
//!    adaptive batching serves the whole remaining rate within the SLO;
//!    none when no size does.
//! 3. `p_ideal = min(p_eff, p_req)` (`p_eff` when there is no `p_req`).
//! 4. FINDBESTFIT (lines 14–26): the free gpulets sorted by size, ties by
//!    GPU index then position; the first of size `≥ p_ideal` whose GPU has
//!    memory for one more copy, whose size the model may use, and on which
//!    a batch exists is taken. An unpartitioned GPU is split into
//!    `p_ideal` and `100 − p_ideal` and the model takes the `p_ideal` part.
//!    The batch: adaptive batching serving the whole remaining rate, else
//!    the saturated batch, which serves its throughput and leaves the rest
//!    of the rate to the next round of the loop; latencies multiplied by
//!    the interference factor against the GPU's other partitions. With
//!    interference, the choice must also leave every other partition of
//!    that GPU within its SLO and round under the new factors; a one-model
//!    partition that the newcomer would push past them first has its batch
//!    and duty cycle re-chosen by the same adaptive rule under those
//!    factors, serving the same share (`Engine::rebatch`: a batching chosen
//!    alone, e.g. a duty cycle cut to `SLO − L` at a low rate, leaves no
//!    room for any slowdown, and keeping it would refuse every neighbour).
//!    Temporal merges re-batch the host GPU's partitions the same way.
//! 5. TEMPORALSCHEDULING (line 22): the new gpulet is merged with the
//!    allocated gpulet that gives the busiest merged round, ties to the
//!    lowest (GPU, position); repeated with the merged gpulet until no
//!    merge is possible. A merge runs on the larger of the two gpulets
//!    (the older one on a tie), frees the other, takes the shorter duty
//!    cycle `d`, and gives each model the smallest listed batch covering its
//!    share in `d`; it is made only when the round fits `d`, every model
//!    keeps `d + L·factor ≤ SLO`, and the host GPU's memory holds the
//!    moved copies. A saturated gpulet (busy 1) and a gpulet holding the
//!    same model are not candidates. A GPU whose gpulets are all free is
//!    unpartitioned again.
//!
//! The GPUs are opened one at a time, so the run is the same as the
//! paper's on any count that suffices, and the count it reports as needed
//! is exact: the most GPUs in use at any point of the run.

use crate::batching::{
    Batching, Burst, EPS, adaptive, adaptive_with, capacity_rps, covering, le, saturated,
    saturated_rps, saturated_with,
};
use crate::interference::{Interference, combined};
use crate::placement::{Assignment, GpuPlan, PartitionPlan, Placement};
use crate::spec::{GpuSpec, ModelSpec, order, usable_sizes, validate};
use crate::{PlanError, Planner};

/// A gpulet whose throughput is within this fraction of the model's best
/// counts as past the knee: 5 %, the artifact's threshold
/// (`getMaxReturnPart` ignores a larger partition that adds less than 5 %
/// throughput, `MIN_THRESHOLD = 1.05`).
pub const KNEE_TOLERANCE: f64 = 0.05;

/// Rounds of [`Engine::rebatch`] on one GPU: each re-chooses the batching of
/// the partitions the previous one left breaking their rules.
const REBATCH_ROUNDS: usize = 3;

/// Whole `p_eff` gpulets one model may take before planning stops with a
/// lower bound on the GPUs needed.
const MAX_CHUNKS: f64 = 1e6;

/// gpulet's elastic partitioning without interference (the paper's
/// "gpulet").
#[derive(Debug, Clone, Copy, Default)]
pub struct Gpulet;

/// gpulet's elastic partitioning with an interference model (the paper's
/// "gpulet+int"), for instance [`crate::LinearInterference`].
#[derive(Debug, Clone, Default)]
pub struct GpuletInt<I> {
    /// The interference model.
    pub interference: I,
}

impl<I> GpuletInt<I> {
    /// The planner with `interference`.
    pub fn new(interference: I) -> Self {
        GpuletInt { interference }
    }
}

impl Planner for Gpulet {
    fn name(&self) -> &'static str {
        "gpulet"
    }

    fn plan(&self, models: &[ModelSpec], gpus: &GpuSpec) -> Result<Placement, PlanError> {
        elastic(self.name(), models, gpus, None)
    }
}

impl<I: Interference> Planner for GpuletInt<I> {
    fn name(&self) -> &'static str {
        "gpulet+int"
    }

    fn plan(&self, models: &[ModelSpec], gpus: &GpuSpec) -> Result<Placement, PlanError> {
        elastic(self.name(), models, gpus, Some(&self.interference))
    }
}

/// `p_eff`: the smallest usable size whose saturated throughput is within
/// [`KNEE_TOLERANCE`] of the best over the usable sizes, or `None` when no
/// size meets the SLO even at its smallest batch.
pub(crate) fn knee(m: &ModelSpec, sizes: &[u32], burst: Burst) -> Option<u32> {
    let t: Vec<(u32, f64)> = sizes
        .iter()
        .filter_map(|&p| {
            saturated(&m.profile, p, m.slo_ms).map(|s| (p, saturated_rps(s, m.slo_ms, burst)))
        })
        .collect();
    let best = t.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
    t.iter()
        .find(|x| x.1 >= (1.0 - KNEE_TOLERANCE) * best)
        .map(|x| x.0)
}

/// Algorithm 1 in the paper's order ([`order`]: ascending `rate × SLO`);
/// when that needs more GPUs than there are, once more in the reverse order
/// (largest `rate × SLO` first, as first-fit-decreasing packs bins), and
/// that plan if it fits. A plan that fits in the paper's order is the
/// paper's plan; when neither fits, the GPUs needed are the fewer of the
/// two orders' counts. This retry is sluice's, not the paper's (docs/gpulet.md,
/// Fig. 16/17): Algorithm 1 gives a partitioned GPU's free gpulet whole to
/// the next model, so which model comes first decides the layout.
fn elastic(
    name: &'static str,
    models: &[ModelSpec],
    gpus: &GpuSpec,
    intf: Option<&dyn Interference>,
) -> Result<Placement, PlanError> {
    let paper = order(models);
    let first = elastic_in(name, models, gpus, intf, &paper);
    let Err(PlanError::NotSchedulable { needed, .. }) = first else {
        return first;
    };
    let reverse: Vec<usize> = paper.iter().rev().copied().collect();
    match elastic_in(name, models, gpus, intf, &reverse) {
        Ok(p) => Ok(p),
        // Either order fits from its own count up (each opens GPUs one at a
        // time), so the fewer of the two is what is needed.
        Err(e @ PlanError::NotSchedulable { needed: r, .. }) if r < needed => Err(e),
        Err(_) => first,
    }
}

/// Algorithm 1 with the models taken in `order`.
fn elastic_in(
    name: &'static str,
    models: &[ModelSpec],
    gpus: &GpuSpec,
    intf: Option<&dyn Interference>,
    order: &[usize],
) -> Result<Placement, PlanError> {
    validate(models, gpus)?;
    let mut e = Engine::new(models, gpus, intf, true);
    for &i in order {
        let m = &models[i];
        if m.rate_rps == 0.0 {
            continue;
        }
        // A rate worth more than a million knee gpulets, more than the GPUs
        // could serve, is refused before the loop builds them: no GPU serves
        // more than 100 × the model's best throughput per percent.
        let sizes = usable_sizes(m, gpus)?;
        let p_eff = knee(m, &sizes, gpus.burst)
            .ok_or_else(|| PlanError::slo_unreachable(m, *sizes.last().expect("non-empty")))?;
        let sat = saturated(&m.profile, p_eff, m.slo_ms).expect("p_eff has a saturated batch");
        if m.rate_rps / saturated_rps(sat, m.slo_ms, gpus.burst) > MAX_CHUNKS {
            let per_pct = best_per_pct(m, &sizes);
            let at_least = (m.rate_rps / (100.0 * per_pct)).ceil();
            if at_least > f64::from(gpus.count) {
                return Err(PlanError::NotSchedulable {
                    planner: name,
                    needed: at_least as u64,
                    available: gpus.count,
                });
            }
        }
        let placed = e.place_model(i)?;
        debug_assert!(placed, "a fresh GPU always takes p_ideal");
    }
    if e.peak > gpus.count as usize {
        return Err(PlanError::NotSchedulable {
            planner: name,
            needed: e.peak as u64,
            available: gpus.count,
        });
    }
    Ok(e.into_placement())
}

/// The most requests per second per percent of a GPU any SLO-feasible
/// batch gives (a round of `L ≤ d` with `d + L ≤ SLO` needs `2·L ≤ SLO`).
fn best_per_pct(m: &ModelSpec, sizes: &[u32]) -> f64 {
    let mut best = 0.0f64;
    for &p in sizes {
        for &b in m.profile.batches() {
            if let Some(l) = m.profile.latency_ms(b, p)
                && le(2.0 * l, m.slo_ms)
            {
                best = best.max(capacity_rps(b, l) / f64::from(p));
            }
        }
    }
    best
}

/// One model's part of a gpulet's round.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Member {
    model: usize,
    batch: u32,
    share_rps: f64,
}

/// A gpulet: free when it has no members.
#[derive(Debug, Clone, PartialEq)]
struct Part {
    size: u32,
    duty_ms: f64,
    members: Vec<Member>,
}

impl Part {
    fn free(size: u32) -> Self {
        Part {
            size,
            duty_ms: 0.0,
            members: Vec::new(),
        }
    }
}

/// A possible merge: the merged round's busy fraction, the host and guest
/// gpulets as (GPU, position), and the host GPU as the merge leaves it
/// (the merged gpulet in the host's place, the guest freed when it is on
/// the same GPU, the neighbours re-batched).
#[derive(Debug, Clone, PartialEq)]
struct Merge {
    busy: f64,
    host: (usize, usize),
    guest: (usize, usize),
    host_gpu: Gpu,
}

#[derive(Debug, Clone, PartialEq)]
struct Gpu {
    parts: Vec<Part>,
}

/// The state both gpulet and the ideal scheduler work on.
pub(crate) struct Engine<'a> {
    models: &'a [ModelSpec],
    spec: &'a GpuSpec,
    intf: Option<&'a dyn Interference>,
    /// Split unpartitioned GPUs and open GPUs as needed (gpulet), or keep
    /// a fixed layout (ideal).
    elastic: bool,
    gpus: Vec<Gpu>,
    /// The most GPUs in use at once so far.
    pub(crate) peak: usize,
}

impl<'a> Engine<'a> {
    /// An engine with no GPUs (elastic) or none yet laid out.
    pub(crate) fn new(
        models: &'a [ModelSpec],
        spec: &'a GpuSpec,
        intf: Option<&'a dyn Interference>,
        elastic: bool,
    ) -> Self {
        Engine {
            models,
            spec,
            intf,
            elastic,
            gpus: Vec::new(),
            peak: 0,
        }
    }

    /// Adds a GPU split into the nonzero `sizes` (fixed layouts).
    pub(crate) fn add_gpu(&mut self, sizes: &[u32]) {
        self.gpus.push(Gpu {
            parts: sizes
                .iter()
                .filter(|&&s| s > 0)
                .map(|&s| Part::free(s))
                .collect(),
        });
    }

    fn is_fresh(&self, g: usize) -> bool {
        let p = &self.gpus[g].parts;
        self.elastic && p.len() == 1 && p[0].size == 100 && p[0].members.is_empty()
    }

    fn in_use(&self) -> usize {
        self.gpus
            .iter()
            .filter(|g| g.parts.iter().any(|p| !p.members.is_empty()))
            .count()
    }

    fn used_mb(&self, g: usize) -> u64 {
        self.gpus[g]
            .parts
            .iter()
            .flat_map(|p| &p.members)
            .map(|m| self.models[m.model].mem_mb)
            .sum()
    }

    /// `L(batch, size)` of `model` in partition `k` of GPU `g`, times its
    /// interference factor against the GPU's other partitions.
    fn lat(&self, model: usize, batch: u32, size: u32, g: usize, k: usize) -> Option<f64> {
        let m = &self.models[model];
        let l = m.profile.latency_ms(batch, size)?;
        let Some(intf) = self.intf else {
            return Some(l);
        };
        let others = self.gpus[g]
            .parts
            .iter()
            .enumerate()
            .filter(|&(q, _)| q != k)
            .flat_map(|(_, o)| {
                o.members
                    .iter()
                    .map(move |x| (self.models[x.model].name.as_str(), x.batch, o.size))
            });
        Some(l * combined(intf, &m.name, batch, size, others))
    }

    /// Sum of the members' latencies over the duty cycle.
    fn busy(&self, g: usize, k: usize) -> f64 {
        let p = &self.gpus[g].parts[k];
        let sum: f64 = p
            .members
            .iter()
            .map(|m| {
                self.lat(m.model, m.batch, p.size, g, k)
                    .unwrap_or(f64::INFINITY)
            })
            .sum();
        sum / p.duty_ms
    }

    /// Every rule `check` tests, on GPU `g`, with interference factors.
    fn gpu_ok(&self, g: usize) -> bool {
        self.used_mb(g) <= self.spec.mem_mb
            && (0..self.gpus[g].parts.len()).all(|k| self.part_ok(g, k))
    }

    /// The rules `check` tests for partition `k` of GPU `g` (a free one
    /// passes): a positive duty cycle, every member's share served and its
    /// `d + L·factor` within its SLO, and the round `Σ L·factor ≤ d`.
    fn part_ok(&self, g: usize, k: usize) -> bool {
        let p = &self.gpus[g].parts[k];
        if p.members.is_empty() {
            return true;
        }
        let d = p.duty_ms;
        if !(d.is_finite() && d > 0.0) {
            return false;
        }
        let mut sum = 0.0;
        for m in &p.members {
            let Some(l) = self.lat(m.model, m.batch, p.size, g, k) else {
                return false;
            };
            let slo = self.models[m.model].slo_ms;
            if !self.spec.burst.covers(m.batch, m.share_rps, d, l, slo) || !le(d + l, slo) {
                return false;
            }
            sum += l;
        }
        le(sum, d)
    }

    /// With interference, a partition placed beside others slows them, and
    /// a batching chosen alone (Nexus's rule, or a duty cycle cut to
    /// `SLO − L`) may leave no room for that. Re-chooses, by the same
    /// adaptive rule under the GPU's new interference factors, the batch
    /// and duty cycle of every one-model partition of GPU `g` that breaks
    /// its rules, serving the same share; a partition the re-choice cannot
    /// save, or one of several models (a temporal merge), stays as it is.
    /// A re-choice changes that partition's batch and so its interference
    /// on the others: repeated until nothing changes, at most
    /// [`REBATCH_ROUNDS`] times. The caller checks the GPU afterwards.
    fn rebatch(&mut self, g: usize) {
        if self.intf.is_none() {
            return;
        }
        for _ in 0..REBATCH_ROUNDS {
            let mut changed = false;
            for k in 0..self.gpus[g].parts.len() {
                let p = &self.gpus[g].parts[k];
                if p.members.len() != 1 || self.part_ok(g, k) {
                    continue;
                }
                let (x, size) = (p.members[0], p.size);
                let m = &self.models[x.model];
                let lat = |b: u32| self.lat(x.model, b, size, g, k);
                let burst = self.spec.burst;
                let Some(b) = adaptive_with(m.profile.batches(), lat, x.share_rps, m.slo_ms, burst)
                else {
                    continue;
                };
                let p = &mut self.gpus[g].parts[k];
                p.duty_ms = b.duty_ms;
                p.members[0].batch = b.batch;
                changed = true;
            }
            if !changed {
                return;
            }
        }
    }

    /// Algorithm 1's loop for model `i`: gpulets until its rate is served.
    /// `Ok(false)` when no free gpulet takes the rest (only in a fixed
    /// layout; elastic planning opens a GPU).
    pub(crate) fn place_model(&mut self, i: usize) -> Result<bool, PlanError> {
        let models = self.models;
        let m = &models[i];
        let sizes = usable_sizes(m, self.spec)?;
        let burst = self.spec.burst;
        let p_eff = knee(m, &sizes, burst)
            .ok_or_else(|| PlanError::slo_unreachable(m, *sizes.last().expect("non-empty")))?;
        let mut rate = m.rate_rps;
        while rate > EPS * m.rate_rps {
            let p_req = sizes
                .iter()
                .copied()
                .find(|&p| adaptive(&m.profile, p, rate, m.slo_ms, burst).is_some());
            let p_ideal = p_req.map_or(p_eff, |p| p.min(p_eff));
            if self.elastic && !(0..self.gpus.len()).any(|g| self.is_fresh(g)) {
                self.gpus.push(Gpu {
                    parts: vec![Part::free(100)],
                });
            }
            let Some((g, k, share)) = self.find_best_fit(i, rate, p_ideal) else {
                return Ok(false);
            };
            rate -= share;
            self.peak = self.peak.max(self.in_use());
            self.temporal(g, k);
        }
        Ok(true)
    }

    /// FINDBESTFIT: places model `i` (remaining `rate`) on a free gpulet
    /// and returns its position and the share it serves.
    fn find_best_fit(&mut self, i: usize, rate: f64, p_ideal: u32) -> Option<(usize, usize, f64)> {
        let models = self.models;
        let m = &models[i];
        let mut free: Vec<(u32, usize, usize)> = self
            .gpus
            .iter()
            .enumerate()
            .flat_map(|(g, gpu)| {
                gpu.parts
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.members.is_empty())
                    .map(move |(k, p)| (p.size, g, k))
            })
            .collect();
        free.sort_unstable();
        let mut sweep: Vec<(u32, usize, usize)> =
            free.iter().copied().filter(|c| c.0 >= p_ideal).collect();
        if !self.elastic {
            // A fixed layout may hold no gpulet of p_ideal or more; then the
            // largest smaller one serves what it can.
            let mut smaller: Vec<_> = free.iter().copied().filter(|c| c.0 < p_ideal).collect();
            smaller.sort_by(|a, b| b.0.cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
            sweep.extend(smaller);
        }
        for (size, g, k) in sweep {
            if self.used_mb(g) + m.mem_mb > self.spec.mem_mb {
                continue;
            }
            let fresh = self.is_fresh(g);
            let s = if fresh { p_ideal } else { size };
            if !self.spec.allows(s) || m.profile.latency_ms(m.profile.batches()[0], s).is_none() {
                continue;
            }
            let saved = self.gpus[g].clone();
            let k = if fresh && s < 100 {
                self.gpus[g].parts = vec![Part::free(s), Part::free(100 - s)];
                0
            } else {
                k
            };
            let batches = m.profile.batches();
            let lat = |b: u32| self.lat(i, b, s, g, k);
            let burst = self.spec.burst;
            let chosen: Option<(Batching, f64)> =
                adaptive_with(batches, lat, rate, m.slo_ms, burst)
                    .map(|b| (b, rate))
                    .or_else(|| {
                        saturated_with(batches, lat, m.slo_ms)
                            .map(|b| (b, saturated_rps(b, m.slo_ms, burst).min(rate)))
                            .filter(|&(_, share)| share > 0.0)
                    });
            let Some((b, share)) = chosen else {
                self.gpus[g] = saved;
                continue;
            };
            let part = &mut self.gpus[g].parts[k];
            part.duty_ms = b.duty_ms;
            part.members = vec![Member {
                model: i,
                batch: b.batch,
                share_rps: share,
            }];
            self.rebatch(g);
            if !self.gpu_ok(g) {
                self.gpus[g] = saved;
                continue;
            }
            return Some((g, k, share));
        }
        None
    }

    /// TEMPORALSCHEDULING: merges the gpulet at `(g, k)` with allocated
    /// ones while a merge is possible.
    fn temporal(&mut self, mut g: usize, mut k: usize) {
        loop {
            if self.busy(g, k) >= 1.0 - EPS {
                return;
            }
            let mut best: Option<Merge> = None;
            for h in 0..self.gpus.len() {
                for j in 0..self.gpus[h].parts.len() {
                    if (h, j) == (g, k) || self.gpus[h].parts[j].members.is_empty() {
                        continue;
                    }
                    if let Some(m) = self.try_merge((g, k), (h, j))
                        && best.as_ref().is_none_or(|b| m.busy > b.busy)
                    {
                        best = Some(m);
                    }
                }
            }
            let Some(Merge {
                host,
                guest,
                host_gpu,
                ..
            }) = best
            else {
                return;
            };
            self.gpus[host.0] = host_gpu;
            let guest_size = self.gpus[guest.0].parts[guest.1].size;
            self.gpus[guest.0].parts[guest.1] = Part::free(guest_size);
            if self.elastic
                && self.gpus[guest.0]
                    .parts
                    .iter()
                    .all(|p| p.members.is_empty())
            {
                self.gpus[guest.0].parts = vec![Part::free(100)];
            }
            (g, k) = host;
        }
    }

    /// The merge of gpulets `a` (new) and `b` (allocated), or `None` when
    /// it breaks a rule.
    fn try_merge(&mut self, a: (usize, usize), b: (usize, usize)) -> Option<Merge> {
        let pa = &self.gpus[a.0].parts[a.1];
        let pb = &self.gpus[b.0].parts[b.1];
        if self.busy(b.0, b.1) >= 1.0 - EPS
            || pa
                .members
                .iter()
                .any(|x| pb.members.iter().any(|y| y.model == x.model))
        {
            return None;
        }
        let (host, guest) = if pa.size > pb.size { (a, b) } else { (b, a) };
        let size = self.gpus[host.0].parts[host.1].size;
        let d = pa.duty_ms.min(pb.duty_ms);
        let mut members = Vec::with_capacity(pa.members.len() + pb.members.len());
        for x in pa.members.iter().chain(&pb.members) {
            let model = &self.models[x.model];
            let profile = &model.profile;
            let lat = |b: u32| profile.latency_ms(b, size);
            let burst = self.spec.burst;
            let batch = covering(profile.batches(), x.share_rps, d, burst, lat, model.slo_ms)?;
            // A profile lists every batch at the sizes it lists: the host's
            // size must be one of them.
            profile.latency_ms(batch, size)?;
            members.push(Member { batch, ..*x });
        }
        members.sort_by_key(|x| x.model);
        let merged = Part {
            size,
            duty_ms: d,
            members,
        };
        let saved = (self.gpus[host.0].clone(), self.gpus[guest.0].clone());
        let guest_size = self.gpus[guest.0].parts[guest.1].size;
        self.gpus[guest.0].parts[guest.1] = Part::free(guest_size);
        self.gpus[host.0].parts[host.1] = merged;
        self.rebatch(host.0);
        let ok = self.gpu_ok(host.0);
        let busy = self.busy(host.0, host.1);
        let host_gpu = ok.then(|| self.gpus[host.0].clone());
        self.gpus[guest.0] = saved.1;
        self.gpus[host.0] = saved.0;
        host_gpu.map(|host_gpu| Merge {
            busy,
            host,
            guest,
            host_gpu,
        })
    }

    /// The GPUs in use, in index order, each with its non-free gpulets.
    pub(crate) fn into_placement(self) -> Placement {
        let models = self.models;
        Placement {
            gpus: self
                .gpus
                .into_iter()
                .filter(|g| g.parts.iter().any(|p| !p.members.is_empty()))
                .map(|g| GpuPlan {
                    partitions: g
                        .parts
                        .into_iter()
                        .filter(|p| !p.members.is_empty())
                        .map(|p| PartitionPlan {
                            size_pct: p.size,
                            duty_cycle_ms: p.duty_ms,
                            models: p
                                .members
                                .iter()
                                .map(|x| Assignment {
                                    model: models[x.model].name.clone(),
                                    batch: x.batch,
                                    share_rps: x.share_rps,
                                })
                                .collect(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{gpulet_gpus, model};
    use crate::{
        GreedyBestFit, LinearCoefficients, LinearInterference, UtilTable, check,
        check_with_interference,
    };

    const B: &[u32] = &[1, 2, 4, 8, 16, 32];
    const P: &[u32] = &[10, 20, 30, 40, 50, 60, 70, 80, 90, 100];

    /// `L(b, p) = 40·b / min(p, 40)` ms, SLO 40: flat past the 40 % knee.
    fn knee_model(rate_rps: f64) -> ModelSpec {
        model("k", 40.0, rate_rps, 2_000, B, P, |b, p| {
            40.0 * f64::from(b) / f64::from(p.min(40))
        })
    }

    /// `L(b, p) = 100·b / p` ms, SLO 8 ms, 100 rps: the SLO, not the rate,
    /// sets the partition.
    fn tight(name: &str) -> ModelSpec {
        model(name, 8.0, 100.0, 2_000, B, P, |b, p| {
            100.0 * f64::from(b) / f64::from(p)
        })
    }

    /// A partition as (size, [(model, batch)]).
    type Part<'a> = (u32, Vec<(&'a str, u32)>);

    fn layout(p: &Placement) -> Vec<Vec<Part<'_>>> {
        p.gpus
            .iter()
            .map(|g| {
                g.partitions
                    .iter()
                    .map(|q| {
                        let ms = q
                            .models
                            .iter()
                            .map(|a| (a.model.as_str(), a.batch))
                            .collect();
                        (q.size_pct, ms)
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn knee_is_the_smallest_size_within_five_percent_of_the_best() {
        // Saturated batch (largest b with 2·L ≤ 40, i.e. L ≤ 20): on 20 %,
        // L = 2b → b = 8, T = 8 / 16 ms = 500 rps; on 40 % and more, L = b →
        // b = 16, T = 16 / 16 ms = 1000 rps. Best 1000; 0.95 · 1000 = 950:
        // 20 % is out, 40 % is the knee.
        let m = knee_model(1.0);
        let sizes = usable_sizes(&m, &gpulet_gpus(1)).unwrap();
        assert_eq!(sizes, [20, 40, 50, 60, 80, 100]);
        assert_eq!(knee(&m, &sizes, Burst::Mean), Some(40));
        // Linear scaling, L = 100·b/p, SLO 8: T(100) = 4 / 4 ms = 1000,
        // T(80) = 2 / 2.5 ms = 800 < 950 → the knee is 100 %.
        assert_eq!(knee(&tight("t"), &sizes, Burst::Mean), Some(100));
    }

    #[test]
    fn heavy_model_takes_knee_gpulets_and_the_rest_of_the_gpu() {
        // 2000 rps of the knee model. No size serves 2000 (at most 1000), so
        // p_req is none and p_ideal = p_eff = 40: GPU 0 splits 40 | 60, the
        // 40 % gpulet runs b = 16 back to back (d = 16 ms, 1000 rps).
        // 1000 rps left: p_req = 40 (b = 16 collects in 16 ms, runs 16 ms,
        // 16 + 16 ≤ 40), p_ideal 40; the free gpulets ≥ 40 % in ascending
        // size are GPU 0's 60 % and a fresh GPU: the 60 % takes it at b = 16,
        // d = 16 ms. One GPU.
        let ms = [knee_model(2000.0)];
        let g = gpulet_gpus(1);
        let plan = Gpulet.plan(&ms, &g).unwrap();
        assert_eq!(
            layout(&plan),
            [vec![(40, vec![("k", 16)]), (60, vec![("k", 16)])]]
        );
        for (_, p) in plan.partitions() {
            assert_eq!(p.duty_cycle_ms, 16.0);
            assert_eq!(p.models[0].share_rps, 1000.0);
        }
        check(&plan, &ms, &g).unwrap();
        // Greedy best-fit: a 100 % chunk (1000 rps) plus 40 % → 2 GPUs.
        assert_eq!(
            GreedyBestFit.plan(&ms, &g).unwrap_err().to_string(),
            "not schedulable by greedy-best-fit: needs 2 GPUs, have 1"
        );
    }

    #[test]
    fn two_models_merge_temporally_on_the_larger_gpulet() {
        // tight, 100 rps, SLO 8: on 20 %, L(1) = 5 ms and 2·5 > 8; on 40 %,
        // L(1) = 2.5: the collection rule fails (10 + 2.5 > 8), so the duty
        // cycle is cut to d = min(10, 8 − 2.5) = 5.5 ms (batch 2: d = 3 <
        // L 5) → p_req = 40, p_eff = 100 (knee test), p_ideal = 40.
        // a: GPU 0 splits 40 | 60, a at (b 1, d 5.5).
        // b: p_ideal 40, the 60 % leftover comes first: on 60 %, L(1) = 1.67,
        //    d = min(10, 6.33) = 6.33 (busy 0.26; b 2 would be 3.33 / 4.67 =
        //    0.71) → (b 1, d 6.33).
        // Temporal: b's 60 % hosts (the larger), d = min(6.33, 5.5) = 5.5;
        //    100 rps in 5.5 ms needs 0.55 → b 1 each, L(1, 60) = 1.67 each:
        //    round 3.33 ≤ 5.5, latency 5.5 + 1.67 = 7.17 ≤ 8 → merged; the
        //    40 % is freed.
        let ms = [tight("a"), tight("b")];
        let g = gpulet_gpus(1);
        let plan = Gpulet.plan(&ms, &g).unwrap();
        assert_eq!(layout(&plan), [vec![(60, vec![("a", 1), ("b", 1)])]]);
        assert_eq!(plan.gpus[0].partitions[0].duty_cycle_ms, 5.5);
        check(&plan, &ms, &g).unwrap();
        assert_eq!(Gpulet.plan(&ms, &g).unwrap(), plan, "deterministic");
    }

    #[test]
    fn schedules_on_one_gpu_what_greedy_needs_two_for() {
        // Three tight models: a and b merge on 60 % as above; c takes the
        // freed 40 % (b 1, d 5.5) and then merges into the 60 %: d = 5.5,
        // round 3 · 1.67 = 5 ≤ 5.5 → one partition, three models.
        // Greedy gives each its 40 %: 40 + 40 on GPU 0, 40 on GPU 1.
        let ms = [tight("a"), tight("b"), tight("c")];
        let g = gpulet_gpus(1);
        let plan = Gpulet.plan(&ms, &g).unwrap();
        assert_eq!(
            layout(&plan),
            [vec![(60, vec![("a", 1), ("b", 1), ("c", 1)])]]
        );
        let s = check(&plan, &ms, &g).unwrap();
        assert!((s.busy_gpus - 0.6 * 5.0 / 5.5).abs() < 1e-9);
        assert_eq!(
            GreedyBestFit.plan(&ms, &g).unwrap_err().to_string(),
            "not schedulable by greedy-best-fit: needs 2 GPUs, have 1"
        );
    }

    /// `factor = 1 + L2_other · (p_other / 100)`: each listed model's L2
    /// utilisation at batch 1; a model not listed is unmeasured (factor 1
    /// for it and against it).
    fn l2_other_only(utils: &[(&str, f64)]) -> LinearInterference {
        utils.iter().fold(
            LinearInterference::new(LinearCoefficients {
                l2_own: 0.0,
                l2_other: 1.0,
                dram_own: 0.0,
                dram_other: 0.0,
                constant: 1.0,
            }),
            |i, &(name, l2)| i.with_util(name, UtilTable::new(vec![(1, l2, 0.0)]).unwrap()),
        )
    }

    /// `L(b, p) = 1000·b / p` ms (10 ms per request on a whole GPU).
    fn slow(name: &str, slo_ms: f64, rate_rps: f64, mem_mb: u64) -> ModelSpec {
        model(name, slo_ms, rate_rps, mem_mb, B, P, |b, p| {
            1000.0 * f64::from(b) / f64::from(p)
        })
    }

    #[test]
    fn interference_moves_a_model_to_a_larger_gpulet() {
        // Order by rate × SLO: a 55·36 = 1980, c 35·60 = 2100, b 38·60 = 2280.
        // a (9 GB): keeping up needs L(1, p) = 1000/p ≤ 1000/55 → p ≥ 55:
        //   60 %, b 1, d 18.2 ms (18.2 + 16.7 = 34.8 ≤ 36) → GPU 0: 60 | 40.
        // c (9 GB): p ≥ 35 → 40 %, b 1, d 28.6 (28.6 + 25 ≤ 60); GPU 0's 40 %
        //   lacks memory (9 + 9 > 16 GB) → GPU 1: 40 | 60.
        // b (1 GB): p ≥ 38 → 40 %, b 1, d 26.3 (26.3 + 25 ≤ 60; on 20 %,
        //   2·50 > 60). Free gpulets ≥ 40 % by size: GPU 0's 40 % (beside a),
        //   GPU 1's 60 % (beside c).
        // No merge fits (the rounds would run 33 > 18 and 33 > 26 or 50 > 26).
        let ms = [
            slow("a", 36.0, 55.0, 9_000),
            slow("c", 60.0, 35.0, 9_000),
            slow("b", 60.0, 38.0, 1_000),
        ];
        let g = gpulet_gpus(2);
        let plain = Gpulet.plan(&ms, &g).unwrap();
        assert_eq!(
            layout(&plain),
            [
                vec![(60, vec![("a", 1)]), (40, vec![("b", 1)])],
                vec![(40, vec![("c", 1)])]
            ]
        );
        check(&plain, &ms, &g).unwrap();

        // factor = 1·L2_other·(p_other/100) + 1, a's L2 utilisation 0.5, b's
        // 0, c unmeasured (factor 1 against it). b beside a on 60 %:
        // 1 + 0.5·0.6 = 1.3, L(1, 40) = 25 · 1.3 = 32.5 and 2·32.5 > 60: no
        // batch. Beside c: factor 1, on 60 %: L = 16.7, d 26.3 → b moves to
        // the larger gpulet.
        let intf = l2_other_only(&[("a", 0.5), ("b", 0.0)]);
        let planner = GpuletInt::new(intf.clone());
        let with = planner.plan(&ms, &g).unwrap();
        assert_eq!(
            layout(&with),
            [
                vec![(60, vec![("a", 1)])],
                vec![(40, vec![("c", 1)]), (60, vec![("b", 1)])]
            ]
        );
        check(&with, &ms, &g).unwrap();
        check_with_interference(&with, &ms, &g, &intf).unwrap();
        // The plain plan breaks under interference: b's round runs 32.5 ms
        // in a 26.3 ms duty cycle.
        let e = check_with_interference(&plain, &ms, &g, &intf).unwrap_err();
        assert!(
            matches!(
                e,
                crate::Violation::RoundOverrun {
                    gpu: 0,
                    partition: 1,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(planner.plan(&ms, &g).unwrap(), with, "deterministic");
    }

    #[test]
    fn a_neighbour_re_batches_a_partition_it_slows_instead_of_opening_a_gpu() {
        // One batch size; L(1, p) = 200 / p ms. Order by rate × SLO: low
        // 5·60 = 300, then busy 400·100 = 40 000.
        // low: 5 rps takes 200 ms to collect, over its 60 ms SLO, so the
        //   duty cycle is cut to SLO − L: on 20 % (p_req; the knee is 100 %),
        //   L = 10, d = 50, d + L = 60 = SLO, no room left → GPU 0: 20 | 80.
        // busy: 400 rps collects in 2.5 ms, which only 80 % runs in (L =
        //   2.5): p_req = p_ideal = 80, GPU 0's 80 %, d = 2.5, busy back to
        //   back (so no temporal merge).
        // Interference: busy's L2 utilisation 0.25 on 80 % slows low by
        // 1 + 0.25·0.8 = 1.2 (low's own utilisation is 0: busy is not
        // slowed).
        // low's round would run d + 1.2·L = 50 + 12 = 62 > 60. Re-batched
        // under the new factor, d = 60 − 12 = 48 still serves 1000/48 =
        // 20.8 ≥ 5 rps, so both fit on one GPU; kept as chosen alone, busy
        // would need a second GPU.
        let one = |name: &str, slo_ms: f64, rate_rps: f64| {
            model(name, slo_ms, rate_rps, 1_000, &[1], P, |_, p| {
                200.0 / f64::from(p)
            })
        };
        let ms = [one("low", 60.0, 5.0), one("busy", 100.0, 400.0)];
        let g = gpulet_gpus(1);
        let intf = l2_other_only(&[("busy", 0.25), ("low", 0.0)]);
        let plan = GpuletInt::new(intf.clone()).plan(&ms, &g).unwrap();
        assert_eq!(
            layout(&plan),
            [vec![(20, vec![("low", 1)]), (80, vec![("busy", 1)])]]
        );
        let low = &plan.gpus[0].partitions[0];
        assert!((low.duty_cycle_ms - 48.0).abs() < 1e-9, "{low:?}");
        check_with_interference(&plan, &ms, &g, &intf).unwrap();
        // low's batching as chosen alone (d = 50) breaks under busy's
        // interference: that is what had to change.
        let mut alone = plan.clone();
        alone.gpus[0].partitions[0].duty_cycle_ms = 50.0;
        assert!(check_with_interference(&alone, &ms, &g, &intf).is_err());
        // Without interference nothing is re-batched: d stays 50.
        let plain = Gpulet.plan(&ms, &g).unwrap();
        assert_eq!(plain.gpus[0].partitions[0].duty_cycle_ms, 50.0);
    }

    #[test]
    fn when_the_papers_order_needs_more_gpus_the_reverse_order_is_tried() {
        // Ascending rate × SLO (the paper's order) is c (1,000), a (16,000),
        // b (32,000), and needs two GPUs; largest first, the three share one
        // 60 % gpulet in a 19.5 ms round.
        let a = model("a", 40.0, 400.0, 2_000, B, P, |b, p| {
            10.0 * f64::from(b) / f64::from(p.min(60))
        });
        let b = model("b", 40.0, 800.0, 2_000, B, P, |b, p| {
            40.0 * f64::from(b) / f64::from(p.min(40))
        });
        let c = model("c", 20.0, 50.0, 2_000, B, P, |b, p| {
            20.0 * f64::from(b) / f64::from(p)
        });
        let ms = [a, b, c];
        let g = gpulet_gpus(1);
        let paper = order(&ms);
        assert_eq!(paper, [2, 0, 1]);
        assert_eq!(
            elastic_in("gpulet", &ms, &g, None, &paper)
                .unwrap_err()
                .to_string(),
            "not schedulable by gpulet: needs 2 GPUs, have 1"
        );
        let plan = Gpulet.plan(&ms, &g).unwrap();
        assert_eq!(
            layout(&plan),
            [vec![(60, vec![("a", 8), ("b", 16), ("c", 1)])]]
        );
        assert_eq!(plan.gpus[0].partitions[0].duty_cycle_ms, 19.5);
        check(&plan, &ms, &g).unwrap();
        // Where the paper's order fits, its plan is kept: two GPUs take
        // what it places, as it places it.
        let g2 = gpulet_gpus(2);
        assert_eq!(
            Gpulet.plan(&ms, &g2).unwrap(),
            elastic_in("gpulet", &ms, &g2, None, &paper).unwrap()
        );
    }

    #[test]
    fn reports_the_exact_gpu_count_and_errors_with_values() {
        let ms = [knee_model(3500.0)];
        // 3500 rps: 40 + 60 (2000 rps) on GPU 0, 40 + 60 on GPU 1 (1500 of
        // its 2000) → needs 2.
        let e = Gpulet.plan(&ms, &gpulet_gpus(1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "not schedulable by gpulet: needs 2 GPUs, have 1"
        );
        let plan = Gpulet.plan(&ms, &gpulet_gpus(2)).unwrap();
        check(&plan, &ms, &gpulet_gpus(2)).unwrap();
        assert_eq!(plan.gpus.len(), 2);

        // L(1, 100) = 1 ms: the SLO must be at least 2 ms.
        let fast = model("fast", 1.5, 10.0, 1, B, P, |b, p| {
            100.0 * f64::from(b) / f64::from(p)
        });
        let e = Gpulet.plan(&[fast], &gpulet_gpus(1)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("model \"fast\" cannot meet its SLO of 1.5 ms: on 100% of a GPU"),
            "{e}"
        );
        let odd = model("odd", 40.0, 10.0, 1, B, &[10, 30, 70], |b, _| f64::from(b));
        let e = Gpulet.plan(&[odd], &gpulet_gpus(1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "model \"odd\": its profile lists partition sizes [10, 30, 70]%, none of them among the GPU's allowed sizes [20, 40, 50, 60, 80, 100]%; profile it at one of those"
        );
        // 1e12 rps at 1000 rps per 40 % gpulet, at most 2500 rps per GPU.
        let e = Gpulet
            .plan(&[knee_model(1e12)], &gpulet_gpus(8))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "not schedulable by gpulet: needs 400000000 GPUs, have 8"
        );
    }
}
