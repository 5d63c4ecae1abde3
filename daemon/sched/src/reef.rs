//! `reef`: reset-based preemption and dynamic kernel padding (REEF, TOCS 2025).
//!
//! Real-time (RT) tasks run on one RT stream, earliest deadline first
//! (FIFO without deadlines, [`EdfQueue`]). Each best-effort (BE) client has
//! its own stream (a *lane*) whose device queue is capped
//! ([`ReefConfig::dq_capacity`], REEF's `hip_set_stream_cap`, §4.2), and a
//! queue of its tasks in the same order.
//!
//! - **Deadlines.** An RT task is launched (all its kernels at once) when
//!   the RT stream is empty or the task launched last has started its last
//!   kernel, so one task at most waits on the stream behind the running one
//!   and the others wait here, in deadline order, where one whose deadline
//!   passes is dropped unstarted ([`Ctx::drop_if_late`]). A BE task is
//!   checked likewise before its first kernel goes, freely or as padding.
//!
//! - **Preemption (§4).** When an RT task arrives, every BE lane with work
//!   on the device is preempted with [`GpuSim::preempt_reset`](sluice_gpusim::GpuSim::preempt_reset): host-queue
//!   reset, preemption flag (lazy eviction), kill of the running kernel. The
//!   latency of each preemption, from the model's `Preempted` report, goes to
//!   [`preempt_latency_ns`](super::PolicyStats::preempt_latency_ns). BE lanes
//!   stay parked while RT work is left; when the RT queue drains, each
//!   preempted task is relaunched from its restore point (§4.4): the
//!   report's `first_incomplete` kernel, or, if that kernel is not
//!   idempotent, the start of its idempotent group.
//!   The group start is [`Model::group_start`](sluice_model::Model::group_start):
//!   the manifest's `group_start`, checked at load against REEF's offline
//!   checker ([`sluice_model::idempotent::minimal_groups`]) on the kernels'
//!   read/write ranges, or, for a manifest without ranges, the nearest
//!   earlier kernel flagged idempotent. Every kernel launched again counts in
//!   [`relaunched_kernels`](super::PolicyStats::relaunched_kernels).
//! - **Dynamic kernel padding (§5.2).** RT kernels run as REEF's `dkp`
//!   kernel runs them (§5.1, Fig. 12): packed onto the first CUs, each
//!   holding as many blocks as spreading the grid would give it
//!   ([`GpuSim::set_packed_placement`](sluice_gpusim::GpuSim::set_packed_placement)),
//!   so its waves are no longer than spread ones, leaving the other CUs
//!   whole for best-effort blocks (which the device fills from the highest
//!   CU down). When an RT kernel
//!   starts, each parked BE lane may launch blocks of its next kernel beside
//!   it, as REEF's greedy selection does ("a set of blocks from candidate
//!   best-effort kernels ... for the remaining CUs"): *rule 1*, the padded
//!   work finishes before the RT kernel is expected to: a block no longer
//!   than the RT kernel, and as many rounds of blocks as fit in its time;
//!   *rule 2*, the blocks fit in the leftover room (whole free CUs at the
//!   BE kernel's occupancy; occupancy helpers of [`sluice_gpu::occupancy`]);
//!   rule 1 counts a padded block at its wave time at full occupancy (the
//!   profile's occupancy curve), since padded blocks share their CUs. A kernel may take
//!   several padded launches to cover; the lane counts its progress in
//!   [`UNITS_PER_BLOCK`]ths of a block and, when it runs freely again,
//!   launches only the blocks left. One padded launch per lane is in flight
//!   at a time.
//!   The BE kernel rides the RT kernel's launch ([`GpuSim::launch_padded`](sluice_gpusim::GpuSim::launch_padded),
//!   REEF §5.1's fused `dkp` launch): no host push, no command-processor
//!   fetch, dispatchable at once at the RT stream's priority.
//!   BE kernels run through *proxy kernels* (§5.2): their register count is
//!   rounded up to the largest count of their occupancy level, one proxy
//!   per level, which leaves occupancy unchanged.
//! - **Multi-version kernels (§5.3).** Each BE kernel gets synthetic versions
//!   (the manifests have one implementation per kernel), the trade-off a DNN
//!   compiler's tuning exposes through "how many loops each block executes":
//!   *merged* versions do the same work in `1/f` as many blocks, each `f`
//!   times as long (`f` in [`VERSION_FACTORS`]); *split* versions in `s`
//!   times as many blocks, each doing `1/s` of the work in
//!   `(1 + SPLIT_OVERHEAD) / s` of the time (`s` in [`SPLIT_FACTORS`]; the
//!   overhead is each block's fixed set-up, a synthetic assumption).
//!   Versions dominated by another (no worse in kernel time, block time,
//!   registers, shared memory, block size and blocks per CU, better in one)
//!   are pruned when the tables are built; selection takes the fastest
//!   version that meets both rules.
//!
//! The same scheduler with [`Mechanism::Wait`] is the wait-based baseline
//! (`wait-preempt`, see [`super::wait_preempt`]).
//!
//! Decisions allocate nothing once the per-model tables are built; those
//! need the device profile, so they are built on the first callback.

use std::collections::VecDeque;
use std::sync::Arc;

use shm_proto::Priority;

use super::queue::EdfQueue;
use super::rt_only::{kernel_count, last_kernel_done, launch_kernels, launch_task};
use super::{Ctx, Policy, Task, TaskDone, tag, untag};
use sluice_gpu::{
    DeviceProfile, Event, Footprint, Gpu, GpuError, KernelLaunch, KernelRef, Ns, Outcome, StreamId,
    blocks_per_cu,
};
use sluice_model::ModelRegistry;

/// Device-queue capacity of BE streams under `reef` (REEF §4.2 / §6.4 uses
/// a small capacity such as 4).
pub const DEFAULT_DQ_CAPACITY: u32 = 4;

/// Synthetic versions of a BE kernel: `f` original blocks merged into one.
pub const VERSION_FACTORS: [u32; 3] = [1, 2, 4];

/// Synthetic versions of a BE kernel: each original block split into `s`
/// blocks, each doing `1/s` of its work.
pub const SPLIT_FACTORS: [u32; 4] = [2, 4, 8, 16];

/// Work units in one original block: the least common multiple of
/// [`SPLIT_FACTORS`], so that every version's block is a whole number of
/// units. Padding counts a kernel's progress in these units.
pub const UNITS_PER_BLOCK: u32 = 16;

/// Extra time of a split block, as a fraction of its share of the original
/// block's time: a block of a split version takes
/// `(1 + SPLIT_OVERHEAD) × block time / s` (each block repeats the set-up
/// work, such as loading its tile, that the original did once). A synthetic
/// assumption, not a measured figure.
pub const SPLIT_OVERHEAD: f64 = 0.15;

/// How BE work is preempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// Reset-based (REEF §4): drop, evict, kill; restore later.
    Reset,
    /// Wait-based: stop feeding, let queued and running kernels finish.
    Wait,
}

/// What the scheduler does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReefConfig {
    /// The preemption mechanism.
    pub mechanism: Mechanism,
    /// Device-queue capacity of BE streams; `None` keeps the profile's.
    pub dq_capacity: Option<u32>,
    /// Dynamic kernel padding (only with [`Mechanism::Reset`]).
    pub padding: bool,
    /// Multi-version kernel selection for padding.
    pub multi_version: bool,
}

impl ReefConfig {
    /// REEF as the paper describes it.
    pub const fn reef() -> Self {
        Self {
            mechanism: Mechanism::Reset,
            dq_capacity: Some(DEFAULT_DQ_CAPACITY),
            padding: true,
            multi_version: true,
        }
    }

    /// The wait-based baseline: profile's device queue, no padding.
    pub const fn wait_preempt() -> Self {
        Self {
            mechanism: Mechanism::Wait,
            dq_capacity: None,
            padding: false,
            multi_version: false,
        }
    }
}

impl Default for ReefConfig {
    fn default() -> Self {
        Self::reef()
    }
}

/// One version of a BE kernel as padding would launch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    /// Original blocks merged into one block of this version.
    pub merge: u32,
    /// Blocks of this version that one original block is split into (1:
    /// not split; `merge` and `split` are never both above 1).
    pub split: u32,
    /// Blocks in the grid.
    pub grid: u32,
    /// Threads per block.
    pub threads: u32,
    /// Registers per thread, as the proxy kernel allocates them.
    pub proxy_regs: u32,
    /// Shared memory per block.
    pub shared_mem: u32,
    /// One block's time alone.
    pub block_time_ns: Ns,
    /// The whole kernel's time alone on the device.
    pub kernel_time_ns: Ns,
    /// Blocks per CU when the grid is spread evenly over every CU.
    pub per_cu: u32,
    /// Blocks of this version one empty CU holds at once.
    pub occupancy: u32,
    /// Work of one block in [`UNITS_PER_BLOCK`]ths of an original block.
    pub units: u32,
    /// What one block takes from a CU.
    pub footprint: Footprint,
    /// The kernel's idempotent flag.
    pub idempotent: bool,
}

impl Version {
    /// Whether `self` dominates `other` (REEF §5.3): no worse in any
    /// attribute, better in at least one. "Block number" is counted per CU,
    /// which is what a version takes from each CU under even spreading.
    pub fn dominates(&self, other: &Self) -> bool {
        let le = [
            self.kernel_time_ns <= other.kernel_time_ns,
            self.block_time_ns <= other.block_time_ns,
            self.proxy_regs <= other.proxy_regs,
            self.shared_mem <= other.shared_mem,
            self.threads <= other.threads,
            self.per_cu <= other.per_cu,
        ];
        let lt = [
            self.kernel_time_ns < other.kernel_time_ns,
            self.block_time_ns < other.block_time_ns,
            self.proxy_regs < other.proxy_regs,
            self.shared_mem < other.shared_mem,
            self.threads < other.threads,
            self.per_cu < other.per_cu,
        ];
        le.iter().all(|&b| b) && lt.iter().any(|&b| b)
    }
}

/// The register count of the proxy kernel (REEF §5.2) that runs a kernel
/// of `regs` registers per thread: the most registers a thread may have at
/// the same occupancy level. Unchanged if no level applies.
pub fn proxy_regs(profile: &DeviceProfile, regs: u32) -> u32 {
    let wave = profile.cu.wave_size.max(1);
    let bank = profile.bank_registers();
    let max_waves = (profile.cu.max_threads / wave / profile.cu.register_banks.max(1)).max(1);
    let Some(waves) = bank.checked_div(regs.saturating_mul(wave)) else {
        return regs;
    };
    let waves = waves.min(max_waves);
    if waves == 0 {
        return regs;
    }
    (bank / (waves * wave)).max(regs)
}

/// A kernel as the RT stream runs it.
#[derive(Debug, Clone, Copy)]
struct RtKernel {
    /// Blocks one CU holds at once.
    occupancy: u32,
    /// Blocks in the grid.
    grid: u32,
    /// The kernel's time alone.
    time: Ns,
}

/// Per-kernel figures of one model.
#[derive(Debug, Clone, Default)]
struct ModelTable {
    /// Each kernel as an RT kernel.
    rt: Vec<RtKernel>,
    /// Pruned BE versions, all kernels, each kernel's sorted by block time.
    versions: Vec<Version>,
    /// Each kernel's range in `versions`.
    ranges: Vec<(u32, u32)>,
    /// Restore point of each kernel (start of its idempotent group).
    group_start: Vec<u32>,
    /// Each kernel's work in [`UNITS_PER_BLOCK`]ths of a block.
    units: Vec<u32>,
}

#[derive(Debug, Clone)]
struct Tables {
    models: Vec<ModelTable>,
    cus: u32,
}

/// The synthetic versions of manifest kernel `k` (the original, each
/// merge factor of `factors` above 1 and each split factor of `splits`),
/// pruned, sorted by block time (fastest first).
pub fn versions_of(
    profile: &DeviceProfile,
    k: &sluice_model::Kernel,
    factors: &[u32],
    splits: &[u32],
) -> Vec<Version> {
    let ncu = profile.compute_units.max(1);
    let grid = u32::try_from(k.blocks()).unwrap_or(u32::MAX).max(1);
    let threads = u32::try_from(k.threads_per_block()).unwrap_or(u32::MAX);
    let regs = proxy_regs(profile, k.regs_per_thread);
    let fp = Footprint::new(profile, threads, regs, k.shared_mem_bytes);
    let bpc = blocks_per_cu(profile, &fp).0.max(1);
    let base_block = (k.block_time_us * 1000.0).round() as Ns;
    let merged = factors.iter().map(|&f| (f.max(1), 1));
    let split = splits.iter().filter(|&&s| s > 1).map(|&s| (1, s));
    let mut v: Vec<Version> = merged
        .chain(split)
        .map(|(f, s)| {
            let g = grid.div_ceil(f).saturating_mul(s);
            let bt = if s > 1 {
                ((base_block as f64) * (1.0 + SPLIT_OVERHEAD) / f64::from(s)).round() as Ns
            } else {
                base_block * Ns::from(f)
            };
            Version {
                merge: f,
                split: s,
                grid: g,
                threads,
                proxy_regs: regs,
                shared_mem: k.shared_mem_bytes,
                block_time_ns: bt,
                kernel_time_ns: Ns::from(g.div_ceil(ncu * bpc)) * bt,
                per_cu: g.div_ceil(ncu),
                occupancy: bpc,
                units: UNITS_PER_BLOCK * f / s,
                footprint: fp,
                idempotent: k.idempotent,
            }
        })
        .collect();
    let keep: Vec<bool> = v
        .iter()
        .enumerate()
        .map(|(i, a)| {
            !v.iter()
                .enumerate()
                .any(|(j, b)| (b.dominates(a)) || (j < i && b == a))
        })
        .collect();
    let mut it = keep.iter();
    v.retain(|_| *it.next().unwrap_or(&false));
    v.sort_by_key(|x| (x.block_time_ns, x.per_cu));
    v
}

impl Tables {
    fn build(profile: &DeviceProfile, models: &ModelRegistry, cfg: &ReefConfig) -> Self {
        let ncu = profile.compute_units.max(1);
        let (factors, splits): (&[u32], &[u32]) = if cfg.multi_version {
            (&VERSION_FACTORS, &SPLIT_FACTORS)
        } else {
            (&VERSION_FACTORS[..1], &[])
        };
        let mut tables = Vec::with_capacity(models.len());
        for (_, m) in models.iter() {
            let ks = &m.manifest.kernels;
            let mut t = ModelTable::default();
            for (j, k) in ks.iter().enumerate() {
                let grid = u32::try_from(k.blocks()).unwrap_or(u32::MAX).max(1);
                let threads = u32::try_from(k.threads_per_block()).unwrap_or(u32::MAX);
                let fp = Footprint::new(profile, threads, k.regs_per_thread, k.shared_mem_bytes);
                let bpc = blocks_per_cu(profile, &fp).0.max(1);
                t.rt.push(RtKernel {
                    occupancy: bpc,
                    grid,
                    // The manifest's time alone (measured, for the REEF
                    // models): the deadline padding must meet.
                    time: k.kernel_time_ns(),
                });
                let start = t.versions.len() as u32;
                t.versions.extend(versions_of(profile, k, factors, splits));
                t.ranges.push((start, t.versions.len() as u32));
                t.group_start.push(group_start(m, j) as u32);
                t.units.push(kernel_units(k));
            }
            tables.push(t);
        }
        Self {
            models: tables,
            cus: ncu,
        }
    }
}

/// A manifest kernel's work in [`UNITS_PER_BLOCK`]ths of a block.
fn kernel_units(k: &sluice_model::Kernel) -> u32 {
    u32::try_from(k.blocks())
        .unwrap_or(u32::MAX / UNITS_PER_BLOCK)
        .max(1)
        .saturating_mul(UNITS_PER_BLOCK)
}

/// Restore point of kernel `k` of `model` (REEF §4.4): the start of its
/// minimal idempotent group, from [`Model::group_start`](sluice_model::Model::group_start)
/// (`k` itself if idempotent alone or past the end).
pub fn group_start(model: &sluice_model::Model, k: usize) -> usize {
    let g = model.group_start(k);
    debug_assert!(g <= k, "group of kernel {k} starts after it, at {g}");
    g.min(k)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LaneState {
    /// BE work runs freely.
    Running,
    /// A preemption was requested; its report has not come yet.
    Preempting,
    /// Preempted (or idle at an RT arrival); waits for the RT queue to drain.
    Parked,
}

#[derive(Debug, Clone, Copy)]
struct Cur {
    task: Task,
    /// Kernels in the task.
    n: usize,
    /// Next kernel to launch.
    next: usize,
    /// Kernels launched at least once (a prefix).
    launched: usize,
    /// Work of kernel `next` already covered by padded launches (in flight
    /// or finished), in [`UNITS_PER_BLOCK`]ths of an original block; 0
    /// when none.
    covered: u32,
}

#[derive(Debug)]
struct Lane {
    stream: StreamId,
    queue: EdfQueue<Task>,
    cur: Option<Cur>,
    state: LaneState,
    /// The padding kernel in flight, and whether it covers the last of its
    /// manifest kernel's work.
    padding: Option<(KernelRef, bool)>,
}

/// REEF (or, with [`Mechanism::Wait`], the wait-based baseline).
#[derive(Debug)]
pub struct Reef {
    cfg: ReefConfig,
    models: Arc<ModelRegistry>,
    tables: Option<Tables>,
    rt: Option<StreamId>,
    /// RT tasks launched on the RT stream, in stream order (at most two:
    /// the running one and one behind it).
    rt_tasks: VecDeque<Task>,
    /// Whether the last of `rt_tasks` has started its last kernel, so the
    /// next RT task may be launched behind it.
    rt_tail_started: bool,
    /// RT tasks not launched yet, earliest deadline first.
    rt_waiting: EdfQueue<Task>,
    lanes: Vec<Lane>,
    /// Lane of each client, indexed by client id (`u32::MAX`: none).
    lane_of_client: Vec<u32>,
    /// Lane of each stream, indexed by stream id (`u32::MAX`: none).
    lane_of_stream: Vec<u32>,
    padded: u64,
}

impl Reef {
    /// A scheduler over `models` with `cfg`.
    pub fn new(models: Arc<ModelRegistry>, cfg: ReefConfig) -> Self {
        Self {
            cfg,
            models,
            tables: None,
            rt: None,
            rt_tasks: VecDeque::new(),
            rt_tail_started: false,
            rt_waiting: EdfQueue::new(),
            lanes: Vec::new(),
            lane_of_client: Vec::new(),
            lane_of_stream: Vec::new(),
            padded: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ReefConfig {
        &self.cfg
    }

    /// BE kernels launched as padding beside RT kernels so far.
    pub fn padded_kernels(&self) -> u64 {
        self.padded
    }

    /// Builds the tables and the RT stream on first use. A failed stream
    /// creation is retried at the next arrival.
    fn init(&mut self, gpu: &mut dyn Gpu) -> Result<StreamId, GpuError> {
        if self.tables.is_none() {
            self.tables = Some(Tables::build(gpu.profile(), &self.models, &self.cfg));
        }
        if let Some(rt) = self.rt {
            return Ok(rt);
        }
        let rt = gpu.create_stream(1)?;
        if !gpu.supports_fused_launch() && self.cfg.padding {
            tracing::info!("reef: this device has no fused launch; running without padding");
            self.cfg.padding = false;
        }
        // Padding runs RT kernels through the dkp kernel, which packs them
        // onto the first CUs and leaves the rest whole (§5.1).
        if self.pads()
            && let Err(e) = gpu.set_packed_placement(rt, true)
        {
            tracing::error!("packed placement of the RT stream: {e}");
        }
        self.rt = Some(rt);
        Ok(rt)
    }

    /// Whether no RT task is launched or waiting.
    fn rt_idle(&self) -> bool {
        self.rt_tasks.is_empty() && self.rt_waiting.is_empty()
    }

    /// Launches waiting RT tasks, earliest deadline first, while the RT
    /// stream is empty or holds one task that has started its last kernel.
    /// Tasks whose deadline has passed are dropped on the way.
    fn launch_rt(&mut self, cx: &mut Ctx<'_>, rt: StreamId) {
        while self.rt_tasks.is_empty() || (self.rt_tasks.len() == 1 && self.rt_tail_started) {
            let Some(task) = self.rt_waiting.pop_startable(cx) else {
                return;
            };
            if launch_task(cx, rt, task) {
                self.rt_tasks.push_back(task);
                self.rt_tail_started = false;
            }
        }
    }

    fn pads(&self) -> bool {
        self.cfg.padding && self.cfg.mechanism == Mechanism::Reset
    }

    /// The lane of `client`, created on first use on a stream that does not
    /// share the RT stream's hardware queue. Fails when the device cannot
    /// create the stream; the next task of the client tries again.
    fn lane_for(
        &mut self,
        gpu: &mut dyn Gpu,
        rt: StreamId,
        client: u32,
    ) -> Result<usize, GpuError> {
        let c = client as usize;
        if let Some(&l) = self.lane_of_client.get(c)
            && l != u32::MAX
        {
            return Ok(l as usize);
        }
        let hwq = gpu.profile().queues.hw_queues.max(1);
        let stream = loop {
            let s = gpu.create_stream(0)?;
            if hwq == 1 || s.0 % hwq != rt.0 % hwq {
                break s;
            }
        };
        if let Some(cap) = self.cfg.dq_capacity
            && let Err(e) = gpu.set_dq_capacity(stream, cap.max(1))
        {
            tracing::error!("device-queue capacity: {e}");
        }
        let l = self.lanes.len();
        self.lanes.push(Lane {
            stream,
            queue: EdfQueue::new(),
            cur: None,
            state: if self.rt_idle() {
                LaneState::Running
            } else {
                LaneState::Parked
            },
            padding: None,
        });
        if self.lane_of_client.len() <= c {
            self.lane_of_client.resize(c + 1, u32::MAX);
        }
        self.lane_of_client[c] = l as u32;
        let s = stream.0 as usize;
        if self.lane_of_stream.len() <= s {
            self.lane_of_stream.resize(s + 1, u32::MAX);
        }
        self.lane_of_stream[s] = l as u32;
        Ok(l)
    }

    /// Launches the rest of lane `l`'s current task, counting relaunches.
    /// A refused launch is the error: the caller fails the task.
    fn launch_rest(&mut self, cx: &mut Ctx<'_>, l: usize) -> Result<(), GpuError> {
        let lane = &mut self.lanes[l];
        let Some(cur) = lane.cur.as_mut() else {
            return Ok(());
        };
        if cur.next >= cur.n {
            return Ok(());
        }
        if cur.next < cur.launched {
            cx.stats.relaunched_kernels += (cur.launched - cur.next) as u64;
        }
        let mut from = cur.next;
        if cur.covered > 0 {
            // Padding ran part of kernel `next`: launch the rest of its
            // blocks (the kernel maps them past the covered ones).
            from += 1;
            if let Some(k) = cx
                .models
                .get(cur.task.model)
                .and_then(|m| m.manifest.kernels.get(cur.next))
            {
                let total = kernel_units(k);
                let left = total.saturating_sub(cur.covered).div_ceil(UNITS_PER_BLOCK);
                let mut launch = KernelLaunch::from_model(k, tag(cur.task.id, cur.next));
                launch.grid_blocks = left.max(1);
                cx.gpu.launch(lane.stream, launch)?;
            }
            cur.covered = 0;
        }
        launch_kernels(cx, lane.stream, &cur.task, from..cur.n)?;
        cur.next = cur.n;
        cur.launched = cur.n;
        Ok(())
    }

    /// Makes the next queued task current, and launches the current task
    /// if the lane runs. A task whose launch is refused fails, and the next
    /// one is tried.
    fn start_next(&mut self, cx: &mut Ctx<'_>, l: usize) {
        loop {
            let lane = &mut self.lanes[l];
            if let Some(cur) = lane.cur
                && cur.launched == 0
                && cur.covered == 0
                && cx.drop_if_late(cur.task)
            {
                // Made current while the lane was parked, never launched,
                // and its deadline passed meanwhile.
                lane.cur = None;
            }
            if lane.cur.is_none() {
                let Some(task) = lane.queue.pop_startable(cx) else {
                    return;
                };
                let n = kernel_count(cx.models, task.model);
                if n == 0 {
                    cx.done.push(TaskDone {
                        task,
                        finished: cx.gpu.now(),
                    });
                    continue;
                }
                lane.cur = Some(Cur {
                    task,
                    n,
                    next: 0,
                    launched: 0,
                    covered: 0,
                });
            }
            if lane.state != LaneState::Running {
                return;
            }
            let Err(e) = self.launch_rest(cx, l) else {
                return;
            };
            if let Some(cur) = self.lanes[l].cur.take() {
                cx.fail(cur.task, e);
            }
        }
    }

    /// Preempts every running lane that has work on the device.
    fn preempt_all(&mut self, cx: &mut Ctx<'_>) {
        for lane in &mut self.lanes {
            if lane.state != LaneState::Running {
                continue;
            }
            if lane.cur.is_none() {
                lane.state = LaneState::Parked;
                continue;
            }
            let r = match self.cfg.mechanism {
                Mechanism::Reset => cx.gpu.preempt_reset(lane.stream).map(|_| ()),
                Mechanism::Wait => cx.gpu.wait_based_preempt(lane.stream),
            };
            match r {
                Ok(()) => lane.state = LaneState::Preempting,
                Err(e) => tracing::error!("preempting stream {}: {e}", lane.stream.0),
            }
        }
    }

    /// Lets lane `l` run again after the RT queue drained.
    fn restore(&mut self, cx: &mut Ctx<'_>, l: usize) {
        if self.cfg.mechanism == Mechanism::Wait
            && let Err(e) = cx.gpu.resume(self.lanes[l].stream)
        {
            tracing::error!("resuming stream {}: {e}", self.lanes[l].stream.0);
            return;
        }
        self.lanes[l].state = LaneState::Running;
        // Launches the rest of the current task, or starts the next one.
        self.start_next(cx, l);
    }

    fn restore_all(&mut self, cx: &mut Ctx<'_>) {
        for l in 0..self.lanes.len() {
            if self.lanes[l].state == LaneState::Parked {
                self.restore(cx, l);
            }
        }
    }

    /// Dynamic kernel padding beside the RT kernel that just started.
    fn pad(&mut self, cx: &mut Ctx<'_>, rt: StreamId, host: KernelRef) {
        let Some(tables) = self.tables.as_ref() else {
            return;
        };
        let (tid, k) = untag(host.tag);
        let Some(rt_task) = self.rt_tasks.iter().find(|t| t.id == tid) else {
            return;
        };
        let Some(&rk) = tables
            .models
            .get(rt_task.model as usize)
            .and_then(|m| m.rt.get(k))
        else {
            return;
        };
        // Rule 2's room: the RT kernel packed onto the first CUs at the
        // per-CU count spreading would give it (`set_packed_placement`),
        // whole CUs after them free; a kernel of more than one wave takes
        // every CU: nothing to pad. The RT kernel's CUs are not shared, so
        // padding never stretches its waves.
        let occ = rk.occupancy.max(1);
        if u64::from(rk.grid) > u64::from(occ) * u64::from(tables.cus) {
            return;
        }
        let level = rk.grid.div_ceil(tables.cus).clamp(1, occ);
        let mut free_cus = tables.cus.saturating_sub(rk.grid.div_ceil(level));
        if free_cus == 0 {
            return;
        }
        let curve = cx.gpu.profile().occupancy.clone();
        let max_threads = f64::from(cx.gpu.profile().cu.max_threads);
        let now = cx.gpu.now();
        let deadline = now + rk.time;
        for lane in &mut self.lanes {
            if lane.state != LaneState::Parked || lane.padding.is_some() {
                continue;
            }
            let Some(cur) = lane.cur.as_mut() else {
                continue;
            };
            if cur.next >= cur.n {
                continue;
            }
            if cur.launched == 0 && cur.covered == 0 && cur.task.late_at(now) {
                continue; // not started, and must not be: dropped at restore
            }
            let Some(mt) = tables.models.get(cur.task.model as usize) else {
                continue;
            };
            let Some(&(a, b)) = mt.ranges.get(cur.next) else {
                continue;
            };
            let left = mt.units[cur.next].saturating_sub(cur.covered);
            let mut pick = None;
            for v in &mt.versions[a as usize..b as usize] {
                if now + v.block_time_ns > deadline {
                    break; // rule 1; versions are sorted by block time
                }
                // Padded blocks fill the free CUs at their occupancy, and a
                // block's time grows with what shares its CU: rule 1 on the
                // wave at full occupancy over one block alone (the most the
                // GPU model stretches a block by).
                let x = |n: u32| f64::from(n * v.footprint.threads) / max_threads;
                let stretch = curve.ratio(x(v.occupancy)) / curve.ratio(x(1));
                let wave = (v.block_time_ns as f64 * stretch).ceil() as Ns;
                if now + wave > deadline {
                    continue;
                }
                // Rule 2: as many of the kernel's remaining blocks as the
                // leftover CUs hold at once (REEF selects "a set of blocks").
                let room = u64::from(free_cus) * u64::from(v.occupancy);
                let waves = (deadline - now) / wave.max(1);
                let want = left.div_ceil(v.units.max(1));
                let blocks = u32::try_from((room * waves).min(u64::from(want))).unwrap_or(want);
                if blocks > 0 {
                    pick = Some((*v, blocks));
                    break;
                }
            }
            let Some((v, blocks)) = pick else {
                continue;
            };
            let t = tag(cur.task.id, cur.next);
            let launch = KernelLaunch {
                grid_blocks: blocks,
                threads_per_block: v.threads,
                regs_per_thread: v.proxy_regs,
                shared_mem: v.shared_mem,
                block_time_ns: v.block_time_ns,
                wave_ns: Vec::new(),
                idempotent: v.idempotent,
                mem_intensity: None,
                tag: t,
            };
            let kref = match cx.gpu.launch_padded(lane.stream, launch, rt, host) {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("padding launch refused: {e}");
                    continue;
                }
            };
            let one_wave = u64::from(free_cus) * u64::from(v.occupancy);
            if u64::from(blocks) >= one_wave {
                free_cus = 0;
            } else {
                free_cus -= blocks.div_ceil(v.occupancy.max(1));
            }
            let units = (blocks * v.units).min(left);
            if cur.next < cur.launched && cur.covered == 0 {
                cx.stats.relaunched_kernels += 1;
            }
            cur.covered += units;
            let last_part = cur.covered >= mt.units[cur.next];
            if last_part {
                cur.next += 1;
                cur.covered = 0;
            }
            cur.launched = cur.launched.max(cur.next);
            lane.padding = Some((kref, last_part));
            self.padded += 1;
        }
    }

    fn on_lane_event(&mut self, cx: &mut Ctx<'_>, l: usize, ev: &Event) {
        match ev {
            Event::KernelFinished {
                t, kernel, outcome, ..
            } => {
                let lane = &mut self.lanes[l];
                let mut partial_pad = false;
                if let Some((r, last_part)) = lane.padding
                    && r == *kernel
                {
                    lane.padding = None;
                    partial_pad = !last_part;
                }
                if *outcome != Outcome::Completed {
                    return;
                }
                let (tid, k) = untag(kernel.tag);
                let Some(cur) = lane.cur else { return };
                if cur.task.id != tid || k + 1 != cur.n {
                    return;
                }
                // A padded part of the last kernel ends the task only if it
                // was the part that covered the rest of the kernel.
                if partial_pad {
                    return;
                }
                lane.cur = None;
                cx.done.push(TaskDone {
                    task: cur.task,
                    finished: *t,
                });
                self.start_next(cx, l);
            }
            Event::Preempted(report) => {
                cx.stats.preempt_latency_ns.push(report.latency_ns());
                let lane = &mut self.lanes[l];
                if self.cfg.mechanism == Mechanism::Reset {
                    if let (Some(cur), Some(fi)) = (lane.cur.as_mut(), report.first_incomplete) {
                        let (tid, k) = untag(fi.tag);
                        if cur.task.id == tid {
                            let gs = self
                                .tables
                                .as_ref()
                                .and_then(|t| t.models.get(cur.task.model as usize))
                                .and_then(|m| m.group_start.get(k))
                                .map_or(k, |&g| g as usize);
                            cur.next = cur.next.min(gs);
                            cur.covered = 0;
                        }
                    }
                    if let Err(e) = cx.gpu.resume(lane.stream) {
                        tracing::error!("resuming stream {}: {e}", lane.stream.0);
                    }
                }
                if lane.state == LaneState::Preempting {
                    lane.state = LaneState::Parked;
                }
                if self.rt_idle() && self.lanes[l].state == LaneState::Parked {
                    self.restore(cx, l);
                }
            }
            Event::KernelStarted { .. } | Event::BlocksCompleted { .. } => {}
        }
    }
}

impl Policy for Reef {
    fn name(&self) -> &'static str {
        match self.cfg.mechanism {
            Mechanism::Reset => "reef",
            Mechanism::Wait => "wait-preempt",
        }
    }

    fn on_arrival(&mut self, cx: &mut Ctx<'_>, task: Task) {
        let rt = match self.init(cx.gpu) {
            Ok(rt) => rt,
            Err(e) => return cx.fail(task, e),
        };
        match task.priority {
            Priority::RealTime => {
                self.rt_waiting.push_task(task);
                self.launch_rt(cx, rt);
                if !self.rt_idle() {
                    self.preempt_all(cx);
                }
            }
            Priority::BestEffort => {
                let l = match self.lane_for(cx.gpu, rt, task.client) {
                    Ok(l) => l,
                    Err(e) => return cx.fail(task, e),
                };
                let lane = &mut self.lanes[l];
                lane.queue.push_task(task);
                if lane.cur.is_none() {
                    self.start_next(cx, l);
                }
            }
        }
    }

    fn on_event(&mut self, cx: &mut Ctx<'_>, ev: &Event) {
        let Some(rt) = self.rt else { return };
        let stream = match ev {
            Event::KernelStarted { stream, .. }
            | Event::KernelFinished { stream, .. }
            | Event::BlocksCompleted { stream, .. } => *stream,
            Event::Preempted(r) => r.stream,
        };
        if stream == rt {
            match ev {
                Event::KernelStarted { kernel, .. } => {
                    if self.cfg.padding && self.cfg.mechanism == Mechanism::Reset {
                        self.pad(cx, rt, *kernel);
                    }
                    let (tid, k) = untag(kernel.tag);
                    if let Some(back) = self.rt_tasks.back()
                        && back.id == tid
                        && k + 1 == kernel_count(cx.models, back.model)
                    {
                        self.rt_tail_started = true;
                        self.launch_rt(cx, rt);
                    }
                }
                _ => {
                    if let Some((task, t)) =
                        last_kernel_done(cx.models, ev, rt, self.rt_tasks.front())
                    {
                        self.rt_tasks.pop_front();
                        cx.done.push(TaskDone { task, finished: t });
                        self.launch_rt(cx, rt);
                        if self.rt_idle() {
                            self.restore_all(cx);
                        }
                    }
                }
            }
            return;
        }
        if let Some(&l) = self.lane_of_stream.get(stream.0 as usize)
            && l != u32::MAX
        {
            self.on_lane_event(cx, l as usize, ev);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::OnceLock;

    use super::*;
    use crate::workload::{Arrival, ClientSpec, RunResult, Workload, run};
    use crate::{PolicyKind, make_policy};

    const DURATION_NS: Ns = 300_000_000;

    fn models() -> Arc<ModelRegistry> {
        static M: OnceLock<Arc<ModelRegistry>> = OnceLock::new();
        Arc::clone(M.get_or_init(|| Arc::new(ModelRegistry::builtin())))
    }

    fn id(name: &str) -> u32 {
        models().lookup(name).unwrap().0
    }

    /// One Poisson RT client (resnet152 at about half its standalone
    /// throughput) and three closed-loop BE clients.
    fn workload() -> Workload {
        let rt_ns = models().lookup("resnet152").unwrap().1.total_time_ns as f64;
        let mut clients = vec![ClientSpec {
            priority: Priority::RealTime,
            model: id("resnet152"),
            arrival: Arrival::Poisson {
                rate_per_s: 0.5e9 / rt_ns,
                seed: 42,
            },
        }];
        for m in ["vgg19", "yolov3", "bert_base"] {
            clients.push(ClientSpec {
                priority: Priority::BestEffort,
                model: id(m),
                arrival: Arrival::ClosedLoop,
            });
        }
        Workload {
            clients,
            duration_ns: DURATION_NS,
        }
    }

    fn rt_mean_ms(r: &RunResult) -> f64 {
        let v: Vec<f64> = r
            .done
            .iter()
            .filter(|d| d.task.priority == Priority::RealTime)
            .map(|d| (d.finished - d.task.arrival) as f64 / 1e6)
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    }

    fn count(r: &RunResult, p: Priority) -> usize {
        r.done.iter().filter(|d| d.task.priority == p).count()
    }

    /// Each policy's run of [`workload`], computed once.
    fn result(kind: PolicyKind) -> &'static RunResult {
        static R: OnceLock<HashMap<&'static str, OnceLock<RunResult>>> = OnceLock::new();
        let map = R.get_or_init(|| {
            PolicyKind::ALL
                .into_iter()
                .map(|k| (k.as_str(), OnceLock::new()))
                .collect()
        });
        if kind == PolicyKind::Reef {
            return &tracked_reef().0;
        }
        map[kind.as_str()].get_or_init(|| {
            let mut p = make_policy(kind, &models());
            run(&DeviceProfile::mi50(), &models(), p.as_mut(), &workload())
        })
    }

    /// What [`Tracker`] saw.
    #[derive(Debug, Default)]
    struct Seen {
        arrived: HashMap<u64, Task>,
        /// Work (block time × blocks, see `Event::KernelFinished::work_ns`)
        /// of each (task, kernel)'s completed launches since its last
        /// rewind: whole launches and padded parts alike.
        work: HashMap<(u64, usize), Ns>,
        /// Rewinds of each (task, kernel): kernels of an idempotent group
        /// that had run before a reset and must run again.
        rewound: HashMap<(u64, usize), u32>,
        /// Tasks whose kernels were dropped, evicted or killed.
        preempted: Vec<u64>,
        /// Tasks reported done before every kernel had completed.
        early: Vec<u64>,
        padded: u64,
    }

    /// Wraps a policy and checks, from the GPU's events, that every kernel
    /// of every task completes, and no more often than restores explain.
    struct Tracker {
        inner: Reef,
        seen: Seen,
    }

    /// Restore point computed here, independently of the policy's tables:
    /// REEF's checker on the manifest's ranges, or the flag rule without them.
    fn expected_group_start(model: u32, k: usize) -> usize {
        let m = models();
        let m = m.get(model).unwrap();
        if m.memory.is_empty() {
            return sluice_model::flag_group_start(&m.manifest.kernels, k);
        }
        let acc: Vec<_> = m.memory.iter().map(|x| x.access()).collect();
        sluice_model::idempotent::minimal_groups(&acc).unwrap()[k]
    }

    impl Policy for Tracker {
        fn name(&self) -> &'static str {
            self.inner.name()
        }

        fn on_arrival(&mut self, cx: &mut Ctx<'_>, task: Task) {
            self.seen.arrived.insert(task.id, task);
            self.inner.on_arrival(cx, task);
        }

        fn on_event(&mut self, cx: &mut Ctx<'_>, ev: &Event) {
            match ev {
                Event::KernelFinished {
                    kernel,
                    outcome: Outcome::Completed,
                    work_ns,
                    ..
                } => *self.seen.work.entry(untag(kernel.tag)).or_default() += work_ns,
                Event::Preempted(r) => {
                    if let Some(fi) = r.first_incomplete {
                        let (tid, k) = untag(fi.tag);
                        let model = self.seen.arrived[&tid].model;
                        // The group runs again from its start; the first
                        // incomplete kernel's finished parts are lost too.
                        for j in expected_group_start(model, k)..k {
                            *self.seen.rewound.entry((tid, j)).or_default() += 1;
                            self.seen.work.insert((tid, j), 0);
                        }
                        self.seen.work.insert((tid, k), 0);
                        self.seen.preempted.push(tid);
                    }
                }
                _ => {}
            }
            let before = cx.done.len();
            self.inner.on_event(cx, ev);
            for d in &cx.done[before..] {
                let n = kernel_count(&models(), d.task.model);
                if (0..n).any(|j| {
                    self.seen.work.get(&(d.task.id, j)).copied().unwrap_or(0)
                        < kernel_work(d.task.model, j)
                }) {
                    self.seen.early.push(d.task.id);
                }
            }
        }
    }

    /// A manifest kernel's work: grid × block time.
    fn kernel_work(model: u32, j: usize) -> Ns {
        let m = models();
        let k = &m.get(model).unwrap().manifest.kernels[j];
        k.blocks() * (k.block_time_us * 1000.0).round() as Ns
    }

    fn tracked_reef() -> &'static (RunResult, Seen) {
        static R: OnceLock<(RunResult, Seen)> = OnceLock::new();
        R.get_or_init(|| {
            let mut t = Tracker {
                inner: Reef::new(models(), ReefConfig::reef()),
                seen: Seen::default(),
            };
            let r = run(&DeviceProfile::mi50(), &models(), &mut t, &workload());
            t.seen.padded = t.inner.padded_kernels();
            (r, t.seen)
        })
    }

    fn p50(v: &[Ns]) -> Ns {
        let mut v = v.to_vec();
        v.sort_unstable();
        v[v.len() / 2]
    }

    #[test]
    fn reef_rt_latency_is_within_5_percent_of_rt_only() {
        let (reef, alone) = (result(PolicyKind::Reef), result(PolicyKind::RtOnly));
        assert_eq!(
            count(reef, Priority::RealTime),
            count(alone, Priority::RealTime)
        );
        let (a, b) = (rt_mean_ms(reef), rt_mean_ms(alone));
        assert!(a <= b * 1.05, "reef {a:.3} ms, rt-only {b:.3} ms");
        // BE work still ran.
        assert!(count(reef, Priority::BestEffort) > 0);
    }

    #[test]
    fn streams_rt_latency_is_clearly_worse_than_rt_only() {
        let (s, alone) = (
            rt_mean_ms(result(PolicyKind::Streams)),
            rt_mean_ms(result(PolicyKind::RtOnly)),
        );
        assert!(s > alone * 1.5, "streams {s:.3} ms, rt-only {alone:.3} ms");
    }

    #[test]
    fn wait_preempt_rt_latency_lies_between_reef_and_streams() {
        let w = rt_mean_ms(result(PolicyKind::WaitPreempt));
        let r = rt_mean_ms(result(PolicyKind::Reef));
        let s = rt_mean_ms(result(PolicyKind::Streams));
        assert!(
            r < w && w < s,
            "reef {r:.3}, wait-preempt {w:.3}, streams {s:.3} ms"
        );
    }

    #[test]
    fn reef_completes_more_tasks_than_seq() {
        let (r, q) = (result(PolicyKind::Reef), result(PolicyKind::Seq));
        assert!(
            r.done.len() > q.done.len(),
            "reef {}, seq {}",
            r.done.len(),
            q.done.len()
        );
    }

    #[test]
    fn reset_preemption_is_recorded_and_far_faster_than_waiting() {
        let reset = &result(PolicyKind::Reef).stats.preempt_latency_ns;
        let wait = &result(PolicyKind::WaitPreempt).stats.preempt_latency_ns;
        assert!(!reset.is_empty() && !wait.is_empty());
        // kill + a capacity-4 device queue of fetches: well under 200 us.
        assert!(reset.iter().all(|&l| l < 200_000), "{reset:?}");
        assert!(
            p50(reset) * 10 < p50(wait),
            "reset {reset:?}, wait {wait:?}"
        );
    }

    #[test]
    fn every_preempted_task_finishes_with_each_kernel_run_as_restores_explain() {
        let (r, seen) = tracked_reef();
        assert!(!seen.preempted.is_empty(), "the workload never preempted");
        assert_eq!(r.unfinished, 0);
        assert!(
            seen.early.is_empty(),
            "done before all kernels: {:?}",
            seen.early
        );
        let done: std::collections::HashSet<u64> = r.done.iter().map(|d| d.task.id).collect();
        for tid in &seen.preempted {
            assert!(done.contains(tid), "preempted task {tid} never finished");
        }
        for d in &r.done {
            let m = models();
            let ks = &m.get(d.task.model).unwrap().manifest.kernels;
            for (j, k) in ks.iter().enumerate() {
                // Since its last rewind each kernel did its work once: at
                // least all of it, at most split versions' set-up overhead
                // more plus rounding (a merged version's last block, a
                // padded part's last block): 8 original blocks.
                let got = seen.work.get(&(d.task.id, j)).copied().unwrap_or(0);
                let want = kernel_work(d.task.model, j);
                let bt = (k.block_time_us * 1000.0).round() as Ns;
                let most = (want as f64 * (1.0 + SPLIT_OVERHEAD)) as Ns + 8 * bt;
                assert!(
                    (want..=most).contains(&got),
                    "task {} kernel {j}: work {got} ns, want {want}..={most}",
                    d.task.id
                );
            }
        }
        assert!(r.stats.relaunched_kernels > 0);
    }

    #[test]
    fn padding_runs_be_kernels_beside_rt_kernels() {
        assert!(tracked_reef().1.padded > 0);
    }

    #[test]
    fn group_start_is_the_models_idempotent_group() {
        let reg = models();
        let t = Tables::build(&DeviceProfile::mi50(), &reg, &ReefConfig::reef());
        let mut non_trivial = 0;
        for (mid, m) in reg.iter() {
            let n = m.manifest.kernels.len();
            for k in 0..n {
                let g = group_start(m, k);
                assert_eq!(t.models[mid as usize].group_start[k] as usize, g);
                assert_eq!(g, expected_group_start(mid, k), "{} kernel {k}", m.name());
                assert_eq!(g == k, m.manifest.kernels[k].idempotent, "{} {k}", m.name());
                non_trivial += usize::from(g < k);
            }
            // Past the end (the task completed): nothing to go back to.
            assert_eq!(group_start(m, n), n);
        }
        assert!(non_trivial > 0);
    }

    #[test]
    fn proxy_kernels_keep_occupancy_and_there_are_few_levels() {
        let p = DeviceProfile::mi50();
        let mut levels = std::collections::BTreeSet::new();
        for regs in 1..=256 {
            let pr = proxy_regs(&p, regs);
            assert!(pr >= regs);
            let a = blocks_per_cu(&p, &Footprint::new(&p, 256, regs, 0)).0;
            let b = blocks_per_cu(&p, &Footprint::new(&p, 256, pr, 0)).0;
            assert_eq!(a, b, "regs {regs} -> proxy {pr}");
            levels.insert(pr);
        }
        // One proxy per occupancy level: 10 wave levels per SIMD on an MI50.
        assert_eq!(levels.len(), 10, "{levels:?}");
    }

    #[test]
    fn versions_are_pruned_by_dominance_and_sorted_fastest_first() {
        let p = DeviceProfile::mi50();
        let m = models();
        let mut saw_three = false;
        for (_, model) in m.iter() {
            for k in &model.manifest.kernels {
                let v = versions_of(&p, k, &VERSION_FACTORS, &[]);
                assert!(!v.is_empty() && v[0].merge == 1);
                assert!(
                    v.windows(2)
                        .all(|w| w[0].block_time_ns <= w[1].block_time_ns)
                );
                for a in &v {
                    assert!(!v.iter().any(|b| b.dominates(a)), "{a:?} is dominated");
                    assert_eq!(a.grid, (k.blocks() as u32).div_ceil(a.merge));
                }
                // A grid that spreads one block per CU gains nothing from
                // merging: only the original survives.
                if k.blocks() <= u64::from(p.compute_units) {
                    assert_eq!(v.len(), 1, "{k:?}");
                }
                saw_three |= v.len() == 3;
            }
        }
        assert!(saw_three);
    }

    #[test]
    fn split_versions_trade_more_blocks_for_shorter_blocks() {
        let p = DeviceProfile::mi50();
        let m = models();
        let mut kept_split = 0;
        for (_, model) in m.iter() {
            for k in &model.manifest.kernels {
                let orig = versions_of(&p, k, &[1], &[]);
                let all = versions_of(&p, k, &VERSION_FACTORS, &SPLIT_FACTORS);
                assert!(
                    all.windows(2)
                        .all(|w| w[0].block_time_ns <= w[1].block_time_ns)
                );
                for a in &all {
                    assert!(!all.iter().any(|b| b.dominates(a)), "{a:?} is dominated");
                    assert!(a.merge == 1 || a.split == 1, "{a:?}");
                }
                for v in all.iter().filter(|v| v.split > 1) {
                    kept_split += 1;
                    let o = &orig[0];
                    assert_eq!(v.grid, o.grid * v.split);
                    assert!(v.block_time_ns < o.block_time_ns, "{v:?} vs {o:?}");
                    // Total block-time work grows by the set-up overhead.
                    let work = |x: &Version| x.block_time_ns as f64 * f64::from(x.grid);
                    let ratio = work(v) / work(o);
                    assert!(
                        (ratio - (1.0 + SPLIT_OVERHEAD)).abs() < 0.02,
                        "{ratio} for {v:?}"
                    );
                }
                // The fastest block always survives pruning: a split version
                // when splits exist (shorter block than any other version).
                assert!(all[0].split > 1 || orig[0].block_time_ns <= 1, "{all:?}");
            }
        }
        assert!(kept_split > 0);
    }

    #[test]
    #[ignore = "prints the comparison table"]
    fn print_policy_table() {
        for k in [
            PolicyKind::RtOnly,
            PolicyKind::Seq,
            PolicyKind::Streams,
            PolicyKind::WaitPreempt,
            PolicyKind::Reef,
        ] {
            let r = result(k);
            let mut pl = r.stats.preempt_latency_ns.clone();
            pl.sort_unstable();
            let p50 = pl.get(pl.len() / 2).copied().unwrap_or(0);
            let p99 = pl.get(pl.len() * 99 / 100).copied().unwrap_or(0);
            println!(
                "{:>12}: rt {:3} mean {:7.3} ms | be done {:4} | unfinished {:3} | util {:.2} | \
                 preempt n {} p50 {} us p99 {} us | relaunched {} | decision p99 {} ns",
                k.as_str(),
                count(r, Priority::RealTime),
                rt_mean_ms(r),
                count(r, Priority::BestEffort),
                r.unfinished,
                r.utilisation,
                pl.len(),
                p50 / 1000,
                p99 / 1000,
                r.stats.relaunched_kernels,
                r.decision_ns.value_at_quantile(0.99),
            );
        }
        for (name, padding, multi_version) in [
            ("no padding", false, false),
            ("padding, 1 version", true, false),
            ("padding, multi-version", true, true),
        ] {
            let cfg = ReefConfig {
                padding,
                multi_version,
                ..ReefConfig::reef()
            };
            let mut p = Reef::new(models(), cfg);
            let r = run(&DeviceProfile::mi50(), &models(), &mut p, &workload());
            println!(
                "reef {name:>22}: rt mean {:7.3} ms | be done {:4} | padded {:5} | util {:.2}",
                rt_mean_ms(&r),
                count(&r, Priority::BestEffort),
                p.padded_kernels(),
                r.utilisation
            );
        }
    }
}
