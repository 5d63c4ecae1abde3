//! Opening CUDA device 0: the one place that does it (feature `cuda`).
//!
//! [`open_cuda`] opens the device, compiles sluice's kernel library with
//! NVRTC for its `sm_XY`, loads it and makes a virtual queue: what
//! `sluice check|profile --device cuda` and the daemon's CUDA job path use.
//! [`open_device0`] builds the scheduler's [`CudaGpu`] on the same path, for
//! the benchmarks that run policies on synthetic kernels.

use crate::driver::{DriverError, StreamPriority};
use crate::gpu::{CudaGpu, Kill, SYNTHETIC_KERNEL, SetupError};
use crate::plan_exec::KernelLibrary;
use crate::queue::VirtualQueue;
use sluice_gpu::DeviceProfile;

/// Setting up CUDA device 0 failed.
#[derive(Debug, thiserror::Error)]
pub enum CudaSetupError {
    /// No usable driver or device (the probe's message).
    #[error(transparent)]
    Open(#[from] crate::real::CudaOpenError),
    /// The device's architecture is not one NVRTC takes, or NVRTC failed.
    #[error("compiling the kernel library for {arch}")]
    Compile {
        /// `sm_XY` of the device.
        arch: String,
        /// Why.
        #[source]
        source: Box<crate::kernels::KernelError>,
    },
    /// Loading the PTX failed.
    #[error("loading the kernel library on the device")]
    Library(#[from] crate::plan_exec::LibraryError),
    /// Creating the virtual queue failed.
    #[error("creating the virtual queue")]
    Queue(#[source] DriverError),
}

/// CUDA device 0 with the kernel library loaded and a virtual queue.
#[derive(Debug)]
pub struct CudaRig {
    /// The driver.
    pub drv: crate::real::CudaDriver,
    /// The library.
    pub lib: KernelLibrary,
    /// A best-effort-priority queue with cooperative kill.
    pub q: VirtualQueue,
}

/// Opens CUDA device 0 ([`real::CudaDriver::new`], whose error is the
/// probe's message when there is no driver or device), compiles the
/// kernel library with NVRTC for its `sm_XY` and loads it.
///
/// [`real::CudaDriver::new`]: crate::real::CudaDriver::new
pub fn open_cuda() -> Result<CudaRig, CudaSetupError> {
    use crate::kernels;
    use crate::queue::{KillMechanism, QueueConfig};

    let mut drv = crate::real::CudaDriver::new(0)?;
    let (major, minor) = drv.info().compute_capability;
    let arch = format!("sm_{major}{minor}");
    let modules = kernels::compile_ptx(&arch).map_err(|source| CudaSetupError::Compile {
        arch,
        source: Box::new(source),
    })?;
    let images: Vec<&str> = modules.iter().map(|m| m.ptx.as_str()).collect();
    let lib = KernelLibrary::from_ptx(&mut drv, &images)?;
    let q = VirtualQueue::new(
        &mut drv,
        StreamPriority::BestEffort,
        QueueConfig::default(),
        KillMechanism::Cooperative,
    )
    .map_err(CudaSetupError::Queue)?;
    Ok(CudaRig { drv, lib, q })
}

/// Opening CUDA device 0 as the scheduler's [`CudaGpu`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenGpuError {
    /// Opening the device or loading the library failed.
    #[error(transparent)]
    Setup(#[from] CudaSetupError),
    /// The loaded library has no synthetic kernel (a build whose kernel
    /// sources lack `synthetic.cu`).
    #[error(
        "the kernel library has no `{SYNTHETIC_KERNEL}`; rebuild with daemon/cuda/kernels/synthetic.cu"
    )]
    NoSyntheticKernel,
    /// Setting up the device's buffers failed.
    #[error(transparent)]
    Gpu(#[from] SetupError),
}

/// CUDA device 0 as the scheduler's [`CudaGpu`], through [`open_cuda`],
/// with the H100 profile's figures and the device's SM count; the loaded
/// kernel library (what the job server runs the models' layers with); and
/// the device's description.
pub fn open_gpu(
    kill: Kill,
) -> Result<(CudaGpu, KernelLibrary, crate::real::CudaInfo), OpenGpuError> {
    let rig = open_cuda()?;
    let info = rig.drv.info().clone();
    let k = rig.lib.synthetic().ok_or(OpenGpuError::NoSyntheticKernel)?;
    let mut profile = DeviceProfile::h100();
    profile.compute_units = u32::try_from(info.sm_count).unwrap_or(1).max(1);
    let g = CudaGpu::new(Box::new(rig.drv), k, profile, kill)?;
    Ok((g, rig.lib, info))
}

/// [`open_gpu`] for the benchmarks, which run synthetic kernels of each
/// manifest's timing and need no library.
pub fn open_device0(kill: Kill) -> Result<(CudaGpu, crate::real::CudaInfo), OpenGpuError> {
    let (g, _, info) = open_gpu(kill)?;
    Ok((g, info))
}
