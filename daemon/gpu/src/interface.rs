//! What a scheduling policy asks of a GPU, as one trait.
//!
//! The policies in `sluice-sched` drive a [`Gpu`]: streams, kernel
//! launches, and REEF's preemption mechanisms as device operations (§4).
//! `sluice_gpusim::GpuSim`, the discrete-event model, implements it; a real
//! backend (`sluice_cuda::CudaGpu`) implements the same trait, so the same
//! policy code drives either. Results come back to the policy as
//! [`Event`]s through `Policy::on_event`, from whoever owns the device.
//! [`Clocked`] adds what the workload driver needs: advancing the device's
//! clock and collecting its events.
//!
//! A backend that cannot do an operation says so with
//! [`GpuError::Unsupported`]; the policies treat every error as "not done"
//! (logged, and the decision falls back: no padding, wait-based preemption).
//! An error that keeps a task from running at all (no stream for it, a
//! refused launch of one of its kernels) fails that task: the policy
//! reports it through its context (`sluice_sched::Ctx::fail`) and the
//! backend completes the request with `DEVICE_ERROR`. No operation panics
//! on a device failure.

use crate::{DeviceProfile, Event, HostReset, KernelLaunch, KernelRef, Ns, OpError, StreamId};

/// A failed device operation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpuError {
    /// The device refused the operation (a bad stream, a kernel that does
    /// not fit, ...).
    #[error(transparent)]
    Refused(#[from] OpError),
    /// This backend does not have the operation.
    #[error("{backend} cannot {op}: {why}")]
    Unsupported {
        /// The backend.
        backend: &'static str,
        /// The operation.
        op: &'static str,
        /// Why, and what happens instead.
        why: &'static str,
    },
    /// The device driver failed.
    #[error("{backend}: {op} failed: {message}")]
    Driver {
        /// The backend.
        backend: &'static str,
        /// The operation.
        op: &'static str,
        /// The driver's message.
        message: String,
    },
}

/// The device operations a scheduling policy uses. See `sluice_gpusim::GpuSim` for the
/// semantics of each; a real backend documents where it differs.
pub trait Gpu {
    /// The device's figures (CUs and their limits, queue costs).
    fn profile(&self) -> &DeviceProfile;
    /// The device's clock, ns.
    fn now(&self) -> Ns;
    /// A new stream; higher `priority` is served first. Fails when the
    /// device cannot make one (a real driver out of streams or memory, a
    /// lost context); the GPU model never fails.
    fn create_stream(&mut self, priority: i32) -> Result<StreamId, GpuError>;
    /// Caps how many kernels of `stream` are on the device at once.
    fn set_dq_capacity(&mut self, stream: StreamId, capacity: u32) -> Result<(), GpuError>;
    /// Places `stream`'s blocks on the lowest CUs first (REEF's `dkp`).
    fn set_packed_placement(&mut self, stream: StreamId, packed: bool) -> Result<(), GpuError>;
    /// Launches a kernel on `stream`, behind what the stream has queued.
    fn launch(&mut self, stream: StreamId, k: KernelLaunch) -> Result<KernelRef, GpuError>;
    /// Launches `k` on idle `stream` fused with `with`, the running kernel
    /// of `host` (REEF §5.1 dynamic kernel padding).
    fn launch_padded(
        &mut self,
        stream: StreamId,
        k: KernelLaunch,
        host: StreamId,
        with: KernelRef,
    ) -> Result<KernelRef, GpuError>;
    /// Reset-based preemption of `stream` (REEF §4.2–4.3): drop the host
    /// queue, set the preemption flag, kill the running blocks. The
    /// `Preempted` event reports when the stream is idle.
    fn preempt_reset(&mut self, stream: StreamId) -> Result<HostReset, GpuError>;
    /// Wait-based preemption: stop feeding `stream`, let what is on the
    /// device finish.
    fn wait_based_preempt(&mut self, stream: StreamId) -> Result<(), GpuError>;
    /// Lets a preempted `stream` run again.
    fn resume(&mut self, stream: StreamId) -> Result<(), GpuError>;
    /// Asks for [`Event::BlocksCompleted`] on `stream`: one notification per
    /// `every` completed blocks of each of its kernels (Paella §4.1 with the
    /// aggregation of Fig. 15; 0 turns them off). Backends without
    /// instrumented kernels say [`GpuError::Unsupported`].
    fn set_block_notify(&mut self, stream: StreamId, every: u32) -> Result<(), GpuError> {
        let _ = (stream, every);
        Err(GpuError::Unsupported {
            backend: "this backend",
            op: "notify block completions",
            why: "its kernels are not instrumented; the policy sees whole kernels finish",
        })
    }
    /// Confines `stream`'s blocks to the CUs in `cus` from now on (a spatial
    /// partition); `None` gives it the whole device again. Blocks already
    /// placed run on where they are. Backends without partitions say
    /// [`GpuError::Unsupported`].
    fn set_partition(&mut self, stream: StreamId, cus: Option<&[u32]>) -> Result<(), GpuError> {
        let _ = (stream, cus);
        Err(GpuError::Unsupported {
            backend: "this backend",
            op: "partition the device",
            why: "it has no CU masks or green contexts; streams share every CU",
        })
    }
    /// Whether [`Gpu::launch_padded`] and [`Gpu::set_packed_placement`]
    /// work (REEF's fused `dkp` launch); policies skip padding otherwise.
    fn supports_fused_launch(&self) -> bool {
        true
    }
    /// Wall-clock ns the backend spent on its own dispatch work inside
    /// these calls (the GPU model counts them: `GpuSim::model_work_ns`); 0 if not counted.
    fn model_work_ns(&self) -> u64 {
        0
    }
}

/// A device the driver can run a workload on: the GPU model in virtual
/// time, or a real device (`sluice_cuda::CudaGpu`) on its own
/// clock.
pub trait Clocked: Gpu {
    /// Lets the device run until `until` or its next event, whichever is
    /// first (`None`: no deadline), appends the events to `out` and returns
    /// the time then; `None` when nothing is left to happen and there is no
    /// deadline.
    fn advance(&mut self, until: Option<Ns>, out: &mut Vec<Event>) -> Option<Ns>;
    /// Fraction of CU-time busy so far, if the device knows it.
    fn utilisation(&self) -> Option<f64>;
    /// Turns the count of the device's own dispatch work on (the GPU
    /// model's is `GpuSim::model_work_ns`).
    fn time_model_work(&mut self) {}
    /// Why [`Clocked::advance`] stopped early, when a device error stopped
    /// it (a real driver's failure, with its cause); `None` otherwise, and
    /// always for a device that cannot fail.
    fn failure(&self) -> Option<String> {
        None
    }
}
