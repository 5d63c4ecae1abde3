//! # sluice-gpu
//!
//! The device interface a scheduling policy drives, and nothing behind it:
//!
//! - [`Gpu`] ([`interface`]): streams, kernel launches, dynamic kernel padding and
//!   REEF's preemption mechanisms as device operations; [`Clocked`] adds
//!   the clock and event stream the workload driver needs.
//! - [`launch`]: the vocabulary of that interface ([`KernelLaunch`],
//!   [`StreamId`], [`Event`], [`PreemptReport`], [`OpError`], ...).
//! - [`profile`]: device profiles (CUs, their limits, queue costs), shipped
//!   as TOML in `daemon/gpu/profiles/` for MI50-, GV100- and H100-like GPUs.
//! - [`occupancy`]: how many blocks of a kernel fit on a compute unit.
//!
//! Two backends implement it: the discrete-event GPU model
//! (`sluice-gpusim`, the default everywhere no GPU is at hand) and the CUDA
//! backend (`sluice-cuda`). `docs/gpu-model.md` describes the model and
//! where each of its numbers comes from.
//!
//! With the GPU model behind it:
//!
//! ```
//! use sluice_gpu::{DeviceProfile, Event, Gpu, KernelLaunch};
//! use sluice_gpusim::GpuSim;
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
//!     wave_ns: Vec::new(),
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
//! // host push + command-processor fetch + launch + one round of blocks.
//! let p = gpu.profile();
//! let q = &p.queues;
//! assert_eq!(done, Some(q.host_launch_ns + q.cp_fetch_ns + q.launch_ns + 10_000));
//! ```

pub mod interface;
pub mod launch;
pub mod occupancy;
pub mod profile;

pub use interface::{Clocked, Gpu, GpuError};
pub use launch::{
    Event, HostReset, KernelLaunch, KernelRef, Ns, OpError, Outcome, PreemptReport, QueueLens,
    StreamId,
};
pub use occupancy::{Footprint, Limit, blocks_per_cu};
pub use profile::{DeviceProfile, ProfileError, Vendor};
