//! `paella`: software-defined, occupancy-aware kernel dispatch (Paella,
//! SOSP'23, §4–§6).
//!
//! Every task gets a *waitlist*: its model's kernels, in order. Nothing goes
//! to the GPU until the dispatcher decides so, one kernel at a time:
//!
//! - **Occupancy model.** The dispatcher keeps its own copy of every CU's
//!   free resources ([`CuState`]), built from the device profile and each
//!   kernel's [`Footprint`]. A dispatched kernel's blocks are placed in that
//!   copy at once, spread over the CUs as the device's water-filling does;
//!   blocks that do not fit are *pending*. A `KernelFinished` event gives the
//!   kernel's resources back, and pending blocks of older kernels are placed
//!   in what was freed (real-time kernels first, then oldest first, as the
//!   device serves its queue heads). `KernelStarted` marks the kernel as out
//!   of its hardware queue.
//! - **Admission.** The chosen kernel is dispatched only if it can be placed
//!   now, give or take `B` blocks ([`PaellaConfig::extra_blocks`]): its
//!   blocks that would not fit, plus every block already pending, must be at
//!   most `B`. A kernel larger than `B` plus the free room (a multi-wave
//!   kernel) goes when nothing is pending and at least one of its blocks
//!   fits; its other blocks wait on the device for its own earlier waves.
//!   When the chosen kernel is not admitted, nothing else is dispatched
//!   either (no backfill), so the order below is strict.
//! - **Streams.** A dispatched kernel goes onto an idle stream (no kernel of
//!   its own outstanding) of the hardware queue with the fewest kernels that
//!   have not started or still have pending blocks. Since a kernel is only
//!   dispatched when it can start, a hardware queue never holds a kernel that
//!   waits behind another one: no head-of-line blocking. Streams are created
//!   as needed, one per hardware queue at a time, and reused.
//! - **Choice** (§6): real-time tasks first, shortest estimated remaining
//!   time among them; then, among best-effort tasks, if the client with the
//!   highest deficit counter has a ready kernel and its deficit exceeds
//!   [`PaellaConfig::deficit_threshold`], that client's oldest ready task;
//!   otherwise the best-effort task with the shortest remaining time (SRPT).
//!   Remaining time is the sum of the manifest times
//!   (`kernel_time_us`) of the task's kernels not yet dispatched, the
//!   kernel about to go included. Ties go to the older task.
//! - **Deficits** (§6 (2)) count best-effort kernels: each dispatch of a
//!   best-effort kernel takes 1 from its client's counter and adds `1/U` to
//!   every active best-effort client's counter (`U` = best-effort clients
//!   with a task in the system), with one shared offset so that a dispatch
//!   is O(1). A client that becomes active again starts at 0. Real-time
//!   dispatches leave the counters alone.
//!
//! Paella is not preemptive: a real-time kernel waits for resources like any
//! other; it only jumps the queue. Its kernels also go onto streams of higher
//! priority, so that when a real-time and a best-effort kernel both wait on
//! the device for the same freed resources, the device serves the real-time
//! one first.
//!
//! A decision allocates nothing once the pools have grown to the workload:
//! the ready sets are binary heaps with lazy deletion (an entry carries the
//! task slot's generation and is dropped when it surfaces stale), per-kernel
//! placement lists keep their capacity across reuse, and streams are reused.
//!
//! What differs from the paper, and why, is in `docs/policies.md`
//! (`## paella`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use shm_proto::Priority;

use super::{Ctx, Policy, Task, TaskDone, tag};
use crate::gpu::occupancy::{BankUse, CuState};
use crate::gpu::{DeviceProfile, Event, Footprint, KernelLaunch, Ns, Outcome, StreamId};
use crate::model::ModelRegistry;

/// Paella's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaellaConfig {
    /// `B`: blocks the dispatcher may have waiting on the device beyond full
    /// occupancy, to hide the launch and fetch delay (Paella §6 (3)).
    pub extra_blocks: u32,
    /// Deficit (in kernels) above which a best-effort client is served before
    /// SRPT's choice (Paella §6 (2)). `f64::INFINITY` turns fairness off.
    pub deficit_threshold: f64,
}

impl Default for PaellaConfig {
    fn default() -> Self {
        Self {
            extra_blocks: 8,
            deficit_threshold: 16.0,
        }
    }
}

/// No slot.
const NONE: u32 = u32::MAX;
/// Scheduling classes: index into per-class arrays; lower is served first.
const RT: usize = 0;
const BE: usize = 1;
/// When the shared deficit offset passes this, it is folded into the
/// counters (O(clients), rare).
const DEFICIT_RENORMALISE: f64 = 1e6;

fn class_of(p: Priority) -> usize {
    match p {
        Priority::RealTime => RT,
        Priority::BestEffort => BE,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobState {
    Free,
    /// Its next kernel waits in the ready sets.
    Ready,
    /// One of its kernels is on the GPU.
    Running,
}

#[derive(Debug, Clone, Copy)]
struct Job {
    task: Task,
    /// Index of the next kernel to dispatch.
    next: u32,
    kernels: u32,
    /// Bumped whenever the job leaves the ready sets; stale heap entries
    /// carry an older value.
    generation: u32,
    state: JobState,
    /// Arrival order, for "oldest" and ties.
    seq: u64,
    /// Index into `clients`.
    client: u32,
}

/// SRPT heap entry: (class, remaining ns, arrival seq, job slot, generation).
type SrptKey = Reverse<(u8, Ns, u64, u32, u32)>;
/// Per-client oldest-first entry: (arrival seq, job slot, generation).
type OldestKey = Reverse<(u64, u32, u32)>;

#[derive(Debug, Default)]
struct Client {
    /// Stored deficit; the effective one adds `Paella::deficit_base`.
    deficit: f64,
    /// Best-effort jobs of this client in the system.
    live: u32,
    /// Ready best-effort jobs of this client.
    ready: u32,
    /// Ready best-effort jobs, oldest first (lazy deletion).
    oldest: BinaryHeap<OldestKey>,
}

/// A kernel the dispatcher has sent to the GPU.
#[derive(Debug, Clone)]
struct InFlight {
    job: u32,
    tag: u64,
    stream: u32,
    hwq: u32,
    class: usize,
    fp: Footprint,
    /// Blocks not yet placed in the occupancy model.
    unplaced: u32,
    started: bool,
    /// (CU, blocks, registers taken per bank), to give back.
    placements: Vec<(u32, u32, BankUse)>,
}

/// The dispatcher's model of the device and of its own streams.
#[derive(Debug)]
struct Shadow {
    ncu: usize,
    empty: CuState,
    cus: Vec<CuState>,
    /// Blocks placed per CU (for the invariant check and tests).
    cu_blocks: Vec<u32>,
    scratch_fit: Vec<u32>,
    cursor: usize,
    nhwq: usize,
    kernels: Vec<InFlight>,
    free_kernels: Vec<u32>,
    /// Stream id -> in-flight slot (NONE when idle).
    by_stream: Vec<u32>,
    /// Idle streams, per class and hardware queue.
    idle: [Vec<Vec<u32>>; 2],
    /// Per hardware queue: kernels not started or with pending blocks.
    busy_hwq: Vec<u32>,
    hwq_cursor: usize,
    /// In-flight slots with pending blocks, per class, oldest first.
    pending: [VecDeque<u32>; 2],
    pending_blocks: u64,
    placed_blocks: u64,
}

impl Shadow {
    fn new(p: &DeviceProfile) -> Self {
        let ncu = p.compute_units as usize;
        let nhwq = p.queues.hw_queues.max(1) as usize;
        let empty = CuState::empty(p);
        Self {
            ncu,
            empty,
            cus: vec![empty; ncu],
            cu_blocks: vec![0; ncu],
            scratch_fit: vec![0; ncu],
            cursor: 0,
            nhwq,
            kernels: Vec::new(),
            free_kernels: Vec::new(),
            by_stream: Vec::new(),
            idle: [vec![Vec::new(); nhwq], vec![Vec::new(); nhwq]],
            busy_hwq: vec![0; nhwq],
            hwq_cursor: 0,
            pending: [VecDeque::new(), VecDeque::new()],
            pending_blocks: 0,
            placed_blocks: 0,
        }
    }

    /// Fills `scratch_fit` with how many blocks of `fp` each CU takes now
    /// (each capped at `n`); returns the total, capped at `n`.
    fn fits(&mut self, fp: &Footprint, n: u32) -> u32 {
        let mut total: u64 = 0;
        for (f, cu) in self.scratch_fit.iter_mut().zip(&self.cus) {
            *f = cu.fit(fp).0.min(n);
            total += u64::from(*f);
        }
        u32::try_from(total.min(u64::from(n))).unwrap_or(n)
    }

    /// Places up to `n` blocks of in-flight kernel `slot` (after
    /// [`Self::fits`] for its footprint and `n`), spread as the device does:
    /// water-filling, the remainder round-robin from a rotating cursor.
    /// Returns how many were placed.
    fn place_fitted(&mut self, slot: u32, n: u32, total: u32) -> u32 {
        let to_place = n.min(total);
        if to_place == 0 {
            return 0;
        }
        let mut level = u32::MAX;
        if to_place < self.scratch_fit.iter().sum::<u32>() {
            level = 1;
            while self
                .scratch_fit
                .iter()
                .map(|&f| u64::from(f.min(level)))
                .sum::<u64>()
                < u64::from(to_place)
            {
                level += 1;
            }
        }
        let base: u32 = if level == u32::MAX {
            to_place
        } else {
            self.scratch_fit.iter().map(|&f| f.min(level - 1)).sum()
        };
        let mut extra = to_place - base;
        let k = &mut self.kernels[slot as usize];
        for i in 0..self.ncu {
            let c = (self.cursor + i) % self.ncu;
            let f = self.scratch_fit[c];
            let mut m = f.min(level.saturating_sub(1));
            if level == u32::MAX {
                m = f;
            } else if f >= level && extra > 0 {
                m += 1;
                extra -= 1;
            }
            if m == 0 {
                continue;
            }
            let used = self.cus[c].take(&k.fp, m);
            self.cu_blocks[c] += m;
            k.placements.push((c as u32, m, used));
        }
        self.cursor = (self.cursor + 1) % self.ncu;
        self.placed_blocks += u64::from(to_place);
        to_place
    }

    /// Gives back everything in-flight kernel `slot` holds.
    fn release(&mut self, slot: u32) {
        let k = &mut self.kernels[slot as usize];
        for &(c, m, ref used) in &k.placements {
            self.cus[c as usize].give(&k.fp, m, used);
            self.cu_blocks[c as usize] -= m;
            self.placed_blocks -= u64::from(m);
        }
        k.placements.clear();
        if k.unplaced > 0 {
            self.pending_blocks -= u64::from(k.unplaced);
            self.busy_hwq[k.hwq as usize] -= 1;
            k.unplaced = 0;
            let class = k.class;
            self.pending[class].retain(|&s| s != slot);
        }
    }

    /// Places pending blocks in freed room: real-time kernels first, then
    /// oldest first; later kernels take what earlier ones leave.
    fn place_pending(&mut self) {
        for class in [RT, BE] {
            let mut i = 0;
            while i < self.pending[class].len() {
                let slot = self.pending[class][i];
                let (fp, want) = {
                    let k = &self.kernels[slot as usize];
                    (k.fp, k.unplaced)
                };
                let total = self.fits(&fp, want);
                let placed = self.place_fitted(slot, want, total);
                let k = &mut self.kernels[slot as usize];
                k.unplaced -= placed;
                self.pending_blocks -= u64::from(placed);
                if k.unplaced == 0 {
                    self.busy_hwq[k.hwq as usize] -= 1;
                    self.pending[class].remove(i);
                } else {
                    i += 1;
                }
            }
        }
    }

    /// The hardware queue a new kernel should go to: the one with the fewest
    /// kernels not started or with pending blocks, rotating among ties.
    fn pick_hwq(&mut self) -> usize {
        let mut best = self.hwq_cursor;
        for i in 0..self.nhwq {
            let h = (self.hwq_cursor + i) % self.nhwq;
            if self.busy_hwq[h] < self.busy_hwq[best] {
                best = h;
            }
        }
        self.hwq_cursor = (best + 1) % self.nhwq;
        best
    }

    /// Checks the occupancy model against the device's capacity (debug
    /// builds, after every callback).
    fn check(&self) {
        let mut placed = 0u64;
        for (cu, &blocks) in self.cus.iter().zip(&self.cu_blocks) {
            assert!(cu.threads <= self.empty.threads, "{cu:?}");
            assert!(cu.shared_mem <= self.empty.shared_mem, "{cu:?}");
            assert!(cu.blocks <= self.empty.blocks, "{cu:?}");
            assert_eq!(self.empty.blocks - cu.blocks, blocks, "{cu:?}");
            for b in 0..cu.nbanks as usize {
                assert!(cu.banks[b] <= self.empty.banks[b], "{cu:?}");
            }
            placed += u64::from(blocks);
        }
        assert_eq!(placed, self.placed_blocks);
        let pending: u64 = self.pending[RT]
            .iter()
            .chain(&self.pending[BE])
            .map(|&s| u64::from(self.kernels[s as usize].unplaced))
            .sum();
        assert_eq!(pending, self.pending_blocks);
    }
}

/// The Paella policy. See the module docs.
#[derive(Debug)]
pub struct Paella {
    cfg: PaellaConfig,
    /// Per model id: `suffix[k]` = manifest time of kernels `k..`, ns.
    suffix: Vec<Box<[Ns]>>,
    /// Per model id: the model's kernels as launches (tag filled in later).
    launches: Vec<Box<[KernelLaunch]>>,
    dev: Option<Shadow>,
    jobs: Vec<Job>,
    free_jobs: Vec<u32>,
    clients: Vec<Client>,
    client_index: HashMap<u32, u32>,
    srpt: BinaryHeap<SrptKey>,
    ready: [u32; 2],
    /// Best-effort clients with a job in the system.
    active_be: u32,
    /// Shared deficit offset: a client's deficit is `deficit + base`.
    deficit_base: f64,
    seq: u64,
}

impl Paella {
    /// Paella with the default [`PaellaConfig`] over `models`.
    pub fn new(models: &ModelRegistry) -> Self {
        Self::with_config(models, PaellaConfig::default())
    }

    /// Paella with `cfg` over `models`.
    pub fn with_config(models: &ModelRegistry, cfg: PaellaConfig) -> Self {
        let n = models
            .iter()
            .map(|(id, _)| id as usize + 1)
            .max()
            .unwrap_or(0);
        let mut suffix = vec![Box::<[Ns]>::default(); n];
        let mut launches = vec![Box::<[KernelLaunch]>::default(); n];
        for (id, m) in models.iter() {
            let ks = &m.manifest.kernels;
            let mut s = vec![0; ks.len() + 1];
            for i in (0..ks.len()).rev() {
                s[i] = s[i + 1] + ks[i].kernel_time_ns();
            }
            suffix[id as usize] = s.into_boxed_slice();
            launches[id as usize] = ks.iter().map(|k| KernelLaunch::from_model(k, 0)).collect();
        }
        Self {
            cfg,
            suffix,
            launches,
            dev: None,
            jobs: Vec::new(),
            free_jobs: Vec::new(),
            clients: Vec::new(),
            client_index: HashMap::new(),
            srpt: BinaryHeap::new(),
            ready: [0; 2],
            active_be: 0,
            deficit_base: 0.0,
            seq: 0,
        }
    }

    /// The parameters.
    pub fn config(&self) -> PaellaConfig {
        self.cfg
    }

    /// Kernels on the GPU and blocks pending in the occupancy model.
    pub fn outstanding(&self) -> (usize, u64) {
        self.dev.as_ref().map_or((0, 0), |d| {
            (d.kernels.len() - d.free_kernels.len(), d.pending_blocks)
        })
    }

    /// Tasks waiting or running.
    pub fn live_tasks(&self) -> usize {
        self.jobs.len() - self.free_jobs.len()
    }

    fn client_slot(&mut self, client: u32) -> u32 {
        if let Some(&i) = self.client_index.get(&client) {
            return i;
        }
        let i = self.clients.len() as u32;
        self.clients.push(Client::default());
        self.client_index.insert(client, i);
        i
    }

    fn make_ready(&mut self, slot: u32) {
        let j = &mut self.jobs[slot as usize];
        j.state = JobState::Ready;
        let class = class_of(j.task.priority);
        let rem = self
            .suffix
            .get(j.task.model as usize)
            .and_then(|s| s.get(j.next as usize))
            .copied()
            .unwrap_or(0);
        let (seq, generation, client) = (j.seq, j.generation, j.client);
        self.srpt
            .push(Reverse((class as u8, rem, seq, slot, generation)));
        self.ready[class] += 1;
        if class == BE {
            let c = &mut self.clients[client as usize];
            c.oldest.push(Reverse((seq, slot, generation)));
            c.ready += 1;
        }
    }

    fn entry_live(&self, slot: u32, generation: u32) -> bool {
        let j = &self.jobs[slot as usize];
        j.state == JobState::Ready && j.generation == generation
    }

    /// The job SRPT would pick (dropping stale entries on the way).
    fn srpt_top(&mut self) -> Option<u32> {
        while let Some(&Reverse((_, _, _, slot, g))) = self.srpt.peek() {
            if self.entry_live(slot, g) {
                return Some(slot);
            }
            self.srpt.pop();
        }
        None
    }

    /// The oldest ready job of client `c` (dropping stale entries).
    fn oldest_of(&mut self, c: u32) -> Option<u32> {
        while let Some(&Reverse((_, slot, g))) = self.clients[c as usize].oldest.peek() {
            if self.entry_live(slot, g) {
                return Some(slot);
            }
            self.clients[c as usize].oldest.pop();
        }
        None
    }

    /// The job whose next kernel goes next (see the module docs).
    fn choose(&mut self) -> Option<u32> {
        if self.ready[RT] > 0 {
            return self.srpt_top();
        }
        if self.ready[BE] == 0 {
            return None;
        }
        if self.cfg.deficit_threshold.is_finite() {
            let limit = self.cfg.deficit_threshold - self.deficit_base;
            let mut best: Option<(f64, u32)> = None;
            for (i, c) in self.clients.iter().enumerate() {
                if c.ready > 0 && c.deficit > limit && best.is_none_or(|(d, _)| c.deficit > d) {
                    best = Some((c.deficit, i as u32));
                }
            }
            if let Some((_, c)) = best {
                return self.oldest_of(c);
            }
        }
        self.srpt_top()
    }

    /// Takes job `slot` out of the ready sets and charges its client.
    fn take(&mut self, slot: u32) {
        let j = &mut self.jobs[slot as usize];
        j.state = JobState::Running;
        j.generation = j.generation.wrapping_add(1);
        let class = class_of(j.task.priority);
        let client = j.client;
        self.ready[class] -= 1;
        if class == BE {
            let u = f64::from(self.active_be.max(1));
            self.deficit_base += 1.0 / u;
            let c = &mut self.clients[client as usize];
            c.ready -= 1;
            c.deficit -= 1.0;
            if self.deficit_base > DEFICIT_RENORMALISE {
                for c in &mut self.clients {
                    c.deficit += self.deficit_base;
                }
                self.deficit_base = 0.0;
            }
        }
        // Keep stale entries bounded: rebuild when they outnumber live ones.
        let live = (self.ready[RT] + self.ready[BE]) as usize;
        if self.srpt.len() > 2 * live + 64 {
            let jobs = &self.jobs;
            self.srpt.retain(|&Reverse((_, _, _, s, g))| {
                let j = &jobs[s as usize];
                j.state == JobState::Ready && j.generation == g
            });
        }
        let c = &mut self.clients[client as usize];
        if c.oldest.len() > 2 * c.ready as usize + 64 {
            let jobs = &self.jobs;
            c.oldest.retain(|&Reverse((_, s, g))| {
                let j = &jobs[s as usize];
                j.state == JobState::Ready && j.generation == g
            });
        }
    }

    /// Dispatches kernels while the chosen one can be placed.
    fn pump(&mut self, cx: &mut Ctx<'_>) {
        while let Some(slot) = self.choose() {
            let job = self.jobs[slot as usize];
            let Some(dev) = self.dev.as_mut() else { return };
            let launch = &self.launches[job.task.model as usize][job.next as usize];
            let fp = Footprint::new(
                cx.gpu.profile(),
                launch.threads_per_block,
                launch.regs_per_thread,
                launch.shared_mem,
            );
            let grid = launch.grid_blocks;
            let fit = dev.fits(&fp, grid);
            let over = dev.pending_blocks + u64::from(grid - fit);
            let admit =
                over <= u64::from(self.cfg.extra_blocks) || (dev.pending_blocks == 0 && fit > 0);
            if !admit {
                return;
            }
            let class = class_of(job.task.priority);
            let h = dev.pick_hwq();
            if dev.idle[class][h].is_empty() {
                // One more stream on every hardware queue, for this class.
                for _ in 0..dev.nhwq {
                    let s = cx.gpu.create_stream(if class == RT { 1 } else { 0 });
                    let hq = s.0 as usize % dev.nhwq;
                    if s.0 as usize >= dev.by_stream.len() {
                        dev.by_stream.resize(s.0 as usize + 1, NONE);
                    }
                    dev.idle[class][hq].push(s.0);
                }
            }
            let Some(stream) = dev.idle[class][h].pop() else {
                return; // the device maps streams differently; cannot happen
            };
            let k = InFlight {
                job: slot,
                tag: tag(job.task.id, job.next as usize),
                stream,
                hwq: h as u32,
                class,
                fp,
                unplaced: grid,
                started: false,
                placements: Vec::new(),
            };
            let kslot = match dev.free_kernels.pop() {
                Some(i) => {
                    let old = &mut dev.kernels[i as usize];
                    let placements = std::mem::take(&mut old.placements);
                    *old = InFlight { placements, ..k };
                    i
                }
                None => {
                    dev.kernels.push(k);
                    (dev.kernels.len() - 1) as u32
                }
            };
            let placed = dev.place_fitted(kslot, grid, fit);
            let kf = &mut dev.kernels[kslot as usize];
            kf.unplaced = grid - placed;
            // Not started yet; counts as busy until KernelStarted.
            dev.busy_hwq[h] += 1;
            if kf.unplaced > 0 {
                dev.busy_hwq[h] += 1;
                dev.pending_blocks += u64::from(kf.unplaced);
                dev.pending[class].push_back(kslot);
            }
            dev.by_stream[stream as usize] = kslot;
            let mut l = launch.clone();
            l.tag = tag(job.task.id, job.next as usize);
            self.take(slot);
            // The footprint was validated against this profile when the
            // launch was built from a validated manifest; a launch the model
            // refuses (a block that fits no CU) is finished as failed below.
            if cx.gpu.launch(StreamId(stream), l).is_err() {
                self.unlaunchable(cx, kslot);
            }
        }
    }

    /// A kernel the GPU refused (its block fits no CU): the task cannot run;
    /// it is reported done now, so that it is not lost.
    fn unlaunchable(&mut self, cx: &mut Ctx<'_>, kslot: u32) {
        let Some(dev) = self.dev.as_mut() else { return };
        let (job, stream, hwq) = {
            let k = &dev.kernels[kslot as usize];
            (k.job, k.stream, k.hwq)
        };
        dev.release(kslot);
        dev.busy_hwq[hwq as usize] -= 1;
        dev.by_stream[stream as usize] = NONE;
        let class = dev.kernels[kslot as usize].class;
        dev.idle[class][hwq as usize].push(stream);
        dev.free_kernels.push(kslot);
        let now = cx.gpu.now();
        self.finish_job(cx, job, now);
    }

    fn finish_job(&mut self, cx: &mut Ctx<'_>, slot: u32, finished: Ns) {
        let j = &mut self.jobs[slot as usize];
        j.state = JobState::Free;
        j.generation = j.generation.wrapping_add(1);
        let task = j.task;
        let client = j.client;
        if class_of(task.priority) == BE {
            let c = &mut self.clients[client as usize];
            c.live -= 1;
            if c.live == 0 {
                self.active_be -= 1;
            }
        }
        self.free_jobs.push(slot);
        cx.done.push(TaskDone { task, finished });
    }

    fn ensure_init(&mut self, cx: &Ctx<'_>) {
        if self.dev.is_none() {
            self.dev = Some(Shadow::new(cx.gpu.profile()));
        }
    }

    fn on_finished(
        &mut self,
        cx: &mut Ctx<'_>,
        t: Ns,
        stream: StreamId,
        ktag: u64,
        outcome: Outcome,
    ) {
        let Some(dev) = self.dev.as_mut() else { return };
        let Some(&kslot) = dev.by_stream.get(stream.0 as usize) else {
            return;
        };
        if kslot == NONE || dev.kernels[kslot as usize].tag != ktag {
            return; // not one of ours
        }
        dev.release(kslot);
        let k = &dev.kernels[kslot as usize];
        let (job, hwq, class, started) = (k.job, k.hwq as usize, k.class, k.started);
        if !started {
            dev.busy_hwq[hwq] -= 1;
        }
        dev.by_stream[stream.0 as usize] = NONE;
        dev.idle[class][hwq].push(stream.0);
        dev.free_kernels.push(kslot);
        dev.place_pending();
        let j = &mut self.jobs[job as usize];
        if outcome == Outcome::Completed {
            j.next += 1;
        } else {
            // Paella never preempts; if something else did, run it again.
            cx.stats.relaunched_kernels += 1;
        }
        if j.next >= j.kernels {
            self.finish_job(cx, job, t);
        } else {
            self.make_ready(job);
        }
    }

    fn debug_check(&self) {
        if cfg!(debug_assertions)
            && let Some(d) = &self.dev
        {
            d.check();
        }
    }
}

impl Policy for Paella {
    fn name(&self) -> &'static str {
        "paella"
    }

    fn on_arrival(&mut self, cx: &mut Ctx<'_>, task: Task) {
        self.ensure_init(cx);
        let client = self.client_slot(task.client);
        let kernels = self
            .launches
            .get(task.model as usize)
            .map_or(0, |l| l.len() as u32);
        let job = Job {
            task,
            next: 0,
            kernels,
            generation: 0,
            state: JobState::Running,
            seq: self.seq,
            client,
        };
        self.seq += 1;
        let slot = match self.free_jobs.pop() {
            Some(s) => {
                let generation = self.jobs[s as usize].generation;
                self.jobs[s as usize] = Job { generation, ..job };
                s
            }
            None => {
                self.jobs.push(job);
                (self.jobs.len() - 1) as u32
            }
        };
        if class_of(task.priority) == BE {
            let base = self.deficit_base;
            let c = &mut self.clients[client as usize];
            if c.live == 0 {
                c.deficit = -base;
                self.active_be += 1;
            }
            c.live += 1;
        }
        if kernels == 0 {
            // An empty or unknown model: nothing to run.
            let now = cx.gpu.now();
            self.finish_job(cx, slot, now);
            return;
        }
        self.make_ready(slot);
        self.pump(cx);
        self.debug_check();
    }

    fn on_event(&mut self, cx: &mut Ctx<'_>, ev: &Event) {
        self.ensure_init(cx);
        match *ev {
            Event::KernelStarted { stream, kernel, .. } => {
                let Some(dev) = self.dev.as_mut() else { return };
                if let Some(&kslot) = dev.by_stream.get(stream.0 as usize)
                    && kslot != NONE
                {
                    let k = &mut dev.kernels[kslot as usize];
                    if k.tag == kernel.tag && !k.started {
                        k.started = true;
                        dev.busy_hwq[k.hwq as usize] -= 1;
                    }
                }
            }
            Event::KernelFinished {
                t,
                stream,
                kernel,
                outcome,
                ..
            } => {
                self.on_finished(cx, t, stream, kernel.tag, outcome);
                self.pump(cx);
            }
            Event::Preempted(_) => {}
        }
        self.debug_check();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::model::{Kernel, Manifest};
    use crate::sched::TaskId;
    use crate::sched::driver::{self, Arrival, ClientSpec, RunResult, Workload};

    /// A kernel of `grid` blocks of `threads` threads taking `us` per block.
    fn kernel(grid: u32, threads: u32, regs: u32, smem: u32, us: f64) -> Kernel {
        Kernel {
            name: "k".to_owned(),
            grid: [grid, 1, 1],
            block: [threads, 1, 1],
            regs_per_thread: regs,
            shared_mem_bytes: smem,
            kernel_time_us: us * f64::from(grid),
            block_time_us: us,
            idempotent: true,
        }
    }

    fn registry(models: Vec<(&str, Vec<Kernel>)>) -> Arc<ModelRegistry> {
        let ms = models.into_iter().map(|(name, kernels)| {
            let total = kernels.iter().map(|k| k.kernel_time_us).sum();
            let m = Manifest {
                name: name.to_owned(),
                display_name: name.to_owned(),
                provenance: "test".to_owned(),
                input_bytes: 0,
                output_bytes: 0,
                total_time_us: total,
                kernels,
            };
            (format!("test:{name}"), m)
        });
        Arc::new(ModelRegistry::from_manifests(ms).expect("valid test models"))
    }

    /// 4 SMs of gv100, compute-bound kernels: a 1024-thread block takes half
    /// an SM, so 8 such blocks fill the device.
    fn small_device() -> DeviceProfile {
        let mut p = DeviceProfile::gv100();
        p.compute_units = 4;
        p.memory.default_intensity = 0.0;
        p
    }

    fn full(us: f64) -> Kernel {
        kernel(8, 1024, 16, 0, us)
    }

    fn client(model: u32, arrival: Arrival) -> ClientSpec {
        ClientSpec {
            priority: Priority::BestEffort,
            model,
            arrival,
        }
    }

    fn finished(r: &RunResult, id: TaskId) -> Ns {
        r.done
            .iter()
            .find(|d| d.task.id == id)
            .map(|d| d.finished)
            .unwrap_or_else(|| panic!("task {id} did not finish: {:?}", r.done))
    }

    #[test]
    fn srpt_runs_a_short_job_before_a_long_one() {
        let models = registry(vec![
            ("blocker", vec![full(500.0)]),
            ("long", vec![full(100.0); 8]),
            ("short", vec![full(100.0)]),
        ]);
        let ids = |n: &str| models.lookup(n).expect("model").0;
        // The blocker fills the device; long, then short, arrive and wait.
        // B = 0 so that nothing waits on the device either.
        let w = Workload {
            clients: vec![
                client(ids("blocker"), Arrival::Trace(vec![0])),
                client(ids("long"), Arrival::Trace(vec![50_000])),
                client(ids("short"), Arrival::Trace(vec![100_000])),
            ],
            duration_ns: 1_000_000,
        };
        let cfg = PaellaConfig {
            extra_blocks: 0,
            ..PaellaConfig::default()
        };
        let mut p = Paella::with_config(&models, cfg);
        let r = driver::run(&small_device(), &models, &mut p, &w);
        assert_eq!(r.unfinished, 0);
        let by_client = |c: u32| {
            r.done
                .iter()
                .find(|d| d.task.client == c)
                .expect("done")
                .task
                .id
        };
        let (blocker, long, short) = (
            finished(&r, by_client(0)),
            finished(&r, by_client(1)),
            finished(&r, by_client(2)),
        );
        // Short goes right after the blocker, long after short.
        assert!(blocker < short && short < long, "{r:?}");
        assert!(short - blocker < 150_000, "short waited: {r:?}");
        assert!(long - short >= 8 * 100_000, "{r:?}");
    }

    /// Three closed-loop clients of one-kernel jobs (one running, one waiting
    /// on the device as one of the `B` extra blocks) always have a job ready
    /// when a kernel finishes; under pure SRPT the 4-kernel job of a fourth
    /// client never runs while they do.
    fn starvation_case(threshold: f64) -> Ns {
        let models = registry(vec![
            ("long", vec![full(100.0); 4]),
            ("short", vec![full(100.0)]),
        ]);
        let (long, short) = (
            models.lookup("long").expect("model").0,
            models.lookup("short").expect("model").0,
        );
        let duration = 20_000_000;
        let w = Workload {
            clients: vec![
                client(short, Arrival::ClosedLoop),
                client(short, Arrival::ClosedLoop),
                client(short, Arrival::ClosedLoop),
                client(long, Arrival::Trace(vec![0])),
            ],
            duration_ns: duration,
        };
        let cfg = PaellaConfig {
            deficit_threshold: threshold,
            ..PaellaConfig::default()
        };
        let mut p = Paella::with_config(&models, cfg);
        let r = driver::run(&small_device(), &models, &mut p, &w);
        assert_eq!(r.unfinished, 0);
        let id = r
            .done
            .iter()
            .find(|d| d.task.client == 3)
            .expect("long task done")
            .task
            .id;
        finished(&r, id)
    }

    #[test]
    fn deficit_fairness_keeps_a_long_job_from_starving() {
        let srpt_only = starvation_case(f64::INFINITY);
        let fair = starvation_case(4.0);
        eprintln!("long job finished at: pure SRPT {srpt_only} ns, threshold 4 {fair} ns");
        // Without fairness it runs only once the short clients stop (20 ms).
        assert!(srpt_only >= 20_000_000, "pure SRPT: {srpt_only}");
        // With it: 4 active clients, each short kernel adds 1/4 to the long
        // client's deficit, so it is first served after about 16 short
        // kernels (~100 us each), then about every fourth kernel.
        assert!(fair < 5_000_000, "with fairness: {fair}");
    }

    #[test]
    fn real_time_tasks_go_before_shorter_best_effort_ones() {
        let models = registry(vec![
            ("blocker", vec![full(500.0)]),
            ("long", vec![full(100.0); 4]),
            ("short", vec![full(100.0)]),
        ]);
        let ids = |n: &str| models.lookup(n).expect("model").0;
        let w = Workload {
            clients: vec![
                client(ids("blocker"), Arrival::Trace(vec![0])),
                client(ids("short"), Arrival::Trace(vec![10_000, 20_000, 30_000])),
                ClientSpec {
                    priority: Priority::RealTime,
                    model: ids("long"),
                    arrival: Arrival::Trace(vec![40_000]),
                },
            ],
            duration_ns: 1_000_000,
        };
        let cfg = PaellaConfig {
            extra_blocks: 0,
            ..PaellaConfig::default()
        };
        let mut p = Paella::with_config(&models, cfg);
        let r = driver::run(&small_device(), &models, &mut p, &w);
        assert_eq!(r.unfinished, 0);
        let rt = r
            .done
            .iter()
            .find(|d| d.task.priority == Priority::RealTime)
            .expect("rt done")
            .finished;
        for d in r.done.iter().filter(|d| d.task.client == 1) {
            assert!(d.finished > rt, "BE {d:?} before RT at {rt}");
        }
    }

    #[test]
    fn tasks_of_empty_or_unknown_models_finish_at_once() {
        let models = registry(vec![("empty", vec![]), ("one", vec![full(10.0)])]);
        let w = Workload {
            clients: vec![
                client(0, Arrival::Trace(vec![5, 6])),
                client(7, Arrival::Trace(vec![9])),
                client(1, Arrival::Trace(vec![10])),
            ],
            duration_ns: 100,
        };
        let mut p = Paella::new(&models);
        let r = driver::run(&small_device(), &models, &mut p, &w);
        assert_eq!(r.unfinished, 0);
        assert_eq!(r.done.len(), 4);
        for d in r.done.iter().filter(|d| d.task.model != 1) {
            assert_eq!(d.finished, d.task.arrival);
        }
    }

    fn arb_kernel() -> impl Strategy<Value = Kernel> {
        (
            1u32..=300,
            prop::sample::select(vec![32u32, 64, 128, 256, 512, 1024]),
            8u32..=64,
            prop::sample::select(vec![0u32, 4096, 16384, 49152]),
            5u32..=200,
        )
            .prop_map(|(g, t, r, s, us)| kernel(g, t, r, s, f64::from(us)))
    }

    fn arb_client(nmodels: u32) -> impl Strategy<Value = ClientSpec> {
        (
            any::<bool>(),
            0..nmodels,
            prop_oneof![
                (500.0f64..20_000.0, any::<u64>())
                    .prop_map(|(rate_per_s, seed)| Arrival::Poisson { rate_per_s, seed }),
                Just(Arrival::ClosedLoop),
            ],
        )
            .prop_map(|(rt, model, arrival)| ClientSpec {
                priority: if rt {
                    Priority::RealTime
                } else {
                    Priority::BestEffort
                },
                model,
                arrival,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Every task finishes exactly once, the occupancy model stays
        /// within the device (checked after every callback in debug builds)
        /// and is empty at the end.
        #[test]
        fn every_task_finishes_once_and_occupancy_stays_within_the_device(
            models in prop::collection::vec(prop::collection::vec(arb_kernel(), 1..6), 1..4),
            clients in prop::collection::vec(arb_client(3), 1..5),
            b in 0u32..64,
            threshold in prop::sample::select(vec![1.0, 8.0, f64::INFINITY]),
        ) {
            let n = models.len() as u32;
            let names = ["m0", "m1", "m2"];
            let reg = registry(
                models.into_iter().enumerate().map(|(i, k)| (names[i], k)).collect(),
            );
            let clients = clients
                .into_iter()
                .map(|mut c| {
                    c.model %= n;
                    c
                })
                .collect();
            let w = Workload { clients, duration_ns: 3_000_000 };
            let cfg = PaellaConfig { extra_blocks: b, deficit_threshold: threshold };
            let mut p = Paella::with_config(&reg, cfg);
            let r = driver::run(&DeviceProfile::gv100(), &reg, &mut p, &w);
            prop_assert_eq!(r.unfinished, 0);
            let mut ids: Vec<TaskId> = r.done.iter().map(|d| d.task.id).collect();
            ids.sort_unstable();
            let len = ids.len();
            ids.dedup();
            prop_assert_eq!(ids.len(), len, "a task finished twice");
            prop_assert_eq!(ids.last().map_or(0, |&l| l + 1), len as u64, "a task is missing");
            prop_assert_eq!(p.outstanding(), (0, 0));
            prop_assert_eq!(p.live_tasks(), 0);
            if let Some(d) = &p.dev {
                d.check();
                prop_assert_eq!(d.placed_blocks, 0);
            }
        }
    }
}
