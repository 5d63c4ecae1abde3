//! # sluice-cuda
//!
//! The CUDA device backend (REEF §4.6 on NVIDIA GPUs).
//!
//! - [`kernels`]: sluice's own CUDA C++ kernel library (sources embedded,
//!   compiled to PTX with NVRTC at run time).
//! - [`queue`]: virtual host queues, the outstanding-kernel cap, lazy
//!   eviction through the preemption flag, restore order, held special
//!   commands: the backend's queue logic, written against the [`driver`]
//!   trait so it is tested with a fake driver on machines without a GPU.
//! - [`plan_exec`]: runs a model's kernel plan (from `sluice-nn`'s
//!   builders) on a driver: the kernel library loaded, buffers allocated,
//!   each step's launch resolved.
//! - [`partition`]: spatial partitions on green contexts (which green
//!   context a CU set becomes); [`gpu`] moves streams between them.
//! - [`gpu`]: the scheduler's `Gpu` interface over those queues, and
//!   [`serve`]: the daemon's job path on it (real model layers under a
//!   policy).
//! - [`measure`]: a model's real layers on a device, measured: checked
//!   against the CPU reference, its kernels timed into a measured
//!   manifest, its latency on spatial partitions (`sluice check|profile
//!   --device cuda`).
//! - `real` (feature `cuda`): [`driver::CuDriver`] over cudarc's run-time
//!   loaded driver API, and `open` (feature `cuda`): the one function that
//!   opens CUDA device 0 (`open_cuda`), and `open_device0` on it.
//! - `fake` and the fake kernel ABI (feature `test-util`, for tests only): a
//!   driver whose kernels run the CPU reference operators, so everything
//!   above is tested on machines without a GPU.

pub mod driver;
#[cfg(any(test, feature = "test-util"))]
pub mod fake;
pub mod gpu;
pub mod graph_run;
pub mod kernels;
pub mod measure;
#[cfg(feature = "cuda")]
pub mod open;
pub mod partition;
pub mod plan_exec;
pub mod queue;
#[cfg(feature = "cuda")]
pub mod real;
pub mod serve;

pub use gpu::{CudaGpu, Kill};
#[cfg(feature = "cuda")]
pub use open::{CudaRig, CudaSetupError, OpenGpuError, open_cuda, open_device0, open_gpu};
