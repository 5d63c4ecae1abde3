//! `split`: SPLIT's block-level preemption (Luo et al., ICPP'23).
//!
//! Requests run one at a time, like [`seq`](super::seq), but a model runs
//! block by block: the kernels of the head request's current block go to
//! one stream at once; when the block's last kernel completes the queue is
//! re-evaluated and the next block of whichever request is then at the head
//! runs. Preemption therefore happens only at block boundaries, and a
//! preempted request keeps its place and its progress (blocks done).
//! Blocks are the model's cut points ([`SplitConfig::cuts`]; in the daemon,
//! the first `splits` entry of each manifest, see
//! [`SplitConfig::from_manifests`]); a model without cuts is one block.
//!
//! **Queue order (SPLIT §3.4, Algorithm 1).** A new request starts at the
//! tail and moves forward past its neighbour `t_i` while the swap lowers
//! their response ratios, stopping at a request of the same model (FIFO
//! within a model, Alg. 1 line 6) or at the head. The response ratio
//! (Alg. 1 lines 1–3, Eq. 3) of a request `t` with `l` of predicted waiting
//! ahead of it is
//!
//! ```text
//! RR(l, t) = (waited(t) + l + Ext_left(t)) / (α · Ext(t))
//! ```
//!
//! with `waited(t) = now − arrival(t)`, `Ext(t)` the model's standalone
//! time (the manifest total, [`sluice_model::Model::total_time_ns`]),
//! `Ext_left(t)` the summed kernel times of the blocks it has not started,
//! and `l` the sum of `Ext_left` of the requests ahead of it. For the
//! neighbour pair, with `l` the waiting ahead of `t_i` (lines 9–12):
//!
//! ```text
//! RR_new_back   = RR(l + Ext_left(t_i), t_new)   // t_new behind t_i
//! RR_new_front  = RR(l,                 t_new)   // t_new ahead of t_i
//! RR_i_back     = RR(l + Ext_left(t_new), t_i)   // t_i behind t_new
//! RR_i_front    = RR(l,                 t_i)     // t_i where it is
//! ```
//!
//! and line 13 is taken exactly: `t_new` stops behind `t_i` when
//! `RR_new_front − RR_new_back ≥ RR_i_front − RR_i_back`, and passes it
//! otherwise (ties stop). That is "swap only if the sum (the average) of
//! the two response ratios gets strictly lower" (§3.4: "exchanging cannot
//! reduce the average response ratio of the two requests"). The `waited`
//! and `l` terms are the same on both sides of each difference and cancel,
//! and so does α: each side is a difference of two ratios over the same
//! `α · Ext` of one request, so the test is `Ext_left(t_i) / Ext(t_new) >
//! Ext_left(t_new) / Ext(t_i)` whatever α is; α (a latency-target factor,
//! §5.2) is therefore not a parameter here.
//!
//! One reading to note: the extracted text of line 12 computes `t_i`'s
//! ratio behind `t_new` with waiting `l + Ext_left(t_i)`; a request does not
//! wait for itself, and Eq. 3 defines the waiting as the execution time of
//! the requests ahead, so this module uses `l + Ext_left(t_new)`. (The
//! literal line would reduce the test to `Ext(t_new) < Ext(t_i)`, ignoring
//! how far `t_i` has got.)
//!
//! The request executing a block is at the head and is not passed during
//! its block: an arrival stops behind it. When its block completes and it
//! has blocks left, the queue is re-evaluated: the requests behind it pass
//! it one by one, by the same rule and the same same-model stop, for as long
//! as the rule says so ([`SplitPolicy`] counts these as preemptions).
//!
//! **Elastic splitting (§3.3).** The paper suspends splitting under "high
//! request density" and when "an excessive number of requests of the same
//! type" are queued, and gives no numbers. Here, when a block is about to
//! start and the queue (the head included) holds more than
//! [`SplitConfig::elastic_queue_len`] requests, or more than
//! [`SplitConfig::elastic_same_model`] requests of any one model, the head
//! request runs all its remaining kernels as one block (to completion).
//! The defaults ([`SplitConfig::DEFAULT_ELASTIC_QUEUE_LEN`],
//! [`SplitConfig::DEFAULT_ELASTIC_SAME_MODEL`]) are this crate's choice,
//! not the paper's; [`SplitConfig::elastic`] `= false` turns elasticity off.
//!
//! **Priorities.** SPLIT has no priority classes: `split` ignores
//! [`Task::priority`]; real-time and best-effort requests are ordered by
//! Algorithm 1 alone.
//!
//! **Costs.** A boundary costs what the device model charges for the gap
//! between two launches on a stream; the paper's splitting overhead
//! (§3.3, the extra copies of a split ONNX model) is not modelled.

use std::ops::Range;
use std::sync::Arc;

use super::rt_only::{Completed, completed, kernel_count, launch_kernels, stream_in};
use super::{Ctx, Policy, Task, TaskDone, TaskId};
use sluice_gpu::{Event, Ns, StreamId};
use sluice_model::{Manifest, ModelRegistry, ModelSplit};

/// The block structure [`SplitPolicy`] uses, and its elasticity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitConfig {
    /// Cut points by model id: the index of the first kernel of blocks
    /// 2..=m, ascending, each in `1..kernels`. An empty vector (or a model
    /// id past the end) means one block. Cuts that are not ascending or
    /// fall outside the model are logged and the model runs unsplit.
    pub cuts: Vec<Vec<u32>>,
    /// Splitting is suspended while the queue holds more requests than
    /// this.
    pub elastic_queue_len: usize,
    /// Splitting is suspended while the queue holds more requests than
    /// this of any one model.
    pub elastic_same_model: usize,
    /// Whether elastic splitting is on at all.
    pub elastic: bool,
}

impl SplitConfig {
    /// Default [`Self::elastic_queue_len`]: 8 requests (our choice; SPLIT
    /// gives no value).
    pub const DEFAULT_ELASTIC_QUEUE_LEN: usize = 8;
    /// Default [`Self::elastic_same_model`]: 4 requests of one model (our
    /// choice; SPLIT gives no value).
    pub const DEFAULT_ELASTIC_SAME_MODEL: usize = 4;

    /// No model split, default elasticity.
    pub fn unsplit() -> Self {
        Self {
            cuts: Vec::new(),
            elastic_queue_len: Self::DEFAULT_ELASTIC_QUEUE_LEN,
            elastic_same_model: Self::DEFAULT_ELASTIC_SAME_MODEL,
            elastic: true,
        }
    }

    /// Each model's cuts from the FIRST entry of its manifest's `splits`
    /// (whatever device it names); a model without one runs unsplit.
    /// Default elasticity.
    pub fn from_manifests(models: &ModelRegistry) -> Self {
        Self::for_device(models, None)
    }

    /// Each model's cuts from the `splits` entry for `device` (a device
    /// profile name), or the first entry when none names it (cut points
    /// are positions in the model's kernel list, valid on any device,
    /// only balanced for the device they were chosen on); a model without
    /// any runs unsplit. Default elasticity.
    pub fn for_device(models: &ModelRegistry, device: Option<&str>) -> Self {
        let mut cuts = vec![Vec::new(); models.len()];
        for (id, m) in models.iter() {
            if let (Some(slot), Some(s)) = (
                cuts.get_mut(id as usize),
                split_for_device(&m.manifest, device),
            ) {
                slot.clone_from(&s.cuts);
            }
        }
        Self {
            cuts,
            ..Self::unsplit()
        }
    }
}

/// The `splits` entry of `manifest` for `device` (a device profile name),
/// else its first entry; `None` without any. What the daemon's `split`
/// policy runs ([`SplitConfig::for_device`]).
pub fn split_for_device<'a>(
    manifest: &'a Manifest,
    device: Option<&str>,
) -> Option<&'a ModelSplit> {
    device
        .and_then(|d| manifest.splits.iter().find(|s| s.device == d))
        .or(manifest.splits.first())
}

impl Default for SplitConfig {
    fn default() -> Self {
        Self::unsplit()
    }
}

/// What Algorithm 1 knows of a queued request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queued {
    /// Model id (requests of one model keep FIFO order).
    pub model: u32,
    /// Arrival time, ns.
    pub arrival: Ns,
    /// Standalone time of its model, ns (`Ext`).
    pub ext_ns: Ns,
    /// Time of the blocks it has not started, ns (`Ext_left`).
    pub ext_left_ns: Ns,
}

/// Algorithm 1's `ResponseRatio` with α = 1 (α cancels out of every
/// comparison this module makes; see the module docs): `(waited + waiting
/// + Ext_left) / Ext`.
pub fn response_ratio(now: Ns, waiting_ns: Ns, r: &Queued) -> f64 {
    let waited = now.saturating_sub(r.arrival);
    (waited as f64 + waiting_ns as f64 + r.ext_left_ns as f64) / r.ext_ns.max(1) as f64
}

/// Algorithm 1 lines 9–13: whether `new`, directly behind `ti` which has
/// `waiting_ns` of work ahead of it, passes `ti`.
pub fn passes(now: Ns, waiting_ns: Ns, new: &Queued, ti: &Queued) -> bool {
    if new.model == ti.model {
        return false;
    }
    let new_back = response_ratio(now, waiting_ns + ti.ext_left_ns, new);
    let new_front = response_ratio(now, waiting_ns, new);
    let ti_back = response_ratio(now, waiting_ns + new.ext_left_ns, ti);
    let ti_front = response_ratio(now, waiting_ns, ti);
    new_front - new_back < ti_front - ti_back
}

/// Where Algorithm 1 inserts `new` into `queue` (head first): it starts at
/// the tail and moves forward while [`passes`] says so, never past index
/// `first_movable` (1 while the head is executing a block) and never past a
/// request of its own model. Returns the insertion index.
pub fn insert_position(queue: &[Queued], new: &Queued, now: Ns, first_movable: usize) -> usize {
    let mut waiting: Ns = queue.iter().map(|q| q.ext_left_ns).sum();
    let mut pos = queue.len();
    while pos > first_movable {
        let ti = &queue[pos - 1];
        waiting -= ti.ext_left_ns;
        if !passes(now, waiting, new, ti) {
            break;
        }
        pos -= 1;
    }
    pos
}

/// What [`SplitPolicy`] counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SplitStats {
    /// Blocks launched (a run to completion under elasticity counts once).
    pub blocks: u64,
    /// Launches that ran a split model's remaining blocks as one because
    /// elastic splitting was suspending splits.
    pub elastic_runs: u64,
    /// Times a request with blocks left was passed at a block boundary.
    pub preemptions: u64,
}

#[derive(Debug, Clone)]
struct Req {
    task: Task,
    /// Index of the first block not launched.
    next_block: usize,
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    id: TaskId,
    /// One past the last kernel launched.
    end: usize,
}

/// SPLIT: one request at a time, preemptible at block boundaries.
#[derive(Debug)]
pub struct SplitPolicy {
    cfg: SplitConfig,
    /// Kernel ranges of each model's blocks, by model id.
    blocks: Vec<Vec<Range<usize>>>,
    /// Summed kernel time of each block, ns, by model id.
    block_ns: Vec<Vec<Ns>>,
    /// Standalone time by model id, ns.
    ext_ns: Vec<Ns>,
    stream: Option<StreamId>,
    /// Head first; the head is the request whose block is in flight.
    queue: Vec<Req>,
    running: Option<InFlight>,
    stats: SplitStats,
}

impl SplitPolicy {
    /// A policy over `models` with the blocks and elasticity of `cfg`.
    pub fn new(models: &Arc<ModelRegistry>, cfg: SplitConfig) -> Self {
        let mut blocks = Vec::with_capacity(models.len());
        let mut block_ns = Vec::with_capacity(models.len());
        let mut ext_ns = Vec::with_capacity(models.len());
        for (id, m) in models.iter() {
            let kernels = &m.manifest.kernels;
            let n = kernels.len();
            let cuts = cfg.cuts.get(id as usize).map_or(&[][..], Vec::as_slice);
            let valid = cuts.windows(2).all(|w| w[0] < w[1])
                && cuts.iter().all(|&c| c >= 1 && (c as usize) < n);
            let cuts = if valid {
                cuts
            } else {
                tracing::warn!(
                    model = m.name(),
                    ?cuts,
                    kernels = n,
                    "split: cuts must be ascending kernel indices in 1..{n}; running the model unsplit"
                );
                &[][..]
            };
            let mut starts = vec![0usize];
            starts.extend(cuts.iter().map(|&c| c as usize));
            let ranges: Vec<Range<usize>> = if n == 0 {
                Vec::new()
            } else {
                starts
                    .iter()
                    .enumerate()
                    .map(|(i, &s)| s..starts.get(i + 1).copied().unwrap_or(n))
                    .collect()
            };
            let times = ranges
                .iter()
                .map(|r| kernels[r.clone()].iter().map(|k| k.kernel_time_ns()).sum())
                .collect();
            blocks.push(ranges);
            block_ns.push(times);
            ext_ns.push(m.total_time_ns);
        }
        Self {
            cfg,
            blocks,
            block_ns,
            ext_ns,
            stream: None,
            queue: Vec::new(),
            running: None,
            stats: SplitStats::default(),
        }
    }

    /// What it counted so far.
    pub fn stats(&self) -> SplitStats {
        self.stats
    }

    /// Blocks of model `model` (1 for an unsplit model, 0 for an empty or
    /// unknown one).
    pub fn block_count(&self, model: u32) -> usize {
        self.blocks.get(model as usize).map_or(0, Vec::len)
    }

    fn queued(&self, r: &Req) -> Queued {
        let m = r.task.model as usize;
        Queued {
            model: r.task.model,
            arrival: r.task.arrival,
            ext_ns: self.ext_ns.get(m).copied().unwrap_or(0),
            ext_left_ns: self
                .block_ns
                .get(m)
                .map_or(0, |b| b.iter().skip(r.next_block).sum()),
        }
    }

    /// Whether elastic splitting suspends splits now.
    fn suspended(&self) -> bool {
        if !self.cfg.elastic {
            return false;
        }
        if self.queue.len() > self.cfg.elastic_queue_len {
            return true;
        }
        let mut counts: Vec<(u32, usize)> = Vec::new();
        for r in &self.queue {
            match counts.iter_mut().find(|(m, _)| *m == r.task.model) {
                Some((_, c)) => *c += 1,
                None => counts.push((r.task.model, 1)),
            }
        }
        counts.iter().any(|&(_, c)| c > self.cfg.elastic_same_model)
    }

    /// Block boundary of the head: the requests behind it pass it while
    /// Algorithm 1's rule says so.
    fn reevaluate(&mut self, now: Ns) {
        let mut i = 0;
        while i + 1 < self.queue.len() {
            let waiting: Ns = self.queue[..i]
                .iter()
                .map(|r| self.queued(r).ext_left_ns)
                .sum();
            let ti = self.queued(&self.queue[i]);
            let new = self.queued(&self.queue[i + 1]);
            if !passes(now, waiting, &new, &ti) {
                break;
            }
            if i == 0 {
                self.stats.preemptions += 1;
            }
            self.queue.swap(i, i + 1);
            i += 1;
        }
    }

    /// Launches the head's next block if the device is free.
    fn start_next(&mut self, cx: &mut Ctx<'_>) {
        while self.running.is_none() {
            let Some(head) = self.queue.first() else {
                return;
            };
            let task = head.task;
            let next = head.next_block;
            if next == 0 && cx.drop_if_late(task) {
                // Its deadline passed while it waited: never started.
                self.queue.remove(0);
                continue;
            }
            let blocks = self.blocks.get(task.model as usize);
            let Some(block) = blocks.and_then(|b| b.get(next)).cloned() else {
                // An empty or unknown model: done at once.
                self.queue.remove(0);
                cx.done.push(TaskDone {
                    task,
                    finished: cx.gpu.now(),
                });
                continue;
            };
            let nblocks = blocks.map_or(0, Vec::len);
            let all = nblocks > next + 1 && self.suspended();
            let range = if all {
                block.start..kernel_count(cx.models, task.model)
            } else {
                block
            };
            let stream = match stream_in(&mut self.stream, cx.gpu, 0) {
                Ok(s) => s,
                Err(e) => {
                    self.queue.remove(0);
                    cx.fail(task, e);
                    continue;
                }
            };
            let end = range.end;
            match launch_kernels(cx, stream, &task, range) {
                Ok(0) => {
                    self.queue.remove(0);
                    cx.done.push(TaskDone {
                        task,
                        finished: cx.gpu.now(),
                    });
                }
                Ok(_) => {
                    self.stats.blocks += 1;
                    if all {
                        self.stats.elastic_runs += 1;
                    }
                    self.queue[0].next_block = if all { nblocks } else { next + 1 };
                    self.running = Some(InFlight { id: task.id, end });
                }
                Err(e) => {
                    self.queue.remove(0);
                    cx.fail(task, e);
                }
            }
        }
    }
}

impl Policy for SplitPolicy {
    fn name(&self) -> &'static str {
        "split"
    }

    fn on_arrival(&mut self, cx: &mut Ctx<'_>, task: Task) {
        let req = Req {
            task,
            next_block: 0,
        };
        let new = self.queued(&req);
        let queued: Vec<Queued> = self.queue.iter().map(|r| self.queued(r)).collect();
        let first_movable = usize::from(self.running.is_some());
        let pos = insert_position(&queued, &new, cx.gpu.now(), first_movable);
        self.queue.insert(pos, req);
        self.start_next(cx);
    }

    fn on_event(&mut self, cx: &mut Ctx<'_>, ev: &Event) {
        let Some(Completed { t, stream, id, k }) = completed(ev) else {
            return;
        };
        let (Some(ours), Some(run)) = (self.stream, self.running) else {
            return;
        };
        if stream != ours || id != run.id || k + 1 != run.end {
            return;
        }
        self.running = None;
        let Some(i) = self.queue.iter().position(|r| r.task.id == id) else {
            return self.start_next(cx);
        };
        let r = &self.queue[i];
        if r.next_block >= self.block_count(r.task.model) {
            let task = self.queue.remove(i).task;
            cx.done.push(TaskDone { task, finished: t });
        } else {
            self.reevaluate(t);
        }
        self.start_next(cx);
    }
}

#[cfg(test)]
mod tests {
    use shm_proto::Priority;

    use super::*;
    use crate::seq::Seq;
    use crate::workload::{Arrival, ClientSpec, Workload, run};
    use sluice_gpu::DeviceProfile;

    const MS: Ns = 1_000_000;

    fn q(model: u32, ext_ms: u64, left_ms: u64) -> Queued {
        Queued {
            model,
            arrival: 0,
            ext_ns: ext_ms * MS,
            ext_left_ns: left_ms * MS,
        }
    }

    #[test]
    fn a_short_request_passes_a_long_one_that_has_most_left() {
        // Long model, 10 ms, 8 ms left; short 2 ms: 8/2 > 2/10, it passes,
        // up to the head.
        let queue = [q(0, 10, 8)];
        assert_eq!(insert_position(&queue, &q(1, 2, 2), 5 * MS, 0), 0);
        // The head executing a block is not passed.
        assert_eq!(insert_position(&queue, &q(1, 2, 2), 5 * MS, 1), 1);
    }

    #[test]
    fn the_swap_rule_weighs_progress_and_ties_stay() {
        // A long one (10 ms) with 0.3 ms left: 0.3/4 < 4/10, a 4 ms request
        // stays behind it (the literal line 12 would pass it: 4 < 10).
        let nearly_done = Queued {
            ext_left_ns: 300_000,
            ..q(0, 10, 0)
        };
        assert_eq!(insert_position(&[nearly_done], &q(1, 4, 4), 0, 0), 1);
        // A long new request does not pass a short one.
        assert_eq!(insert_position(&[q(0, 2, 2)], &q(1, 10, 10), 0, 0), 1);
        // Ext_left_i / Ext_new = Ext_left_new / Ext_i (4/4 = 4/4): a tie
        // stops.
        assert_eq!(insert_position(&[q(0, 4, 4)], &q(1, 4, 4), 0, 0), 1);
        // Waited time cancels: the same answer whatever the arrivals.
        let old = Queued {
            arrival: 0,
            ..q(0, 10, 8)
        };
        let late = Queued {
            arrival: 50 * MS,
            ..q(1, 2, 2)
        };
        assert_eq!(insert_position(&[old], &late, 60 * MS, 0), 0);
    }

    #[test]
    fn same_model_requests_keep_fifo_order() {
        // [long A, short S1]: a second short S2 of S1's model stops behind
        // S1, though it would pass A.
        let queue = [q(0, 10, 10), q(1, 2, 2)];
        assert_eq!(insert_position(&queue, &q(1, 2, 2), 0, 0), 2);
        // A request of another model as short as S1 ties with it and
        // stops behind it.
        assert_eq!(insert_position(&queue, &q(2, 2, 2), 0, 0), 2);
        // A shorter one passes S1 and A.
        assert_eq!(insert_position(&queue, &q(2, 1, 1), 0, 0), 0);
    }

    /// vgg19 in three blocks, as even as its kernel times allow.
    fn vgg_thirds(models: &ModelRegistry) -> (u32, Vec<u32>) {
        let (vgg, m) = models.lookup("vgg19").unwrap();
        let total: u64 = m.manifest.kernels.iter().map(|k| k.kernel_time_ns()).sum();
        let mut cuts = Vec::new();
        let mut acc = 0;
        for (i, k) in m.manifest.kernels.iter().enumerate() {
            acc += k.kernel_time_ns();
            if cuts.len() < 2 && acc * 3 >= total * (cuts.len() as u64 + 1) {
                cuts.push(i as u32 + 1);
            }
        }
        assert_eq!(cuts.len(), 2);
        (vgg, cuts)
    }

    fn pair(long: u32, short: u32, short_at: Ns) -> Workload {
        Workload {
            clients: vec![
                ClientSpec {
                    priority: Priority::BestEffort,
                    model: long,
                    arrival: Arrival::Trace(vec![0]),
                },
                ClientSpec {
                    priority: Priority::BestEffort,
                    model: short,
                    arrival: Arrival::Trace(vec![short_at]),
                },
            ],
            duration_ns: 1_000 * MS,
        }
    }

    fn split_cfg(models: &ModelRegistry, model: u32, cuts: Vec<u32>) -> SplitConfig {
        let mut cfg = SplitConfig {
            cuts: vec![Vec::new(); models.len()],
            ..SplitConfig::default()
        };
        cfg.cuts[model as usize] = cuts;
        cfg
    }

    #[test]
    fn a_short_request_runs_after_the_current_block_not_after_the_model() {
        let models = Arc::new(ModelRegistry::builtin());
        let (vgg, cuts) = vgg_thirds(&models);
        let (r18, _) = models.lookup("resnet18").unwrap();
        let first_block: u64 = models.get(vgg).unwrap().manifest.kernels[..cuts[0] as usize]
            .iter()
            .map(|k| k.kernel_time_ns())
            .sum();
        // resnet18 arrives a quarter into vgg19's first block.
        let w = pair(vgg, r18, first_block / 4);
        let mut p = SplitPolicy::new(&models, split_cfg(&models, vgg, cuts));
        assert_eq!(p.block_count(vgg), 3);
        let r = run(&DeviceProfile::mi50(), &models, &mut p, &w);
        assert_eq!((r.done.len(), r.unfinished), (2, 0));
        let fin = |m| r.done.iter().find(|d| d.task.model == m).unwrap().finished;
        assert!(fin(r18) < fin(vgg), "split: {:?}", r.done);
        // It started after the first block: it finished after it.
        assert!(fin(r18) > first_block, "{} {first_block}", fin(r18));
        assert_eq!(p.stats().preemptions, 1);
        assert_eq!(p.stats().blocks, 4);
        // Under seq the short one waits for the whole of vgg19.
        let r = run(&DeviceProfile::mi50(), &models, &mut Seq::new(), &w);
        let fin = |m| r.done.iter().find(|d| d.task.model == m).unwrap().finished;
        assert!(fin(r18) > fin(vgg), "seq: {:?}", r.done);
        // And so it does under split with vgg19 unsplit.
        let mut p = SplitPolicy::new(&models, SplitConfig::unsplit());
        let r = run(&DeviceProfile::mi50(), &models, &mut p, &w);
        let fin = |m| r.done.iter().find(|d| d.task.model == m).unwrap().finished;
        assert!(fin(r18) > fin(vgg), "unsplit: {:?}", r.done);
    }

    #[test]
    fn elastic_splitting_runs_a_split_model_whole_when_the_queue_is_long() {
        let models = Arc::new(ModelRegistry::builtin());
        let (vgg, cuts) = vgg_thirds(&models);
        let (mob, _) = models.lookup("mobilenet").unwrap();
        let first_block: u64 = models.get(vgg).unwrap().manifest.kernels[..cuts[0] as usize]
            .iter()
            .map(|k| k.kernel_time_ns())
            .sum();
        let mob_total = models.get(mob).unwrap().total_time_ns;
        // A mobilenet request runs first (0.9 ms); two vgg19 requests
        // (4.4 ms, first block about 1.5 ms) queue behind it, so when the
        // first vgg19 starts, about when mobilenet ends, the queue holds
        // two requests of vgg19. A second mobilenet request arrives half a
        // block later, during that vgg19's first block.
        let late = mob_total + first_block / 2;
        let w = Workload {
            clients: vec![
                ClientSpec {
                    priority: Priority::BestEffort,
                    model: mob,
                    arrival: Arrival::Trace(vec![0, late]),
                },
                ClientSpec {
                    priority: Priority::BestEffort,
                    model: vgg,
                    arrival: Arrival::Trace(vec![1, 2]),
                },
            ],
            duration_ns: 1_000 * MS,
        };
        let run_with = |elastic_queue_len, elastic_same_model, elastic| {
            let cfg = SplitConfig {
                elastic_queue_len,
                elastic_same_model,
                elastic,
                ..split_cfg(&models, vgg, cuts.clone())
            };
            let mut p = SplitPolicy::new(&models, cfg);
            let r = run(&DeviceProfile::mi50(), &models, &mut p, &w);
            assert_eq!((r.done.len(), r.unfinished), (4, 0));
            let first_vgg = r.done.iter().find(|d| d.task.model == vgg).unwrap();
            let late_r18 = r.done.iter().find(|d| d.task.arrival == late).unwrap();
            (p.stats(), late_r18.finished < first_vgg.finished)
        };
        // Defaults: vgg19 is split, the late request passes it at the first
        // boundary.
        let d = (
            SplitConfig::DEFAULT_ELASTIC_QUEUE_LEN,
            SplitConfig::DEFAULT_ELASTIC_SAME_MODEL,
        );
        let (s, passed) = run_with(d.0, d.1, true);
        assert!(passed && s.elastic_runs == 0 && s.preemptions == 1, "{s:?}");
        // Two vgg19 requests queued, more than 1 of one model: the first
        // runs whole and the late request waits for it.
        let (s, passed) = run_with(d.0, 1, true);
        assert!(
            !passed && s.elastic_runs == 1 && s.preemptions == 0,
            "{s:?}"
        );
        // Two requests queued, more than 1: the same.
        let (s, passed) = run_with(1, d.1, true);
        assert!(
            !passed && s.elastic_runs == 1 && s.preemptions == 0,
            "{s:?}"
        );
        // Elasticity off: split whatever the queue.
        let (s, passed) = run_with(1, 1, false);
        assert!(passed && s.elastic_runs == 0 && s.preemptions == 1, "{s:?}");
    }

    #[test]
    fn for_device_takes_the_devices_split_else_the_first() {
        let mut m = ModelRegistry::builtin()
            .lookup("resnet50")
            .unwrap()
            .1
            .manifest
            .clone();
        let first = m.splits[0].clone();
        let mut other = first.clone();
        other.device = "gv100".into();
        other.cuts = vec![100];
        other.block_time_us = vec![
            first.block_time_us.iter().sum::<f64>() / 2.0,
            first.block_time_us.iter().sum::<f64>() / 2.0,
        ];
        m.splits.push(other);
        let reg = ModelRegistry::from_manifests([("r".to_owned(), m)]).unwrap();
        assert_eq!(
            SplitConfig::for_device(&reg, Some("gv100")).cuts[0],
            vec![100]
        );
        assert_eq!(
            SplitConfig::for_device(&reg, Some("h100")).cuts[0],
            first.cuts
        );
        assert_eq!(SplitConfig::for_device(&reg, None).cuts[0], first.cuts);
    }

    #[test]
    fn from_manifests_takes_the_first_split() {
        let models = ModelRegistry::builtin();
        let cfg = SplitConfig::from_manifests(&models);
        assert_eq!(cfg.cuts.len(), models.len());
        for (id, m) in models.iter() {
            let want = m.manifest.splits.first().map(|s| s.cuts.clone());
            assert_eq!(cfg.cuts[id as usize], want.unwrap_or_default());
        }
    }
}
