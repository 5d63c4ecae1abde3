//! The vocabulary of the device interface: streams, kernel launches, the
//! events a device reports, preemption reports, and why an operation was
//! refused ([`OpError`]).
//!
//! These types are shared by every backend (the GPU model in
//! `sluice-gpusim`, the CUDA backend in `sluice-cuda`) and by the policies
//! that drive them. `docs/gpu-model.md` explains the execution model the
//! semantics come from.

use crate::occupancy::Limit;
use sluice_model as model;

/// Virtual time in nanoseconds.
pub type Ns = u64;

/// A stream, as returned by [`GpuSim::create_stream`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u32);

/// A kernel to launch.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelLaunch {
    /// Blocks in the grid (at least 1).
    pub grid_blocks: u32,
    /// Threads per block (1 to 1024).
    pub threads_per_block: u32,
    /// Registers per thread.
    pub regs_per_thread: u32,
    /// Shared memory per block, bytes.
    pub shared_mem: u32,
    /// Time of one wave of this kernel's blocks when it is alone on the
    /// device, at the occupancy it then has on each CU (`min(blocks_per_cu,
    /// ceil(grid / CUs))` blocks), ns: the manifests' `kernel_time / rounds`
    /// (`docs/models.md`). Without `wave_ns` the GPU model scales it by the
    /// profile's occupancy curve for other occupancies; with `wave_ns` it
    /// only counts the kernel's work (`Event::KernelFinished::work_ns`).
    pub block_time_ns: Ns,
    /// Measured wave times: entry `j` is the time, ns, for `j + 1` blocks of
    /// this kernel resident side by side on one CU to finish together (REEF's
    /// per-occupancy `latency[j]`, launch floor removed). Empty: no
    /// measurement; the model estimates from `block_time_ns` (see
    /// `docs/gpu-model.md`). Beyond the last entry the model extrapolates
    /// linearly (throughput saturated).
    pub wave_ns: Vec<Ns>,
    /// Whether re-running the kernel gives the same result (carried for the
    /// caller's restore logic; the model does not act on it).
    pub idempotent: bool,
    /// Share of the device's memory bandwidth the kernel uses alone at full
    /// occupancy, 0 to 1, which drives the model's co-run slowdown; `None`
    /// takes the profile's `memory.default_intensity` (an estimate).
    pub mem_intensity: Option<f64>,
    /// Caller's label, echoed in events (e.g. the model's kernel index).
    pub tag: u64,
}

impl KernelLaunch {
    /// The launch of a manifest kernel, tagged `tag`.
    pub fn from_model(k: &model::Kernel, tag: u64) -> Self {
        Self {
            grid_blocks: u32::try_from(k.blocks()).unwrap_or(u32::MAX),
            threads_per_block: u32::try_from(k.threads_per_block()).unwrap_or(u32::MAX),
            regs_per_thread: k.regs_per_thread,
            shared_mem: k.shared_mem_bytes,
            // `as` saturates and maps NaN to 0; manifests are validated.
            block_time_ns: (k.block_time_us * 1000.0).round() as Ns,
            idempotent: k.idempotent,
            wave_ns: k
                .wave_us
                .iter()
                .map(|&us| (us * 1000.0).round() as Ns)
                .collect(),
            mem_intensity: k.mem_intensity,
            tag,
        }
    }
}

/// Which kernel: its execution index on its stream (0, 1, 2, … in launch
/// order) and the caller's tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelRef {
    /// Position in the stream's launch order.
    pub exec_index: u64,
    /// The caller's tag from [`KernelLaunch::tag`].
    pub tag: u64,
}

/// How a kernel left the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// All blocks ran to the end.
    Completed,
    /// Lazily evicted: it reached the head with the preemption flag set and
    /// exited on entry; no block ran.
    Evicted,
    /// Some blocks ran, then the preemption flag made the rest exit on entry.
    Aborted,
    /// Its running blocks were killed.
    Killed,
}

/// What the model reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A kernel's first block was placed.
    KernelStarted {
        /// When.
        t: Ns,
        /// Its stream.
        stream: StreamId,
        /// Which kernel.
        kernel: KernelRef,
    },
    /// A kernel left the device.
    KernelFinished {
        /// When.
        t: Ns,
        /// Its stream.
        stream: StreamId,
        /// Which kernel.
        kernel: KernelRef,
        /// How.
        outcome: Outcome,
        /// For a completed kernel, its grid times its block time alone: the
        /// work it did, whatever the placement and slowdown. 0 otherwise.
        work_ns: Ns,
    },
    /// A preemption of a stream finished: the stream is idle.
    Preempted(PreemptReport),
    /// Paella's block-completion notification (§4.1): `blocks` more blocks
    /// of the kernel have completed since the last notification. Emitted
    /// only for streams that asked with `Gpu::set_block_notify`, once per
    /// `every` completed blocks (the aggregation of Paella Fig. 15); the
    /// blocks left when the kernel finishes are reported by its
    /// `KernelFinished` instead.
    BlocksCompleted {
        /// When.
        t: Ns,
        /// Its stream.
        stream: StreamId,
        /// Which kernel.
        kernel: KernelRef,
        /// Blocks completed since the last notification for this kernel.
        blocks: u32,
    },
}

/// The result of a preemption, emitted once the stream is idle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreemptReport {
    /// The stream.
    pub stream: StreamId,
    /// When the first preemption operation was requested.
    pub requested_at: Ns,
    /// When the stream became idle.
    pub idle_at: Ns,
    /// Kernels dropped from the host queue by [`GpuSim::reset_host_queue`].
    pub dropped_host: u32,
    /// Kernels lazily evicted from the device and hardware queues
    /// ([`Outcome::Evicted`] and [`Outcome::Aborted`]).
    pub evicted: u32,
    /// Kernels killed on the CUs.
    pub killed: u32,
    /// Kernels still held in the host queue (wait-based preemption).
    pub held_host: u32,
    /// The first kernel (lowest execution index) that did not complete; a
    /// restore relaunches from here (or from its idempotent group's first
    /// kernel). `None` if every launched kernel completed.
    pub first_incomplete: Option<KernelRef>,
}

impl PreemptReport {
    /// Preemption latency: request to idle.
    pub fn latency_ns(&self) -> Ns {
        self.idle_at - self.requested_at
    }
}

/// What [`GpuSim::reset_host_queue`] dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostReset {
    /// Kernels dropped.
    pub dropped: u32,
    /// The first of them, if any.
    pub first: Option<KernelRef>,
}

/// Where a stream's kernels are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueLens {
    /// In the host queue.
    pub host: usize,
    /// In the device queue: being fetched, or fetched and waiting for the
    /// stream's previous kernel (a kernel holds its slot until its launch
    /// starts).
    pub device: usize,
    /// Launching, or launched and waiting at the head of its hardware queue
    /// (or riding a fused launch) to place its first block: 0 or 1.
    pub hardware: usize,
    /// Whether a kernel is dispatching or running.
    pub active: bool,
}

/// Why an operation on the model was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OpError {
    /// The stream id was not returned by this model's `create_stream`.
    #[error("no stream {0}; use an id returned by create_stream on this GpuSim")]
    NoSuchStream(u32),
    /// A launch with an empty grid or block.
    #[error(
        "kernel `{tag}`: grid of {grid_blocks} blocks of {threads} threads; \
         both must be at least 1 (and threads at most 1024)"
    )]
    EmptyKernel {
        /// The launch's tag.
        tag: u64,
        /// Its grid.
        grid_blocks: u32,
        /// Its threads per block.
        threads: u32,
    },
    /// One block needs more of a resource than a whole CU has.
    #[error(
        "kernel `{tag}`: one block needs {need} {} but a CU of `{profile}` has {have}; \
         shrink the block or use a larger device profile",
        limit.name()
    )]
    DoesNotFit {
        /// The launch's tag.
        tag: u64,
        /// The resource.
        limit: Limit,
        /// What one block needs.
        need: u64,
        /// What an empty CU has.
        have: u64,
        /// The profile's name.
        profile: String,
    },
    /// A memory intensity outside 0..=1.
    #[error(
        "kernel `{tag}`: mem_intensity = {value} is outside 0..=1; use a share between 0 and 1"
    )]
    BadIntensity {
        /// The launch's tag.
        tag: u64,
        /// The value given.
        value: f64,
    },
    /// A fused launch whose host kernel is not dispatching or running.
    #[error(
        "kernel `{tag}`: cannot ride with kernel {host_exec} of stream {host_stream}, which is \
         not dispatching or running; fuse only with a kernel between its KernelStarted and \
         KernelFinished events"
    )]
    NotDispatching {
        /// The padded launch's tag.
        tag: u64,
        /// The host kernel's stream.
        host_stream: u32,
        /// The host kernel's execution index.
        host_exec: u64,
    },
    /// A fused launch on a stream that still has kernels queued or running.
    #[error(
        "kernel `{tag}`: stream {stream} still has kernels queued or running; a fused launch \
         would overtake them, so launch it only on an idle stream"
    )]
    StreamBusy {
        /// The padded launch's tag.
        tag: u64,
        /// The stream.
        stream: u32,
    },
    /// A device-queue capacity of 0.
    #[error("stream {stream}: device-queue capacity 0 would never run a kernel; use at least 1")]
    ZeroCapacity {
        /// The stream.
        stream: u32,
    },
    /// A partition with no CUs, or with a CU the device does not have.
    #[error("stream {stream}: bad partition: {why}")]
    BadPartition {
        /// The stream.
        stream: u32,
        /// What is wrong and what to give instead.
        why: String,
    },
    /// `resume` while a preemption has not finished.
    #[error(
        "stream {stream}: preemption requested at {requested_at} ns has not finished; \
         run the model until its Preempted event before resuming"
    )]
    PreemptInProgress {
        /// The stream.
        stream: u32,
        /// When the preemption was requested.
        requested_at: Ns,
    },
}
