//! The backends that need no GPU, behind `sluice_backend::Backend`:
//!
//! - [`fifo`]: step 1's simulated device, one job at a time in real time;
//! - [`modeled`]: a scheduling policy on the GPU model (`sluice-gpusim`),
//!   run in real time.

pub mod fifo;
pub mod modeled;
