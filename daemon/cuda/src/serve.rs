//! [`CudaServer`]: the daemon's job path on a CUDA GPU. Clients' requests
//! run the models' real layers (the [`sluice_nn`] plans on the kernel
//! library), scheduled by the same policies ([`sluice_sched`]) that run on
//! the GPU model, through [`CudaGpu`]'s virtual queues.
//!
//! **Models.** Every model of the registry must have a builder
//! ([`sluice_nn::builders::MODEL_NAMES`]) or an imported graph
//! ([`GraphModels`]: an ONNX file lowered by
//! [`sluice_nn::builders::lower_graph`], with the file's own weights), and
//! its manifest must match the plan (one manifest kernel per plan step, the
//! plan's input and output sizes): [`builder_registry`] makes such a
//! registry from the builders, [`graph_registry`] from the builders and
//! imported graphs ([`onnx_graphs`] reads a folder of ONNX files, e.g.
//! the DISB models of `scripts/onnx/make-disb-models.py`), with estimated
//! kernel times; manifests measured by `sluice profile --device cuda` may
//! replace them. Weights are random
//! (seeded): the point is the GPU work and its scheduling, not the
//! answers (an imported graph's weights are its own). Client input is the
//! plan's f32 input tensor, byte for byte (an imported graph's inputs packed
//! in graph order, token ids as f32 numbers); the only data-dependent
//! addressing is `sluice_embedding`'s, which writes NaN for an id outside
//! its table, so no input can make a kernel read or write outside its
//! buffers.
//!
//! **Instances.** A loaded model ([`DeviceModel`]: weights, activations,
//! pinned input and output buffers in one device arena) runs one inference
//! at a time, so each model is loaded `instances` times per priority class,
//! and a request waits in a queue (in this device, not the policy;
//! earliest deadline first, [`EdfQueue`], FIFO without deadlines) until an
//! instance of its model and class is free. Each instance is the policy's
//! "client": the policy keys lanes and streams by [`Task::client`], so the
//! number of CUDA streams stays bounded however many clients come and go.
//!
//! **Launches.** When the policy launches kernel `i` of a task,
//! [`CudaGpu::launch_commands`] queues step `i` of the task's instance
//! ([`DeviceModel::step_commands`]: the first step also copies the input
//! in, the last also copies the output out). Preemption and restore are
//! the policy's, exactly as on the GPU model: `reef` resets the
//! best-effort queues (host queue dropped, flag set, running kernels
//! killed cooperatively at their next flag poll) and relaunches from the
//! first incomplete kernel; every step is idempotent alone, so that is
//! correct. There is no dynamic kernel padding on CUDA
//! ([`CudaGpu`] has no fused launch).
//!
//! **Deadlines.** A request whose deadline has passed when an instance
//! frees for it is not started: it completes with `DEADLINE_MISSED`, its
//! input is not copied, and no kernel of it is launched. Once handed to the
//! policy, the policy's own check applies ([`Ctx::drop_if_late`]), and a
//! task it drops frees its instance and completes the same way. A request
//! that has started runs to its end, however late.
//!
//! **Errors.** A request whose memory cannot be read or written, or whose
//! launch cannot be resolved, completes with `DEVICE_ERROR`; the device
//! carries on. So does a request the policy fails because the device
//! refused to start it (no CUDA stream could be created for it, a launch
//! was refused: [`Ctx::fail`]); its instance is free again at once, since
//! whatever of it was launched is ahead, in stream order, of anything the
//! next request on that instance launches. A driver failure while polling (a lost or faulted context)
//! fails every queued and running request, and every later one, with
//! `DEVICE_ERROR`: the daemon keeps serving its clients the error rather
//! than hanging them.

use std::collections::HashMap;
use std::sync::Arc;

use shm_proto::{Priority, status};

use super::driver::{DriverError, StreamPriority};
use super::gpu::CudaGpu;
use super::plan_exec::{DeviceModel, KernelLibrary, LoadError, LoadOptions};
use super::queue::{KillMechanism, QueueConfig, VirtualQueue};
use sluice_backend::{Backend, Finished, Job};
use sluice_gpu::{
    DeviceProfile, Event, Gpu, GpuError, HostReset, KernelLaunch, KernelRef, Ns, StreamId,
};
use sluice_model::{Model, ModelError, ModelRegistry};
use sluice_nn::builders::{
    BuildError, BuildOptions, BuiltModel, ExportError, LowerError, MODEL_NAMES, Plan, Scale,
    Weights, build, lower_graph,
};
use sluice_sched::{
    Ctx, Policy, PolicyKind, PolicyStats, Task, TaskDone, TaskFailed, TaskId, TaskMissed, arrive,
    queue::EdfQueue, untag,
};

/// How a [`CudaServer`] loads its models.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Full or small models (must match the registry's manifests).
    pub scale: Scale,
    /// Copies of each model loaded per priority class (at least 1).
    pub instances: usize,
    /// Seed of the random weights ([`sluice_nn::builders::Weights::generate`]).
    pub weights_seed: u64,
    /// Upload staging and timeouts.
    pub load: LoadOptions,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            scale: Scale::Full,
            instances: 1,
            weights_seed: 1,
            load: LoadOptions::default(),
        }
    }
}

/// Building a [`CudaServer`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// `rt-only` drops best-effort requests, which clients would wait for
    /// forever.
    #[error(
        "policy `rt-only` is a benchmark reference that drops best-effort work; choose another for the daemon"
    )]
    RtOnly,
    /// A registry model has no builder.
    #[error(
        "model `{name}` has no {scale:?}-scale builder, so the CUDA backend cannot run it; it \
         serves {} (with `_small` appended at Small scale): point models.dir at a folder of \
         only those models' manifests (`sluice profile --device cuda NAME` writes them), or \
         remove this one from it",
        MODEL_NAMES.join(", ")
    )]
    NoBuilder {
        /// The model.
        name: String,
        /// The scale asked for.
        scale: Scale,
    },
    /// A manifest does not describe the built plan.
    #[error(
        "model `{name}`: its manifest does not match the {scale:?}-scale plan ({what}); \
         regenerate it with `sluice profile --device cuda {name}` or remove it from models.dir"
    )]
    Mismatch {
        /// The model.
        name: String,
        /// The plan's scale.
        scale: Scale,
        /// What differs, with both values.
        what: String,
    },
    /// The builder failed (a bug in the builder).
    #[error("building model `{name}`")]
    Build {
        /// The model.
        name: String,
        /// Why.
        #[source]
        source: Box<BuildError>,
    },
    /// Creating the upload queue failed.
    #[error("creating the CUDA stream that uploads the weights")]
    Queue(#[source] DriverError),
    /// Loading a model instance failed.
    #[error("loading instance {instance} of model `{name}` for {class} requests")]
    Load {
        /// The model.
        name: String,
        /// Which copy.
        instance: usize,
        /// `real-time` or `best-effort`.
        class: &'static str,
        /// Why.
        #[source]
        source: Box<LoadError>,
    },
}

/// Making the builders' registry failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A builder failed.
    #[error("building model `{name}`")]
    Build {
        /// The model.
        name: &'static str,
        /// Why.
        #[source]
        source: Box<BuildError>,
    },
    /// Its manifest could not be made or loaded.
    #[error("exporting the manifest of model `{name}`")]
    Export {
        /// The model.
        name: &'static str,
        /// Why.
        #[source]
        source: Box<ExportError>,
    },
    /// The registry refused the manifests.
    #[error("registering the builders' manifests")]
    Registry(#[source] ModelError),
    /// An imported graph does not lower to the kernel library.
    #[error("model `{name}` (an imported graph) cannot run on the CUDA kernel library")]
    Lower {
        /// The model.
        name: String,
        /// Why.
        #[source]
        source: Box<LowerError>,
    },
    /// Its manifest could not be made.
    #[error("exporting the manifest of model `{name}` (an imported graph)")]
    ExportGraph {
        /// The model.
        name: String,
        /// Why.
        #[source]
        source: Box<ExportError>,
    },
    /// An ONNX file of the folder could not be read.
    #[error("{path}: {why}")]
    Onnx {
        /// The file or folder.
        path: std::path::PathBuf,
        /// What is wrong and the fix.
        why: String,
    },
}

/// Models served from imported graphs instead of builders: each registry
/// name with its lowered plan and the graph's own weights.
pub type GraphModels = HashMap<String, (Plan, Weights)>;

/// The registry of every built model ([`MODEL_NAMES`]) at `scale`, each
/// replaced by the imported graph of the same registry name in `graphs`
/// (`vgg19_small` at Small scale, `vgg19` at Full; at batch 1), and every
/// other graph of `graphs` (e.g. `yolov3_small`) added; with the lowered
/// plans and weights to serve them ([`CudaServer::with_graphs`]). Kernel
/// times are estimated as for the builders.
pub fn graph_registry(
    scale: Scale,
    graphs: &[(String, sluice_graph::Static)],
) -> Result<(ModelRegistry, GraphModels), RegistryError> {
    let mut parts = Vec::with_capacity(MODEL_NAMES.len() + graphs.len());
    let mut plans = GraphModels::new();
    for (name, s) in graphs {
        let low = lower_graph(s, name).map_err(|source| RegistryError::Lower {
            name: name.clone(),
            source: Box::new(source),
        })?;
        let built = BuiltModel::from_plan(
            low.plan,
            scale,
            format!("the imported graph `{name}` at batch {}", s.batch()),
        );
        let m = built
            .manifest()
            .map_err(|source| RegistryError::ExportGraph {
                name: name.clone(),
                source: Box::new(source),
            })?;
        parts.push((m.file, m.manifest, m.memory));
        plans.insert(name.clone(), (built.plan().clone(), low.weights));
    }
    for name in MODEL_NAMES {
        let built =
            build(name, &BuildOptions { scale }).map_err(|source| RegistryError::Build {
                name,
                source: Box::new(source),
            })?;
        if plans.contains_key(built.plan().name()) {
            continue;
        }
        let m = built.manifest().map_err(|source| RegistryError::Export {
            name,
            source: Box::new(source),
        })?;
        parts.push((m.file, m.manifest, m.memory));
    }
    let reg = ModelRegistry::from_parts(parts).map_err(RegistryError::Registry)?;
    Ok((reg, plans))
}

/// Every `*.onnx` file of `dir` (in name order) as a graph at batch 1,
/// named by its file stem (`make-disb-models.py --small` writes
/// `vgg19_small.onnx`, ...), for [`graph_registry`].
pub fn onnx_graphs(
    dir: &std::path::Path,
) -> Result<Vec<(String, sluice_graph::Static)>, RegistryError> {
    let bad = |path: &std::path::Path, why: String| RegistryError::Onnx {
        path: path.to_owned(),
        why,
    };
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| {
            bad(
                dir,
                format!("cannot list it: {e}; give a folder of ONNX files"),
            )
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(bad(
            dir,
            "holds no .onnx file; make the DISB models with scripts/onnx/make-disb-models.py"
                .into(),
        ));
    }
    files
        .iter()
        .map(|p| {
            let m = sluice_onnx::load(p, &sluice_onnx::Options::default())
                .map_err(|e| bad(p, e.to_string()))?;
            let s = m.graph.specialize(1).map_err(|e| bad(p, e.to_string()))?;
            let name = p
                .file_stem()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            Ok((name, s))
        })
        .collect()
}

/// The registry of every built model ([`MODEL_NAMES`]) at `scale`, with
/// kernel times estimated for an H100 ([`sluice_nn::builders`]'s roofline
/// estimate): what the CUDA backend serves unless `models.dir` gives
/// measured manifests.
pub fn builder_registry(scale: Scale) -> Result<ModelRegistry, RegistryError> {
    let mut parts = Vec::with_capacity(MODEL_NAMES.len());
    for name in MODEL_NAMES {
        let built =
            build(name, &BuildOptions { scale }).map_err(|source| RegistryError::Build {
                name,
                source: Box::new(source),
            })?;
        let m = built.manifest().map_err(|source| RegistryError::Export {
            name,
            source: Box::new(source),
        })?;
        parts.push((m.file, m.manifest, m.memory));
    }
    ModelRegistry::from_parts(parts).map_err(RegistryError::Registry)
}

/// The builder whose `scale` plan is named `name` (`vgg19`, or
/// `vgg19_small` at Small scale).
pub fn builder_of(name: &str, scale: Scale) -> Option<&'static str> {
    let base = match scale {
        Scale::Full => name,
        Scale::Small => name.strip_suffix("_small")?,
    };
    MODEL_NAMES.into_iter().find(|&n| n == base)
}

/// A [`CudaServer`] on the fake driver, whose kernels run the
/// [`sluice_nn::reference`] CPU functions on fake device memory
/// ([`fake_abi`](super::plan_exec::fake_abi), default timings): the whole
/// job path (policy, virtual queues, preemption flag, copies, pinned
/// buffers) without a GPU. Every kernel's virtual time passes as the
/// device is polled. For tests and demonstrations only: it is slow (the
/// CPU computes every layer) and its clock is not real time.
#[cfg(any(test, feature = "test-util"))]
pub fn fake_server(
    kind: PolicyKind,
    models: Arc<ModelRegistry>,
    opts: &ServeOptions,
) -> Result<CudaServer, FakeServerError> {
    let (gpu, lib, _) = fake_gpu()?;
    Ok(CudaServer::new(
        gpu,
        &lib,
        kind,
        models,
        opts,
        "fake CUDA device (CPU kernels)",
        shm_proto::now_ns(),
    )?)
}

/// [`fake_server`], serving the models `graphs` names from their lowered
/// plans and own weights ([`graph_registry`], [`CudaServer::with_graphs`]):
/// an ONNX model's whole request path on the fake driver.
#[cfg(any(test, feature = "test-util"))]
pub fn fake_server_with_graphs(
    kind: PolicyKind,
    models: Arc<ModelRegistry>,
    opts: &ServeOptions,
    graphs: &GraphModels,
) -> Result<CudaServer, FakeServerError> {
    let (gpu, lib, _) = fake_gpu()?;
    Ok(CudaServer::with_graphs(
        gpu,
        &lib,
        kind,
        models,
        opts,
        graphs,
        "fake CUDA device (CPU kernels)",
        shm_proto::now_ns(),
    )?)
}

/// The fake device of [`fake_server`]: the scheduler's device, the kernel
/// library, and another handle on the fake driver (to advance or break it).
#[cfg(any(test, feature = "test-util"))]
fn fake_gpu() -> Result<(CudaGpu, KernelLibrary, super::fake::FakeDriver), FakeServerError> {
    use super::driver::CuDriver;
    use super::fake::{FakeDriver, FakeKernel};
    use super::gpu::{Kill, SYNTHETIC_KERNEL};
    use super::plan_exec::fake_abi;
    let mut d = FakeDriver::default();
    fake_abi::define(&d, fake_abi::FakeTimes::default());
    // `sluice_synthetic(ctl, kidx, float* sink, u64 block_ns)`: block_ns at
    // byte 12 of its own arguments.
    let synth = d.kernel_handle(
        SYNTHETIC_KERNEL,
        FakeKernel::new(0).timed_by_arg(12).polling(1_000),
    );
    let m = d
        .load_module("fake kernel library")
        .map_err(FakeServerError::Driver)?;
    let lib = KernelLibrary::from_module(&mut d, m).map_err(FakeServerError::Library)?;
    let probe = d.clone();
    let gpu = CudaGpu::new(Box::new(d), synth, DeviceProfile::h100(), Kill::Cooperative)
        .map_err(FakeServerError::Setup)?;
    Ok((gpu, lib, probe))
}

/// [`fake_server`] failed.
#[derive(Debug, thiserror::Error)]
#[cfg(any(test, feature = "test-util"))]
pub enum FakeServerError {
    /// The fake driver refused a call (a bug).
    #[error("fake driver")]
    Driver(#[source] DriverError),
    /// The fake library is incomplete (a bug).
    #[error("fake kernel library")]
    Library(#[source] super::plan_exec::LibraryError),
    /// The scheduler's device could not be set up.
    #[error(transparent)]
    Setup(super::gpu::SetupError),
    /// The models could not be loaded.
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// Priority classes, as pool indexes.
const CLASSES: [Priority; 2] = [Priority::RealTime, Priority::BestEffort];

fn class_index(p: Priority) -> usize {
    match p {
        Priority::RealTime => 0,
        _ => 1,
    }
}

fn class_name(p: Priority) -> &'static str {
    match p {
        Priority::RealTime => "real-time",
        _ => "best-effort",
    }
}

/// The loaded copies of one model for one priority class.
#[derive(Debug)]
struct Pool {
    instances: Vec<DeviceModel>,
    free: Vec<usize>,
    waiting: EdfQueue<Job>,
}

/// A request the policy is running.
#[derive(Debug)]
struct Running {
    job: Job,
    pool: usize,
    inst: usize,
    started: Option<Ns>,
    /// Its client went away: no completion.
    cancelled: bool,
    /// A launch could not be resolved, or the policy failed the task
    /// ([`Ctx::fail`]): completes with `DEVICE_ERROR`.
    failed: bool,
}

/// The daemon's [`Backend`] on CUDA (see the module docs).
pub struct CudaServer {
    name: String,
    gpu: CudaGpu,
    policy: Box<dyn Policy>,
    models: Arc<ModelRegistry>,
    /// Index `model * 2 + class`.
    pools: Vec<Pool>,
    instances: usize,
    running: HashMap<TaskId, Running>,
    next_task: TaskId,
    events: Vec<Event>,
    fresh: Vec<TaskDone>,
    /// Tasks the policy failed, for the next poll.
    failed: Vec<TaskFailed>,
    /// Tasks the policy dropped for a passed deadline, for the next poll.
    missed: Vec<TaskMissed>,
    /// The latest `CLOCK_MONOTONIC` time the dispatcher passed in.
    seen_ns: u64,
    /// Completions decided outside the policy (errors), for the next poll.
    ready: Vec<Finished>,
    stats: PolicyStats,
    /// `CLOCK_MONOTONIC` ns minus device ns, so device times map onto the
    /// dispatcher's clock.
    mono_offset: i128,
    buf: Vec<u8>,
    /// Set when the driver failed: every request fails from then on.
    broken: Option<String>,
    _upload: VirtualQueue,
}

impl std::fmt::Debug for CudaServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaServer")
            .field("name", &self.name)
            .field("running", &self.running.len())
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

/// Checks that `m`'s manifest describes `plan`.
fn check_manifest(
    m: &Model,
    plan: &sluice_nn::builders::Plan,
    scale: Scale,
) -> Result<(), ServeError> {
    let mismatch = |what: String| ServeError::Mismatch {
        name: m.name().to_owned(),
        scale,
        what,
    };
    let steps = plan.steps().len();
    if m.manifest.kernels.len() != steps {
        return Err(mismatch(format!(
            "{} kernels in the manifest, {steps} steps in the plan",
            m.manifest.kernels.len()
        )));
    }
    let input = plan.buffer(plan.input()).bytes();
    if m.input_bytes != input {
        return Err(mismatch(format!(
            "input_bytes {} in the manifest, {input} in the plan",
            m.input_bytes
        )));
    }
    let output = plan.buffer(plan.output()).bytes();
    if m.output_bytes != output {
        return Err(mismatch(format!(
            "output_bytes {} in the manifest, {output} in the plan",
            m.output_bytes
        )));
    }
    Ok(())
}

impl CudaServer {
    /// Loads every model of `models` on `gpu`'s device `opts.instances`
    /// times per priority class, with `lib`'s kernels, under policy `kind`.
    /// `mono_now` is the current `CLOCK_MONOTONIC` time (read just before
    /// the call: it is paired with the device's clock at entry). `device`
    /// names the GPU in [`Backend::name`].
    pub fn new(
        gpu: CudaGpu,
        lib: &KernelLibrary,
        kind: PolicyKind,
        models: Arc<ModelRegistry>,
        opts: &ServeOptions,
        device: &str,
        mono_now: u64,
    ) -> Result<Self, ServeError> {
        Self::with_graphs(
            gpu,
            lib,
            kind,
            models,
            opts,
            &GraphModels::new(),
            device,
            mono_now,
        )
    }

    /// [`CudaServer::new`], with the models `graphs` names run from their
    /// lowered plans and own weights ([`graph_registry`]) and every other
    /// one from its builder.
    #[allow(clippy::too_many_arguments)]
    pub fn with_graphs(
        mut gpu: CudaGpu,
        lib: &KernelLibrary,
        kind: PolicyKind,
        models: Arc<ModelRegistry>,
        opts: &ServeOptions,
        graphs: &GraphModels,
        device: &str,
        mono_now: u64,
    ) -> Result<Self, ServeError> {
        if kind == PolicyKind::RtOnly {
            return Err(ServeError::RtOnly);
        }
        // The two clocks are read together, before the models load (seconds
        // on a GPU): device times then map onto `mono_now`'s clock.
        let mono_offset = i128::from(mono_now) - i128::from(gpu.now());
        let policy = sluice_sched::make_policy(kind, &models);
        let instances = opts.instances.max(1);
        let mut upload = VirtualQueue::new(
            gpu.driver(),
            StreamPriority::BestEffort,
            QueueConfig::default(),
            KillMechanism::None,
        )
        .map_err(ServeError::Queue)?;
        let mut pools = Vec::with_capacity(models.len() * 2);
        let mut largest = 0usize;
        for (_, m) in models.iter() {
            let name = m.name();
            let (plan, weights) = match graphs.get(name) {
                Some((plan, weights)) => (plan.clone(), weights.clone()),
                None => {
                    let Some(builder) = builder_of(name, opts.scale) else {
                        return Err(ServeError::NoBuilder {
                            name: name.to_owned(),
                            scale: opts.scale,
                        });
                    };
                    let built =
                        build(builder, &BuildOptions { scale: opts.scale }).map_err(|source| {
                            ServeError::Build {
                                name: name.to_owned(),
                                source: Box::new(source),
                            }
                        })?;
                    let w = built.weights(opts.weights_seed);
                    (built.plan().clone(), w)
                }
            };
            check_manifest(m, &plan, opts.scale)?;
            for class in CLASSES {
                let mut loaded = Vec::with_capacity(instances);
                for instance in 0..instances {
                    let dm = DeviceModel::load(
                        gpu.driver(),
                        &mut upload,
                        &plan,
                        &weights,
                        lib,
                        &opts.load,
                    )
                    .map_err(|source| ServeError::Load {
                        name: name.to_owned(),
                        instance,
                        class: class_name(class),
                        source: Box::new(source),
                    })?;
                    largest = largest.max(dm.input_bytes()).max(dm.output_bytes());
                    loaded.push(dm);
                }
                tracing::info!(
                    model = name,
                    class = class_name(class),
                    instances,
                    "CUDA: model loaded"
                );
                pools.push(Pool {
                    free: (0..instances).rev().collect(),
                    instances: loaded,
                    waiting: EdfQueue::new(),
                });
            }
        }
        Ok(Self {
            name: format!("CUDA {device}, policy {kind}"),
            gpu,
            policy,
            models,
            pools,
            instances,
            running: HashMap::new(),
            next_task: 0,
            events: Vec::new(),
            fresh: Vec::new(),
            failed: Vec::new(),
            missed: Vec::new(),
            seen_ns: 0,
            ready: Vec::new(),
            stats: PolicyStats::default(),
            mono_offset,
            buf: vec![0u8; largest],
            broken: None,
            _upload: upload,
        })
    }

    /// Preemption latencies and relaunches so far.
    pub fn stats(&self) -> &PolicyStats {
        &self.stats
    }

    /// The scheduler's device, e.g. to reach a fake driver in tests.
    pub fn gpu(&mut self) -> &mut CudaGpu {
        &mut self.gpu
    }

    /// The device time of `CLOCK_MONOTONIC` `mono_ns` (0 if before the
    /// device's start).
    fn device_ns(&self, mono_ns: u64) -> Ns {
        u64::try_from((i128::from(mono_ns) - self.mono_offset).max(0)).unwrap_or(u64::MAX)
    }

    fn mono(&self, device_ns: Ns) -> u64 {
        u64::try_from((i128::from(device_ns) + self.mono_offset).max(0)).unwrap_or(u64::MAX)
    }

    fn error_completion(&self, job: &Job, status: u32) -> Finished {
        let now = self.mono(self.gpu.now());
        Finished {
            client: job.client,
            request_id: job.request_id,
            status,
            output_len: 0,
            received_ns: job.received_ns,
            started_ns: now,
            finished_ns: now,
        }
    }

    /// Runs one policy callback with the device bound to the running
    /// requests' model instances.
    fn with_policy(&mut self, f: impl FnOnce(&mut dyn Policy, &mut Ctx<'_>)) {
        let mut bound = Bound {
            gpu: &mut self.gpu,
            running: &mut self.running,
            pools: &self.pools,
        };
        let mut cx = Ctx {
            gpu: &mut bound,
            models: &self.models,
            done: &mut self.fresh,
            failed: &mut self.failed,
            missed: &mut self.missed,
            stats: &mut self.stats,
        };
        f(&mut *self.policy, &mut cx);
    }

    /// Starts waiting requests of pool `p` while it has free instances.
    fn admit(&mut self, p: usize) {
        loop {
            // The later of the device's clock and the dispatcher's: a fake
            // device's clock runs behind the wall clock.
            let now_mono = self.mono(self.gpu.now()).max(self.seen_ns);
            let pool = &mut self.pools[p];
            let (Some(&inst), false) = (pool.free.last(), pool.waiting.is_empty()) else {
                return;
            };
            let Some(job) = pool.waiting.pop() else {
                return;
            };
            if job.deadline_ns != 0 && now_mono > job.deadline_ns {
                // Late before it started: nothing copied, nothing launched.
                let f = self.error_completion(&job, status::DEADLINE_MISSED);
                self.ready.push(f);
                continue;
            }
            // The kernel library runs one input and one output at batch 1;
            // such a typed request's spans are the job's own (see `Job`).
            if job
                .tensors
                .as_ref()
                .is_some_and(|t| t.batch != 1 || t.inputs.len() != 1 || t.outputs.len() != 1)
            {
                tracing::warn!(
                    ?job,
                    "CUDA: typed requests of several tensors or batch over 1 are not served \
                     by the CUDA backend yet; use one input and one output at batch 1"
                );
                let f = self.error_completion(&job, status::DEVICE_ERROR);
                self.ready.push(f);
                continue;
            }
            let dm = &pool.instances[inst];
            let n = dm.input_bytes();
            let input = &mut self.buf[..n];
            let read = u64::try_from(n).is_ok_and(|n| n == job.input_len)
                && job.memory.read(job.input_off, input);
            if !read {
                tracing::warn!(?job, "CUDA: the request's input could not be read");
                let f = self.error_completion(&job, status::DEVICE_ERROR);
                self.ready.push(f);
                continue;
            }
            if let Err(e) = dm.write_input_bytes(self.gpu.driver(), input) {
                tracing::error!(?job, "CUDA: {e}");
                let f = self.error_completion(&job, status::DEVICE_ERROR);
                self.ready.push(f);
                continue;
            }
            self.pools[p].free.pop();
            let id = self.next_task;
            self.next_task += 1;
            let task = Task {
                id,
                // The instance is the policy's client (see the module docs).
                client: (p * self.instances + inst) as u32,
                priority: job.priority,
                model: job.model,
                arrival: self.gpu.now(),
                deadline: (job.deadline_ns != 0).then(|| self.device_ns(job.deadline_ns)),
            };
            self.running.insert(
                id,
                Running {
                    job,
                    pool: p,
                    inst,
                    started: None,
                    cancelled: false,
                    failed: false,
                },
            );
            self.with_policy(|p, cx| arrive(p, cx, task));
        }
    }

    /// Polls the device and hands its events to the policy.
    fn advance(&mut self) {
        if self.broken.is_some() {
            return;
        }
        if let Err(e) = self.gpu.poll() {
            self.fail_everything(format!("CUDA device failed: {e}"));
            return;
        }
        let mut events = std::mem::take(&mut self.events);
        events.extend(self.gpu.drain_events());
        for ev in events.drain(..) {
            if let Event::KernelStarted { t, kernel, .. } = &ev {
                let (task, _) = untag(kernel.tag);
                if let Some(r) = self.running.get_mut(&task)
                    && r.started.is_none()
                {
                    r.started = Some(*t);
                }
            }
            self.with_policy(|p, cx| p.on_event(cx, &ev));
        }
        self.events = events;
    }

    /// The driver failed: every request fails, now and from now on.
    fn fail_everything(&mut self, why: String) {
        tracing::error!("{why}; every request will complete with DEVICE_ERROR");
        let mut jobs: Vec<Job> = self
            .running
            .drain()
            .filter(|(_, r)| !r.cancelled)
            .map(|(_, r)| r.job)
            .collect();
        for pool in &mut self.pools {
            jobs.extend(pool.waiting.drain());
        }
        for job in &jobs {
            let f = self.error_completion(job, status::DEVICE_ERROR);
            self.ready.push(f);
        }
        self.fresh.clear();
        self.failed.clear();
        self.broken = Some(why);
    }

    /// Turns the policy's finished and failed tasks into completions.
    fn complete(&mut self, done: &mut Vec<Finished>) {
        // A task the policy failed completes as one whose launch could not
        // be resolved: DEVICE_ERROR when the policy gave up on it.
        for f in self.failed.drain(..) {
            if let Some(r) = self.running.get_mut(&f.task.id) {
                r.failed = true;
            }
            self.fresh.push(TaskDone {
                task: f.task,
                finished: f.at,
            });
        }
        // A task the policy dropped for its deadline launched nothing: its
        // instance is free, and it completes with DEADLINE_MISSED.
        for m in std::mem::take(&mut self.missed) {
            let Some(r) = self.running.remove(&m.task.id) else {
                continue;
            };
            self.pools[r.pool].free.push(r.inst);
            if !r.cancelled {
                let at = self.mono(m.at);
                done.push(Finished {
                    status: status::DEADLINE_MISSED,
                    started_ns: at,
                    finished_ns: at,
                    ..self.error_completion(&r.job, status::DEADLINE_MISSED)
                });
            }
        }
        let mut fresh = std::mem::take(&mut self.fresh);
        for d in fresh.drain(..) {
            let Some(r) = self.running.remove(&d.task.id) else {
                continue;
            };
            self.pools[r.pool].free.push(r.inst);
            if r.cancelled {
                continue;
            }
            let finished = self.mono(d.finished);
            let started = r.started.map_or(finished, |s| self.mono(s));
            // A request that started runs to its end and returns its
            // output, however late it finished.
            let (st, output_len) = if r.failed {
                (status::DEVICE_ERROR, 0)
            } else {
                self.write_output(&r)
            };
            done.push(Finished {
                client: r.job.client,
                request_id: r.job.request_id,
                status: st,
                output_len,
                received_ns: r.job.received_ns,
                started_ns: started,
                finished_ns: finished,
            });
        }
        self.fresh = fresh;
    }

    fn write_output(&mut self, r: &Running) -> (u32, u64) {
        let dm = &self.pools[r.pool].instances[r.inst];
        let n = dm.output_bytes();
        let out = &mut self.buf[..n];
        if let Err(e) = dm.read_output_bytes(self.gpu.driver(), out) {
            tracing::error!(job = ?r.job, "CUDA: {e}");
            return (status::DEVICE_ERROR, 0);
        }
        let fits = u64::try_from(n).is_ok_and(|n| n <= r.job.output_len);
        if !fits || !r.job.memory.write(r.job.output_off, out) {
            tracing::warn!(job = ?r.job, "CUDA: the request's output could not be written");
            return (status::DEVICE_ERROR, 0);
        }
        (status::OK, n as u64)
    }
}

impl Backend for CudaServer {
    fn name(&self) -> &str {
        &self.name
    }

    fn submit(&mut self, job: Job, now_ns: u64) {
        self.seen_ns = self.seen_ns.max(now_ns);
        if self.broken.is_some() {
            let f = self.error_completion(&job, status::DEVICE_ERROR);
            self.ready.push(f);
            return;
        }
        let p = job.model as usize * 2 + class_index(job.priority);
        if p >= self.pools.len() {
            tracing::warn!(?job, "CUDA: the request names no loaded model");
            let f = self.error_completion(&job, status::DEVICE_ERROR);
            self.ready.push(f);
            return;
        }
        self.advance();
        self.pools[p]
            .waiting
            .push((job.deadline_ns != 0).then_some(job.deadline_ns), job);
        self.admit(p);
    }

    fn poll(&mut self, now_ns: u64, done: &mut Vec<Finished>) {
        self.seen_ns = self.seen_ns.max(now_ns);
        if self.broken.is_none() && self.gpu.busy() {
            // A real driver spins a moment; the fake one moves its clock
            // to its next change, so a fake device runs as it is polled.
            self.gpu.driver().wait_for_progress();
        }
        self.advance();
        self.complete(done);
        for p in 0..self.pools.len() {
            if !self.pools[p].waiting.is_empty() {
                self.admit(p);
            }
        }
        done.append(&mut self.ready);
        if self.running.is_empty() && !self.gpu.busy() {
            self.gpu.reclaim();
        }
    }

    fn next_event_ns(&self) -> Option<u64> {
        // The GPU reports completions only when polled: poll again at once
        // while it has work (the dispatcher's busy-poll, as REEF's).
        let busy = !self.ready.is_empty()
            || !self.fresh.is_empty()
            || !self.failed.is_empty()
            || !self.missed.is_empty()
            || (self.broken.is_none() && (self.gpu.busy() || !self.running.is_empty()));
        busy.then(|| self.mono(self.gpu.now()))
    }

    fn cancel_client(&mut self, client: u32) -> usize {
        let mut n = 0;
        for pool in &mut self.pools {
            let before = pool.waiting.len();
            pool.waiting.retain(|j| j.client != client);
            n += before - pool.waiting.len();
        }
        for r in self.running.values_mut() {
            if r.job.client == client && !r.cancelled {
                r.cancelled = true;
                n += 1;
            }
        }
        let before = self.ready.len();
        self.ready.retain(|f| f.client != client);
        n + before - self.ready.len()
    }

    fn queued(&self) -> usize {
        self.pools.iter().map(|p| p.waiting.len()).sum::<usize>()
            + self.running.values().filter(|r| !r.cancelled).count()
            + self.ready.len()
    }

    fn simulated(&self) -> bool {
        false
    }
}

/// [`CudaGpu`] as the policy sees it while serving: a launch of kernel `i`
/// of a task runs step `i` of the task's model instance.
struct Bound<'a> {
    gpu: &'a mut CudaGpu,
    running: &'a mut HashMap<TaskId, Running>,
    pools: &'a [Pool],
}

impl Gpu for Bound<'_> {
    fn profile(&self) -> &DeviceProfile {
        self.gpu.profile()
    }
    fn now(&self) -> Ns {
        self.gpu.now()
    }
    fn create_stream(&mut self, priority: i32) -> Result<StreamId, GpuError> {
        self.gpu.create_stream(priority)
    }
    fn set_dq_capacity(&mut self, stream: StreamId, capacity: u32) -> Result<(), GpuError> {
        self.gpu.set_dq_capacity(stream, capacity)
    }
    fn set_packed_placement(&mut self, stream: StreamId, packed: bool) -> Result<(), GpuError> {
        self.gpu.set_packed_placement(stream, packed)
    }
    fn launch(&mut self, stream: StreamId, k: KernelLaunch) -> Result<KernelRef, GpuError> {
        let (task, step) = untag(k.tag);
        let commands = self.running.get(&task).and_then(|r| {
            self.pools
                .get(r.pool)?
                .instances
                .get(r.inst)?
                .step_commands(step)
        });
        match commands {
            Some(c) => self.gpu.launch_commands(stream, k, c),
            None => {
                // A policy bug: it launched a kernel the plan does not
                // have. The task fails; a one-block zero-time stand-in
                // keeps the stream's order for the policy.
                tracing::error!(task, step, "CUDA: a launch names no step of a loaded model");
                if let Some(r) = self.running.get_mut(&task) {
                    r.failed = true;
                }
                self.gpu.launch(
                    stream,
                    KernelLaunch {
                        grid_blocks: 1,
                        block_time_ns: 0,
                        wave_ns: Vec::new(),
                        ..k
                    },
                )
            }
        }
    }
    fn launch_padded(
        &mut self,
        stream: StreamId,
        k: KernelLaunch,
        host: StreamId,
        with: KernelRef,
    ) -> Result<KernelRef, GpuError> {
        self.gpu.launch_padded(stream, k, host, with)
    }
    fn preempt_reset(&mut self, stream: StreamId) -> Result<HostReset, GpuError> {
        self.gpu.preempt_reset(stream)
    }
    fn wait_based_preempt(&mut self, stream: StreamId) -> Result<(), GpuError> {
        self.gpu.wait_based_preempt(stream)
    }
    fn resume(&mut self, stream: StreamId) -> Result<(), GpuError> {
        self.gpu.resume(stream)
    }
    fn supports_fused_launch(&self) -> bool {
        self.gpu.supports_fused_launch()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::CuDriver;
    use crate::fake::{FakeDriver, FakeKernel};
    use crate::gpu::{Kill, SYNTHETIC_KERNEL};
    use sluice_backend::TensorMemory;
    use sluice_backend::testmem::{BrokenMemory, VecMemory};
    use sluice_nn::builders::run_cpu;

    const SEED: u64 = 5;

    struct Rig {
        srv: CudaServer,
        d: FakeDriver,
    }

    fn small_registry() -> Arc<ModelRegistry> {
        Arc::new(builder_registry(Scale::Small).unwrap())
    }

    fn server(reg: Arc<ModelRegistry>, kind: PolicyKind, instances: usize) -> Rig {
        let (gpu, lib, d) = fake_gpu().unwrap();
        let opts = ServeOptions {
            scale: Scale::Small,
            instances,
            weights_seed: SEED,
            load: LoadOptions::default(),
        };
        let srv = CudaServer::new(gpu, &lib, kind, reg, &opts, "fake", 0).unwrap();
        Rig { srv, d }
    }

    /// Loading the models takes device time (on the fake, every weight
    /// copy's virtual time; on an H200 seconds): the dispatcher's clock is
    /// paired with the device's before it, so a completion's device times
    /// are not shifted back by the load (when they were, on the H200 every
    /// request's `finished_ns` fell before its `received_ns`).
    #[test]
    fn device_times_map_onto_the_clock_read_before_the_models_loaded() {
        let rig = server(small_registry(), PolicyKind::Reef, 1);
        let loaded_at = rig.srv.gpu.now();
        assert!(loaded_at > 0, "loading took no device time");
        // mono_now was 0 with the device clock at ~0: a device time maps to
        // itself, not to itself minus the load.
        assert_eq!(rig.srv.mono(loaded_at), loaded_at);
        rig.d.advance(1_000);
        assert_eq!(rig.srv.mono(rig.srv.gpu.now()), loaded_at + 1_000);
    }

    fn small(name: &str) -> sluice_nn::builders::BuiltModel {
        sluice_nn::builders::build_small(name).unwrap()
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    /// A request for `name` with input `input_seed`, and its arena.
    fn job(
        reg: &ModelRegistry,
        name: &str,
        client: u32,
        request_id: u64,
        priority: Priority,
        input_seed: u64,
    ) -> (Job, Arc<VecMemory>) {
        let (model, m) = reg.lookup(&format!("{name}_small")).unwrap();
        let input = f32_bytes(&small(name).random_input(input_seed));
        assert_eq!(input.len() as u64, m.input_bytes);
        let memory = VecMemory::new((m.input_bytes + m.output_bytes) as usize);
        assert!(memory.write(0, &input));
        let job = Job::untyped(
            client,
            request_id,
            model,
            priority,
            (m.input_bytes, m.output_bytes),
            memory.clone(),
            0,
        );
        (job, memory)
    }

    /// What the CPU reference computes for `name` on input `input_seed`.
    fn expected(name: &str, input_seed: u64) -> Vec<u8> {
        let b = small(name);
        f32_bytes(&run_cpu(b.plan(), &b.weights(SEED), &b.random_input(input_seed)).unwrap())
    }

    fn output(reg: &ModelRegistry, name: &str, mem: &VecMemory) -> Vec<u8> {
        let (_, m) = reg.lookup(&format!("{name}_small")).unwrap();
        mem.bytes(m.input_bytes as usize, m.output_bytes as usize)
    }

    /// Polls (advancing the fake clock) until `n` completions or idle.
    fn run(rig: &mut Rig, done: &mut Vec<Finished>, n: usize) {
        for _ in 0..1_000_000 {
            rig.srv.poll(0, done);
            if done.len() >= n || rig.srv.next_event_ns().is_none() {
                return;
            }
            rig.d.wait_for_progress();
        }
        panic!("the fake device never finished");
    }

    fn launches(d: &FakeDriver) -> usize {
        d.calls()
            .iter()
            .filter(|c| matches!(c, crate::fake::Call::Launch { .. }))
            .count()
    }

    /// On the fake driver: a request already late when it reaches the
    /// server completes with DEADLINE_MISSED and launches no kernel, under
    /// `reef`, `paella` and `streams`; one with room to spare runs.
    #[test]
    fn a_request_late_on_arrival_launches_no_kernel_on_the_fake_driver() {
        let reg = small_registry();
        for kind in [PolicyKind::Reef, PolicyKind::Paella, PolicyKind::Streams] {
            let mut rig = server(Arc::clone(&reg), kind, 1);
            let before = launches(&rig.d);
            let (mut late, late_mem) = job(&reg, "vgg19", 1, 0, Priority::RealTime, 3);
            // The device clock has passed 1 ns by the time the models loaded.
            late.deadline_ns = 1;
            rig.srv.submit(late, 0);
            let mut done = Vec::new();
            run(&mut rig, &mut done, 1);
            assert_eq!(done.len(), 1, "{kind}");
            assert_eq!(done[0].status, status::DEADLINE_MISSED, "{kind}");
            assert_eq!(done[0].output_len, 0, "{kind}");
            assert_eq!(launches(&rig.d), before, "{kind}: a kernel was launched");
            assert!(
                output(&reg, "vgg19", &late_mem).iter().all(|&b| b == 0),
                "{kind}: output written"
            );
            let (mut fine, fine_mem) = job(&reg, "vgg19", 2, 1, Priority::RealTime, 4);
            fine.deadline_ns = u64::MAX / 2;
            rig.srv.submit(fine, 0);
            done.clear();
            run(&mut rig, &mut done, 1);
            assert_eq!(done.len(), 1, "{kind}");
            assert_eq!(done[0].status, status::OK, "{kind}");
            assert!(launches(&rig.d) > before, "{kind}");
            assert_eq!(
                output(&reg, "vgg19", &fine_mem),
                expected("vgg19", 4),
                "{kind}"
            );
        }
    }

    /// An imported graph served in place of a builder's model: a small
    /// transformer-like graph (token ids to an embedding, a product of two
    /// activations, a softmax) replaces `bert_base_small` and a CNN-like one
    /// (a grouped convolution, a broadcast multiply, a concat) is added as
    /// `yolov3_small`; the server answers both with the CPU executor's
    /// output, and the builders' models still with their plans'.
    #[test]
    fn imported_graphs_are_served_in_place_of_the_builders_models() {
        use sluice_graph::{DType, Dim, GraphBuilder, Limits, Op, Tensor, Window};
        let rand = |n: usize, seed: u64| -> Vec<f32> {
            let mut r = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            (0..n)
                .map(|_| {
                    r ^= r << 13;
                    r ^= r >> 7;
                    r ^= r << 17;
                    (r >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
                })
                .collect()
        };
        let mut b = GraphBuilder::new(Limits::default());
        let ids = b
            .input("ids", DType::I64, vec![Dim::Fixed(1), Dim::Fixed(5)])
            .unwrap();
        let table = b
            .constant_value("table", Tensor::f32(vec![7, 4], rand(28, 1)).unwrap())
            .unwrap();
        let e = b
            .op(
                "emb",
                Op::Gather { axis: 0 },
                vec![Some(table), Some(ids)],
                "e",
            )
            .unwrap();
        let et = b
            .op(
                "et",
                Op::Transpose {
                    perm: Some(vec![0, 2, 1]),
                },
                vec![Some(e)],
                "et",
            )
            .unwrap();
        let q = b
            .op("qk", Op::MatMul, vec![Some(e), Some(et)], "q")
            .unwrap();
        b.node(
            "sm",
            Op::Softmax {
                axis: -1,
                log: false,
                coerce_2d: false,
            },
            vec![Some(q)],
            &["y"],
        )
        .unwrap();
        b.output("y");
        let text = b.build().unwrap().specialize(1).unwrap();
        let mut b = GraphBuilder::new(Limits::default());
        let x = b
            .input(
                "x",
                DType::F32,
                vec![Dim::Fixed(1), Dim::Fixed(4), Dim::Fixed(5), Dim::Fixed(5)],
            )
            .unwrap();
        let w = b
            .constant_value("w", Tensor::f32(vec![4, 2, 3, 3], rand(72, 2)).unwrap())
            .unwrap();
        let c = b
            .op(
                "conv",
                Op::Conv {
                    window: Window {
                        kernel: Some(vec![3, 3]),
                        strides: vec![1, 1],
                        pads: vec![1, 1, 1, 1],
                        dilations: vec![],
                        auto_pad: sluice_graph::AutoPad::NotSet,
                        ceil_mode: false,
                    },
                    group: 2,
                    act: None,
                },
                vec![Some(x), Some(w)],
                "c",
            )
            .unwrap();
        let k = b
            .constant_value("k", Tensor::f32(vec![4, 1, 1], rand(4, 3)).unwrap())
            .unwrap();
        let m = b
            .op(
                "mul",
                Op::Binary(sluice_graph::BinOp::Mul, None),
                vec![Some(c), Some(k)],
                "m",
            )
            .unwrap();
        b.node(
            "cat",
            Op::Concat { axis: 1 },
            vec![Some(m), Some(x)],
            &["z"],
        )
        .unwrap();
        b.output("z");
        let image = b.build().unwrap().specialize(1).unwrap();
        let graphs = vec![
            ("bert_base_small".to_owned(), text.clone()),
            ("yolov3_small".to_owned(), image.clone()),
        ];
        let (reg, plans) = graph_registry(Scale::Small, &graphs).unwrap();
        assert_eq!(reg.len(), MODEL_NAMES.len() + 1);
        let reg = Arc::new(reg);
        let (gpu, lib, d) = fake_gpu().unwrap();
        let opts = ServeOptions {
            scale: Scale::Small,
            instances: 1,
            weights_seed: SEED,
            load: LoadOptions::default(),
        };
        let srv = CudaServer::with_graphs(
            gpu,
            &lib,
            PolicyKind::Reef,
            Arc::clone(&reg),
            &opts,
            &plans,
            "fake",
            0,
        )
        .unwrap();
        let mut rig = Rig { srv, d };
        let id_vals = vec![3i64, 0, 6, 3, -1];
        let ids_t = Tensor::i64(vec![1, 5], id_vals.clone()).unwrap();
        let x_t = Tensor::f32(vec![1, 4, 5, 5], rand(100, 4)).unwrap();
        let cases: Vec<(&str, Vec<f32>, Vec<f32>)> = vec![
            (
                "bert_base_small",
                id_vals.iter().map(|&v| v as f32).collect(),
                text.run(&[("ids", &ids_t)]).unwrap()[0].1.to_f32_vec(),
            ),
            (
                "yolov3_small",
                x_t.to_f32_vec(),
                image.run(&[("x", &x_t)]).unwrap()[0].1.to_f32_vec(),
            ),
        ];
        let mut mems = Vec::new();
        for (i, (name, input, _)) in cases.iter().enumerate() {
            let (model, m) = reg.lookup(name).unwrap();
            let bytes = f32_bytes(input);
            assert_eq!(bytes.len() as u64, m.input_bytes, "{name}");
            let memory = VecMemory::new((m.input_bytes + m.output_bytes) as usize);
            assert!(memory.write(0, &bytes));
            let j = Job {
                client: 1,
                request_id: i as u64,
                model,
                priority: Priority::BestEffort,
                deadline_ns: 0,
                input_off: 0,
                input_len: m.input_bytes,
                output_off: m.input_bytes,
                output_len: m.output_bytes,
                memory: Arc::clone(&memory) as Arc<dyn TensorMemory>,
                received_ns: 0,
                tensors: None,
            };
            rig.srv.submit(j, 0);
            mems.push(memory);
        }
        let (vj, vmem) = job(&reg, "vgg19", 1, 2, Priority::RealTime, 8);
        rig.srv.submit(vj, 0);
        let mut done = Vec::new();
        run(&mut rig, &mut done, 3);
        assert_eq!(done.len(), 3);
        assert!(done.iter().all(|f| f.status == status::OK));
        for ((name, _, want), mem) in cases.iter().zip(&mems) {
            let (_, m) = reg.lookup(name).unwrap();
            let got: Vec<f32> = mem
                .bytes(m.input_bytes as usize, m.output_bytes as usize)
                .chunks_exact(4)
                .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            assert_eq!(got.len(), want.len(), "{name}");
            let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
            let err = got
                .iter()
                .zip(want)
                .fold(0f32, |a, (g, w)| a.max((g - w).abs()));
            assert!(
                scale > 0.0 && err <= 1e-4 * scale,
                "{name}: error {err} of {scale}"
            );
        }
        assert_eq!(output(&reg, "vgg19", &vmem), expected("vgg19", 8));
    }

    #[test]
    fn every_model_served_equals_the_cpu_reference_in_both_classes() {
        let reg = small_registry();
        let mut rig = server(Arc::clone(&reg), PolicyKind::Reef, 1);
        let mut mems = Vec::new();
        for (i, name) in MODEL_NAMES.iter().enumerate() {
            for (c, prio) in CLASSES.into_iter().enumerate() {
                let seed = 100 + (i * 2 + c) as u64;
                let (j, mem) = job(&reg, name, 1, mems.len() as u64, prio, seed);
                rig.srv.submit(j, 0);
                mems.push((name, seed, mem));
            }
        }
        let mut done = Vec::new();
        run(&mut rig, &mut done, mems.len());
        assert_eq!(done.len(), mems.len());
        assert_eq!(rig.srv.queued(), 0);
        for f in &done {
            let (name, seed, mem) = &mems[f.request_id as usize];
            assert_eq!(f.status, status::OK, "{name}");
            let (_, m) = reg.lookup(&format!("{name}_small")).unwrap();
            assert_eq!(f.output_len, m.output_bytes);
            assert_eq!(output(&reg, name, mem), expected(name, *seed), "{name}");
        }
    }

    #[test]
    fn a_real_time_request_preempts_best_effort_work_and_both_outputs_are_right() {
        let reg = small_registry();
        let mut rig = server(Arc::clone(&reg), PolicyKind::Reef, 1);
        let (be, be_mem) = job(&reg, "resnet152", 1, 0, Priority::BestEffort, 1);
        rig.srv.submit(be, 0);
        let mut done = Vec::new();
        // Let the best-effort model get well into its kernels.
        for _ in 0..60 {
            rig.srv.poll(0, &mut done);
            rig.d.wait_for_progress();
        }
        assert!(done.is_empty(), "resnet152 finished too soon for the test");
        let (rt, rt_mem) = job(&reg, "vgg19", 2, 1, Priority::RealTime, 2);
        rig.srv.submit(rt, 0);
        run(&mut rig, &mut done, 2);
        assert_eq!(done.len(), 2);
        assert_eq!(
            done[0].request_id, 1,
            "the real-time request finishes first"
        );
        assert!(done.iter().all(|f| f.status == status::OK));
        let stats = rig.srv.stats();
        assert!(!stats.preempt_latency_ns.is_empty(), "no preemption");
        // The kernel running when the flag was set was killed and ran again.
        assert!(stats.relaunched_kernels > 0, "{stats:?}");
        assert_eq!(output(&reg, "vgg19", &rt_mem), expected("vgg19", 2));
        assert_eq!(output(&reg, "resnet152", &be_mem), expected("resnet152", 1));
    }

    #[test]
    fn requests_of_one_model_wait_for_its_instance_and_none_is_corrupted() {
        let reg = small_registry();
        let mut rig = server(Arc::clone(&reg), PolicyKind::Streams, 1);
        let mems: Vec<_> = (0..3)
            .map(|i| {
                let (j, m) = job(
                    &reg,
                    "bert_base",
                    i,
                    u64::from(i),
                    Priority::BestEffort,
                    40 + u64::from(i),
                );
                rig.srv.submit(j, 0);
                m
            })
            .collect();
        assert_eq!(rig.srv.queued(), 3);
        let mut done = Vec::new();
        run(&mut rig, &mut done, 3);
        assert_eq!(done.len(), 3);
        for f in &done {
            assert_eq!(f.status, status::OK);
            let i = f.request_id as usize;
            assert_eq!(
                output(&reg, "bert_base", &mems[i]),
                expected("bert_base", 40 + i as u64)
            );
        }
    }

    #[test]
    fn a_departed_client_gets_no_completion_and_its_instance_serves_the_next() {
        let reg = small_registry();
        let mut rig = server(Arc::clone(&reg), PolicyKind::Reef, 1);
        let (a, _) = job(&reg, "gpt2", 7, 0, Priority::BestEffort, 1);
        let (b, _) = job(&reg, "gpt2", 7, 1, Priority::BestEffort, 2);
        let (c, c_mem) = job(&reg, "gpt2", 8, 2, Priority::BestEffort, 3);
        rig.srv.submit(a, 0);
        rig.srv.submit(b, 0);
        rig.srv.submit(c, 0);
        // One running, two waiting for the single instance.
        assert_eq!(rig.srv.cancel_client(7), 2);
        let mut done = Vec::new();
        run(&mut rig, &mut done, 1);
        assert_eq!(done.len(), 1);
        assert_eq!((done[0].client, done[0].status), (8, status::OK));
        assert_eq!(output(&reg, "gpt2", &c_mem), expected("gpt2", 3));
        assert_eq!(rig.srv.queued(), 0);
    }

    #[test]
    fn unreadable_memory_fails_only_that_request() {
        let reg = small_registry();
        let mut rig = server(Arc::clone(&reg), PolicyKind::Reef, 1);
        let (mut bad, _) = job(&reg, "vgg19", 1, 0, Priority::RealTime, 1);
        bad.memory = Arc::new(BrokenMemory);
        let (good, good_mem) = job(&reg, "vgg19", 2, 1, Priority::RealTime, 2);
        rig.srv.submit(bad, 0);
        rig.srv.submit(good, 0);
        let mut done = Vec::new();
        run(&mut rig, &mut done, 2);
        let by_id = |id| done.iter().find(|f| f.request_id == id).unwrap().status;
        assert_eq!(by_id(0), status::DEVICE_ERROR);
        assert_eq!(by_id(1), status::OK);
        assert_eq!(output(&reg, "vgg19", &good_mem), expected("vgg19", 2));
    }

    #[test]
    fn a_stream_the_driver_cannot_create_fails_that_request_and_the_next_is_served() {
        let reg = small_registry();
        for kind in [
            PolicyKind::Reef,
            PolicyKind::Seq,
            PolicyKind::Streams,
            PolicyKind::Paella,
        ] {
            let mut rig = server(Arc::clone(&reg), kind, 1);
            // The first request needs the policy's first stream: refused.
            rig.d.fail_stream_creation(1);
            let (first, _) = job(&reg, "vgg19", 1, 0, Priority::BestEffort, 1);
            rig.srv.submit(first, 0);
            let mut done = Vec::new();
            run(&mut rig, &mut done, 1);
            assert_eq!(done.len(), 1, "{kind}");
            assert_eq!(
                (done[0].request_id, done[0].status),
                (0, status::DEVICE_ERROR),
                "{kind}"
            );
            assert_eq!(rig.srv.queued(), 0, "{kind}");
            // The device carries on: the next request gets its stream.
            let (next, next_mem) = job(&reg, "vgg19", 1, 1, Priority::BestEffort, 2);
            rig.srv.submit(next, 0);
            let mut done = Vec::new();
            run(&mut rig, &mut done, 1);
            assert_eq!(done.len(), 1, "{kind}");
            assert_eq!(
                (done[0].request_id, done[0].status),
                (1, status::OK),
                "{kind}"
            );
            assert_eq!(
                output(&reg, "vgg19", &next_mem),
                expected("vgg19", 2),
                "{kind}"
            );
        }
    }

    #[test]
    fn a_best_effort_lane_that_cannot_be_created_fails_only_its_request() {
        let reg = small_registry();
        let mut rig = server(Arc::clone(&reg), PolicyKind::Reef, 1);
        // The real-time stream exists; the best-effort lane is refused.
        let (rt, rt_mem) = job(&reg, "vgg19", 1, 0, Priority::RealTime, 1);
        rig.srv.submit(rt, 0);
        let mut done = Vec::new();
        run(&mut rig, &mut done, 1);
        assert_eq!((done[0].request_id, done[0].status), (0, status::OK));
        rig.d.fail_stream_creation(1);
        let (be, _) = job(&reg, "resnet152", 2, 1, Priority::BestEffort, 2);
        let (rt2, rt2_mem) = job(&reg, "vgg19", 1, 2, Priority::RealTime, 3);
        let (be2, be2_mem) = job(&reg, "resnet152", 2, 3, Priority::BestEffort, 4);
        rig.srv.submit(be, 0);
        rig.srv.submit(rt2, 0);
        rig.srv.submit(be2, 0);
        let mut done = Vec::new();
        run(&mut rig, &mut done, 3);
        let by_id = |id| done.iter().find(|f| f.request_id == id).unwrap().status;
        assert_eq!(by_id(1), status::DEVICE_ERROR);
        assert_eq!(by_id(2), status::OK);
        assert_eq!(by_id(3), status::OK);
        assert_eq!(output(&reg, "vgg19", &rt_mem), expected("vgg19", 1));
        assert_eq!(output(&reg, "vgg19", &rt2_mem), expected("vgg19", 3));
        assert_eq!(
            output(&reg, "resnet152", &be2_mem),
            expected("resnet152", 4)
        );
        assert_eq!(rig.srv.queued(), 0);
    }

    #[test]
    fn a_lost_context_fails_every_request_instead_of_hanging_them() {
        let reg = small_registry();
        let mut rig = server(Arc::clone(&reg), PolicyKind::Reef, 1);
        for i in 0..3 {
            let (j, _) = job(&reg, "resnet152", 1, i, Priority::BestEffort, i);
            rig.srv.submit(j, 0);
        }
        let mut done = Vec::new();
        rig.srv.poll(0, &mut done);
        rig.d.lose_context();
        run(&mut rig, &mut done, 3);
        assert_eq!(done.len(), 3);
        assert!(done.iter().all(|f| f.status == status::DEVICE_ERROR));
        let (late, _) = job(&reg, "vgg19", 1, 9, Priority::RealTime, 0);
        rig.srv.submit(late, 0);
        let mut more = Vec::new();
        rig.srv.poll(0, &mut more);
        assert_eq!(more.len(), 1);
        assert_eq!(more[0].status, status::DEVICE_ERROR);
        assert_eq!(rig.srv.next_event_ns(), None);
    }

    #[test]
    fn manifests_that_do_not_match_a_builder_are_refused_with_the_fix() {
        // The built-in manifests describe the models' published kernel
        // sequences, not sluice's plans.
        let builtin = Arc::new(ModelRegistry::builtin());
        let e = CudaServer::new(
            dummy_gpu(),
            &KernelLibrary::default(),
            PolicyKind::Reef,
            builtin,
            &ServeOptions::default(),
            "fake",
            0,
        )
        .unwrap_err();
        let text = e.to_string();
        // The built-in registry also holds models with no builder (the
        // REEF artifact's alexnet, ...): refused by name, with the fix.
        assert!(
            matches!(
                e,
                ServeError::Mismatch { .. } | ServeError::NoBuilder { .. }
            ),
            "{text}"
        );
        assert!(text.contains("sluice profile --device cuda"), "{text}");

        let b = ModelRegistry::builtin();
        let (_, echo) = b.lookup("echo_small").unwrap();
        let only_echo = ModelRegistry::from_parts([(
            echo.file.clone(),
            echo.manifest.clone(),
            echo.memory.clone(),
        )])
        .unwrap();
        let e = CudaServer::new(
            dummy_gpu(),
            &KernelLibrary::default(),
            PolicyKind::Reef,
            Arc::new(only_echo),
            &ServeOptions::default(),
            "fake",
            0,
        )
        .unwrap_err();
        assert!(
            matches!(e, ServeError::NoBuilder { ref name, .. } if name == "echo_small"),
            "{e}"
        );
        assert!(e.to_string().contains("or remove this one from it"));

        // Full-scale manifests with Small-scale plans.
        let e = CudaServer::new(
            dummy_gpu(),
            &KernelLibrary::default(),
            PolicyKind::Reef,
            Arc::new(builder_registry(Scale::Full).unwrap()),
            &ServeOptions {
                scale: Scale::Small,
                ..ServeOptions::default()
            },
            "fake",
            0,
        )
        .unwrap_err();
        assert!(matches!(e, ServeError::NoBuilder { .. }), "{e}");

        let e = CudaServer::new(
            dummy_gpu(),
            &KernelLibrary::default(),
            PolicyKind::RtOnly,
            small_registry(),
            &ServeOptions::default(),
            "fake",
            0,
        )
        .unwrap_err();
        assert!(matches!(e, ServeError::RtOnly));
    }

    fn dummy_gpu() -> CudaGpu {
        let mut d = FakeDriver::default();
        let synth = d.kernel_handle(SYNTHETIC_KERNEL, FakeKernel::new(0));
        CudaGpu::new(Box::new(d), synth, DeviceProfile::h100(), Kill::Cooperative).unwrap()
    }
}
