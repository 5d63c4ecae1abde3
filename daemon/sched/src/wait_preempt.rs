//! `wait-preempt`: wait-based preemption of best-effort work.
//!
//! The baseline REEF compares reset-based preemption against (§2.2, §6.4):
//! the same scheduler as [`super::reef`] — real-time tasks FIFO on a
//! high-priority stream, one stream per best-effort client, best-effort
//! lanes parked while real-time work is left — but a real-time arrival
//! preempts each busy best-effort stream with
//! [`sluice_gpusim::GpuSim::wait_based_preempt`]: the host queue stops feeding,
//! and everything already in the device queue, the hardware queue and on
//! the CUs runs to completion. The stream resumes, kernels held in its host
//! queue first, once no real-time task is left. Nothing is killed, so
//! nothing is relaunched. Best-effort streams keep the profile's device-queue
//! capacity (hundreds of kernels, REEF §4.2), which is why waiting is slow;
//! there is no kernel padding.

use std::sync::Arc;

use super::reef::{Reef, ReefConfig};
use sluice_model::ModelRegistry;

/// The wait-based baseline: a [`Reef`] with [`ReefConfig::wait_preempt`].
pub type WaitPreempt = Reef;

/// The `wait-preempt` policy over `models`.
pub fn wait_preempt(models: Arc<ModelRegistry>) -> WaitPreempt {
    Reef::new(models, ReefConfig::wait_preempt())
}
