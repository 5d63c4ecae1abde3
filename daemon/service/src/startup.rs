//! Process-level glue shared by the `sluiced` and `sluice` binaries:
//! logging, loading models, building the device, stop signals.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::fifo::FifoBackend;
use crate::backend::modeled::ModeledBackend;
use crate::config::{BackendKind, Config, Scheduler};
use sluice_backend::Backend;
use sluice_model::ModelRegistry;

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

/// The models the config asks for.
///
/// - `device.backend = "sim"`: `models.dir`, or the built-in set.
/// - `device.backend = "cuda"`: the models the CUDA backend can run, the
///   [`sluice_nn`] builders' at `device.model_scale`
///   ([`builder_registry`](sluice_cuda::serve::builder_registry),
///   kernel times estimated), each replaced by the manifest of the same
///   name in `models.dir` when there is one (e.g. measured by
///   `sluice profile --device cuda`). The same registry is used when the
///   daemon falls back to the simulated GPU, so clients see the same
///   models either way.
pub fn load_models(config: &Config) -> Result<ModelRegistry, Box<dyn std::error::Error>> {
    Ok(match (config.device.backend, &config.models.dir) {
        (BackendKind::Sim, Some(dir)) => ModelRegistry::load_dir(dir)?,
        (BackendKind::Sim, None) => ModelRegistry::builtin(),
        (BackendKind::Cuda, dir) => {
            let built = sluice_cuda::serve::builder_registry(config.device.model_scale)?;
            match dir {
                Some(dir) => built.with_overrides(ModelRegistry::load_dir(dir)?)?,
                None => built,
            }
        }
    })
}

/// The device the config asks for.
///
/// `device.backend = "cuda"`: a build without the `cuda` feature refuses it
/// ([`CudaNotBuilt`]). A build with it probes the CUDA driver and, for now,
/// always falls back to the simulated device with one warning: with no
/// driver it says why, and with a driver it says that the CUDA device of the
/// job path is not wired yet (the queue logic and the driver exist, see
/// `docs/cuda-backend.md`).
pub fn make_device(
    config: &Config,
    models: Arc<ModelRegistry>,
) -> Result<Box<dyn Backend>, Box<dyn std::error::Error>> {
    match config.device.backend {
        BackendKind::Sim => make_sim_device(config, models),
        BackendKind::Cuda => {
            #[cfg(not(feature = "cuda"))]
            {
                let _ = models;
                Err(Box::new(CudaNotBuilt))
            }
            #[cfg(feature = "cuda")]
            {
                match sluice_cuda::real::probe() {
                    Ok(info) => Ok(Box::new(cuda::open_server(config, models, &info)?)),
                    Err(why) => {
                        tracing::warn!("{}", cuda_fallback_message(&why));
                        make_sim_device(config, models)
                    }
                }
            }
        }
    }
}

/// The simulated device of `device.scheduler`: step 1's real-time one for
/// `fifo`, the policy-driven GPU model otherwise.
fn make_sim_device(
    config: &Config,
    models: Arc<ModelRegistry>,
) -> Result<Box<dyn Backend>, Box<dyn std::error::Error>> {
    match config.device.scheduler {
        Scheduler::Fifo => Ok(Box::new(FifoBackend::new(
            models,
            config.device.time_scale,
        )?)),
        Scheduler::Policy(kind) => {
            let profile = sluice_gpu::DeviceProfile::builtin(&config.device.profile)?;
            Ok(Box::new(ModeledBackend::new(
                profile,
                kind,
                models,
                shm_proto::now_ns(),
            )?))
        }
    }
}

/// `device.backend = "cuda"` in a build without the CUDA backend.
#[cfg(not(feature = "cuda"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "device.backend = \"cuda\", but this build does not include the CUDA backend; rebuild with \
     `--features cuda` (cargo build --release --features sluice-cli/cuda), or set \
     device.backend = \"sim\""
)]
pub struct CudaNotBuilt;

/// The one warning `make_device` logs for `device.backend = "cuda"` in a
/// build with the `cuda` feature when the driver probe finds no usable
/// driver or device.
#[cfg(feature = "cuda")]
pub fn cuda_fallback_message(why: &sluice_cuda::real::CudaUnavailable) -> String {
    format!("device.backend = \"cuda\": no CUDA driver ({why}); falling back to the simulated GPU")
}

/// Opening the CUDA backend's server on the real GPU.
#[cfg(feature = "cuda")]
pub mod cuda {
    use std::sync::Arc;

    use crate::config::{Config, Scheduler};
    use sluice_cuda::gpu::{CudaGpu, Kill, SYNTHETIC_KERNEL};
    use sluice_cuda::plan_exec::LoadOptions;
    use sluice_cuda::real::CudaInfo;
    use sluice_cuda::serve::{CudaServer, ServeOptions};
    use sluice_cuda::{CudaSetupError, open_cuda};
    use sluice_gpu::DeviceProfile;
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
        /// Opening the device, compiling or loading the kernel library.
        #[error(transparent)]
        Rig(#[from] CudaSetupError),
        /// The compiled library has no synthetic kernel (a bug).
        #[error("the kernel library has no {SYNTHETIC_KERNEL}")]
        NoSynthetic,
        /// Setting up the scheduler's device failed.
        #[error(transparent)]
        Setup(#[from] sluice_cuda::gpu::SetupError),
        /// Loading the models failed.
        #[error(transparent)]
        Serve(#[from] sluice_cuda::serve::ServeError),
    }

    /// Opens device 0 with the kernel library compiled and loaded
    /// ([`open_cuda`]), loads every model of `models` and starts the policy
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
        let rig = open_cuda()?;
        let synth = rig.lib.synthetic().ok_or(OpenError::NoSynthetic)?;
        let mut profile = DeviceProfile::h100();
        profile.compute_units = u32::try_from(info.sm_count).unwrap_or(1).max(1);
        let gpu = CudaGpu::new(Box::new(rig.drv), synth, profile, Kill::Cooperative)?;
        let opts = ServeOptions {
            scale: config.device.model_scale,
            instances: config.device.instances,
            weights_seed: 1,
            load: LoadOptions::default(),
        };
        Ok(CudaServer::new(
            gpu,
            &rig.lib,
            kind,
            models,
            &opts,
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
        let models = Arc::new(ModelRegistry::builtin());
        let e = match make_device(&cuda_config(), models) {
            Err(e) => e,
            Ok(d) => panic!("made {}", d.name()),
        };
        let text = e.to_string();
        assert!(text.starts_with("device.backend = \"cuda\""), "{text}");
        assert!(text.contains("rebuild with `--features cuda`"), "{text}");
        assert!(e.downcast_ref::<CudaNotBuilt>().is_some());
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_with_the_feature_and_no_driver_falls_back_to_the_simulated_gpu() {
        if let Ok(info) = sluice_cuda::real::probe() {
            eprintln!("skipped: this machine has a CUDA driver ({info})");
            return;
        }
        let models = Arc::new(ModelRegistry::builtin());
        let sim = make_device(&Config::default(), models.clone()).unwrap();
        let d = make_device(&cuda_config(), models).unwrap();
        assert_eq!(d.name(), sim.name());
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_fallback_message_says_why() {
        use sluice_cuda::real::CudaUnavailable;
        let no_driver = CudaUnavailable::NoLibrary {
            library: "libcuda.so.1".into(),
            detail: "libcuda.so.1: cannot open shared object file".into(),
        };
        assert_eq!(
            cuda_fallback_message(&no_driver),
            "device.backend = \"cuda\": no CUDA driver (libcuda.so.1 not found: no NVIDIA driver \
             on this machine (libcuda.so.1: cannot open shared object file); install the NVIDIA \
             driver, or set device.backend = \"sim\"); falling back to the simulated GPU"
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
}
