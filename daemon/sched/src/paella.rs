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
//! - **Admission** (§6 (3) and "Efficient implementation"). The dispatcher
//!   keeps a backlog `B` ([`PaellaConfig::backlog`]) waiting on the
//!   device beyond full occupancy, to hide the delay between a dispatch
//!   and its placement: while less than `B` is pending, the chosen
//!   kernel is dispatched whether or not its blocks fit now (those that do
//!   not become pending), and this repeats until `B` or more is pending.
//!   By default `B` is device time ([`Backlog::DispatchPath`]): a pending
//!   block counts the time a device full of its kernel's blocks takes per
//!   block, and `B` is the profile's dispatch path (host push + fetch +
//!   launch).
//!   With nothing pending a kernel goes if some block of it fits (so
//!   `B = 0` fills the device and sends nothing beyond it). When the chosen
//!   kernel is not admitted, nothing else is dispatched either (no
//!   backfill), so the order below is strict.
//! - **Streams.** A dispatched kernel goes onto an idle stream (no kernel of
//!   its own outstanding) of the hardware queue with the fewest kernels that
//!   have not started or still have pending blocks. Since the blocks waiting
//!   on the device are bounded by `B` plus one kernel, and a new kernel
//!   goes to the least busy hardware queue, a kernel rarely waits behind
//!   another one in its hardware queue. Streams are created
//!   as needed, one per hardware queue at a time, and reused.
//! - **Choice** (§6): real-time tasks first, shortest estimated remaining
//!   time among them; then, among best-effort tasks, if the client with the
//!   highest deficit counter has a ready kernel and its deficit exceeds
//!   [`PaellaConfig::deficit_threshold`], that client's oldest ready task;
//!   otherwise the best-effort task with the shortest remaining time (SRPT).
//!   Remaining time is the sum of the manifest times
//!   (`kernel_time_us`) of the task's kernels not yet dispatched, the
//!   kernel about to go included. Ties go to the older task.
//!   Deadlines come before remaining time within a class: a task with an
//!   earlier deadline goes first, tasks without one after those with one
//!   (the order of [`crate::queue`]; without deadlines, Paella's order
//!   unchanged). The deficit rule's oldest-task pick ignores deadlines. A
//!   task whose deadline passed before its first kernel went is dropped
//!   unstarted ([`Ctx::drop_if_late`]).
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
//! # Cost of a decision
//!
//! The target is about a microsecond per decision (REEF's kernel
//! selection takes 0.4–1.2 µs). What a callback does, and what bounds it:
//!
//! - **Choice**: the ready sets are binary heaps that know where each task
//!   sits (`SlotHeap`), so a dispatched task leaves them at once in
//!   O(log tasks): no stale entries, no periodic rebuilds. The fairness
//!   check scans the clients (a handful).
//! - **Occupancy model by classes of CUs**: CUs are filled alike
//!   (water-filling) and freed a kernel at a time, so only a few distinct
//!   CU states exist at once (DISB A–E on the mi50: a median of 1–3 and a
//!   90th percentile of 3–8 for 60 CUs). `Shadow` keeps each distinct
//!   state once with the bit set of its CUs. Counting how many blocks of a
//!   kernel fit is one `Fig::fit` per class; placing them moves each
//!   class's CUs, or the part of them that takes one block more, to the
//!   class of the state after the take; a finished kernel gives back what
//!   its *pieces* (CU set, blocks per CU, registers per bank) took, a class
//!   at a time. The work per decision grows with the classes, not the CUs.
//! - **Arithmetic**: a kernel's divisors become exact multiply-shift
//!   reciprocals the first time it is dispatched (`Fig`, `Recip`); the
//!   water-filling level is solved over the classes sorted by fit; the
//!   wavefronts a block group spreads over the register banks are counted
//!   in closed form (`take_blocks`) instead of one bank search per
//!   wavefront. A kernel ruled out because more than `B` blocks are
//!   pending, or by an upper bound from device-wide free totals (kept up to
//!   date on every placement and release), costs no pass at all.
//! - **Nothing allocates** once the pools (tasks, in-flight kernels and
//!   their pieces, classes, streams, heaps) have grown to the workload.
//!
//! All of this computes exactly what the straightforward model computes
//! (a `CuState` per CU, `CuState::fit` per CU, a level-by-level search,
//! `CuState::take` wavefront by wavefront): the tests run both side by side
//! on random devices and operation sequences.
//!
//! What is left is proportional to the kernels a callback dispatches: at
//! the 99th percentile a `KernelFinished` in DISB C–E dispatches about 4
//! (`sluice bench disb --workload all --policy paella`, columns
//! `dec50`/`dec99`; wall time on the machine that runs it).
//!
//! What differs from the paper, and why, is in `docs/policies.md`
//! (`## paella`).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use shm_proto::Priority;

use super::{Ctx, Policy, Task, TaskDone, tag};
use sluice_gpu::occupancy::{BankUse, CuState};
use sluice_gpu::profile::MAX_REGISTER_BANKS;
use sluice_gpu::{
    DeviceProfile, Event, Footprint, Gpu, GpuError, KernelLaunch, Ns, Outcome, StreamId,
};
use sluice_model::ModelRegistry;

/// The order in which the dispatcher serves jobs (within a class; real-time
/// jobs always go first). Paella's own policy and the two baselines of its
/// evaluation (Paella §7, Table 3: Paella-SJF, Paella-RR), which keep its
/// dispatcher and change only the queueing policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queueing {
    /// Paella §6: shortest remaining time first, with deficit fairness.
    Srpt,
    /// Shortest job first by total model time, non-preemptive between jobs:
    /// a job that has dispatched a kernel goes before every job that has
    /// not (oldest first among them); among those that have not, the
    /// shortest model first. No deficit fairness.
    Sjf,
    /// Round robin over jobs, kernel by kernel: a job that dispatches a
    /// kernel goes to the back of the line. No deficit fairness.
    RoundRobin,
}

/// How much work the dispatcher keeps waiting on the device beyond full
/// occupancy: Paella §6 (3)'s `B`, "to ensure that the GPU is always
/// saturated" across the delay between a dispatch and its blocks reaching
/// the device. The paper gives no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backlog {
    /// `B` as a count of pending blocks, whatever their length.
    Blocks(u32),
    /// Pending blocks that take the device at least its *dispatch path* to
    /// drain (the default): each pending block counts the time a device full
    /// of its kernel's blocks takes per block (its wave time over the blocks
    /// a full wave holds on all CUs), and the dispatcher keeps
    /// dispatching while their sum is under the profile's host push +
    /// fetch + launch (`queues.host_launch_ns + cp_fetch_ns + launch_ns`,
    /// 30 µs on `mi50`): the delay `B` is there to hide, measured for the
    /// device, not fitted to any result.
    DispatchPath,
}

/// Paella's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaellaConfig {
    /// `B`: work the dispatcher may have waiting on the device beyond full
    /// occupancy, to hide the launch and fetch delay (Paella §6 (3)).
    pub backlog: Backlog,
    /// Deficit (in kernels) above which a best-effort client is served before
    /// SRPT's choice (Paella §6 (2)). `f64::INFINITY` turns fairness off.
    pub deficit_threshold: f64,
    /// Kernels of a job that may be launched behind its kernel on the device
    /// before that one finishes (launch ahead; 0 turns it off). See the
    /// module docs, *Launch ahead*.
    pub launch_ahead: u32,
    /// Blocks per completion notification asked of the device
    /// ([`Gpu::set_block_notify`]; Paella §5.2 and Fig. 15 aggregate 16).
    /// 0: per-kernel completions only.
    pub notify_every: u32,
    /// Queueing policy.
    pub queueing: Queueing,
}

impl Default for PaellaConfig {
    fn default() -> Self {
        Self {
            backlog: Backlog::DispatchPath,
            deficit_threshold: 16.0,
            launch_ahead: 4,
            notify_every: 16,
            queueing: Queueing::Srpt,
        }
    }
}

impl PaellaConfig {
    /// Paella's dispatcher with shortest-job-first queueing (Paella-SJF).
    pub fn sjf() -> Self {
        Self {
            deficit_threshold: f64::INFINITY,
            queueing: Queueing::Sjf,
            ..Self::default()
        }
    }

    /// Paella's dispatcher with round-robin queueing (Paella-RR).
    pub fn round_robin() -> Self {
        Self {
            deficit_threshold: f64::INFINITY,
            queueing: Queueing::RoundRobin,
            ..Self::default()
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
/// Register banks a CU can have.
const MAX_BANKS: usize = MAX_REGISTER_BANKS as usize;
// `state_hash` reads all of them.
const _: () = assert!(MAX_BANKS == 8);

fn class_of(p: Priority) -> usize {
    match p {
        Priority::RealTime => RT,
        Priority::BestEffort => BE,
    }
}

/// `floor(n / d)` for every `u32` `n` by one 64×64→128-bit multiplication.
///
/// With `c = ceil(2^64 / d)`, `floor(c·n / 2^64) = floor(n / d)` for every
/// 32-bit `n` and `2 <= d < 2^32` (Lemire, Kaser and Kurz, "Faster
/// remainder by direct computation", 2019, Theorem 1 with F = 64, N = 32):
/// `c·n / 2^64 = n/d + n·e / (d·2^64)` with `0 <= e < d`, an error below
/// `2^-32 <= 1/d`, which never carries past the next integer. `d = 1` is
/// the identity; `d = 0` stands for "no limit" and gives `u32::MAX`.
#[derive(Debug, Clone, Copy)]
struct Recip {
    /// `ceil(2^64 / d)` for `d >= 2`, else 0.
    c: u64,
    d: u32,
}

impl Recip {
    fn new(d: u32) -> Self {
        let c = if d >= 2 {
            u64::MAX / u64::from(d) + 1
        } else {
            0
        };
        Self { c, d }
    }

    #[inline]
    fn div(self, n: u32) -> u32 {
        if self.c != 0 {
            // The quotient is at most n, so it fits.
            ((u128::from(self.c) * u128::from(n)) >> 64) as u32
        } else if self.d == 1 {
            n
        } else {
            u32::MAX
        }
    }
}

/// A kernel's per-block needs, with its divisors precomputed, so that how
/// many of its blocks a CU takes costs multiplications only.
#[derive(Debug, Clone, Copy)]
struct Fig {
    fp: Footprint,
    /// Picoseconds of device time per pending block ([`drain_ps`]): what a
    /// pending block counts under [`Backlog::DispatchPath`].
    drain_ps: u64,
    /// Divides free threads by `fp.threads`.
    by_threads: Recip,
    /// Divides free shared memory by `fp.shared_mem`.
    by_smem: Recip,
    /// Divides a bank's free registers by `fp.wave_regs`.
    by_wave_regs: Recip,
    /// Divides free wavefront slots (over all banks) by `fp.waves`.
    by_waves: Recip,
    /// Whether registers limit it at all (`wave_regs > 0 && waves > 0`).
    regs: bool,
}

impl Fig {
    fn new(fp: Footprint) -> Self {
        Self {
            fp,
            drain_ps: 1,
            by_threads: Recip::new(fp.threads),
            by_smem: Recip::new(fp.shared_mem),
            by_wave_regs: Recip::new(fp.wave_regs),
            by_waves: Recip::new(fp.waves),
            regs: fp.wave_regs > 0 && fp.waves > 0,
        }
    }

    fn of(p: &DeviceProfile, l: &KernelLaunch) -> Self {
        let fp = Footprint::new(p, l.threads_per_block, l.regs_per_thread, l.shared_mem);
        Self {
            drain_ps: drain_ps(p, l, &fp),
            ..Self::new(fp)
        }
    }

    /// How many more blocks fit on `cu`: `cu.fit(&self.fp).0`.
    #[inline]
    fn fit(&self, cu: &CuState) -> u32 {
        let mut n = cu
            .blocks
            .min(self.by_threads.div(cu.threads))
            .min(self.by_smem.div(cu.shared_mem));
        if self.regs {
            let waves: u32 = cu.banks[..cu.nbanks as usize]
                .iter()
                .map(|&free| self.by_wave_regs.div(free))
                .sum();
            n = n.min(self.by_waves.div(waves));
        }
        n
    }
}

/// Takes `m` blocks of `fig` from `cu`, which must fit: what
/// [`CuState::take`] does, registers included, bank for bank (see
/// [`spread_waves`]). `by_banks` divides by `cu.nbanks`.
fn take_blocks(cu: &mut CuState, fig: &Fig, m: u32, by_banks: Recip) -> BankUse {
    let fp = &fig.fp;
    debug_assert!(fig.fit(cu) >= m, "{m} blocks of {fp:?} do not fit {cu:?}");
    cu.threads -= fp.threads * m;
    cu.shared_mem -= fp.shared_mem * m;
    cu.blocks -= m;
    let mut used = [0; MAX_BANKS];
    let total = fp.waves * m;
    if fp.wave_regs > 0 && total > 0 {
        // Constant bank counts let the compiler unroll the bank loops.
        let nb = cu.nbanks as usize;
        let (banks, u) = (&mut cu.banks, &mut used);
        match nb {
            4 => spread_waves(&mut banks[..4], fig, total, by_banks, &mut u[..4]),
            2 => spread_waves(&mut banks[..2], fig, total, by_banks, &mut u[..2]),
            1 => spread_waves(&mut banks[..1], fig, total, by_banks, &mut u[..1]),
            8 => spread_waves(&mut banks[..8], fig, total, by_banks, &mut u[..8]),
            _ => spread_waves(&mut banks[..nb], fig, total, by_banks, &mut u[..nb]),
        }
    }
    used
}

/// Gives back `m` blocks of `fp` that took `used` from the banks:
/// [`CuState::give`], over the banks in use only.
fn give_blocks(cu: &mut CuState, fp: &Footprint, m: u32, used: &BankUse) {
    cu.threads += fp.threads * m;
    cu.shared_mem += fp.shared_mem * m;
    cu.blocks += m;
    let nb = cu.nbanks as usize;
    for (free, u) in cu.banks[..nb].iter_mut().zip(used) {
        *free += u;
    }
}

/// Takes `total` wavefronts of `fig.fp.wave_regs` registers from `banks`,
/// each from the bank with the most free registers (the lowest index on a
/// tie), as [`CuState::take`] does one wavefront at a time; records what
/// each bank gave in `used`. The banks must hold them all.
///
/// When the banks' free registers are within one wavefront `w` of each
/// other, the bank that gives one drops below all the others, so the
/// wavefronts go round-robin in the order (most free first, lowest index
/// first). Otherwise write bank `b`'s free registers as `q_b · w + r_b`
/// (`r_b < w`): its `j`-th wavefront finds `(q_b - j) · w + r_b` free, so
/// the wavefronts go, in order, to these values of all banks sorted by level
/// `q_b - j` (high first), then `r_b` (high first), then bank index: every
/// bank gives its wavefronts above some level `l`, and the first few banks
/// of level `l` in that order one more.
#[inline(always)]
fn spread_waves(banks: &mut [u32], fig: &Fig, total: u32, by_banks: Recip, used: &mut [u32]) {
    let w = fig.fp.wave_regs;
    let nb = banks.len();
    let (mut lo, mut hi) = (u32::MAX, 0);
    for &b in banks.iter() {
        lo = lo.min(b);
        hi = hi.max(b);
    }
    let mut count = [0u32; MAX_BANKS];
    let count = &mut count[..nb];
    if hi - lo < w {
        let full = by_banks.div(total);
        let extra = total - full * nb as u32;
        count.fill(full);
        if extra > 0 && lo == hi {
            for c in &mut count[..extra as usize] {
                *c += 1;
            }
        } else if extra > 0 {
            for b in 0..nb {
                let v = banks[b];
                let ahead = (0..nb)
                    .filter(|&o| banks[o] > v || (banks[o] == v && o < b))
                    .count() as u32;
                count[b] += u32::from(ahead < extra);
            }
        }
    } else {
        spread_by_level(banks, fig, total, count);
    }
    for ((free, u), &c) in banks.iter_mut().zip(used.iter_mut()).zip(count.iter()) {
        *u = c * w;
        *free -= *u;
    }
}

/// The general case of [`spread_waves`]: fills `count` with the wavefronts
/// each bank gives, by levels.
#[inline(always)]
fn spread_by_level(banks: &[u32], fig: &Fig, total: u32, count: &mut [u32]) {
    let w = fig.fp.wave_regs;
    let nb = banks.len();
    // q: whole wavefronts each bank holds; s: the same, sorted high first.
    let mut q = [0u32; MAX_BANKS];
    for (qb, &free) in q.iter_mut().zip(banks.iter()) {
        *qb = fig.by_wave_regs.div(free);
    }
    let mut s = q;
    let s = &mut s[..nb];
    for i in 1..nb {
        let mut j = i;
        while j > 0 && s[j - 1] < s[j] {
            s.swap(j - 1, j);
            j -= 1;
        }
    }
    // A(l) = sum over banks of max(0, q_b - l): wavefronts above level l.
    // The level of the last wavefront is the smallest l >= 1 with
    // A(l) < total. On [s[k], s[k-1]] (s[nb] = 0) only the k highest banks
    // count, A(l) = p_k - k·l with p_k their sum.
    let total64 = u64::from(total);
    let mut p: u64 = 0;
    let mut level: u64 = 1;
    for k in 1..=nb {
        p += u64::from(s[k - 1]);
        let lo = if k < nb { u64::from(s[k]) } else { 0 };
        let kk = k as u64;
        if p - kk * lo >= total64 {
            level = (p - total64) / kk + 1;
            break;
        }
    }
    // The fit guarantees level >= 1 and at most u32::MAX.
    let level = level as u32;
    let mut above = 0u32;
    let mut at_level = 0u32;
    for (c, &qb) in count.iter_mut().zip(&q[..nb]) {
        *c = qb.saturating_sub(level);
        above += *c;
        at_level += u32::from(qb >= level);
    }
    // 1 <= rem <= at_level, since A(level) < total <= A(level - 1).
    let rem = total - above;
    if rem == at_level {
        for (c, &qb) in count.iter_mut().zip(&q[..nb]) {
            *c += u32::from(qb >= level);
        }
    } else {
        // The `rem` banks of the level first by (r high, index low).
        let r = |b: usize| banks[b] - q[b] * w;
        for b in 0..nb {
            if q[b] < level {
                continue;
            }
            let rb = r(b);
            let ahead = (0..nb)
                .filter(|&o| q[o] >= level && (r(o) > rb || (r(o) == rb && o < b)))
                .count() as u32;
            if ahead < rem {
                count[b] += 1;
            }
        }
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
    /// Kernels completed.
    completed: u32,
    kernels: u32,
    state: JobState,
    /// Arrival order, for "oldest" and ties.
    seq: u64,
    /// Index into `clients`.
    client: u32,
    /// Its kernels on the device (dispatched, not finished).
    inflight: u32,
    /// Of those, the ones not started yet.
    unstarted: u32,
    /// The in-flight slot of its last dispatched kernel (NONE when none is
    /// in flight); its stream is the job's while kernels are in flight.
    tail: u32,
    /// A kernel of it did not complete: it fails once none is in flight.
    aborted: bool,
}

/// SRPT key: (class, deadline (`Ns::MAX`: none), remaining ns, arrival
/// seq); unique since seq is.
type SrptKey = (u8, Ns, Ns, u64);

/// A binary min-heap of job slots by key that knows where each slot sits
/// (`pos`, indexed by job slot, owned by the caller so that several heaps
/// can share one), so that any slot leaves it in O(log n).
#[derive(Debug)]
struct SlotHeap<K> {
    items: Vec<(K, u32)>,
}

impl<K> Default for SlotHeap<K> {
    fn default() -> Self {
        Self { items: Vec::new() }
    }
}

impl<K: Ord + Copy> SlotHeap<K> {
    fn peek(&self) -> Option<u32> {
        self.items.first().map(|&(_, s)| s)
    }

    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn set(&mut self, pos: &mut [u32], i: usize, item: (K, u32)) {
        pos[item.1 as usize] = i as u32;
        self.items[i] = item;
    }

    fn push(&mut self, pos: &mut [u32], key: K, slot: u32) {
        let i = self.items.len();
        self.items.push((key, slot));
        pos[slot as usize] = i as u32;
        self.sift_up(pos, i);
    }

    /// Removes `slot`, which must be in this heap.
    fn remove(&mut self, pos: &mut [u32], slot: u32) {
        let i = pos[slot as usize] as usize;
        pos[slot as usize] = NONE;
        let Some(last) = self.items.pop() else { return };
        if i < self.items.len() {
            self.set(pos, i, last);
            let i = self.sift_up(pos, i);
            self.sift_down(pos, i);
        }
    }

    fn sift_up(&mut self, pos: &mut [u32], mut i: usize) -> usize {
        let item = self.items[i];
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.items[parent].0 <= item.0 {
                break;
            }
            self.set(pos, i, self.items[parent]);
            i = parent;
        }
        self.set(pos, i, item);
        i
    }

    fn sift_down(&mut self, pos: &mut [u32], mut i: usize) {
        let item = self.items[i];
        let n = self.items.len();
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            let child = if l + 1 < n && self.items[l + 1].0 < self.items[l].0 {
                l + 1
            } else {
                l
            };
            if item.0 <= self.items[child].0 {
                break;
            }
            self.set(pos, i, self.items[child]);
            i = child;
        }
        self.set(pos, i, item);
    }
}

#[derive(Debug, Default)]
struct Client {
    /// Stored deficit; the effective one adds `Paella::deficit_base`.
    deficit: f64,
    /// Best-effort jobs of this client in the system.
    live: u32,
    /// Ready best-effort jobs of this client, oldest first (by arrival
    /// seq).
    oldest: SlotHeap<u64>,
}

/// Hashes a client id with one multiplication (the ids are small
/// integers; SipHash's protection against chosen keys is not needed).
#[derive(Debug, Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A kernel the dispatcher has sent to the GPU.
#[derive(Debug, Clone)]
struct InFlight {
    job: u32,
    tag: u64,
    stream: u32,
    hwq: u32,
    class: usize,
    fig: Fig,
    /// Blocks not yet placed in the occupancy model.
    unplaced: u32,
    started: bool,
    /// Launched ahead and waiting on the device for the kernel in front of
    /// it on its stream to finish: none of its blocks can be placed yet, so
    /// they are not pending (not in `Shadow::pending`).
    queued: bool,
    /// While queued: its estimate of the blocks that will wait for room
    /// once it may start (counted, weighted, in `Shadow::ahead_backlog`).
    ahead_est: u32,
    /// The kernel launched behind it on its stream (NONE: none).
    behind: u32,
    /// Blocks the device reported complete that the occupancy model has
    /// not given back yet (see `Shadow::release_completed`).
    credit: u32,
    /// What it holds, to give back: per piece, blocks per CU and the
    /// registers each CU gave per bank; the piece's CUs are `piece_cus`.
    pieces: Vec<(u32, BankUse)>,
    /// Per piece, its CUs: `Shadow::words` words of a bit set.
    piece_cus: Vec<u64>,
}

impl InFlight {
    /// Kernel `tag` of job `job` just sent on `stream` (hardware queue
    /// `hwq`), `grid` blocks, none placed, nothing behind it.
    fn new(job: u32, tag: u64, stream: u32, hwq: u32, class: usize, fig: Fig, grid: u32) -> Self {
        Self {
            job,
            tag,
            stream,
            hwq,
            class,
            fig,
            unplaced: grid,
            started: false,
            queued: false,
            ahead_est: 0,
            behind: NONE,
            credit: 0,
            pieces: Vec::new(),
            piece_cus: Vec::new(),
        }
    }
}

/// Which scratch set [`Shadow::select`] intersects with.
#[derive(Debug, Clone, Copy)]
enum Mask {
    All,
    Plus,
    Minus,
}

/// CUs in the same state: the occupancy model stores each distinct state
/// once, with the set of CUs in it (`Shadow::members`).
#[derive(Debug, Clone, Copy)]
struct CuClass {
    state: CuState,
    /// [`state_hash`] of `state`.
    hash: u64,
    /// How many CUs; 0 when the slot is free.
    cus: u32,
    /// Its index in `Shadow::live` (when live).
    live_pos: u32,
    /// From the last [`Shadow::fits`]: blocks of that kernel each of its
    /// CUs takes (0 for a class made since).
    fit: u32,
}

/// A hash of a CU state, to tell states apart quickly.
fn state_hash(s: &CuState) -> u64 {
    const K: [u64; 6] = [
        0x9e37_79b9_7f4a_7c15,
        0xc2b2_ae3d_27d4_eb4f,
        0x1656_67b1_9e37_79f9,
        0x85eb_ca77_c2b2_ae63,
        0x27d4_eb2f_1656_67c5,
        0xff51_afd7_ed55_8ccd,
    ];
    let pair = |a: u32, b: u32| u64::from(a) << 32 | u64::from(b);
    let b = &s.banks;
    let h = pair(s.threads, s.shared_mem).wrapping_mul(K[0])
        ^ pair(s.blocks, b[0]).wrapping_mul(K[1])
        ^ pair(b[1], b[2]).wrapping_mul(K[2])
        ^ pair(b[3], b[4]).wrapping_mul(K[3])
        ^ pair(b[5], b[6]).wrapping_mul(K[4])
        ^ u64::from(b[7]).wrapping_mul(K[5]);
    h ^ (h >> 29)
}

/// The mask of the lowest `k` set bits of `x` (`k` at most its count):
/// clears the lowest `k` bits, or the highest `count - k`, whichever is
/// fewer.
fn lowest_bits(x: u64, k: u32) -> u64 {
    let n = x.count_ones();
    let mut rest = x;
    if k <= n - k {
        for _ in 0..k {
            rest &= rest - 1;
        }
        x ^ rest
    } else {
        for _ in 0..n - k {
            rest &= !(1u64 << (63 - rest.leading_zeros()));
        }
        rest
    }
}

/// The dispatcher's model of the device and of its own streams.
///
/// The occupancy model is the free resources of every CU. CUs are placed
/// alike (water-filling) and freed alike (a kernel at a time), so at any
/// time only a few distinct CU states exist (in the DISB workloads on the
/// mi50, a median of 1 to 3 and a 90th percentile of 3 to 8 for 60 CUs).
/// The model stores each distinct state once, as a class, with the set of
/// its CUs as a bit set; counting how many blocks fit is one
/// [`Fig::fit`] per class, and placing blocks or giving them back moves
/// CUs between classes a class at a time. Each CU is in exactly one class
/// and no two live classes have the same state.
#[derive(Debug)]
struct Shadow {
    ncu: usize,
    /// Words of a CU bit set.
    words: usize,
    empty: CuState,
    /// Class slots; a free slot has `cus == 0`.
    classes: Vec<CuClass>,
    /// Per class slot, its CUs (`words` words each).
    members: Vec<u64>,
    free_classes: Vec<u32>,
    /// The live classes: (state hash, slot).
    live: Vec<(u64, u32)>,
    /// Scratch CU sets (`words` words each): not yet handled in this pass;
    /// taking one block more; the part of a class being moved.
    rest: Vec<u64>,
    plus: Vec<u64>,
    part: Vec<u64>,
    /// Scratch CU sets: the complement of `plus`; every CU.
    minus: Vec<u64>,
    ones: Vec<u64>,
    /// Scratch: (blocks that fit, CUs) per class, for the level.
    order: Vec<(u32, u32)>,
    /// Sum over CUs of the last [`Self::fits`].
    fit_sum: u64,
    /// Free resources summed over the CUs: free block slots, threads,
    /// shared memory and registers. They bound any kernel's fit from
    /// above ([`Self::fit_bound`]).
    free_blocks: u64,
    free_threads: u64,
    free_smem: u64,
    free_regs: u64,
    /// Divides by the number of register banks.
    by_banks: Recip,
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
    /// Blocks of `pending` in all, and per class.
    pending_blocks: u64,
    /// What the admission rule counts ([`PaellaConfig::backlog`]): pending
    /// blocks weighted by [`Shadow::unit`], per class, and the same of the
    /// kernels launched ahead (`ahead_est` weighted).
    backlog_class: [u64; 2],
    ahead_backlog: u64,
    /// Whether a pending block counts its kernel's `Fig::drain_ps`
    /// ([`Backlog::DispatchPath`]) rather than 1.
    by_time: bool,
    /// `B` in the unit of `backlog` ([`backlog_limit`]), fixed at start.
    limit: u64,
    placed_blocks: u64,
    /// Blocks per completion notification asked of each new stream; 0 once
    /// the device said it cannot (then kernels are given back whole).
    notify_every: u32,
}

/// `B` in the units [`Shadow::backlog`] counts: blocks, or picoseconds of
/// the profile's dispatch path.
fn backlog_limit(backlog: Backlog, p: &DeviceProfile) -> u64 {
    match backlog {
        Backlog::Blocks(b) => u64::from(b),
        Backlog::DispatchPath => dispatch_path_ns(p).saturating_mul(1000),
    }
}

/// The delay between a dispatch and its blocks becoming placeable on an
/// idle device, ns: host push + command-processor fetch + launch.
fn dispatch_path_ns(p: &DeviceProfile) -> u64 {
    p.queues
        .host_launch_ns
        .saturating_add(p.queues.cp_fetch_ns)
        .saturating_add(p.queues.launch_ns)
}

/// Device time per pending block of `l`, ps, at the rate a device full of
/// its blocks completes them: its wave time (`block_time_ns`) over the
/// blocks a full wave holds on all CUs (as many per CU as fit); at least 1.
/// Pending blocks of small kernels are placed beside other kernels' blocks,
/// so the full device's rate applies, not the kernel's own alone. Taking
/// the wave time alone for a full wave is optimistic (more blocks per CU
/// take at least as long), so the real pending time is at least what is
/// counted: the backlog errs toward keeping the device saturated.
fn drain_ps(p: &DeviceProfile, l: &KernelLaunch, fp: &Footprint) -> u64 {
    let cus = u64::from(p.compute_units.max(1));
    let per_cu = u64::from(sluice_gpu::occupancy::blocks_per_cu(p, fp).0).max(1);
    (l.block_time_ns.saturating_mul(1000) / (per_cu * cus)).max(1)
}

/// Registers a block of `fp` takes from its CU's banks, as
/// [`CuState::take`] counts them (none when `wave_regs` is 0).
fn regs_per_block(fp: &Footprint) -> u64 {
    u64::from(fp.waves) * u64::from(fp.wave_regs)
}

/// Registers free over all of `cu`'s banks.
fn cu_regs(cu: &CuState) -> u64 {
    cu.banks[..cu.nbanks as usize]
        .iter()
        .map(|&b| u64::from(b))
        .sum()
}

impl Shadow {
    /// One more idle stream of `class` on every hardware queue. A stream
    /// the device refuses stops it there; those made are kept.
    fn add_streams(&mut self, gpu: &mut dyn Gpu, class: usize) -> Result<(), GpuError> {
        for _ in 0..self.nhwq {
            let s = gpu.create_stream(if class == RT { 1 } else { 0 })?;
            if self.notify_every > 0
                && let Err(e) = gpu.set_block_notify(s, self.notify_every)
            {
                // Logged once: no later stream asks again.
                tracing::info!(
                    "paella: no block-group completions ({e}); \
                     the occupancy model frees whole kernels as they finish"
                );
                self.notify_every = 0;
            }
            let hq = s.0 as usize % self.nhwq;
            if s.0 as usize >= self.by_stream.len() {
                self.by_stream.resize(s.0 as usize + 1, NONE);
            }
            self.idle[class][hq].push(s.0);
        }
        Ok(())
    }

    fn new(p: &DeviceProfile, notify_every: u32, backlog: Backlog) -> Self {
        let ncu = p.compute_units as usize;
        let words = ncu.div_ceil(64);
        let nhwq = p.queues.hw_queues.max(1) as usize;
        let empty = CuState::empty(p);
        let n = ncu as u64;
        let mut all = vec![0u64; words];
        for (w, word) in all.iter_mut().enumerate() {
            let bits = (ncu - 64 * w).min(64);
            *word = if bits == 64 {
                u64::MAX
            } else {
                (1 << bits) - 1
            };
        }
        let mut classes = Vec::new();
        let mut live = Vec::new();
        if ncu > 0 {
            let hash = state_hash(&empty);
            classes.push(CuClass {
                state: empty,
                hash,
                cus: ncu as u32,
                live_pos: 0,
                fit: 0,
            });
            live.push((hash, 0));
        }
        Self {
            ncu,
            words,
            empty,
            members: if ncu > 0 { all } else { Vec::new() },
            classes,
            free_classes: Vec::new(),
            live,
            rest: vec![0; words],
            plus: vec![0; words],
            part: vec![0; words],
            minus: vec![0; words],
            ones: vec![u64::MAX; words],
            order: Vec::new(),
            fit_sum: 0,
            free_blocks: n * u64::from(empty.blocks),
            free_threads: n * u64::from(empty.threads),
            free_smem: n * u64::from(empty.shared_mem),
            free_regs: n * cu_regs(&empty),
            by_banks: Recip::new(empty.nbanks),
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
            backlog_class: [0; 2],
            ahead_backlog: 0,
            by_time: backlog == Backlog::DispatchPath,
            limit: backlog_limit(backlog, p),
            placed_blocks: 0,
            notify_every,
        }
    }

    /// Pending work of both classes plus that of the kernels launched
    /// ahead: what best-effort admission compares with `B`.
    fn backlog(&self) -> u64 {
        self.backlog_class[RT] + self.backlog_class[BE] + self.ahead_backlog
    }

    /// What one pending block of `fig` adds to the backlog.
    fn unit(&self, fig: &Fig) -> u64 {
        if self.by_time { fig.drain_ps } else { 1 }
    }

    /// Adds `blocks` pending blocks of `fig` (class `class`) to the counts.
    fn add_pending(&mut self, fig: &Fig, class: usize, blocks: u32) {
        let w = u64::from(blocks) * self.unit(fig);
        self.pending_blocks += u64::from(blocks);
        self.backlog_class[class] += w;
    }

    /// Takes `blocks` pending blocks of `fig` (class `class`) off the counts.
    fn sub_pending(&mut self, fig: &Fig, class: usize, blocks: u32) {
        let w = u64::from(blocks) * self.unit(fig);
        self.pending_blocks -= u64::from(blocks);
        self.backlog_class[class] -= w;
    }

    /// Puts `k` into a free in-flight slot (keeping the slot's buffers) and
    /// returns the slot.
    fn new_kernel(&mut self, k: InFlight) -> u32 {
        match self.free_kernels.pop() {
            Some(i) => {
                let old = &mut self.kernels[i as usize];
                let pieces = std::mem::take(&mut old.pieces);
                let piece_cus = std::mem::take(&mut old.piece_cus);
                *old = InFlight {
                    pieces,
                    piece_cus,
                    ..k
                };
                i
            }
            None => {
                self.kernels.push(k);
                (self.kernels.len() - 1) as u32
            }
        }
    }

    /// An upper bound, from the free totals plus what `tail_blocks` blocks
    /// of `tail` will give back, on the blocks of `fig` the device will take
    /// once that kernel has finished (the room a kernel launched behind it
    /// can expect). O(1).
    fn room_after(&self, tail: &Fig, tail_blocks: u32, fig: &Fig) -> u32 {
        let t = u64::from(tail_blocks);
        let (tf, fp) = (&tail.fp, &fig.fp);
        let mut n = self.free_blocks + t;
        if fp.threads > 0 {
            n = n.min((self.free_threads + t * u64::from(tf.threads)) / u64::from(fp.threads));
        }
        if fp.shared_mem > 0 {
            let smem = self.free_smem + t * u64::from(tf.shared_mem);
            n = n.min(smem / u64::from(fp.shared_mem));
        }
        if fig.regs {
            let regs = self.free_regs + t * regs_per_block(tf);
            n = n.min(regs / u64::from(fp.wave_regs) / u64::from(fp.waves));
        }
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// An upper bound on the blocks of `fig` the device takes now, from the
    /// free totals (the sum of per-CU floors is at most the floor of the
    /// sum). O(1).
    fn fit_bound(&self, fig: &Fig) -> u64 {
        let fp = &fig.fp;
        let mut n = self.free_blocks;
        if fp.threads > 0 {
            n = n.min(self.free_threads / u64::from(fp.threads));
        }
        if fp.shared_mem > 0 {
            n = n.min(self.free_smem / u64::from(fp.shared_mem));
        }
        if fig.regs {
            n = n.min(self.free_regs / u64::from(fp.wave_regs) / u64::from(fp.waves));
        }
        n
    }

    /// Records in every class how many blocks of `fig` each of its CUs
    /// takes now (capped at `n`); returns the total over the CUs, capped at
    /// `n`.
    fn fits(&mut self, fig: &Fig, n: u32) -> u32 {
        let mut total: u64 = 0;
        for &(_, i) in &self.live {
            let c = &mut self.classes[i as usize];
            c.fit = fig.fit(&c.state).min(n);
            total += u64::from(c.fit) * u64::from(c.cus);
        }
        self.fit_sum = total;
        u32::try_from(total.min(u64::from(n))).unwrap_or(n)
    }

    /// The water-filling level for `to_place` blocks (less than
    /// `fit_sum`): the smallest `level >= 1` with
    /// `sum over CUs of min(fit, level) >= to_place`, and that sum at
    /// `level - 1`. With the classes sorted by fit, the sum is linear in
    /// `level` between two fits: `p + level · g`, `p` the blocks of the
    /// classes that fit fewer, `g` the CUs of those that fit more.
    fn level(&mut self, to_place: u32) -> (u32, u64) {
        self.order.clear();
        let mut g = 0u64;
        for &(_, i) in &self.live {
            let c = &self.classes[i as usize];
            if c.fit > 0 {
                self.order.push((c.fit, c.cus));
                g += u64::from(c.cus);
            }
        }
        self.order.sort_unstable();
        let want = u64::from(to_place);
        let mut p = 0u64;
        for &(f, n) in &self.order {
            if p + u64::from(f) * g >= want {
                // Past the previous fit the sum was below `want`, so this
                // is above it.
                let level = (want - p).div_ceil(g);
                return (level as u32, p + (level - 1) * g);
            }
            p += u64::from(f) * u64::from(n);
            g -= u64::from(n);
        }
        // Not reached: `to_place` is below the sum of the fits.
        (1, 0)
    }

    fn set(&self, class: u32) -> &[u64] {
        let w = self.words;
        &self.members[class as usize * w..(class as usize + 1) * w]
    }

    /// The live class of CUs in `state` (with hash `hash`), if any.
    fn find_class(&self, state: &CuState, hash: u64) -> Option<u32> {
        self.live
            .iter()
            .find(|&&(h, i)| h == hash && self.classes[i as usize].state == *state)
            .map(|&(_, i)| i)
    }

    /// A new class of CUs in `state`, with no CUs yet.
    fn new_class(&mut self, state: CuState, hash: u64) -> u32 {
        let class = CuClass {
            state,
            hash,
            cus: 0,
            live_pos: self.live.len() as u32,
            fit: 0,
        };
        let i = match self.free_classes.pop() {
            Some(i) => {
                self.classes[i as usize] = class;
                i
            }
            None => {
                self.classes.push(class);
                self.members.extend(std::iter::repeat_n(0, self.words));
                (self.classes.len() - 1) as u32
            }
        };
        self.live.push((hash, i));
        i
    }

    /// Moves the `cus` CUs of `part` (all in class `from`) to the class of
    /// `state`; frees `from` if it is left empty. When they are all of
    /// `from` and no class has `state`, `from` just takes the new state.
    fn move_part(&mut self, from: u32, state: &CuState, cus: u32) {
        let hash = state_hash(state);
        let found = self.find_class(state, hash);
        let c = &mut self.classes[from as usize];
        if found.is_none() && c.cus == cus {
            c.state = *state;
            c.hash = hash;
            // Its fit was for the old state; its CUs are handled already.
            c.fit = 0;
            self.live[c.live_pos as usize].0 = hash;
            return;
        }
        let to = match found {
            Some(to) => to,
            None => self.new_class(*state, hash),
        };
        let w = self.words;
        let (f, t) = (from as usize * w, to as usize * w);
        for i in 0..w {
            let bits = self.part[i];
            self.members[f + i] &= !bits;
            self.members[t + i] |= bits;
        }
        self.classes[to as usize].cus += cus;
        let c = &mut self.classes[from as usize];
        c.cus -= cus;
        if c.cus == 0 {
            let pos = c.live_pos as usize;
            self.live.swap_remove(pos);
            if let Some(&(_, moved)) = self.live.get(pos) {
                self.classes[moved as usize].live_pos = pos as u32;
            }
            self.free_classes.push(from);
        }
    }

    /// Marks in `plus` the first `k` CUs of `rest` (the CUs that take the
    /// water-filling level) counted round-robin from the cursor.
    fn mark_first(&mut self, mut k: u32) {
        self.plus.fill(0);
        let (cw, cb) = (self.cursor / 64, self.cursor % 64);
        let high = u64::MAX << cb;
        // From the cursor to the end, then from CU 0 up to the cursor.
        let spans = (cw..self.words)
            .map(|w| (w, if w == cw { high } else { u64::MAX }))
            .chain((0..=cw).map(|w| (w, if w == cw { !high } else { u64::MAX })));
        for (w, mask) in spans {
            if k == 0 {
                break;
            }
            let bits = self.rest[w] & mask;
            let n = bits.count_ones();
            let take = if n <= k { bits } else { lowest_bits(bits, k) };
            self.plus[w] |= take;
            k -= n.min(k);
        }
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
        // Every CU takes min(fit, level - 1), and the first `extra` CUs
        // from the cursor that take `level` or more one more; or, when the
        // kernel takes all the room, every CU its fit.
        let level = if u64::from(to_place) < self.fit_sum {
            let (level, base) = self.level(to_place);
            let extra = u64::from(to_place) - base;
            // `rest`: the CUs that take `level` or more.
            self.rest.fill(0);
            for &(_, c) in &self.live {
                let c = c as usize;
                if self.classes[c].fit >= level {
                    let set = &self.members[c * self.words..(c + 1) * self.words];
                    for (r, &m) in self.rest.iter_mut().zip(set) {
                        *r |= m;
                    }
                }
            }
            // At most the CUs taking `level`, so it fits in u32.
            self.mark_first(extra as u32);
            for (m, &p) in self.minus.iter_mut().zip(&self.plus) {
                *m = !p;
            }
            level
        } else {
            u32::MAX
        };
        // `rest`: the CUs not handled yet in this pass (a class may gain
        // CUs handled already).
        self.rest.fill(u64::MAX);
        let k = &mut self.kernels[slot as usize];
        let fig = k.fig;
        let mut pieces = std::mem::take(&mut k.pieces);
        let mut piece_cus = std::mem::take(&mut k.piece_cus);
        let mut placed = 0u64;
        // Pieces of this pass hold distinct CUs: those alike merge.
        let first_piece = pieces.len();
        // Downwards: a class that empties is swapped with the last live one
        // (seen already), and classes made here come last (with only CUs
        // handled already).
        let mut i = self.live.len();
        while i > 0 {
            i -= 1;
            let c = self.live[i].1;
            let fit = self.classes[c as usize].fit;
            if fit == 0 {
                continue;
            }
            let mut move_to = |this: &mut Self, m: u32, mask: Mask| {
                let cus = this.select(c, mask);
                if cus > 0 {
                    let mut state = this.classes[c as usize].state;
                    let used = take_blocks(&mut state, &fig, m, this.by_banks);
                    let w = this.words;
                    match pieces[first_piece..]
                        .iter()
                        .position(|&(pm, ref pu)| pm == m && *pu == used)
                    {
                        Some(j) => {
                            let at = (first_piece + j) * w;
                            for (p, &b) in piece_cus[at..at + w].iter_mut().zip(&this.part) {
                                *p |= b;
                            }
                        }
                        None => {
                            pieces.push((m, used));
                            piece_cus.extend_from_slice(&this.part);
                        }
                    }
                    placed += u64::from(m) * u64::from(cus);
                    this.move_part(c, &state, cus);
                }
            };
            if level == u32::MAX {
                move_to(self, fit, Mask::All);
            } else if fit >= level {
                move_to(self, level, Mask::Plus);
                if level > 1 {
                    move_to(self, level - 1, Mask::Minus);
                }
            } else {
                move_to(self, fit, Mask::All);
            }
        }
        let k = &mut self.kernels[slot as usize];
        k.pieces = pieces;
        k.piece_cus = piece_cus;
        debug_assert_eq!(placed, u64::from(to_place));
        self.cursor = (self.cursor + 1) % self.ncu;
        self.placed_blocks += u64::from(to_place);
        let fp = &fig.fp;
        self.free_blocks -= placed;
        self.free_threads -= placed * u64::from(fp.threads);
        self.free_smem -= placed * u64::from(fp.shared_mem);
        // Every block's wavefronts took `wave_regs` each.
        self.free_regs -= placed * regs_per_block(fp);
        to_place
    }

    /// Sets `part` to the CUs of class `c` still in `rest` and in `mask`
    /// (`ones`, `plus` or `minus`), takes them out of `rest`, and returns
    /// how many there are.
    fn select(&mut self, c: u32, mask: Mask) -> u32 {
        let w = self.words;
        let Self {
            members,
            rest,
            plus,
            minus,
            ones,
            part,
            ..
        } = self;
        let mask = match mask {
            Mask::All => &ones[..],
            Mask::Plus => &plus[..],
            Mask::Minus => &minus[..],
        };
        if w == 1 {
            // Up to 64 CUs (the mi50's 60): one word.
            let bits = members[c as usize] & rest[0] & mask[0];
            part[0] = bits;
            rest[0] &= !bits;
            return bits.count_ones();
        }
        let set = &members[c as usize * w..][..w];
        let mut cus = 0;
        for (((p, r), &s), &k) in part.iter_mut().zip(rest.iter_mut()).zip(set).zip(mask) {
            let bits = s & *r & k;
            *p = bits;
            *r &= !bits;
            cus += bits.count_ones();
        }
        cus
    }

    /// Gives back `m` blocks of `fp` that took `used` from the banks on
    /// each CU of `rest` (which it clears), a class at a time; returns the
    /// blocks given back.
    fn give_back(&mut self, fp: &Footprint, m: u32, used: &BankUse) -> u64 {
        let w = self.words;
        let mut left: u32 = self.rest.iter().map(|b| b.count_ones()).sum();
        let blocks = u64::from(m) * u64::from(left);
        // Downwards, as in `place_fitted`.
        let mut i = self.live.len();
        while left > 0 && i > 0 {
            i -= 1;
            let c = self.live[i].1;
            if w == 1 && self.members[c as usize] & self.rest[0] == 0 {
                continue;
            }
            let cus = self.select(c, Mask::All);
            if cus > 0 {
                left -= cus;
                let mut state = self.classes[c as usize].state;
                give_blocks(&mut state, fp, m, used);
                self.move_part(c, &state, cus);
            }
        }
        self.placed_blocks -= blocks;
        self.free_blocks += blocks;
        self.free_threads += blocks * u64::from(fp.threads);
        self.free_smem += blocks * u64::from(fp.shared_mem);
        self.free_regs += blocks * regs_per_block(fp);
        blocks
    }

    /// Gives back `n` more blocks of in-flight kernel `slot` that the
    /// device reported complete ([`Event::BlocksCompleted`]). The report
    /// does not say on which CUs they ran, so the model adds them to the
    /// kernel's credit and gives back whole CUs of its pieces while the
    /// credit covers them: most loaded first (the piece with the most
    /// blocks per CU that the credit covers), lowest CUs of the piece first.
    /// It never gives back more than was reported; what the credit does not
    /// cover yet stays held until more blocks complete or the kernel
    /// finishes. `given` sees each give-back: (blocks per CU, registers per
    /// bank, CUs).
    fn release_completed(
        &mut self,
        slot: u32,
        n: u32,
        mut given: impl FnMut(u32, &BankUse, &[u64]),
    ) {
        let w = self.words;
        let k = &mut self.kernels[slot as usize];
        k.credit += n;
        let fp = k.fig.fp;
        let mut pieces = std::mem::take(&mut k.pieces);
        let mut piece_cus = std::mem::take(&mut k.piece_cus);
        let mut credit = k.credit;
        loop {
            let best = pieces
                .iter()
                .enumerate()
                .filter(|&(_, &(m, _))| m <= credit)
                .max_by_key(|&(p, &(m, _))| (m, std::cmp::Reverse(p)));
            let Some((p, &(m, used))) = best else { break };
            let cus = &mut piece_cus[p * w..(p + 1) * w];
            let have: u32 = cus.iter().map(|b| b.count_ones()).sum();
            let mut take = have.min(credit / m);
            credit -= take * m;
            for (word, r) in cus.iter_mut().zip(self.rest.iter_mut()) {
                let n = word.count_ones();
                let bits = if n <= take {
                    *word
                } else {
                    lowest_bits(*word, take)
                };
                take -= bits.count_ones();
                *r = bits;
                *word &= !bits;
            }
            given(m, &used, &self.rest);
            if cus.iter().all(|&b| b == 0) {
                pieces.remove(p);
                piece_cus.drain(p * w..(p + 1) * w);
            }
            self.give_back(&fp, m, &used);
        }
        let k = &mut self.kernels[slot as usize];
        k.credit = credit;
        k.pieces = pieces;
        k.piece_cus = piece_cus;
    }

    /// Gives back everything in-flight kernel `slot` holds.
    fn release(&mut self, slot: u32) {
        let k = &mut self.kernels[slot as usize];
        let fp = k.fig.fp;
        k.credit = 0;
        let mut pieces = std::mem::take(&mut k.pieces);
        let mut piece_cus = std::mem::take(&mut k.piece_cus);
        let w = self.words;
        for (p, &(m, ref used)) in pieces.iter().enumerate() {
            // `rest`: the piece's CUs not given back yet; each class holding
            // some gives them back together.
            self.rest.copy_from_slice(&piece_cus[p * w..(p + 1) * w]);
            self.give_back(&fp, m, used);
        }
        pieces.clear();
        piece_cus.clear();
        let k = &mut self.kernels[slot as usize];
        k.pieces = pieces;
        k.piece_cus = piece_cus;
        if k.unplaced > 0 && !k.queued {
            let (fig, class, unplaced, hwq) = (k.fig, k.class, k.unplaced, k.hwq);
            k.unplaced = 0;
            self.sub_pending(&fig, class, unplaced);
            self.busy_hwq[hwq as usize] -= 1;
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
                let (fig, want) = {
                    let k = &self.kernels[slot as usize];
                    (k.fig, k.unplaced)
                };
                // Nothing fits at all: skip the pass (it would place 0).
                if self.fit_bound(&fig) == 0 {
                    i += 1;
                    continue;
                }
                let total = self.fits(&fig, want);
                let placed = self.place_fitted(slot, want, total);
                self.sub_pending(&fig, class, placed);
                let k = &mut self.kernels[slot as usize];
                k.unplaced -= placed;
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

    /// The state of every CU, from the classes (for checks and tests).
    fn cu_states(&self) -> Vec<CuState> {
        let mut out = vec![None; self.ncu];
        for (c, class) in self.classes.iter().enumerate() {
            if class.cus == 0 {
                continue;
            }
            for (w, &bits) in self.set(c as u32).iter().enumerate() {
                let mut b = bits;
                while b != 0 {
                    let cu = w * 64 + b.trailing_zeros() as usize;
                    assert!(cu < self.ncu, "class {c} holds CU {cu} of {}", self.ncu);
                    assert!(out[cu].is_none(), "CU {cu} is in two classes");
                    out[cu] = Some(class.state);
                    b &= b - 1;
                }
            }
        }
        out.into_iter()
            .enumerate()
            .map(|(cu, s)| s.unwrap_or_else(|| panic!("CU {cu} is in no class")))
            .collect()
    }

    /// Checks the occupancy model against the device's capacity and itself
    /// (debug builds, after every callback).
    fn check(&self) {
        let states = self.cu_states();
        let mut placed = 0u64;
        let (mut threads, mut smem, mut regs, mut free) = (0u64, 0u64, 0u64, 0u64);
        for cu in &states {
            assert!(cu.threads <= self.empty.threads, "{cu:?}");
            assert!(cu.shared_mem <= self.empty.shared_mem, "{cu:?}");
            assert!(cu.blocks <= self.empty.blocks, "{cu:?}");
            for b in 0..cu.nbanks as usize {
                assert!(cu.banks[b] <= self.empty.banks[b], "{cu:?}");
            }
            placed += u64::from(self.empty.blocks - cu.blocks);
            free += u64::from(cu.blocks);
            threads += u64::from(cu.threads);
            smem += u64::from(cu.shared_mem);
            regs += cu_regs(cu);
        }
        assert_eq!(placed, self.placed_blocks);
        assert_eq!(
            (free, threads, smem, regs),
            (
                self.free_blocks,
                self.free_threads,
                self.free_smem,
                self.free_regs
            )
        );
        for (c, class) in self.classes.iter().enumerate() {
            let n: u32 = self.set(c as u32).iter().map(|b| b.count_ones()).sum();
            assert_eq!(n, class.cus, "class {c}: {class:?}");
            if class.cus > 0 {
                assert_eq!(class.hash, state_hash(&class.state));
                assert!(
                    !self.classes[c + 1..]
                        .iter()
                        .any(|o| o.cus > 0 && o.state == class.state),
                    "two classes of {:?}",
                    class.state
                );
                let pos = class.live_pos as usize;
                assert_eq!(self.live[pos], (class.hash, c as u32), "class {c}");
            } else {
                assert!(self.free_classes.contains(&(c as u32)), "class {c} lost");
            }
        }
        assert_eq!(
            self.live.len() + self.free_classes.len(),
            self.classes.len()
        );
        let pending: u64 = self.pending[RT]
            .iter()
            .chain(&self.pending[BE])
            .map(|&s| u64::from(self.kernels[s as usize].unplaced))
            .sum();
        assert_eq!(pending, self.pending_blocks);
        let weigh = |s: &u32| {
            let k = &self.kernels[*s as usize];
            u64::from(k.unplaced) * self.unit(&k.fig)
        };
        let rt: u64 = self.pending[RT].iter().map(weigh).sum();
        let be: u64 = self.pending[BE].iter().map(weigh).sum();
        assert_eq!([rt, be], self.backlog_class, "backlog per class");
        let ahead: u64 = self
            .kernels
            .iter()
            .enumerate()
            .filter(|(i, k)| k.queued && !self.free_kernels.contains(&(*i as u32)))
            .map(|(_, k)| u64::from(k.ahead_est) * self.unit(&k.fig))
            .sum();
        assert_eq!(ahead, self.ahead_backlog, "backlog launched ahead");
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
    /// Per model id and kernel: its figures on this device, filled in at
    /// its first dispatch.
    figs: Vec<Box<[Option<Fig>]>>,
    dev: Option<Shadow>,
    jobs: Vec<Job>,
    /// Per job slot: why it failed, once a kernel of it did not complete
    /// (it fails when none of its kernels is in flight any more).
    failures: Vec<Option<GpuError>>,
    free_jobs: Vec<u32>,
    clients: Vec<Client>,
    client_index: HashMap<u32, u32, BuildHasherDefault<IdHasher>>,
    /// Ready jobs (no kernel in flight) by key ([`Self::key`]).
    srpt: SlotHeap<SrptKey>,
    /// Per job slot: its index in `srpt` (NONE when not ready).
    srpt_pos: Vec<u32>,
    /// Jobs with kernels in flight that may launch their next one ahead,
    /// by the same key.
    ahead: SlotHeap<SrptKey>,
    /// Per job slot: its index in `ahead` (NONE when not in it).
    ahead_pos: Vec<u32>,
    /// Scratch: candidates of `ahead` passed over in one pass.
    skipped: Vec<(SrptKey, u32)>,
    /// Per job slot: its index in its client's `oldest` (NONE when not a
    /// ready best-effort job).
    oldest_pos: Vec<u32>,
    ready: [u32; 2],
    /// Best-effort clients with a job in the system.
    active_be: u32,
    /// Shared deficit offset: a client's deficit is `deficit + base`.
    deficit_base: f64,
    seq: u64,
    /// Round-robin turns handed out.
    turn: u64,
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
        let mut figs = vec![Box::<[Option<Fig>]>::default(); n];
        for (id, m) in models.iter() {
            let ks = &m.manifest.kernels;
            let mut s = vec![0; ks.len() + 1];
            for i in (0..ks.len()).rev() {
                s[i] = s[i + 1] + ks[i].kernel_time_ns();
            }
            suffix[id as usize] = s.into_boxed_slice();
            launches[id as usize] = ks.iter().map(|k| KernelLaunch::from_model(k, 0)).collect();
            figs[id as usize] = vec![None; ks.len()].into_boxed_slice();
        }
        Self {
            cfg,
            suffix,
            launches,
            figs,
            dev: None,
            jobs: Vec::new(),
            failures: Vec::new(),
            free_jobs: Vec::new(),
            clients: Vec::new(),
            client_index: HashMap::default(),
            srpt: SlotHeap::default(),
            srpt_pos: Vec::new(),
            ahead: SlotHeap::default(),
            ahead_pos: Vec::new(),
            skipped: Vec::new(),
            oldest_pos: Vec::new(),
            ready: [0; 2],
            active_be: 0,
            deficit_base: 0.0,
            seq: 0,
            turn: 0,
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

    /// Job `slot`'s place in line for its next kernel (lower first): its
    /// class, then its deadline (earliest first, none last: the order
    /// inside a class of [`crate::queue`]; all equal without deadlines),
    /// then by the queueing policy (SRPT: remaining manifest time;
    /// SJF: 0 once started, else the model's total time; round robin: a
    /// new turn), then arrival.
    fn key(&mut self, slot: u32) -> SrptKey {
        let j = &self.jobs[slot as usize];
        let class = class_of(j.task.priority) as u8;
        let times = self.suffix.get(j.task.model as usize);
        let at = |k: u32| times.and_then(|s| s.get(k as usize)).copied().unwrap_or(0);
        let mid = match self.cfg.queueing {
            Queueing::Srpt => at(j.next),
            Queueing::Sjf if j.next > 0 => 0,
            Queueing::Sjf => at(0),
            Queueing::RoundRobin => {
                self.turn += 1;
                self.turn
            }
        };
        (class, j.task.deadline.unwrap_or(Ns::MAX), mid, j.seq)
    }

    fn make_ready(&mut self, slot: u32) {
        let key = self.key(slot);
        let j = &mut self.jobs[slot as usize];
        j.state = JobState::Ready;
        let class = class_of(j.task.priority);
        let (seq, client) = (j.seq, j.client);
        self.srpt.push(&mut self.srpt_pos, key, slot);
        self.ready[class] += 1;
        if class == BE {
            self.clients[client as usize]
                .oldest
                .push(&mut self.oldest_pos, seq, slot);
        }
    }

    /// Whether job `slot` may launch its next kernel ahead: it has kernels
    /// in flight, fewer than `1 + launch_ahead`, and more to run.
    fn may_go_ahead(&self, slot: u32) -> bool {
        let j = &self.jobs[slot as usize];
        j.inflight > 0
            && j.inflight <= self.cfg.launch_ahead
            && j.next < j.kernels
            && !j.aborted
            && j.tail != NONE
    }

    /// Puts job `slot` among the launch-ahead candidates if it may go
    /// ahead and is not there yet.
    fn offer_ahead(&mut self, slot: u32) {
        if self.ahead_pos[slot as usize] == NONE && self.may_go_ahead(slot) {
            let key = self.key(slot);
            self.ahead.push(&mut self.ahead_pos, key, slot);
        }
    }

    fn leave_ahead(&mut self, slot: u32) {
        if self.ahead_pos[slot as usize] != NONE {
            self.ahead.remove(&mut self.ahead_pos, slot);
        }
    }

    /// The job whose next kernel goes next (see the module docs).
    fn choose(&self) -> Option<u32> {
        if self.ready[RT] > 0 {
            return self.srpt.peek();
        }
        if self.ready[BE] == 0 {
            return None;
        }
        if self.cfg.deficit_threshold.is_finite() {
            let limit = self.cfg.deficit_threshold - self.deficit_base;
            let mut best: Option<(f64, u32)> = None;
            for (i, c) in self.clients.iter().enumerate() {
                if !c.oldest.is_empty()
                    && c.deficit > limit
                    && best.is_none_or(|(d, _)| c.deficit > d)
                {
                    best = Some((c.deficit, i as u32));
                }
            }
            if let Some((_, c)) = best {
                return self.clients[c as usize].oldest.peek();
            }
        }
        self.srpt.peek()
    }

    /// Takes job `slot` out of the ready sets and charges its client.
    fn take(&mut self, slot: u32) {
        self.unready(slot);
        self.charge(slot);
    }

    /// Takes job `slot` out of the ready sets.
    fn unready(&mut self, slot: u32) {
        let j = &mut self.jobs[slot as usize];
        j.state = JobState::Running;
        let class = class_of(j.task.priority);
        let client = j.client;
        self.ready[class] -= 1;
        self.srpt.remove(&mut self.srpt_pos, slot);
        if class == BE {
            self.clients[client as usize]
                .oldest
                .remove(&mut self.oldest_pos, slot);
        }
    }

    /// Charges job `slot`'s client for one best-effort kernel (§6 (2)).
    fn charge(&mut self, slot: u32) {
        let j = &self.jobs[slot as usize];
        if class_of(j.task.priority) != BE {
            return;
        }
        let client = j.client;
        let u = f64::from(self.active_be.max(1));
        self.deficit_base += 1.0 / u;
        self.clients[client as usize].deficit -= 1.0;
        if self.deficit_base > DEFICIT_RENORMALISE {
            for c in &mut self.clients {
                c.deficit += self.deficit_base;
            }
            self.deficit_base = 0.0;
        }
    }

    /// The figures of kernel `next` of `model` on this device.
    fn fig(&mut self, p: &DeviceProfile, model: u32, next: u32) -> Fig {
        let cell = &mut self.figs[model as usize][next as usize];
        *cell.get_or_insert_with(|| Fig::of(p, &self.launches[model as usize][next as usize]))
    }

    /// Dispatches what may go: ready jobs in order while the chosen one is
    /// admitted, then kernels launched ahead.
    fn pump(&mut self, cx: &mut Ctx<'_>) {
        self.pump_ready(cx);
        if self.cfg.launch_ahead > 0 {
            self.pump_ahead(cx);
        }
    }

    /// Dispatches ready jobs' kernels while the chosen one is admitted.
    fn pump_ready(&mut self, cx: &mut Ctx<'_>) {
        while let Some(slot) = self.choose() {
            let job = self.jobs[slot as usize];
            if job.next == 0 && job.task.late_at(cx.gpu.now()) {
                // Its deadline passed while it waited: dropped unstarted,
                // its client not charged.
                self.unready(slot);
                self.free_job(slot);
                cx.drop_if_late(job.task);
                continue;
            }
            let fig = self.fig(cx.gpu.profile(), job.task.model, job.next);
            let Some(dev) = self.dev.as_mut() else { return };
            let launch = &self.launches[job.task.model as usize][job.next as usize];
            let grid = launch.grid_blocks;
            let class = class_of(job.task.priority);
            let b = dev.limit;
            // Paella §6, "Efficient implementation" and (3): once placements
            // bring the work waiting on the device below `B`, the chosen
            // kernel is dispatched, whether or not its blocks fit now, and
            // this repeats until `B` or more wait; with nothing waiting, a
            // kernel goes if any of its blocks fits (the device is not full
            // for it: `B = 0` fills the device and no more). Real-time
            // kernels count only real-time blocks waiting, so best-effort
            // ones never hold them back, and go whenever none waits: the
            // device serves their priority-1 streams first as room frees.
            let fit;
            if class == RT {
                let pending = dev.backlog_class[RT];
                if !(pending == 0 || pending < b) {
                    return;
                }
                fit = dev.fits(&fig, grid);
            } else {
                let pending = dev.backlog();
                if pending >= b && (pending > 0 || dev.fit_bound(&fig) == 0) {
                    return;
                }
                fit = dev.fits(&fig, grid);
                if !within_backlog(pending, b, fit) {
                    return;
                }
            }
            let h = dev.pick_hwq();
            if dev.idle[class][h].is_empty()
                && let Err(e) = dev.add_streams(cx.gpu, class)
            {
                // No stream for the job: it fails; the next one tries.
                self.take(slot);
                let now = cx.gpu.now();
                self.finish_job(cx, slot, now, Some(e));
                continue;
            }
            let Some(stream) = dev.idle[class][h].pop() else {
                return; // the device maps streams differently; cannot happen
            };
            let kslot = dev.new_kernel(InFlight::new(
                slot,
                tag(job.task.id, job.next as usize),
                stream,
                h as u32,
                class,
                fig,
                grid,
            ));
            let placed = dev.place_fitted(kslot, grid, fit);
            let unplaced = grid - placed;
            dev.kernels[kslot as usize].unplaced = unplaced;
            // Not started yet; counts as busy until KernelStarted.
            dev.busy_hwq[h] += 1;
            if unplaced > 0 {
                dev.busy_hwq[h] += 1;
                dev.add_pending(&fig, class, unplaced);
                dev.pending[class].push_back(kslot);
            }
            dev.by_stream[stream as usize] = kslot;
            let mut l = launch.clone();
            l.tag = tag(job.task.id, job.next as usize);
            self.take(slot);
            // The footprint was validated against this profile when the
            // launch was built from a validated manifest; a launch the model
            // refuses (a block that fits no CU) is finished as failed below.
            if let Err(e) = cx.gpu.launch(StreamId(stream), l) {
                self.unlaunchable(cx, kslot, e);
                continue;
            }
            let j = &mut self.jobs[slot as usize];
            j.next += 1;
            j.inflight = 1;
            j.unstarted = 1;
            j.tail = kslot;
            self.offer_ahead(slot);
        }
    }

    /// Launches kernels ahead (module docs, *Launch ahead*): candidates in
    /// the dispatcher's order, each only if its job comes before the job
    /// the dispatcher is holding back (if any), so that launching ahead
    /// never lets a job pass one that would have been served first.
    fn pump_ahead(&mut self, cx: &mut Ctx<'_>) {
        let bar = self
            .choose()
            .map(|s| self.srpt.items[self.srpt_pos[s as usize] as usize].0);
        while let Some(slot) = self.ahead.peek() {
            let key = self.ahead.items[0].0;
            if bar.is_some_and(|b| key >= b) {
                break;
            }
            self.ahead.remove(&mut self.ahead_pos, slot);
            if self.try_ahead(cx, slot) {
                self.offer_ahead(slot);
            } else if self.may_go_ahead(slot) {
                self.skipped.push((key, slot));
            }
        }
        for (key, slot) in std::mem::take(&mut self.skipped) {
            self.ahead.push(&mut self.ahead_pos, key, slot);
        }
    }

    /// Launches job `slot`'s next kernel behind its last one, on the same
    /// stream, if the rules of *Launch ahead* allow; returns whether it did.
    fn try_ahead(&mut self, cx: &mut Ctx<'_>, slot: u32) -> bool {
        let job = self.jobs[slot as usize];
        let fig = self.fig(cx.gpu.profile(), job.task.model, job.next);
        let nready = self.ready[RT] + self.ready[BE];
        let Some(dev) = self.dev.as_mut() else {
            return false;
        };
        let tail = &dev.kernels[job.tail as usize];
        let h = tail.hwq as usize;
        // Its hardware queue holds nothing but this job's kernels that wait
        // to start or to place more waves; another hardware queue stays
        // free for jobs that can start now.
        let own = if tail.queued { 0 } else { tail.unplaced };
        let own_backlog = u64::from(own) * dev.unit(&tail.fig);
        if dev.busy_hwq[h] != job.unstarted + u32::from(own > 0) {
            return false;
        }
        let other_free = if dev.nhwq > 1 {
            (0..dev.nhwq).any(|o| o != h && dev.busy_hwq[o] == 0)
        } else {
            nready == 0
        };
        if !other_free {
            return false;
        }
        let launch = &self.launches[job.task.model as usize][job.next as usize];
        let grid = launch.grid_blocks;
        let room = dev.room_after(&tail.fig, tail_blocks(tail), &fig);
        let est = grid.saturating_sub(room);
        let class = class_of(job.task.priority);
        // Blocks waiting for room, but those of the job's own last kernel
        // (which it waits behind anyway).
        let pending = if class == RT {
            dev.backlog_class[RT]
        } else {
            dev.backlog()
        } - own_backlog;
        // As for a kernel dispatched now: less than B waiting, or nothing
        // and some room for it once the kernel in front is done.
        if !within_backlog(pending, dev.limit, room) {
            return false;
        }
        let stream = tail.stream;
        let tail_slot = job.tail;
        let kslot = dev.new_kernel(InFlight {
            queued: true,
            ahead_est: est,
            ..InFlight::new(
                slot,
                tag(job.task.id, job.next as usize),
                stream,
                h as u32,
                class,
                fig,
                grid,
            )
        });
        dev.kernels[tail_slot as usize].behind = kslot;
        let est_backlog = u64::from(est) * dev.unit(&fig);
        dev.ahead_backlog += est_backlog;
        dev.busy_hwq[h] += 1;
        let mut l = launch.clone();
        l.tag = tag(job.task.id, job.next as usize);
        if let Err(e) = cx.gpu.launch(StreamId(stream), l) {
            // Undo it; the job fails once its kernels in flight are done.
            dev.kernels[tail_slot as usize].behind = NONE;
            dev.ahead_backlog -= est_backlog;
            dev.busy_hwq[h] -= 1;
            dev.kernels[kslot as usize].queued = false;
            dev.kernels[kslot as usize].unplaced = 0;
            dev.free_kernels.push(kslot);
            let j = &mut self.jobs[slot as usize];
            j.aborted = true;
            self.failures[slot as usize] = Some(e);
            return false;
        }
        self.charge(slot);
        let j = &mut self.jobs[slot as usize];
        j.next += 1;
        j.inflight += 1;
        j.unstarted += 1;
        j.tail = kslot;
        true
    }

    /// A kernel the GPU refused (its block fits no CU, a device failure):
    /// the task cannot run; it fails now ([`Ctx::fail`]), so that it is
    /// not lost. Only for a job's first kernel in flight.
    fn unlaunchable(&mut self, cx: &mut Ctx<'_>, kslot: u32, error: GpuError) {
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
        self.finish_job(cx, job, now, Some(error));
    }

    /// Frees job `slot`: its task finished at `finished`, or, with an
    /// `error`, failed.
    fn finish_job(&mut self, cx: &mut Ctx<'_>, slot: u32, finished: Ns, error: Option<GpuError>) {
        let task = self.free_job(slot);
        match error {
            None => cx.done.push(TaskDone { task, finished }),
            Some(e) => cx.fail(task, e),
        }
    }

    /// Frees job `slot` and returns its task.
    fn free_job(&mut self, slot: u32) -> Task {
        self.leave_ahead(slot);
        let j = &mut self.jobs[slot as usize];
        j.state = JobState::Free;
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
        task
    }

    fn ensure_init(&mut self, cx: &Ctx<'_>) {
        if self.dev.is_none() {
            self.dev = Some(Shadow::new(
                cx.gpu.profile(),
                self.cfg.notify_every,
                self.cfg.backlog,
            ));
        }
    }

    /// The in-flight slot of the kernel `ktag` at the front of `stream`, if
    /// it is one of ours.
    fn front(&self, stream: StreamId, ktag: u64) -> Option<u32> {
        let dev = self.dev.as_ref()?;
        let &kslot = dev.by_stream.get(stream.0 as usize)?;
        (kslot != NONE && dev.kernels[kslot as usize].tag == ktag).then_some(kslot)
    }

    fn on_finished(
        &mut self,
        cx: &mut Ctx<'_>,
        t: Ns,
        stream: StreamId,
        ktag: u64,
        outcome: Outcome,
    ) {
        let Some(kslot) = self.front(stream, ktag) else {
            return; // not one of ours
        };
        let Some(dev) = self.dev.as_mut() else { return };
        dev.release(kslot);
        let k = &dev.kernels[kslot as usize];
        let (job, hwq, class, started, behind) =
            (k.job, k.hwq as usize, k.class, k.started, k.behind);
        if !started {
            dev.busy_hwq[hwq] -= 1;
            self.jobs[job as usize].unstarted -= 1;
        }
        if behind == NONE {
            dev.by_stream[stream.0 as usize] = NONE;
            dev.idle[class][hwq].push(stream.0);
        } else {
            // The kernel launched behind it may start now: its blocks wait
            // for room like any other kernel's.
            dev.by_stream[stream.0 as usize] = behind;
            let b = &mut dev.kernels[behind as usize];
            b.queued = false;
            let (est, fig, class, unplaced, hwq) = (b.ahead_est, b.fig, b.class, b.unplaced, b.hwq);
            b.ahead_est = 0;
            dev.ahead_backlog -= u64::from(est) * dev.unit(&fig);
            if unplaced > 0 {
                dev.add_pending(&fig, class, unplaced);
                dev.busy_hwq[hwq as usize] += 1;
                dev.pending[class].push_back(behind);
            }
        }
        dev.free_kernels.push(kslot);
        dev.place_pending();
        let j = &mut self.jobs[job as usize];
        j.inflight -= 1;
        if j.tail == kslot {
            j.tail = NONE;
        }
        if outcome == Outcome::Completed {
            j.completed += 1;
        } else if !j.aborted {
            // Paella never preempts, and it launches a job's later kernels
            // behind this one, so it cannot run it again: the task fails.
            j.aborted = true;
            self.failures[job as usize] = Some(GpuError::Driver {
                backend: "paella",
                op: "run a kernel",
                message: format!(
                    "kernel {ktag:#x} ended {outcome:?}; paella does not restore kernels"
                ),
            });
        }
        let j = self.jobs[job as usize];
        if j.inflight > 0 {
            if j.aborted {
                self.leave_ahead(job);
            } else {
                self.offer_ahead(job);
            }
        } else if j.aborted {
            let e = self.failures[job as usize].take();
            self.finish_job(cx, job, t, e);
        } else if j.completed >= j.kernels {
            self.finish_job(cx, job, t, None);
        } else {
            self.leave_ahead(job);
            self.make_ready(job);
        }
    }

    /// `blocks` more blocks of the kernel `ktag` at the front of `stream`
    /// completed: their room goes back to the occupancy model.
    fn on_blocks(&mut self, stream: StreamId, ktag: u64, blocks: u32) {
        let Some(kslot) = self.front(stream, ktag) else {
            return;
        };
        let Some(dev) = self.dev.as_mut() else { return };
        dev.release_completed(kslot, blocks, |_, _, _| {});
        dev.place_pending();
    }

    fn debug_check(&self) {
        if cfg!(debug_assertions) {
            if let Some(d) = &self.dev {
                d.check();
            }
            for (slot, j) in self.jobs.iter().enumerate() {
                let ready = j.state == JobState::Ready;
                assert_eq!(self.srpt_pos[slot] != NONE, ready, "{j:?}");
                let in_oldest = ready && class_of(j.task.priority) == BE;
                assert_eq!(self.oldest_pos[slot] != NONE, in_oldest, "{j:?}");
                if self.ahead_pos[slot] != NONE {
                    assert!(
                        j.state == JobState::Running && self.may_go_ahead(slot as u32),
                        "{j:?}"
                    );
                }
                if j.state == JobState::Ready {
                    assert_eq!(j.inflight, 0, "{j:?}");
                }
            }
            assert_eq!(
                self.srpt.items.len(),
                (self.ready[RT] + self.ready[BE]) as usize
            );
        }
    }
}

/// Paella §6's dispatch condition for a best-effort kernel: fewer than `b`
/// blocks wait on the device for room (`pending`), or none waits and some
/// of the kernel's blocks fit (`fit` of them).
fn within_backlog(pending: u64, b: u64, fit: u32) -> bool {
    pending < b || (pending == 0 && fit > 0)
}

/// Blocks a kernel will hold once all of it is placed.
fn tail_blocks(k: &InFlight) -> u32 {
    // Pieces hold what is placed; `unplaced` the rest.
    let placed: u32 = k
        .pieces
        .iter()
        .enumerate()
        .map(|(p, &(m, _))| m * k.piece_count(p))
        .sum();
    placed + k.unplaced
}

impl InFlight {
    /// CUs of piece `p`.
    fn piece_count(&self, p: usize) -> u32 {
        let w = self.piece_cus.len() / self.pieces.len().max(1);
        self.piece_cus[p * w..(p + 1) * w]
            .iter()
            .map(|b| b.count_ones())
            .sum()
    }
}

impl Policy for Paella {
    fn name(&self) -> &'static str {
        match self.cfg.queueing {
            Queueing::Srpt => "paella",
            Queueing::Sjf => "paella-sjf",
            Queueing::RoundRobin => "paella-rr",
        }
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
            completed: 0,
            kernels,
            state: JobState::Running,
            seq: self.seq,
            client,
            inflight: 0,
            unstarted: 0,
            tail: NONE,
            aborted: false,
        };
        self.seq += 1;
        let slot = match self.free_jobs.pop() {
            Some(s) => {
                self.jobs[s as usize] = job;
                self.failures[s as usize] = None;
                s
            }
            None => {
                self.jobs.push(job);
                self.failures.push(None);
                self.srpt_pos.push(NONE);
                self.ahead_pos.push(NONE);
                self.oldest_pos.push(NONE);
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
            self.finish_job(cx, slot, now, None);
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
                let Some(kslot) = self.front(stream, kernel.tag) else {
                    return;
                };
                let Some(dev) = self.dev.as_mut() else { return };
                let k = &mut dev.kernels[kslot as usize];
                if !k.started {
                    k.started = true;
                    dev.busy_hwq[k.hwq as usize] -= 1;
                    self.jobs[k.job as usize].unstarted -= 1;
                    // Its hardware queue may be free for a launch ahead.
                    if self.cfg.launch_ahead > 0 {
                        self.pump_ahead(cx);
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
            Event::BlocksCompleted {
                stream,
                kernel,
                blocks,
                ..
            } => {
                self.on_blocks(stream, kernel.tag, blocks);
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
    use crate::TaskId;
    use crate::workload::{self, Arrival, ClientSpec, RunResult, Workload};
    use sluice_model::{Kernel, Manifest};

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
            wave_us: Vec::new(),
            mem_intensity: None,
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
                lbp: Vec::new(),
                splits: Vec::new(),
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
            backlog: Backlog::Blocks(0),
            ..PaellaConfig::default()
        };
        let mut p = Paella::with_config(&models, cfg);
        let r = workload::run(&small_device(), &models, &mut p, &w);
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
        let r = workload::run(&small_device(), &models, &mut p, &w);
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
            backlog: Backlog::Blocks(0),
            ..PaellaConfig::default()
        };
        let mut p = Paella::with_config(&models, cfg);
        let r = workload::run(&small_device(), &models, &mut p, &w);
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
        let r = workload::run(&small_device(), &models, &mut p, &w);
        assert_eq!(r.unfinished, 0);
        assert_eq!(r.done.len(), 4);
        for d in r.done.iter().filter(|d| d.task.model != 1) {
            assert_eq!(d.finished, d.task.arrival);
        }
    }

    /// A real-time task arrives while a best-effort kernel has far more
    /// than `B` blocks waiting for room: it is dispatched at once (the
    /// device serves it before the waiting best-effort blocks), not once the
    /// best-effort backlog has drained to `B`.
    #[test]
    fn a_real_time_kernel_goes_while_more_than_b_best_effort_blocks_wait() {
        let models = registry(vec![
            // 80 blocks of half an SM on 4 SMs: 10 waves of 100 us.
            ("big", vec![kernel(80, 1024, 16, 0, 100.0)]),
            ("rt", vec![full(100.0)]),
        ]);
        let ids = |n: &str| models.lookup(n).expect("model").0;
        let w = Workload {
            clients: vec![
                client(ids("big"), Arrival::Trace(vec![0])),
                ClientSpec {
                    priority: Priority::RealTime,
                    model: ids("rt"),
                    arrival: Arrival::Trace(vec![50_000]),
                },
            ],
            duration_ns: 2_000_000,
        };
        let mut p = Paella::new(&models);
        let mut gpu = sluice_gpusim::GpuSim::new(small_device());
        let r = workload::run_on(&mut gpu, &models, &mut p, &w);
        assert_eq!(r.unfinished, 0);
        let rt = r
            .done
            .iter()
            .find(|d| d.task.priority == Priority::RealTime)
            .expect("rt done");
        let be = r
            .done
            .iter()
            .find(|d| d.task.priority == Priority::BestEffort)
            .expect("be done");
        // 72 blocks were pending (B = 8) when it arrived. Dispatched at
        // once, it takes the room of the first wave (at 100 us) and
        // finishes a wave later; held back until 8 blocks were left, it
        // would have started after about 9 waves.
        let latency = rt.finished - rt.task.arrival;
        assert!(latency < 300_000, "RT latency {latency} ns: {r:?}");
        assert!(be.finished > rt.finished, "{r:?}");
    }

    /// Paella §6: with fewer than `B` blocks waiting, the chosen kernel is
    /// dispatched even though none of its blocks fits, so its launch and
    /// fetch overlap the kernel that holds the device and its first wave
    /// starts the moment room frees.
    #[test]
    fn a_kernel_is_dispatched_into_a_full_device_while_fewer_than_b_blocks_wait() {
        let models = registry(vec![
            ("blocker", vec![full(500.0)]),
            // Two waves of the device.
            ("next", vec![kernel(16, 1024, 16, 0, 100.0)]),
        ]);
        let ids = |n: &str| models.lookup(n).expect("model").0;
        let w = Workload {
            clients: vec![
                client(ids("blocker"), Arrival::Trace(vec![0])),
                client(ids("next"), Arrival::Trace(vec![50_000])),
            ],
            duration_ns: 2_000_000,
        };
        let device = small_device();
        let dispatch = dispatch_path_ns(&device);
        let mut p = Paella::new(&models);
        let r = workload::run(&device, &models, &mut p, &w);
        assert_eq!(r.unfinished, 0);
        let gap = finished(&r, 1) - finished(&r, 0);
        // Two waves of 100 us once the blocker is gone. Held back until
        // room frees (nothing waiting, none of its blocks fitting), it
        // would pay the whole dispatch path on top of them.
        let waves = 200_000;
        assert!(gap >= waves, "gap {gap} ns");
        assert!(
            gap < waves + dispatch / 2,
            "gap {gap} ns, dispatch {dispatch} ns"
        );
    }

    /// Paella §6 (3): `B` is there to keep the device saturated across the
    /// dispatch path. The default backlog (pending work worth the
    /// profile's dispatch path, [`Backlog::DispatchPath`]) keeps a backlog
    /// of resnet18 requests on the `mi50` profile (30 µs dispatch path,
    /// kernels of tens of µs) nearly as busy as one stream per client, and
    /// busier than a fixed 8 blocks, which drain in far less than the path.
    #[test]
    fn the_dispatch_path_backlog_keeps_the_device_saturated() {
        let models = Arc::new(ModelRegistry::builtin());
        let (r18, _) = models.lookup("resnet18").expect("resnet18");
        let w = Workload {
            clients: (0..8)
                .map(|_| client(r18, Arrival::Trace(vec![0, 0])))
                .collect(),
            duration_ns: 1,
        };
        let mi50 = DeviceProfile::mi50();
        let run = |p: &mut dyn Policy| {
            let r = workload::run(&mi50, &models, p, &w);
            assert_eq!(r.done.len(), 16);
            r.utilisation
        };
        let streams = run(&mut crate::streams::Streams::new());
        let path = run(&mut Paella::new(&models));
        let b8 = run(&mut Paella::with_config(
            &models,
            PaellaConfig {
                backlog: Backlog::Blocks(8),
                ..PaellaConfig::default()
            },
        ));
        eprintln!("utilisation: streams {streams:.3}, dispatch path {path:.3}, B = 8 {b8:.3}");
        assert!(
            path >= 0.95 * streams,
            "dispatch path {path:.3} vs streams {streams:.3}"
        );
        assert!(path > b8 + 0.05, "dispatch path {path:.3} vs B = 8 {b8:.3}");
    }

    /// A model alone runs under `paella` within 10% of its time under `seq`
    /// (one stream, all kernels launched at once), on the GPU model: the
    /// launch and fetch of each next kernel overlap the kernel before it.
    #[test]
    fn a_model_alone_takes_at_most_1_1_times_its_seq_time() {
        let models = Arc::new(ModelRegistry::builtin());
        let mut worst = Vec::new();
        for (id, m) in models.iter() {
            if m.manifest.kernels.is_empty() {
                continue;
            }
            let w = Workload {
                clients: vec![client(id, Arrival::Trace(vec![0]))],
                duration_ns: 1,
            };
            let time = |p: &mut dyn Policy| {
                let r = workload::run(&DeviceProfile::mi50(), &models, p, &w);
                assert_eq!(r.done.len(), 1, "{}", m.manifest.name);
                r.done[0].finished
            };
            let seq = time(&mut crate::seq::Seq::new());
            let paella = time(&mut Paella::new(&models));
            let ratio = paella as f64 / seq as f64;
            eprintln!(
                "{}: seq {seq} ns, paella {paella} ns, {ratio:.3}",
                m.manifest.name
            );
            worst.push((ratio, m.manifest.name.clone()));
        }
        for (ratio, name) in worst {
            assert!(ratio <= 1.1, "{name}: paella/seq = {ratio:.3}");
        }
    }

    /// A `BlocksCompleted` report gives its blocks' room back to the
    /// occupancy model before the kernel finishes, and a kernel waiting for
    /// room is placed in it.
    #[test]
    fn block_group_completions_free_occupancy_before_the_kernel_finishes() {
        use sluice_gpu::Clocked;
        use sluice_gpusim::GpuSim;
        // Two one-kernel jobs of 32 blocks of a quarter SM: the first fills
        // the 4 SMs (16 blocks) and has 16 more waiting, so with B = 16 the
        // second is held until blocks complete.
        let models = registry(vec![
            ("a", vec![kernel(32, 512, 16, 0, 100.0)]),
            ("b", vec![kernel(16, 512, 16, 0, 100.0)]),
        ]);
        let mut gpu = GpuSim::new(small_device());
        let mut p = Paella::with_config(
            &models,
            PaellaConfig {
                backlog: Backlog::Blocks(16),
                ..PaellaConfig::default()
            },
        );
        let mut done = Vec::new();
        let mut call = |gpu: &mut GpuSim, p: &mut Paella, f: &dyn Fn(&mut Paella, &mut Ctx<'_>)| {
            let (mut failed, mut missed, mut stats) = (Vec::new(), Vec::new(), Default::default());
            let mut cx = Ctx {
                gpu,
                models: &models,
                done: &mut done,
                failed: &mut failed,
                missed: &mut missed,
                stats: &mut stats,
            };
            f(p, &mut cx);
        };
        let task = |id: u64, model| Task {
            id,
            client: id as u32,
            priority: Priority::BestEffort,
            model,
            arrival: 0,
            deadline: None,
        };
        call(&mut gpu, &mut p, &|p, cx| p.on_arrival(cx, task(0, 0)));
        call(&mut gpu, &mut p, &|p, cx| p.on_arrival(cx, task(1, 1)));
        assert_eq!(p.outstanding(), (1, 16), "the second job is held");
        let placed = |p: &Paella| p.dev.as_ref().map_or(0, |d| d.placed_blocks);
        assert_eq!(placed(&p), 16);
        let mut evs = Vec::new();
        let mut reports = 0;
        let mut finished = 0;
        while Clocked::advance(&mut gpu, None, &mut evs).is_some() {
            for ev in std::mem::take(&mut evs) {
                call(&mut gpu, &mut p, &|p, cx| p.on_event(cx, &ev));
                match ev {
                    Event::BlocksCompleted { blocks, .. } if finished == 0 => {
                        reports += 1;
                        assert_eq!(blocks, 16);
                        // The first wave's room went to the waiting blocks
                        // of the first kernel (still 16 placed, none
                        // pending), and the second kernel went too.
                        assert_eq!(p.outstanding(), (2, 16), "after report {reports}");
                        assert_eq!(placed(&p), 16);
                    }
                    Event::KernelFinished { .. } => finished += 1,
                    _ => {}
                }
            }
        }
        assert_eq!(reports, 1, "one report before the first kernel finished");
        assert_eq!(finished, 2);
        assert_eq!(done.len(), 2);
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
            launch_ahead in 0u32..=3,
            notify_every in prop::sample::select(vec![0u32, 1, 3, 16]),
            queueing in prop::sample::select(vec![Queueing::Srpt, Queueing::Sjf, Queueing::RoundRobin]),
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
            let cfg = PaellaConfig {
                backlog: Backlog::Blocks(b),
                deficit_threshold: threshold,
                launch_ahead,
                notify_every,
                queueing,
            };
            let mut p = Paella::with_config(&reg, cfg);
            let r = workload::run(&DeviceProfile::gv100(), &reg, &mut p, &w);
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

    // ---- The fast occupancy model against the straightforward one. ----

    /// The occupancy model as first written: one `CuState` per CU,
    /// `CuState::fit` per CU, the water-filling level found level by level,
    /// `CuState::take` wavefront by wavefront. The class-based [`Shadow`]
    /// must do exactly what it does.
    struct PerCuModel {
        cus: Vec<CuState>,
        cursor: usize,
        /// Per kernel: (CU, blocks, registers per bank) to give back.
        held: Vec<Vec<(usize, u32, BankUse)>>,
    }

    impl PerCuModel {
        fn fits(&self, fp: &Footprint, n: u32) -> (Vec<u32>, u32) {
            let f: Vec<u32> = self.cus.iter().map(|cu| cu.fit(fp).0.min(n)).collect();
            let total: u64 = f.iter().map(|&x| u64::from(x)).sum();
            (f, total.min(u64::from(n)) as u32)
        }

        fn place(&mut self, k: usize, fp: &Footprint, n: u32, f: &[u32], total: u32) -> u32 {
            let to_place = n.min(total);
            if to_place == 0 {
                return 0;
            }
            let ncu = self.cus.len();
            let mut level = u32::MAX;
            if to_place < f.iter().sum::<u32>() {
                level = 1;
                while f.iter().map(|&x| u64::from(x.min(level))).sum::<u64>() < u64::from(to_place)
                {
                    level += 1;
                }
            }
            let base: u32 = if level == u32::MAX {
                to_place
            } else {
                f.iter().map(|&x| x.min(level - 1)).sum()
            };
            let mut extra = to_place - base;
            for i in 0..ncu {
                let c = (self.cursor + i) % ncu;
                let mut m = f[c].min(level.saturating_sub(1));
                if level == u32::MAX {
                    m = f[c];
                } else if f[c] >= level && extra > 0 {
                    m += 1;
                    extra -= 1;
                }
                if m > 0 {
                    let used = self.cus[c].take(fp, m);
                    self.held[k].push((c, m, used));
                }
            }
            self.cursor = (self.cursor + 1) % ncu;
            to_place
        }

        fn release(&mut self, k: usize, fp: &Footprint) {
            for (c, m, used) in std::mem::take(&mut self.held[k]) {
                self.cus[c].give(fp, m, &used);
            }
        }
    }

    /// A device with `banks` register banks (not always a power of two)
    /// and `ncu` CUs (up to three bit-set words).
    fn arb_device() -> impl Strategy<Value = DeviceProfile> {
        (
            1u32..=130,
            prop::sample::select(vec![32u32, 64]),
            4u32..=48,
            1u32..=8,
            1u32..=8,
            prop::sample::select(vec![16u32, 48, 64, 100]),
            prop::sample::select(vec![4u32, 16, 32, 40]),
        )
            .prop_map(|(ncu, wave, waves, banks, reg_k, smem_kb, max_blocks)| {
                let mut p = DeviceProfile::mi50();
                p.compute_units = ncu;
                p.cu.wave_size = wave;
                p.cu.max_threads = waves * wave;
                p.cu.register_banks = banks;
                p.cu.max_registers = reg_k * 4096 * banks;
                p.cu.shared_mem_bytes = smem_kb * 1024;
                p.cu.max_blocks = max_blocks;
                p
            })
    }

    /// (grid, threads, registers per thread, shared memory) of a kernel.
    fn arb_launch() -> impl Strategy<Value = (u32, u32, u32, u32)> {
        (
            prop_oneof![1u32..=8, 1u32..=400],
            prop::sample::select(vec![32u32, 64, 96, 128, 256, 1024]),
            prop::sample::select(vec![0u32, 1, 16, 24, 40, 64, 128]),
            prop::sample::select(vec![0u32, 256, 4096, 12288, 49152]),
        )
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Dispatch a kernel: place what fits.
        Place((u32, u32, u32, u32)),
        /// Place more blocks of the in-flight kernel at this index.
        More(usize, u32),
        /// Release the in-flight kernel at this index.
        Release(usize),
        /// This many blocks of the in-flight kernel at this index completed
        /// (`Shadow::release_completed`).
        Done(usize, u32),
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => arb_launch().prop_map(Op::Place),
            1 => (any::<usize>(), 1u32..=64).prop_map(|(i, n)| Op::More(i, n)),
            2 => any::<usize>().prop_map(Op::Release),
            2 => (any::<usize>(), 1u32..=48).prop_map(|(i, n)| Op::Done(i, n)),
        ]
    }

    fn in_flight(fig: Fig) -> InFlight {
        InFlight {
            job: 0,
            tag: 0,
            stream: 0,
            hwq: 0,
            class: BE,
            fig,
            unplaced: 0,
            started: false,
            queued: false,
            ahead_est: 0,
            behind: NONE,
            credit: 0,
            pieces: Vec::new(),
            piece_cus: Vec::new(),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn recip_divides_exactly(n in any::<u32>(), d in any::<u32>()) {
            let q = Recip::new(d).div(n);
            prop_assert_eq!(q, n.checked_div(d).unwrap_or(u32::MAX));
            for d in [1, 2, 3, 7, 64, 1000, 65_537, u32::MAX - 1, u32::MAX] {
                prop_assert_eq!(Recip::new(d).div(n), n / d);
                prop_assert_eq!(Recip::new(d).div(u32::MAX), u32::MAX / d);
                let near = n - n % d;
                prop_assert_eq!(Recip::new(d).div(near), near / d);
                prop_assert_eq!(Recip::new(d).div(near.wrapping_sub(1)), near.wrapping_sub(1) / d);
            }
        }

        /// `Fig::fit` and `take_blocks` compute what `CuState::fit` and
        /// `CuState::take` do, from CU states that earlier takes left.
        #[test]
        fn fit_and_take_match_cu_state(
            p in arb_device(),
            history in prop::collection::vec((arb_launch(), 1u32..=8), 0..12),
            last in arb_launch(),
            m in 1u32..=64,
        ) {
            let mut cu = CuState::empty(&p);
            let by_banks = Recip::new(cu.nbanks);
            for ((_, t, r, s), n) in history.into_iter().chain([(last, m)]) {
                let fp = Footprint::new(&p, t, r, s);
                let fig = Fig::new(fp);
                let fit = cu.fit(&fp).0;
                prop_assert_eq!(fig.fit(&cu), fit, "{:?} {:?}", cu, fp);
                let n = n.min(fit);
                if n == 0 {
                    continue;
                }
                let mut fast = cu;
                let used = take_blocks(&mut fast, &fig, n, by_banks);
                let want = cu.take(&fp, n);
                prop_assert_eq!(fast, cu, "{} blocks of {:?}", n, fp);
                prop_assert_eq!(used, want);
            }
        }

        /// The class-based occupancy model places and frees every block
        /// where the per-CU model does, for any sequence of dispatches,
        /// further placements and releases.
        #[test]
        fn class_model_matches_the_per_cu_model(
            p in arb_device(),
            ops in prop::collection::vec(arb_op(), 1..40),
        ) {
            let mut sh = Shadow::new(&p, 0, Backlog::Blocks(0));
            let ncu = p.compute_units as usize;
            let mut model = PerCuModel {
                cus: vec![CuState::empty(&p); ncu],
                cursor: 0,
                held: Vec::new(),
            };
            // (shadow slot, model index, footprint) of the kernels held.
            let mut live: Vec<(u32, usize, Footprint)> = Vec::new();
            for op in ops {
                match op {
                    Op::Place((grid, t, r, s)) => {
                        let fp = Footprint::new(&p, t, r, s);
                        let fig = Fig::new(fp);
                        sh.kernels.push(in_flight(fig));
                        let slot = (sh.kernels.len() - 1) as u32;
                        model.held.push(Vec::new());
                        let k = model.held.len() - 1;
                        let total = sh.fits(&fig, grid);
                        let (f, want) = model.fits(&fp, grid);
                        prop_assert_eq!(total, want);
                        prop_assert!(sh.fit_bound(&fig) >= u64::from(total));
                        let placed = sh.place_fitted(slot, grid, total);
                        prop_assert_eq!(placed, model.place(k, &fp, grid, &f, want));
                        live.push((slot, k, fp));
                    }
                    Op::More(i, n) if !live.is_empty() => {
                        let (slot, k, fp) = live[i % live.len()];
                        let fig = sh.kernels[slot as usize].fig;
                        let total = sh.fits(&fig, n);
                        let (f, want) = model.fits(&fp, n);
                        prop_assert_eq!(total, want);
                        let placed = sh.place_fitted(slot, n, total);
                        prop_assert_eq!(placed, model.place(k, &fp, n, &f, want));
                    }
                    Op::Release(i) if !live.is_empty() => {
                        let (slot, k, fp) = live.swap_remove(i % live.len());
                        sh.release(slot);
                        model.release(k, &fp);
                    }
                    Op::Done(i, n) if !live.is_empty() => {
                        // The per-CU model gives back, CU by CU, what the
                        // class model says it gave back: each must be a
                        // holding of that kernel there.
                        let (slot, k, fp) = live[i % live.len()];
                        let mut given = Vec::new();
                        sh.release_completed(slot, n, |m, used, cus| {
                            given.push((m, *used, cus.to_vec()));
                        });
                        for (m, used, cus) in given {
                            for (w, &bits) in cus.iter().enumerate() {
                                let mut b = bits;
                                while b != 0 {
                                    let cu = w * 64 + b.trailing_zeros() as usize;
                                    b &= b - 1;
                                    let at = model.held[k]
                                        .iter()
                                        .position(|&(c, hm, hu)| c == cu && hm == m && hu == used);
                                    let Some(at) = at else {
                                        return Err(TestCaseError::fail(format!(
                                            "gave back {m} blocks on CU {cu} it does not hold"
                                        )));
                                    };
                                    let (_, _, hu) = model.held[k].swap_remove(at);
                                    model.cus[cu].give(&fp, m, &hu);
                                }
                            }
                        }
                        // What is left of the credit covers no CU of any
                        // piece still held.
                        let kf = &sh.kernels[slot as usize];
                        prop_assert!(kf.pieces.iter().all(|&(m, _)| m > kf.credit));
                    }
                    Op::More(..) | Op::Release(_) | Op::Done(..) => continue,
                }
                prop_assert_eq!(sh.cursor, model.cursor);
                prop_assert_eq!(&sh.cu_states(), &model.cus);
                sh.check();
            }
            for (slot, k, fp) in live {
                sh.release(slot);
                model.release(k, &fp);
            }
            prop_assert_eq!(&sh.cu_states(), &vec![CuState::empty(&p); ncu]);
            prop_assert_eq!(sh.live.len(), 1, "the empty CUs are one class again");
            prop_assert_eq!(sh.placed_blocks, 0);
        }

        /// `SlotHeap` pops what `BinaryHeap` pops, with removals anywhere.
        #[test]
        fn slot_heap_matches_binary_heap(
            ops in prop::collection::vec((any::<bool>(), 0u32..32, 0u64..20), 1..200),
        ) {
            let mut heap = SlotHeap::<(u64, u32)>::default();
            let mut pos = vec![NONE; 32];
            let mut keys: Vec<Option<u64>> = vec![None; 32];
            for (insert, slot, key) in ops {
                let s = slot as usize;
                match (insert, keys[s]) {
                    (true, None) => {
                        heap.push(&mut pos, (key, slot), slot);
                        keys[s] = Some(key);
                    }
                    (false, Some(_)) => {
                        heap.remove(&mut pos, slot);
                        keys[s] = None;
                    }
                    _ => {}
                }
                let want = keys
                    .iter()
                    .enumerate()
                    .filter_map(|(i, k)| k.map(|k| (k, i as u32)))
                    .min()
                    .map(|(_, i)| i);
                prop_assert_eq!(heap.peek(), want);
                for (i, &p) in pos.iter().enumerate() {
                    prop_assert_eq!(p != NONE, keys[i].is_some());
                    if p != NONE {
                        prop_assert_eq!(heap.items[p as usize].1, i as u32);
                    }
                }
            }
        }
    }
}
