//! A discrete-event model of a GPU executing DNN kernels, in virtual time.
//!
//! It is the ground the REEF and Paella scheduling policies run on (issue 3,
//! step 2) while no real GPU is at hand. It models:
//!
//! - compute units with per-CU limits and occupancy ([`occupancy`]);
//! - kernels as grids of blocks with a per-block time, slowed down when
//!   co-running kernels over-subscribe memory bandwidth;
//! - streams with an unbounded host queue feeding a bounded device queue,
//!   a command processor that pays a fetch cost per kernel, and a limited
//!   number of hardware queues, each strictly FIFO at its head (REEF §4.1,
//!   Paella §2.1) ([`sim`]);
//! - REEF's preemption mechanisms as device operations: host-queue reset,
//!   lazy eviction through a preemption flag, device-queue capacity, kill of
//!   running blocks, and the wait-based baseline (REEF §4.2–4.3).
//!
//! Device parameters come from TOML profiles ([`profile`]); `docs/gpu-model.md`
//! says what is modelled, what is not, and where each number comes from.
//!
//! ```
//! use sluice_daemon::gpu::{DeviceProfile, Event, GpuSim, KernelLaunch};
//!
//! let mut gpu = GpuSim::new(DeviceProfile::mi50());
//! let s = gpu.create_stream(0);
//! let k = KernelLaunch {
//!     grid_blocks: 120,
//!     threads_per_block: 256,
//!     regs_per_thread: 32,
//!     shared_mem: 0,
//!     block_time_ns: 10_000,
//!     idempotent: true,
//!     mem_intensity: None,
//!     tag: 7,
//! };
//! gpu.launch(s, k).unwrap();
//! let mut done = None;
//! while let Some(e) = gpu.step() {
//!     if let Event::KernelFinished { t, .. } = e {
//!         done = Some(t);
//!     }
//! }
//! // host push + command-processor fetch + one round of blocks.
//! let p = gpu.profile();
//! assert_eq!(done, Some(p.queues.host_launch_ns + p.queues.cp_fetch_ns + 10_000));
//! ```

pub mod occupancy;
pub mod ops;
pub mod profile;
pub mod sim;

pub use occupancy::{Footprint, Limit, blocks_per_cu};
pub use ops::{Gpu, GpuError};
pub use profile::{DeviceProfile, ProfileError, Vendor};
pub use sim::{
    Event, GpuSim, HostReset, KernelLaunch, KernelRef, Ns, Outcome, PreemptReport, QueueLens,
    SimError, StreamId,
};
