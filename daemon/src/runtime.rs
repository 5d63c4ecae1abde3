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
pub fn make_device(
    config: &Config,
    models: Arc<ModelRegistry>,
) -> Result<Box<dyn Device>, Box<dyn std::error::Error>> {
    match (config.device.backend, config.device.scheduler) {
        (Backend::Sim, Scheduler::Fifo) => {
            Ok(Box::new(SimGpu::new(models, config.device.time_scale)?))
        }
        (Backend::Sim, Scheduler::Policy(kind)) => {
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
