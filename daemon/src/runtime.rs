//! Process-level glue shared by the `sluiced` and `sluice` binaries:
//! logging, loading models, building the device, stop signals.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{Backend, Config, Scheduler};
use crate::device::Device;
use crate::device::modeled::ModeledGpu;
use crate::device::sim::SimGpu;
use crate::model::ModelRegistry;

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

/// The models the config asks for: `models.dir`, or the built-in set.
pub fn load_models(config: &Config) -> Result<ModelRegistry, Box<dyn std::error::Error>> {
    Ok(match &config.models.dir {
        Some(dir) => ModelRegistry::load_dir(dir)?,
        None => ModelRegistry::builtin(),
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
) -> Result<Box<dyn Device>, Box<dyn std::error::Error>> {
    match config.device.backend {
        Backend::Sim => make_sim_device(config, models),
        Backend::Cuda => {
            #[cfg(not(feature = "cuda"))]
            {
                let _ = models;
                Err(Box::new(CudaNotBuilt))
            }
            #[cfg(feature = "cuda")]
            {
                let probe = crate::device::cuda::real::probe();
                tracing::warn!("{}", cuda_fallback_message(&probe));
                make_sim_device(config, models)
            }
        }
    }
}

/// The simulated device of `device.scheduler`: step 1's real-time one for
/// `fifo`, the policy-driven GPU model otherwise.
fn make_sim_device(
    config: &Config,
    models: Arc<ModelRegistry>,
) -> Result<Box<dyn Device>, Box<dyn std::error::Error>> {
    match config.device.scheduler {
        Scheduler::Fifo => Ok(Box::new(SimGpu::new(models, config.device.time_scale)?)),
        Scheduler::Policy(kind) => {
            let profile = crate::gpu::DeviceProfile::builtin(&config.device.profile)?;
            Ok(Box::new(ModeledGpu::new(
                profile,
                kind,
                models,
                sluice_client::now_ns(),
            )?))
        }
    }
}

/// `device.backend = "cuda"` in a build without the CUDA backend.
#[cfg(not(feature = "cuda"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "device.backend = \"cuda\", but this build does not include the CUDA backend; rebuild with \
     `--features cuda` (cargo build --release -p sluice-daemon --features cuda), or set \
     device.backend = \"sim\""
)]
pub struct CudaNotBuilt;

/// The one warning `make_device` logs for `device.backend = "cuda"` in a
/// build with the `cuda` feature, given what the driver probe found.
#[cfg(feature = "cuda")]
pub fn cuda_fallback_message(
    probe: &Result<crate::device::cuda::real::CudaInfo, crate::device::cuda::real::CudaUnavailable>,
) -> String {
    match probe {
        Err(why) => format!(
            "device.backend = \"cuda\": no CUDA driver ({why}); falling back to the simulated GPU"
        ),
        Ok(info) => format!(
            "device.backend = \"cuda\": found {info}, but the CUDA device of the job path is not \
             wired yet (queue logic and driver only, see docs/cuda-backend.md); falling back to \
             the simulated GPU"
        ),
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
        c.device.backend = Backend::Cuda;
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
    fn cuda_with_the_feature_falls_back_to_the_simulated_gpu() {
        let models = Arc::new(ModelRegistry::builtin());
        let sim = make_device(&Config::default(), models.clone()).unwrap();
        let d = make_device(&cuda_config(), models).unwrap();
        assert_eq!(d.name(), sim.name());
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_fallback_message_says_why() {
        use crate::device::cuda::real::{CudaInfo, CudaUnavailable};
        let no_driver = Err(CudaUnavailable::NoLibrary {
            library: "libcuda.so.1".into(),
            detail: "libcuda.so.1: cannot open shared object file".into(),
        });
        assert_eq!(
            cuda_fallback_message(&no_driver),
            "device.backend = \"cuda\": no CUDA driver (libcuda.so.1 not found: no NVIDIA driver \
             on this machine (libcuda.so.1: cannot open shared object file); install the NVIDIA \
             driver, or set device.backend = \"sim\"); falling back to the simulated GPU"
        );
        let found = Ok(CudaInfo {
            devices: 1,
            name: "NVIDIA H100".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            total_mem: 80 << 30,
            driver_version: 12040,
        });
        let m = cuda_fallback_message(&found);
        assert!(m.contains("found NVIDIA H100"), "{m}");
        assert!(m.contains("not wired yet"), "{m}");
        assert!(m.ends_with("falling back to the simulated GPU"), "{m}");
    }

    #[test]
    fn sim_backend_follows_the_scheduler() {
        let models = Arc::new(ModelRegistry::builtin());
        let mut c = Config::default();
        let fifo = make_device(&c, models.clone()).unwrap().name().to_owned();
        c.device.scheduler = Scheduler::Policy(crate::sched::PolicyKind::Reef);
        let reef = make_device(&c, models).unwrap().name().to_owned();
        assert_ne!(fifo, reef);
    }
}
