//! # sluice-backend
//!
//! The job interface between `sluiced`'s dispatcher and whatever runs the
//! models. The dispatcher (`sluice_service::dispatch`) hands a validated
//! [`Job`] to a [`Backend`] and polls it for [`Finished`] jobs; the backend
//! reads inputs from and writes outputs to the client's arena through
//! [`TensorMemory`] only.
//!
//! The backends behind it:
//!
//! - `sluice_service::backend::fifo::FifoBackend`: the embedded simulated
//!   device, one job at a time in real time;
//! - `sluice_service::backend::modeled::ModeledBackend`: a scheduling policy
//!   on the GPU model (`sluice-gpusim`) in real time;
//! - `sluice_service::backend::cpu::CpuBackend`: the models' graphs on
//!   sluice's CPU executor, on worker threads;
//! - `sluice_cuda::serve::CudaServer`: the CUDA job path (the models' real
//!   layers under a policy on a GPU).
//!
//! Nothing above this crate knows which one it drives. With the `test-util`
//! feature, [`testmem`] provides arenas for other crates' tests.

#[cfg(feature = "test-util")]
pub mod testmem;

use std::sync::{Arc, Mutex};

use shm_proto::Priority;

/// Bounded access to one client's data arena.
///
/// The arena lives in client-writable shared memory, so implementations copy
/// bytes in and out through raw pointers and never hand out a reference into
/// it. Offsets are relative to the arena start. Both methods return `false`
/// (and touch nothing) when `offset + len` does not fit in the arena; the
/// dispatcher has already checked every span, so `false` means a bug.
pub trait TensorMemory: Send + Sync {
    /// Size of the arena in bytes.
    fn len(&self) -> u64;
    /// Whether the arena is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `buf.len()` bytes starting at `offset` out of the arena.
    fn read(&self, offset: u64, buf: &mut [u8]) -> bool;
    /// Copies `data` into the arena at `offset`.
    fn write(&self, offset: u64, data: &[u8]) -> bool;
}

/// A heap-backed arena (for requests made in the daemon's own process,
/// such as the benchmarks that drive a backend directly, and for tests).
#[derive(Debug)]
pub struct VecMemory(Mutex<Vec<u8>>);

impl VecMemory {
    /// `len` zero bytes.
    pub fn new(len: usize) -> Arc<Self> {
        Arc::new(Self(Mutex::new(vec![0; len])))
    }

    /// A copy of bytes `off..off + len`.
    ///
    /// # Panics
    ///
    /// If the range lies outside the arena or the lock is poisoned.
    pub fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        self.0.lock().unwrap()[off..off + len].to_vec()
    }
}

impl TensorMemory for VecMemory {
    fn len(&self) -> u64 {
        self.0.lock().map_or(0, |v| v.len() as u64)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> bool {
        let Ok(mem) = self.0.lock() else { return false };
        let Some(src) = usize::try_from(offset)
            .ok()
            .and_then(|o| mem.get(o..o.checked_add(buf.len())?))
        else {
            return false;
        };
        buf.copy_from_slice(src);
        true
    }
    fn write(&self, offset: u64, data: &[u8]) -> bool {
        let Ok(mut mem) = self.0.lock() else {
            return false;
        };
        let Some(dst) = usize::try_from(offset)
            .ok()
            .and_then(|o| mem.get_mut(o..o.checked_add(data.len())?))
        else {
            return false;
        };
        dst.copy_from_slice(data);
        true
    }
}

/// A validated request, ready for a device.
#[derive(Clone)]
pub struct Job {
    /// Daemon-assigned client number; used to cancel a departed client's work.
    pub client: u32,
    /// The client's request id, echoed in the completion.
    pub request_id: u64,
    /// Index of the model in the registry (already checked to exist).
    pub model: u32,
    /// Real-time or best-effort.
    pub priority: Priority,
    /// Absolute deadline in `CLOCK_MONOTONIC` ns, 0 for none.
    pub deadline_ns: u64,
    /// Input span in the client's arena (validated); for a typed request,
    /// its first input's (the whole list is in [`Job::tensors`]).
    pub input_off: u64,
    /// Input length in bytes (validated).
    pub input_len: u64,
    /// Output span in the client's arena (validated); for a typed request,
    /// its first output's.
    pub output_off: u64,
    /// Output length in bytes (validated).
    pub output_len: u64,
    /// The client's arena; the device writes the output through it.
    pub memory: Arc<dyn TensorMemory>,
    /// When the dispatcher took the request off the ring (`CLOCK_MONOTONIC` ns).
    pub received_ns: u64,
    /// Per-tensor spans of a typed request, validated against the model's
    /// `sluice_model::ModelIo`; `None` for an untyped request (one
    /// input span, one output span, batch 1: the fields above).
    pub tensors: Option<Arc<TensorSpans>>,
}

impl Job {
    /// An untyped request of `model` from `client`, no deadline: `sizes` are
    /// its input and output bytes, the input at offset 0 of `memory` and the
    /// output right after it.
    pub fn untyped(
        client: u32,
        request_id: u64,
        model: u32,
        priority: Priority,
        sizes: (u64, u64),
        memory: Arc<dyn TensorMemory>,
        received_ns: u64,
    ) -> Job {
        Job {
            client,
            request_id,
            model,
            priority,
            deadline_ns: 0,
            input_off: 0,
            input_len: sizes.0,
            output_off: sizes.0,
            output_len: sizes.1,
            memory,
            received_ns,
            tensors: None,
        }
    }
}

/// Where each tensor of a typed request lies in the client's arena.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpans {
    /// The request's batch size (1 up to the model's maximum).
    pub batch: u32,
    /// One span per model input, in the model's order; each exactly the
    /// input's size at `batch`.
    pub inputs: Vec<Span>,
    /// One span per model output, in the model's order; each exactly the
    /// output's size at `batch`.
    pub outputs: Vec<Span>,
}

/// A byte range in a client's arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// Offset from the arena's start.
    pub off: u64,
    /// Length in bytes.
    pub len: u64,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("client", &self.client)
            .field("request_id", &self.request_id)
            .field("model", &self.model)
            .field("priority", &self.priority)
            .finish_non_exhaustive()
    }
}

/// A job the device has finished (or failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// Client the job belonged to.
    pub client: u32,
    /// The client's request id.
    pub request_id: u64,
    /// `shm_proto::Status` code as a raw `u32` (OK, or an error).
    pub status: u32,
    /// Bytes written to the output span.
    pub output_len: u64,
    /// When the dispatcher received it (`CLOCK_MONOTONIC` ns).
    pub received_ns: u64,
    /// When the device started its first kernel.
    pub started_ns: u64,
    /// When the device finished its last kernel.
    pub finished_ns: u64,
}

/// A device backend. Driven by one thread (the dispatcher); not shared.
pub trait Backend: Send {
    /// Human-readable backend name, e.g. `"sim (real time)"`.
    fn name(&self) -> &str;
    /// Queues `job`. `now_ns` is the current `CLOCK_MONOTONIC` time.
    fn submit(&mut self, job: Job, now_ns: u64);
    /// Advances the device to `now_ns` and appends every job finished by
    /// then to `done`.
    fn poll(&mut self, now_ns: u64, done: &mut Vec<Finished>);
    /// The `CLOCK_MONOTONIC` time of the next completion, or `None` when idle.
    /// The dispatcher sleeps at most until then.
    fn next_event_ns(&self) -> Option<u64>;
    /// Drops every queued or running job of `client` (the client has gone)
    /// and returns how many were dropped. No completion is produced for them.
    fn cancel_client(&mut self, client: u32) -> usize;
    /// Jobs queued or running.
    fn queued(&self) -> usize;
    /// Drops what finished jobs still hold (their [`Job::memory`]
    /// references). The dispatcher calls it once it has posted the
    /// completions of a poll, so a backend may keep a poll's finished jobs
    /// until then and release their regions (a locked decrement each) off
    /// the request's path. A backend that does must also drop them at the
    /// start of its next `poll`, for callers that never call this. The
    /// default holds nothing back.
    fn release_finished(&mut self) {}
    /// What runs where, for `sluice status`, when the backend serves
    /// several devices or partitions (`None`: one device, nothing to
    /// show). The backend updates it from its own thread; the status
    /// reader locks it briefly.
    fn layout(&self) -> Option<Arc<Mutex<Layout>>> {
        None
    }
    /// Whether the device is simulated: its outputs are the reference
    /// digest of the input ([`shm_proto::sim::expected_output`]; for a
    /// typed request [`shm_proto::sim::expected_typed_output`] per output),
    /// which clients can check. A real GPU computes the model instead.
    fn simulated(&self) -> bool {
        true
    }
    /// A descriptor that becomes readable when jobs finish on threads of
    /// the backend's own (an eventfd the backend writes and drains in
    /// [`Backend::poll`]), so the dispatcher can sleep in `epoll_wait`
    /// instead of polling. `None` (the default): completions are due at
    /// [`Backend::next_event_ns`].
    fn wake_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
}

/// What a backend serving several GPUs runs where (`sluice status`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Layout {
    /// The planner that made the placement in force.
    pub planner: String,
    /// Each GPU with its partitions.
    pub gpus: Vec<GpuLayout>,
    /// Each model served, with its load.
    pub models: Vec<ModelLoad>,
    /// Placements applied since start (the first included).
    pub switches: u64,
    /// Dispatcher time the last switch took, ns (planning excluded).
    pub last_switch_ns: u64,
    /// The longest switch so far, ns.
    pub max_switch_ns: u64,
    /// Median switch over the last 1024, ns.
    pub switch_p50_ns: u64,
    /// 99th percentile switch over the last 1024, ns.
    pub switch_p99_ns: u64,
    /// Dispatcher time the last planner run took, ns.
    pub last_plan_ns: u64,
    /// Why the last plan fell back to every GPU serving every model, if it
    /// did.
    pub plan_error: Option<String>,
    /// GPUs the placement in force uses; the others are idle (0 from a
    /// daemon that predates the field).
    #[serde(default)]
    pub gpus_in_use: u32,
    /// The last plans applied, oldest first (at most [`RECENT_PLANS`]).
    #[serde(default)]
    pub recent_plans: Vec<PlanRecord>,
}

/// How many plans [`Layout::recent_plans`] keeps.
pub const RECENT_PLANS: usize = 8;

/// One plan applied, in [`Layout::recent_plans`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlanRecord {
    /// When it was applied, ms since the backend started.
    pub at_ms: u64,
    /// GPUs it uses.
    pub gpus_in_use: u32,
    /// Wall time the planner took for it, ns.
    pub plan_ns: u64,
    /// Whether the planner found nothing and every GPU serves every model.
    pub fallback: bool,
}

/// One GPU in a [`Layout`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GpuLayout {
    /// Its index in the configuration.
    pub index: u32,
    /// Its device profile (simulated).
    pub profile: String,
    /// Compute units it has.
    pub compute_units: u32,
    /// Its partitions: those of the placement in force, then those still
    /// draining the previous one.
    pub partitions: Vec<PartitionLayout>,
}

/// One partition in a [`GpuLayout`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PartitionLayout {
    /// Planned share of the GPU, percent.
    pub size_pct: u32,
    /// First CU it owns.
    pub first_cu: u32,
    /// CUs it owns.
    pub cus: u32,
    /// Whether it is draining: it takes no new batch and goes away once
    /// its last one finishes.
    pub draining: bool,
    /// Batches running in it now.
    pub in_flight: u32,
    /// The models it serves: (model, planned batch, planned rate share in
    /// requests/s).
    pub models: Vec<(String, u32, f64)>,
}

/// One model's load in a [`Layout`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelLoad {
    /// Model name.
    pub name: String,
    /// Its SLO, ms.
    pub slo_ms: f64,
    /// Arrival rate over the monitor's window, requests/s.
    pub rate_rps: f64,
    /// The rate the placement in force was planned for.
    pub planned_rps: f64,
    /// Requests waiting for a batch.
    pub queued: u64,
    /// Requests completed.
    pub completed: u64,
    /// Completed later than the SLO after they arrived.
    pub slo_violations: u64,
    /// Batches run.
    pub batches: u64,
    /// Largest batch run.
    pub max_batch: u32,
}
