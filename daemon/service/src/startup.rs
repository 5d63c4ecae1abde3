//! From a configuration to a running daemon: logging, the model registry,
//! the device backend, stop signals. Shared by the `sluiced` and `sluice`
//! binaries.
//!
//! Start-up runs, in order, [`Config::load`](crate::config::Config::load),
//! [`load_models`], [`choose_device`] (which backend this build and machine
//! can drive: the `cuda` feature check and the CUDA driver probe) and
//! [`open_device`]; [`make_device`] is the last two. `sluiced
//! --check-config` runs the same steps through [`check`], short of opening
//! a real GPU, so it refuses exactly what start-up would, with the same
//! message. Each step has its own error enum; [`StartupError`] is any of
//! them.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::cpu::CpuBackend;
use crate::backend::fifo::{FifoBackend, OpError};
use crate::backend::modeled::{ModeledBackend, ModeledError};
#[cfg(feature = "cuda")]
use crate::config::Fallback;
use crate::config::{BackendKind, Config, ConfigError, DaemonConfig, DeviceConfig, Scheduler};
use crate::repo::{LiveModels, ModelRepo, RepoError, Target};
use crate::server::StartError;
use crate::sys::DispatcherSetup;
use sluice_backend::Backend;
use sluice_cuda::serve::RegistryError;
use sluice_gpu::ProfileError;
use sluice_model::{ModelError, ModelRegistry};

/// Logs to stderr; `RUST_LOG` filters (default `info`).
pub fn init_tracing() {
    init_tracing_with("info");
}

/// Like [`init_tracing`], but only warnings unless `RUST_LOG` says otherwise
/// (for the `sluice` tool, whose output is its table).
pub fn init_tracing_quiet() {
    init_tracing_with("warn");
}

fn init_tracing_with(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}

/// What `[daemon]` asks of the OS for the dispatcher thread.
impl From<&DaemonConfig> for DispatcherSetup {
    fn from(d: &DaemonConfig) -> Self {
        Self {
            core: d.dispatcher_core,
            realtime_priority: d.realtime_priority,
            lock_memory: d.lock_memory,
        }
    }
}

// ---------------------------------------------------------------------------
// Models.

/// [`load_models`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadModelsError {
    /// `models.dir` could not be loaded (`device.backend = "sim"` or
    /// `"cpu"`).
    #[error(
        "cannot load the models of models.dir = \"{}\"; fix what is named below, or \
         remove models.dir to serve the models built into the binary",
        dir.display()
    )]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Which file or directory, and why.
        #[source]
        source: Box<RepoError>,
    },
    /// `device.backend = "cpu"` without `models.dir`.
    #[error(
        "device.backend = \"cpu\" runs ONNX models, and the models built into the binary are \
         manifests only; set models.dir to a folder of NAME.onnx files (docs/onnx.md), or set \
         device.backend = \"sim\""
    )]
    CpuWithoutDir,
    /// The CUDA backend's model builders failed (a bug in sluice).
    #[error(
        "cannot build the CUDA backend's models at device.model_scale = \"{scale}\"; this is a \
         bug in sluice, please report it with the cause below; meanwhile try the other \
         device.model_scale, or set device.backend = \"sim\""
    )]
    Builders {
        /// `device.model_scale`.
        scale: &'static str,
        /// Which model, and why.
        #[source]
        source: Box<RegistryError>,
    },
    /// `cluster.models` names a model that is not there.
    #[error(
        "cluster.models lists {model:?}, which is not among the models: {}; fix the name or \
         add its manifest to models.dir",
        available.join(", ")
    )]
    ClusterModel {
        /// The name.
        model: String,
        /// The models there are.
        available: Vec<String>,
    },
    /// The ONNX files of `models.dir` could not be imported or lowered for
    /// the CUDA backend.
    #[error(
        "cannot serve the ONNX files of models.dir = \"{}\" on the CUDA backend; fix or \
         remove the file named below (the CUDA kernel library refuses what it cannot lower, \
         naming the node), or serve them with device.backend = \"cpu\"",
        dir.display()
    )]
    CudaGraphs {
        /// The directory.
        dir: PathBuf,
        /// Which file or node, and why.
        #[source]
        source: Box<RegistryError>,
    },
    /// The manifests of `models.dir` could not replace the builders' ones
    /// (`device.backend = "cuda"`).
    #[error(
        "cannot put the model manifests of models.dir = \"{}\" over the CUDA backend's \
         models; fix what is named below, or remove models.dir to serve the builders' models",
        dir.display()
    )]
    Overrides {
        /// The directory.
        dir: PathBuf,
        /// Which file or directory, and why.
        #[source]
        source: Box<ModelError>,
    },
}

/// The models the config asks for; with `[cluster]` and `cluster.models`,
/// only those.
///
/// - `device.backend = "sim"`: `models.dir`, or the built-in set.
/// - `device.backend = "cuda"`: the models the CUDA backend can run, the
///   [`sluice_nn`] builders' at `device.model_scale`
///   ([`builder_registry`](sluice_cuda::serve::builder_registry),
///   kernel times estimated), each replaced by the manifest of the same
///   name in `models.dir` when there is one (e.g. measured by
///   `sluice profile --device cuda`). The same registry is used when the
///   daemon falls back to the simulated GPU (`device.fallback = "sim"`), so
///   clients see the same models either way.
pub fn load_models(config: &Config) -> Result<ModelRegistry, LoadModelsError> {
    let all = load_all_models(config)?;
    let wanted = &config.cluster.models;
    if !config.cluster.enabled() || wanted.is_empty() {
        return Ok(all);
    }
    if let Some(missing) = wanted.iter().find(|m| all.lookup(m).is_none()) {
        return Err(LoadModelsError::ClusterModel {
            model: missing.clone(),
            available: all.iter().map(|(_, m)| m.name().to_owned()).collect(),
        });
    }
    let kept = all
        .iter()
        .filter(|(_, m)| wanted.iter().any(|w| w == m.name()))
        .map(|(_, m)| sluice_model::ModelEntry::from(m.clone()));
    // The models were valid in `all`, so they are here.
    Ok(ModelRegistry::from_entries(kept).expect("a subset of a valid registry is valid"))
}

/// Every model `models.dir` or the backend offers, before `cluster.models`
/// cuts them down.
fn load_all_models(config: &Config) -> Result<ModelRegistry, LoadModelsError> {
    let dir = config.models.dir.as_ref();
    match config.device.backend {
        BackendKind::Sim => match dir {
            Some(dir) => Ok(open_repository(dir, Target::Sim)?
                .live()
                .current()
                .registry
                .clone()),
            None => Ok(ModelRegistry::builtin()),
        },
        BackendKind::Cpu => {
            let dir = dir.ok_or(LoadModelsError::CpuWithoutDir)?;
            Ok(open_repository(dir, Target::Cpu)?
                .live()
                .current()
                .registry
                .clone())
        }
        BackendKind::Cuda => Ok(cuda_models(config)?.0),
    }
}

/// The CUDA backend's models and the lowered plans of the imported ones
/// (for `CudaServer::with_graphs`): the [`sluice_nn`] builders' models at
/// `device.model_scale`, each replaced by the ONNX file of `models.dir`
/// with the same name (`vgg19.onnx`, or `vgg19_small.onnx` at the small
/// scale) and every other ONNX file there added, lowered to the kernel
/// library with its own weights at batch 1
/// ([`graph_registry`](sluice_cuda::serve::graph_registry)); then each
/// replaced by the `*.json` manifest of the same name there, if any (e.g.
/// measured by `sluice profile --device cuda`). Kernel times of built and
/// imported models are estimated. The start-up reads the ONNX files twice
/// (once for the registry, once when the server loads the plans).
pub fn cuda_models(
    config: &Config,
) -> Result<(ModelRegistry, sluice_cuda::serve::GraphModels), LoadModelsError> {
    let scale = config.device.model_scale;
    let dir = config.models.dir.as_ref();
    let has = |ext: &str| {
        dir.and_then(|d| std::fs::read_dir(d).ok())
            .is_some_and(|entries| {
                entries
                    .filter_map(Result::ok)
                    .any(|e| e.path().extension().is_some_and(|x| x == ext))
            })
    };
    let graphs = match dir {
        Some(d) if has("onnx") => {
            sluice_cuda::serve::onnx_graphs(d).map_err(|e| LoadModelsError::CudaGraphs {
                dir: d.clone(),
                source: Box::new(e),
            })?
        }
        _ => Vec::new(),
    };
    let (built, plans) = sluice_cuda::serve::graph_registry(scale, &graphs).map_err(|e| {
        if graphs.is_empty() {
            LoadModelsError::Builders {
                scale: crate::config::scale_name(scale),
                source: Box::new(e),
            }
        } else {
            LoadModelsError::CudaGraphs {
                dir: dir.cloned().unwrap_or_default(),
                source: Box::new(e),
            }
        }
    })?;
    // Without ONNX files the folder must hold manifests (an empty or
    // unreadable folder is an error, as it always was).
    let Some(dir) = dir.filter(|_| has("json") || graphs.is_empty()) else {
        return Ok((built, plans));
    };
    let overrides = |e| LoadModelsError::Overrides {
        dir: dir.clone(),
        source: Box::new(e),
    };
    let measured = ModelRegistry::load_dir(dir).map_err(overrides)?;
    Ok((built.with_overrides(measured).map_err(overrides)?, plans))
}

/// Loads `dir` for `target` ([`ModelRepo::open`]: every file, or the
/// first error).
fn open_repository(dir: &std::path::Path, target: Target) -> Result<ModelRepo, LoadModelsError> {
    ModelRepo::open(dir, target).map_err(|e| LoadModelsError::Dir {
        dir: dir.to_owned(),
        source: Box::new(e),
    })
}

/// The models to serve and, for a backend that reloads them
/// (`device.backend = "cpu"`), the repository reloads work on.
pub fn load_live_models(
    config: &Config,
) -> Result<(Arc<LiveModels>, Option<ModelRepo>), LoadModelsError> {
    if config.device.backend == BackendKind::Cpu && !config.cluster.enabled() {
        let dir = config
            .models
            .dir
            .as_ref()
            .ok_or(LoadModelsError::CpuWithoutDir)?;
        let repo = open_repository(dir, Target::Cpu)?;
        return Ok((repo.live().clone(), Some(repo)));
    }
    let why = LiveModels::refusal(config.device.backend.as_str());
    Ok((Arc::new(LiveModels::fixed(load_models(config)?, why)), None))
}

/// Start-up after the configuration: the models ([`load_live_models`]),
/// the device, the daemon.
pub fn serve(config: Config) -> Result<crate::server::Daemon, StartupError> {
    let (live, repo) = load_live_models(&config)?;
    let device: Box<dyn Backend> = if config.device.backend == BackendKind::Cpu {
        if config.cluster.enabled() {
            return Err(DeviceError::ClusterOnCpu.into());
        }
        Box::new(open_cpu(&config, live.clone())?)
    } else {
        make_device(&config, Arc::new(live.current().registry.clone()))?
    };
    Ok(crate::server::Daemon::start_live(
        config, live, repo, device,
    )?)
}

/// The CPU backend on `device.cpu_threads` workers, serving `live`.
pub fn open_cpu(config: &Config, live: Arc<LiveModels>) -> Result<CpuBackend, DeviceError> {
    CpuBackend::new(live, config.device.cpu_threads).map_err(|source| DeviceError::CpuThreads {
        threads: config.device.cpu_threads,
        source,
    })
}

// ---------------------------------------------------------------------------
// The device.

/// The backend [`choose_device`] settled on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceChoice {
    /// `device.backend = "sim"`: the simulated GPU.
    Sim,
    /// `device.backend = "cpu"`: the CPU executor.
    Cpu,
    /// `device.backend = "cuda"`, and the driver answered for device 0.
    #[cfg(feature = "cuda")]
    Cuda(sluice_cuda::real::CudaInfo),
    /// `device.backend = "cuda"`, no driver answered and
    /// `device.fallback = "sim"`: the simulated GPU, and why.
    #[cfg(feature = "cuda")]
    SimFallback(sluice_cuda::real::CudaUnavailable),
}

impl DeviceChoice {
    /// Whether the device is the simulated GPU (cheap to open, no
    /// hardware).
    pub fn is_simulated(&self) -> bool {
        match self {
            DeviceChoice::Sim => true,
            DeviceChoice::Cpu => false,
            #[cfg(feature = "cuda")]
            DeviceChoice::SimFallback(_) => true,
            #[cfg(feature = "cuda")]
            DeviceChoice::Cuda(_) => false,
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceChoice::Sim => f.write_str("the simulated GPU"),
            DeviceChoice::Cpu => f.write_str("the CPU executor"),
            #[cfg(feature = "cuda")]
            DeviceChoice::Cuda(info) => write!(f, "CUDA: {info}"),
            #[cfg(feature = "cuda")]
            DeviceChoice::SimFallback(_) => {
                f.write_str("the simulated GPU (no CUDA driver; device.fallback = \"sim\")")
            }
        }
    }
}

/// [`choose_device`] found no backend it may use.
#[derive(Debug, thiserror::Error)]
pub enum BackendUnavailable {
    /// `device.backend = "cuda"` in a build without the CUDA backend
    /// (`device.fallback` does not cover this: it is a build mistake, not
    /// a machine without a GPU).
    #[error(
        "device.backend = \"cuda\", but this build does not include the CUDA backend; rebuild \
         with `--features cuda` (cargo build --release --features sluice-cli/cuda), or set \
         device.backend = \"sim\""
    )]
    CudaNotBuilt,
    /// `device.backend = "cuda"`, no CUDA driver or device answered, and
    /// `device.fallback` is `"none"`.
    #[cfg(feature = "cuda")]
    #[error(
        "device.backend = \"cuda\", but no CUDA driver or device answers on this machine; fix \
         the cause below, or set device.fallback = \"sim\" to serve the simulated GPU when \
         there is none (device.backend = \"sim\" to always serve it)"
    )]
    NoCuda {
        /// What the driver probe found.
        #[source]
        source: sluice_cuda::real::CudaUnavailable,
    },
}

/// Which backend `device` asks for and this build and machine can drive.
///
/// - `"sim"`: [`DeviceChoice::Sim`].
/// - `"cuda"` in a build without the `cuda` feature:
///   [`BackendUnavailable::CudaNotBuilt`], whatever `device.fallback` says.
/// - `"cuda"` in a build with it: probes the driver
///   (`sluice_cuda::real::probe`, which loads `libcuda` at run time and
///   fails fast without it). No driver or device:
///   `BackendUnavailable::NoCuda`, or with `device.fallback = "sim"` one
///   warning (`fallback_warning`) and `DeviceChoice::SimFallback`.
pub fn choose_device(device: &DeviceConfig) -> Result<DeviceChoice, BackendUnavailable> {
    match device.backend {
        BackendKind::Sim => Ok(DeviceChoice::Sim),
        BackendKind::Cpu => Ok(DeviceChoice::Cpu),
        #[cfg(not(feature = "cuda"))]
        BackendKind::Cuda => Err(BackendUnavailable::CudaNotBuilt),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => choose_cuda(device.fallback, sluice_cuda::real::probe()),
    }
}

/// [`choose_device`] for `device.backend = "cuda"`, given the probe's
/// answer.
#[cfg(feature = "cuda")]
fn choose_cuda(
    fallback: Fallback,
    probed: Result<sluice_cuda::real::CudaInfo, sluice_cuda::real::CudaUnavailable>,
) -> Result<DeviceChoice, BackendUnavailable> {
    match (probed, fallback) {
        (Ok(info), _) => Ok(DeviceChoice::Cuda(info)),
        (Err(source), Fallback::None) => Err(BackendUnavailable::NoCuda { source }),
        (Err(why), Fallback::Sim) => {
            tracing::warn!("{}", fallback_warning(&why));
            Ok(DeviceChoice::SimFallback(why))
        }
    }
}

/// The one warning [`choose_device`] logs when `device.fallback = "sim"`
/// replaces a CUDA device that is not there.
#[cfg(feature = "cuda")]
pub fn fallback_warning(why: &sluice_cuda::real::CudaUnavailable) -> String {
    format!(
        "device.backend = \"cuda\": no CUDA driver or device answers ({why}); serving the \
         simulated GPU instead, as device.fallback = \"sim\" asks"
    )
}

/// [`open_device`] or [`make_device`] failed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// No backend this build and machine may use ([`choose_device`]).
    #[error(transparent)]
    Unavailable(#[from] BackendUnavailable),
    /// The simulated GPU's `fifo` scheduler refused its settings.
    #[error("cannot start the simulated GPU with device.scheduler = \"fifo\"")]
    Fifo {
        /// Which setting, and what to write.
        #[source]
        source: OpError,
    },
    /// `device.profile` is not a GPU model profile.
    #[error(
        "cannot load the GPU model profile device.profile = \"{profile}\"; use one of the \
         built-in profiles (\"mi50\", \"gv100\", \"h100\")"
    )]
    Profile {
        /// `device.profile`.
        profile: String,
        /// Why.
        #[source]
        source: Box<ProfileError>,
    },
    /// The policy of `device.scheduler` cannot drive the simulated GPU.
    #[error("cannot start the simulated GPU with device.scheduler = \"{scheduler}\"")]
    Modeled {
        /// `device.scheduler`.
        scheduler: &'static str,
        /// Why, and what to choose instead.
        #[source]
        source: ModeledError,
    },
    /// `[cluster]` could not be built.
    #[error("cannot start the cluster of [cluster]")]
    Cluster {
        /// Why.
        #[source]
        source: crate::backend::cluster::ClusterError,
    },
    /// `[cluster]` with the CPU backend.
    #[error(
        "[cluster] serves simulated GPUs only, but device.backend = \"cpu\"; remove [cluster] \
         to serve ONNX models on the CPU, or set device.backend = \"sim\""
    )]
    ClusterOnCpu,
    /// The CPU backend's worker threads could not be started.
    #[error("cannot start the cpu backend's {threads} worker threads; lower device.cpu_threads")]
    CpuThreads {
        /// `device.cpu_threads`.
        threads: usize,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The CPU backend asked of [`open_device`], which has a registry of
    /// manifests only.
    #[error(
        "device.backend = \"cpu\" runs the graphs of models.dir, which a registry does not \
         hold; start it with startup::serve (what sluiced does)"
    )]
    CpuNeedsGraphs,
    /// `[cluster]` with the CUDA backend.
    #[error(
        "[cluster] serves simulated GPUs only so far, but device.backend = \"cuda\"; remove \
         [cluster] to serve one CUDA GPU, or set device.backend = \"sim\""
    )]
    ClusterOnCuda,
    /// The CUDA device answered the probe but could not be set up.
    #[cfg(feature = "cuda")]
    #[error(
        "cannot set up CUDA device 0 ({device}); fix the cause below, or set \
         device.backend = \"sim\""
    )]
    Cuda {
        /// The device's name.
        device: String,
        /// Why.
        #[source]
        source: cuda::OpenError,
    },
}

/// Opens the device [`choose_device`] chose: the simulated GPU of
/// `device.scheduler`, or the CUDA backend's server on device 0
/// (`cuda::open_server`: compiles the kernel library and loads every
/// model).
pub fn open_device(
    config: &Config,
    models: Arc<ModelRegistry>,
    choice: &DeviceChoice,
) -> Result<Box<dyn Backend>, DeviceError> {
    if config.cluster.enabled() {
        return make_cluster(config, models);
    }
    match choice {
        DeviceChoice::Sim => make_sim_device(config, models),
        DeviceChoice::Cpu => Err(DeviceError::CpuNeedsGraphs),
        #[cfg(feature = "cuda")]
        DeviceChoice::SimFallback(_) => make_sim_device(config, models),
        #[cfg(feature = "cuda")]
        DeviceChoice::Cuda(info) => match cuda::open_server(config, models, info) {
            Ok(server) => Ok(Box::new(server)),
            Err(source) => Err(DeviceError::Cuda {
                device: info.name.clone(),
                source,
            }),
        },
    }
}

/// The device the config asks for: [`choose_device`], then
/// [`open_device`].
pub fn make_device(
    config: &Config,
    models: Arc<ModelRegistry>,
) -> Result<Box<dyn Backend>, DeviceError> {
    let choice = choose_device(&config.device)?;
    open_device(config, models, &choice)
}

/// `[cluster]`: several simulated GPUs, planned and batched
/// ([`crate::backend::cluster`]).
fn make_cluster(
    config: &Config,
    models: Arc<ModelRegistry>,
) -> Result<Box<dyn Backend>, DeviceError> {
    match config.device.backend {
        BackendKind::Sim => {}
        BackendKind::Cuda => return Err(DeviceError::ClusterOnCuda),
        BackendKind::Cpu => return Err(DeviceError::ClusterOnCpu),
    }
    tracing::info!(
        "cluster: profiling {} models on the simulated {} for the planner",
        models.len(),
        config.cluster.gpus[0]
    );
    let cluster =
        crate::backend::cluster::setup::from_config(config, models, shm_proto::now_ns(), |m| {
            tracing::info!("cluster: profiling {m}")
        })
        .and_then(|c| c.with_planner_thread())
        .map_err(|source| DeviceError::Cluster { source })?;
    Ok(Box::new(cluster))
}

/// The simulated device of `device.scheduler`: the one-at-a-time one for
/// `fifo`, the policy-driven GPU model otherwise.
fn make_sim_device(
    config: &Config,
    models: Arc<ModelRegistry>,
) -> Result<Box<dyn Backend>, DeviceError> {
    match config.device.scheduler {
        Scheduler::Fifo => match FifoBackend::new(models, config.device.time_scale) {
            Ok(fifo) => Ok(Box::new(fifo)),
            Err(source) => Err(DeviceError::Fifo { source }),
        },
        Scheduler::Policy(kind) => {
            let profile = &config.device.profile;
            let profile =
                sluice_gpu::DeviceProfile::builtin(profile).map_err(|e| DeviceError::Profile {
                    profile: profile.clone(),
                    source: Box::new(e),
                })?;
            match ModeledBackend::new(profile, kind, models, shm_proto::now_ns()) {
                Ok(modeled) => Ok(Box::new(modeled)),
                Err(source) => Err(DeviceError::Modeled {
                    scheduler: kind.as_str(),
                    source,
                }),
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Start-up as a whole, and --check-config.

/// Why `sluiced` stopped before serving: any step of start-up. Its
/// message is the step's own.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The config file could not be read or is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// [`load_models`] failed.
    #[error(transparent)]
    Models(#[from] LoadModelsError),
    /// [`choose_device`] or [`open_device`] failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The daemon itself (socket, dispatcher) could not start.
    #[error(transparent)]
    Start(#[from] StartError),
}

impl From<BackendUnavailable> for StartupError {
    fn from(e: BackendUnavailable) -> Self {
        Self::Device(e.into())
    }
}

impl StartupError {
    /// `sluiced`'s exit status for it: 2 for the configuration or what it
    /// asks of this machine, 1 for the daemon itself.
    pub fn exit_status(&self) -> u8 {
        match self {
            Self::Config(_) | Self::Models(_) | Self::Device(_) => 2,
            Self::Start(_) => 1,
        }
    }
}

/// What [`check`] found.
#[derive(Debug)]
pub struct Checked {
    /// How many models the daemon would serve.
    pub models: usize,
    /// The device it would open.
    pub device: DeviceChoice,
}

/// Runs start-up's own steps on `config` short of serving: [`load_models`],
/// [`choose_device`] (the `cuda` feature check and the driver probe) and,
/// for the simulated GPU, [`open_device`] (then drops it). A real GPU is
/// probed but not opened: that compiles the kernel library and loads every
/// model onto it, which is start-up's work (and may not be shared with a
/// running daemon). Fails exactly where start-up would, with the same error.
pub fn check(config: &Config) -> Result<Checked, StartupError> {
    let models = Arc::new(load_models(config)?);
    let device = choose_device(&config.device)?;
    if device.is_simulated() {
        drop(open_device(config, models.clone(), &device)?);
    }
    Ok(Checked {
        models: models.len(),
        device,
    })
}

/// Opening the CUDA backend's server on the real GPU.
#[cfg(feature = "cuda")]
pub mod cuda {
    use std::sync::Arc;

    use crate::config::{Config, Scheduler};
    use sluice_cuda::gpu::Kill;
    use sluice_cuda::plan_exec::LoadOptions;
    use sluice_cuda::real::CudaInfo;
    use sluice_cuda::serve::{CudaServer, ServeOptions};
    use sluice_cuda::{OpenGpuError, open_gpu};
    use sluice_model::ModelRegistry;

    /// The CUDA device was found but could not be set up.
    #[derive(Debug, thiserror::Error)]
    pub enum OpenError {
        /// `fifo` is the simulated device's own scheduler.
        #[error(
            "device.scheduler = \"fifo\" is the simulated device's scheduler; the cuda backend \
             runs a policy: use \"reef\", \"streams\", \"seq\", \"wait-preempt\" or \"paella\""
        )]
        Fifo,
        /// Opening the device, compiling or loading the kernel library,
        /// setting up the scheduler's device.
        #[error(transparent)]
        Gpu(#[from] OpenGpuError),
        /// Loading the models failed.
        #[error(transparent)]
        Serve(#[from] sluice_cuda::serve::ServeError),
        /// The ONNX files of `models.dir` could not be read again.
        #[error(transparent)]
        Models(#[from] super::LoadModelsError),
    }

    /// Opens device 0 with the kernel library compiled and loaded
    /// ([`open_gpu`], the benchmarks' path too), loads every model of `models` and starts the policy
    /// of `device.scheduler`.
    pub fn open_server(
        config: &Config,
        models: Arc<ModelRegistry>,
        info: &CudaInfo,
    ) -> Result<CudaServer, OpenError> {
        let Scheduler::Policy(kind) = config.device.scheduler else {
            return Err(OpenError::Fifo);
        };
        tracing::info!("CUDA: {info}; compiling the kernel library");
        let (gpu, lib, _) = open_gpu(Kill::Cooperative)?;
        let opts = ServeOptions {
            scale: config.device.model_scale,
            instances: config.device.instances,
            weights_seed: 1,
            load: LoadOptions::default(),
        };
        // The imported models' lowered plans and weights (the registry
        // `models` was made from the same files by `load_models`).
        let (_, graphs) = super::cuda_models(config)?;
        Ok(CudaServer::with_graphs(
            gpu,
            &lib,
            kind,
            models,
            &opts,
            &graphs,
            &info.to_string(),
            shm_proto::now_ns(),
        )?)
    }
}

/// The set of stop signals (SIGTERM, SIGINT, SIGHUP), blocked in the calling
/// thread and so in every thread it starts afterwards.
pub fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits up to `timeout` for one of `set`; returns the signal number.
pub fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` is an initialised sigset, `ts` a valid timespec, and a
    // null siginfo pointer is allowed.
    let r = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (r > 0).then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cuda_config() -> Config {
        let mut c = Config::default();
        c.device.backend = BackendKind::Cuda;
        c
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_is_refused_with_the_fix() {
        for fallback in crate::config::Fallback::ALL {
            let mut c = cuda_config();
            c.device.fallback = *fallback;
            assert!(matches!(
                choose_device(&c.device),
                Err(BackendUnavailable::CudaNotBuilt)
            ));
            let models = Arc::new(ModelRegistry::builtin());
            let e = match make_device(&c, models) {
                Err(e) => e,
                Ok(d) => panic!("made {}", d.name()),
            };
            assert!(matches!(
                e,
                DeviceError::Unavailable(BackendUnavailable::CudaNotBuilt)
            ));
            let text = e.to_string();
            assert!(text.starts_with("device.backend = \"cuda\""), "{text}");
            assert!(text.contains("rebuild with `--features cuda`"), "{text}");
            // check() stops at the same error.
            let checked = check(&c).unwrap_err();
            assert_eq!(checked.to_string(), text);
            assert_eq!(checked.exit_status(), 2);
        }
    }

    #[cfg(feature = "cuda")]
    fn no_library() -> sluice_cuda::real::CudaUnavailable {
        sluice_cuda::real::CudaUnavailable::NoLibrary {
            library: "libcuda.so.1".into(),
            detail: "libcuda.so.1: cannot open shared object file".into(),
        }
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_without_a_driver_is_refused_unless_falling_back() {
        let e = choose_cuda(Fallback::None, Err(no_library())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "device.backend = \"cuda\", but no CUDA driver or device answers on this machine; \
             fix the cause below, or set device.fallback = \"sim\" to serve the simulated GPU \
             when there is none (device.backend = \"sim\" to always serve it)"
        );
        let source = std::error::Error::source(&e).unwrap().to_string();
        assert!(source.starts_with("libcuda.so.1 not found"), "{source}");
        assert_eq!(
            choose_cuda(Fallback::Sim, Err(no_library())).unwrap(),
            DeviceChoice::SimFallback(no_library())
        );
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_on_this_machine_follows_the_probe_and_the_fallback() {
        let models = Arc::new(load_models(&cuda_config()).unwrap());
        if let Ok(info) = sluice_cuda::real::probe() {
            eprintln!("driver side skipped: this machine has a CUDA driver ({info})");
            assert_eq!(
                choose_device(&cuda_config().device).unwrap(),
                DeviceChoice::Cuda(info)
            );
            return;
        }
        let e = device_err(&cuda_config(), &models);
        assert!(
            matches!(
                e,
                DeviceError::Unavailable(BackendUnavailable::NoCuda { .. })
            ),
            "{e:?}"
        );
        assert_eq!(
            check(&cuda_config()).unwrap_err().to_string(),
            e.to_string()
        );
        let mut c = cuda_config();
        c.device.fallback = Fallback::Sim;
        let sim = make_device(&Config::default(), models.clone()).unwrap();
        let d = make_device(&c, models).unwrap();
        assert_eq!(d.name(), sim.name());
        let checked = check(&c).unwrap();
        assert!(checked.device.is_simulated());
        assert!(
            checked.device.to_string().contains("device.fallback"),
            "{}",
            checked.device
        );
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn fallback_warning_says_why() {
        assert_eq!(
            fallback_warning(&no_library()),
            "device.backend = \"cuda\": no CUDA driver or device answers (libcuda.so.1 not \
             found: no NVIDIA driver on this machine (libcuda.so.1: cannot open shared object \
             file); install the NVIDIA driver, or set device.backend = \"sim\"); serving the \
             simulated GPU instead, as device.fallback = \"sim\" asks"
        );
    }

    #[test]
    fn check_opens_the_simulated_gpu_and_reports_it() {
        let checked = check(&Config::default()).unwrap();
        assert_eq!(checked.device, DeviceChoice::Sim);
        assert_eq!(checked.models, ModelRegistry::builtin().len());
        assert_eq!(checked.device.to_string(), "the simulated GPU");
    }

    /// `make_device`'s error (the device has no `Debug`).
    fn device_err(c: &Config, models: &Arc<ModelRegistry>) -> DeviceError {
        match make_device(c, models.clone()) {
            Err(e) => e,
            Ok(d) => panic!("made {}", d.name()),
        }
    }

    #[test]
    fn sim_device_errors_name_the_key() {
        let models = Arc::new(ModelRegistry::builtin());
        let mut c = Config::default();
        c.device.time_scale = -1.0;
        let e = device_err(&c, &models);
        assert_eq!(
            e.to_string(),
            "cannot start the simulated GPU with device.scheduler = \"fifo\""
        );
        assert!(std::error::Error::source(&e).is_some());
        let mut c = Config::default();
        c.device.scheduler = Scheduler::Policy(sluice_sched::PolicyKind::Reef);
        c.device.profile = "a800".to_owned();
        let e = device_err(&c, &models);
        assert!(
            e.to_string()
                .starts_with("cannot load the GPU model profile device.profile = \"a800\""),
            "{e}"
        );
        c.device.profile = "h100".to_owned();
        c.device.scheduler = Scheduler::Policy(sluice_sched::PolicyKind::RtOnly);
        let e = device_err(&c, &models);
        assert_eq!(
            e.to_string(),
            "cannot start the simulated GPU with device.scheduler = \"rt-only\""
        );
        let e = StartupError::from(e);
        assert_eq!(e.exit_status(), 2);
    }

    #[test]
    fn models_dir_errors_name_the_key() {
        let mut c = Config::default();
        c.models.dir = Some(PathBuf::from("/nonexistent/sluice-models"));
        let e = load_models(&c).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "cannot load the models of models.dir = \"/nonexistent/sluice-models\""
            ),
            "{e}"
        );
        assert!(matches!(e, LoadModelsError::Dir { .. }));
        c.device.backend = BackendKind::Cuda;
        c.device.model_scale = sluice_nn::builders::Scale::Small;
        assert!(matches!(
            load_models(&c).unwrap_err(),
            LoadModelsError::Overrides { .. }
        ));
    }

    #[test]
    fn the_cpu_backend_needs_a_model_directory_and_no_cluster() {
        let mut c = Config::default();
        c.device.backend = BackendKind::Cpu;
        let e = load_models(&c).unwrap_err();
        assert!(matches!(e, LoadModelsError::CpuWithoutDir), "{e}");
        assert!(e.to_string().contains("set models.dir"), "{e}");
        assert!(matches!(
            load_live_models(&c),
            Err(LoadModelsError::CpuWithoutDir)
        ));
        let dir = std::env::temp_dir().join(format!("sluice-cpu-start-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("fc.onnx"),
            sluice_onnx::test_models::gemm(2, 2, &[1.0; 4], &[0.0; 2], true),
        )
        .unwrap();
        c.models.dir = Some(dir.clone());
        let (live, repo) = load_live_models(&c).unwrap();
        assert!(repo.is_some());
        assert_eq!(live.reload(), &crate::repo::Reload::Supported);
        let checked = check(&c).unwrap();
        assert_eq!((checked.models, checked.device), (1, DeviceChoice::Cpu));
        assert!(matches!(
            make_device(&c, Arc::new(ModelRegistry::builtin())),
            Err(DeviceError::CpuNeedsGraphs)
        ));
        // The simulated GPU serves the same file on its estimated manifest,
        // and refuses reloads.
        c.device.backend = BackendKind::Sim;
        let (live, repo) = load_live_models(&c).unwrap();
        assert!(repo.is_none());
        assert!(
            matches!(live.reload(), crate::repo::Reload::Refused(why) if why.contains("device.backend = \"sim\"")),
            "{:?}",
            live.reload()
        );
        assert_eq!(live.current().registry.len(), 1);
        c.device.backend = BackendKind::Cpu;
        c.cluster.gpus = vec!["mi50".into()];
        let e = match serve(c) {
            Err(e) => e,
            Ok(_) => panic!("served a cluster on the cpu backend"),
        };
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.to_string().contains("[cluster]"), "{e}");
    }

    /// The CUDA backend's registry: the builders' models, an ONNX file of
    /// `models.dir` added with its lowered plan, and one named like a
    /// builder's model taking that model's place; a file the kernel library
    /// cannot take is refused naming the folder. No GPU is needed to build
    /// the registry.
    #[test]
    fn the_cuda_backend_serves_the_onnx_files_of_the_model_directory() {
        let mut c = Config::default();
        c.device.backend = BackendKind::Cuda;
        c.device.model_scale = sluice_nn::builders::Scale::Small;
        let (builders, none) = cuda_models(&c).unwrap();
        assert!(none.is_empty());
        let dir = std::env::temp_dir().join(format!("sluice-cuda-onnx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fc = sluice_onnx::test_models::gemm(4, 3, &[0.5; 12], &[0.0; 3], true);
        std::fs::write(dir.join("fc.onnx"), &fc).unwrap();
        std::fs::write(dir.join("vgg19_small.onnx"), &fc).unwrap();
        c.models.dir = Some(dir.clone());
        let (reg, plans) = cuda_models(&c).unwrap();
        assert_eq!(reg.len(), builders.len() + 1);
        assert!(plans.contains_key("fc") && plans.contains_key("vgg19_small"));
        let (_, fc_model) = reg.lookup("fc").unwrap();
        let (_, vgg) = reg.lookup("vgg19_small").unwrap();
        assert_eq!((fc_model.input_bytes, vgg.input_bytes), (16, 16));
        assert_eq!(load_models(&c).unwrap().len(), reg.len());
        // A graph the kernel library refuses stops the start naming the folder.
        std::fs::write(dir.join("bad.onnx"), b"not a model").unwrap();
        let e = load_models(&c).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(e, LoadModelsError::CudaGraphs { .. }), "{e}");
        assert!(e.to_string().contains("sluice-cuda-onnx"), "{e}");
    }

    #[test]
    fn dispatcher_setup_comes_from_the_daemon_section() {
        let d = DaemonConfig {
            dispatcher_core: Some(3),
            realtime_priority: 7,
            lock_memory: false,
            ..DaemonConfig::default()
        };
        assert_eq!(
            DispatcherSetup::from(&d),
            DispatcherSetup {
                core: Some(3),
                realtime_priority: 7,
                lock_memory: false,
            }
        );
    }

    #[test]
    fn the_cuda_backend_serves_the_builders_models_with_measured_overrides() {
        let mut c = cuda_config();
        c.device.model_scale = sluice_nn::builders::Scale::Small;
        let reg = load_models(&c).unwrap();
        let names: Vec<&str> = reg.iter().map(|(_, m)| m.name()).collect();
        assert_eq!(
            names,
            [
                "bert_base_small",
                "gpt2_small",
                "resnet152_small",
                "vgg19_small"
            ]
        );
        // A manifest in models.dir replaces the builder's of its name.
        let dir = std::env::temp_dir().join(format!("sluice-rt-models-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let built = sluice_nn::builders::build(
            "gpt2",
            &sluice_nn::builders::BuildOptions {
                scale: sluice_nn::builders::Scale::Small,
            },
        )
        .unwrap();
        let json = built
            .manifest_json()
            .unwrap()
            .replace("\"display_name\": \"", "\"display_name\": \"measured ");
        std::fs::write(dir.join("gpt2_small.json"), json).unwrap();
        c.models.dir = Some(dir.clone());
        let reg = load_models(&c).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let (_, m) = reg.lookup("gpt2_small").unwrap();
        assert!(
            m.manifest.display_name.starts_with("measured "),
            "{}",
            m.manifest.display_name
        );
        assert_eq!(reg.len(), 4);
    }

    #[test]
    fn sim_backend_follows_the_scheduler() {
        let models = Arc::new(ModelRegistry::builtin());
        let mut c = Config::default();
        let fifo = make_device(&c, models.clone()).unwrap().name().to_owned();
        c.device.scheduler = Scheduler::Policy(sluice_sched::PolicyKind::Reef);
        let reef = make_device(&c, models).unwrap().name().to_owned();
        assert_ne!(fifo, reef);
    }

    #[test]
    fn cluster_models_cut_the_registry_and_an_unknown_one_is_named() {
        let mut config = Config::default();
        config.cluster.gpus = vec!["mi50".into()];
        config.cluster.models = vec!["resnet18".into()];
        let models = load_models(&config).unwrap();
        assert_eq!(models.len(), 1, "only the listed model is served");
        config.cluster.models = vec!["resnet19".into()];
        let e = load_models(&config).unwrap_err().to_string();
        assert!(e.contains("\"resnet19\"") && e.contains("resnet18"), "{e}");
    }
}
