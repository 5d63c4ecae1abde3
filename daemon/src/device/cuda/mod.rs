//! The CUDA device backend (REEF §4.6 on NVIDIA GPUs).
//!
//! - [`kernels`]: sluice's own CUDA C++ kernel library (sources embedded,
//!   compiled to PTX with NVRTC at run time).
//! - [`queue`]: virtual host queues, the outstanding-kernel cap, lazy
//!   eviction through the preemption flag, restore order, held special
//!   commands: the backend's queue logic, written against the [`driver`]
//!   trait so it is tested with a fake driver on machines without a GPU.
//! - [`gpu`]: the scheduler's `Gpu` interface over those queues, and
//!   [`serve`]: the daemon's job path on it (real model layers under a
//!   policy).
//! - `real` (feature `cuda`): [`driver::CuDriver`] over cudarc's run-time
//!   loaded driver API.

pub mod driver;
pub mod fake;
pub mod gpu;
pub mod kernels;
pub mod plan_exec;
pub mod queue;
#[cfg(feature = "cuda")]
pub mod real;
pub mod serve;
