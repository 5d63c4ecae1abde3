//! The backends that need no GPU, behind `sluice_backend::Backend`:
//!
//! - [`cpu`]: the models' ONNX graphs on sluice's CPU executor, real
//!   outputs, on worker threads;
//! - [`fifo`]: the simplest simulated device, one job at a time in real time;
//! - [`modeled`]: a scheduling policy on the GPU model (`sluice-gpusim`),
//!   run in real time;
//! - [`fair`]: not a device but a wrapper the dispatcher puts in front of
//!   whichever device runs, bounding each client's share of its priority
//!   class.

pub mod cluster;
pub mod cpu;
pub mod fair;
pub mod fifo;
pub mod modeled;
