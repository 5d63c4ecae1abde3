//! `sluice bench preempt --device cuda`: REEF's Figure 19 (TOCS 2025 §6.4)
//! on a real GPU, through the scheduler's device interface
//! ([`CudaGpu`](sluice_cuda::gpu::CudaGpu)).
//!
//! The set-up follows the simulated benchmark ([`crate::preempt`]):
//! `n` kernels of `kernel_us` (one round of 256-thread blocks, one per SM),
//! launched on one stream; once the first is half done, the stream is
//! preempted. **Wait-based**: stop feeding the stream (device-queue
//! capacity 1024, so every launched kernel is on the device) and wait for
//! it to drain, running kernels to their end. **Reset-based**: device-queue
//! capacity 4, drop the host queue, set the flag (queued kernels return at
//! entry), and the running kernel stops at its next flag poll (the
//! synthetic kernel polls every iteration; cooperative kill). Latency:
//! request to the stream observed idle, on the host's `CLOCK_MONOTONIC`.
//! Each point is repeated `reps` times; p50 and p99 are reported.
//!
//! The harness is written against [`CudaGpu`] over any
//! [`CuDriver`](sluice_cuda::driver::CuDriver), so its tests run it
//! on the fake driver (virtual time) where no GPU is present.

use serde::{Deserialize, Serialize};

use crate::preempt::RESET_DQ_CAPACITY;
use sluice_cuda::gpu::{CudaGpu, Kill};
use sluice_gpu::{Event, Gpu, GpuError, KernelLaunch, Ns};

/// Device-queue capacity of the wait-based runs: every launched kernel
/// reaches the device, as with the profile default on the model.
pub const WAIT_DQ_CAPACITY: u32 = 1024;

/// How long one measurement may take before it is abandoned, device ns.
const WATCHDOG_NS: Ns = 30_000_000_000;

/// p50 and p99 of one point, µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Median.
    pub p50: f64,
    /// 99th percentile (the maximum when fewer than 100 repetitions).
    pub p99: f64,
}

/// One point of the kernel-count sweep on the device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeviceByKernels {
    /// Kernels launched.
    pub kernels: u64,
    /// Wait-based latency, µs (p50).
    pub wait_us: f64,
    /// Reset-based latency, µs (p50).
    pub reset_us: f64,
    /// Wait-based p50/p99.
    pub wait: Spread,
    /// Reset-based p50/p99.
    pub reset: Spread,
}

/// One point of the kernel-time sweep on the device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeviceByKernelTime {
    /// Each kernel's time, µs.
    pub kernel_us: u64,
    /// Wait-based latency, µs (p50).
    pub wait_us: f64,
    /// Reset-based latency, µs (p50).
    pub reset_us: f64,
    /// Wait-based p50/p99.
    pub wait: Spread,
    /// Reset-based p50/p99.
    pub reset: Spread,
}

/// The device benchmark's result (`--json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceResult {
    /// The device, as the driver names it.
    pub device: String,
    /// SMs (one block per SM per kernel).
    pub sms: u32,
    /// Repetitions per point.
    pub reps: u32,
    /// Figure 19a.
    pub by_kernels: Vec<DeviceByKernels>,
    /// Figure 19b.
    pub by_kernel_time: Vec<DeviceByKernelTime>,
}

/// The device benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceBenchError {
    /// A device operation failed.
    #[error("{what}: {source}")]
    Gpu {
        /// The measurement.
        what: String,
        /// The device's error.
        #[source]
        source: GpuError,
    },
    /// Polling the device failed.
    #[error("{what}: {message}")]
    Poll {
        /// The measurement.
        what: String,
        /// The queue's error.
        message: String,
    },
    /// No preemption report within the watchdog.
    #[error("{what}: no preemption report within {} s", WATCHDOG_NS / 1_000_000_000)]
    Timeout {
        /// The measurement.
        what: String,
    },
    /// Setting the device up failed.
    #[error("{0}")]
    Setup(String),
}

fn poll(g: &mut CudaGpu, what: &str) -> Result<Vec<Event>, DeviceBenchError> {
    g.poll().map_err(|e| DeviceBenchError::Poll {
        what: what.into(),
        message: e.to_string(),
    })?;
    Ok(g.drain_events().collect())
}

/// One Figure 19 measurement on a fresh stream of `g`: latency, ns.
pub fn fig19_once(
    g: &mut CudaGpu,
    sms: u32,
    n: u64,
    kernel_ns: Ns,
    reset: bool,
) -> Result<Ns, DeviceBenchError> {
    let what = format!(
        "{} preemption of {n} kernels of {} us",
        if reset { "reset-based" } else { "wait-based" },
        kernel_ns / 1000
    );
    let gpu_err = |source| DeviceBenchError::Gpu {
        what: what.clone(),
        source,
    };
    g.set_kill(if reset { Kill::Cooperative } else { Kill::None });
    let s = g.create_stream(0).map_err(gpu_err)?;
    g.set_dq_capacity(
        s,
        if reset {
            RESET_DQ_CAPACITY
        } else {
            WAIT_DQ_CAPACITY
        },
    )
    .map_err(gpu_err)?;
    for i in 0..n {
        g.launch(
            s,
            KernelLaunch {
                grid_blocks: sms.max(1),
                threads_per_block: 256,
                regs_per_thread: 32,
                shared_mem: 0,
                block_time_ns: kernel_ns,
                wave_ns: Vec::new(),
                idempotent: true,
                mem_intensity: None,
                tag: i,
            },
        )
        .map_err(gpu_err)?;
    }
    // Wait for the first kernel to start, then for it to be half done.
    let deadline = g.now() + WATCHDOG_NS;
    let mut started = None;
    while started.is_none() {
        for e in poll(g, &what)? {
            if let Event::KernelStarted { t, stream, .. } = e
                && stream == s
            {
                started = Some(t);
            }
        }
        if g.now() > deadline {
            return Err(DeviceBenchError::Timeout { what });
        }
        g.driver().wait_for_progress();
    }
    let at = started.unwrap_or_default() + kernel_ns / 2;
    while g.now() < at {
        poll(g, &what)?;
        g.driver().wait_for_progress();
    }
    if reset {
        g.preempt_reset(s).map_err(gpu_err)?;
    } else {
        g.wait_based_preempt(s).map_err(gpu_err)?;
    }
    loop {
        for e in poll(g, &what)? {
            if let Event::Preempted(r) = e
                && r.stream == s
            {
                g.reclaim();
                return Ok(r.latency_ns());
            }
        }
        if g.now() > deadline {
            return Err(DeviceBenchError::Timeout { what });
        }
        g.driver().wait_for_progress();
    }
}

fn spread(v: Vec<Ns>) -> Spread {
    let mut us: Vec<f64> = v.into_iter().map(|ns| ns as f64 / 1e3).collect();
    us.sort_by(f64::total_cmp);
    Spread {
        p50: sluice_stats::quantile(&us, 0.5),
        p99: sluice_stats::quantile(&us, 0.99),
    }
}

/// Runs both Figure 19 sweeps on `g`, `reps` times per point, calling
/// `progress(done, total)` after each measurement.
pub fn run_on(
    g: &mut CudaGpu,
    device: &str,
    sms: u32,
    reps: u32,
    counts: &[u64],
    times_us: &[u64],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<DeviceResult, DeviceBenchError> {
    let reps = reps.max(1);
    let total = (counts.len() + times_us.len()) * 2 * reps as usize;
    let mut done = 0;
    let mut point =
        |g: &mut CudaGpu, n: u64, ns: Ns| -> Result<(Spread, Spread), DeviceBenchError> {
            let (mut w, mut r) = (Vec::new(), Vec::new());
            for _ in 0..reps {
                w.push(fig19_once(g, sms, n, ns, false)?);
                done += 1;
                progress(done, total);
                r.push(fig19_once(g, sms, n, ns, true)?);
                done += 1;
                progress(done, total);
            }
            Ok((spread(w), spread(r)))
        };
    let mut by_kernels = Vec::new();
    for &n in counts {
        let (wait, reset) = point(g, n, 100_000)?;
        by_kernels.push(DeviceByKernels {
            kernels: n,
            wait_us: wait.p50,
            reset_us: reset.p50,
            wait,
            reset,
        });
    }
    let mut by_kernel_time = Vec::new();
    for &k in times_us {
        let (wait, reset) = point(g, 100, k * 1000)?;
        by_kernel_time.push(DeviceByKernelTime {
            kernel_us: k,
            wait_us: wait.p50,
            reset_us: reset.p50,
            wait,
            reset,
        });
    }
    Ok(DeviceResult {
        device: device.into(),
        sms,
        reps,
        by_kernels,
        by_kernel_time,
    })
}

/// The result as tables.
pub fn table(r: &DeviceResult) -> String {
    let mut s = format!(
        "REEF Fig. 19 on {} ({} SMs, {} repetitions per point; real hardware, host clock)\n\n",
        r.device, r.sms, r.reps
    );
    s += "kernels (100 us each) | wait p50 / p99 us | reset p50 / p99 us\n";
    for p in &r.by_kernels {
        s += &format!(
            "{:>21} | {:>8.1} / {:>8.1} | {:>7.1} / {:>7.1}\n",
            p.kernels, p.wait.p50, p.wait.p99, p.reset.p50, p.reset.p99
        );
    }
    s += "\nkernel time us (100 kernels) | wait p50 / p99 us | reset p50 / p99 us\n";
    for p in &r.by_kernel_time {
        s += &format!(
            "{:>28} | {:>8.1} / {:>8.1} | {:>7.1} / {:>7.1}\n",
            p.kernel_us, p.wait.p50, p.wait.p99, p.reset.p50, p.reset.p99
        );
    }
    s
}

/// Runs the benchmark on CUDA device 0: probes the driver, compiles the
/// synthetic kernel with NVRTC for the device's architecture, and measures.
#[cfg(feature = "cuda")]
pub fn run_cuda(
    reps: u32,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<DeviceResult, DeviceBenchError> {
    use crate::preempt::{KERNEL_COUNTS, KERNEL_TIMES_US};
    let (mut g, info) = sluice_cuda::open_device0(Kill::Cooperative)
        .map_err(|e| DeviceBenchError::Setup(e.to_string()))?;
    let sms = u32::try_from(info.sm_count).unwrap_or(1).max(1);
    run_on(
        &mut g,
        &info.name,
        sms,
        reps,
        &KERNEL_COUNTS,
        &KERNEL_TIMES_US,
        progress,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_cuda::fake::{FakeDriver, FakeKernel};
    use sluice_cuda::gpu::SYNTHETIC_KERNEL;
    use sluice_gpu::DeviceProfile;

    fn fake() -> CudaGpu {
        let mut d = FakeDriver::default();
        // `block_ns` at byte 12 of the synthetic kernel's own arguments;
        // it polls the flag every 1 µs of its run.
        let k = d.kernel_handle(
            SYNTHETIC_KERNEL,
            FakeKernel::new(0).timed_by_arg(12).polling(1_000),
        );
        CudaGpu::new(Box::new(d), k, DeviceProfile::h100(), Kill::Cooperative).unwrap()
    }

    /// The harness on the fake device reproduces REEF's shape: reset-based
    /// latency flat in queued kernels and kernel time, wait-based growing.
    #[test]
    fn on_the_fake_device_reset_is_flat_and_wait_grows() {
        let mut g = fake();
        let r = run_on(
            &mut g,
            "fake",
            132,
            2,
            &[10, 100, 400],
            &[10, 100, 1000],
            &mut |_, _| {},
        )
        .unwrap();
        let k = &r.by_kernels;
        assert!(k[2].wait_us > 30.0 * k[0].wait_us / 2.0, "{k:?}");
        assert!(k[2].reset_us <= k[0].reset_us * 1.5 + 5.0, "{k:?}");
        assert!(k.iter().all(|p| p.reset_us < p.wait_us), "{k:?}");
        let t = &r.by_kernel_time;
        assert!(t[2].wait_us > 50.0 * t[0].wait_us, "{t:?}");
        assert!(t[2].reset_us < 50.0, "{t:?}");
        // Wait-based runs every launched kernel: about n × kernel.
        assert!(
            (k[1].wait_us - 100.0 * 100.0).abs() < 0.2 * 100.0 * 100.0,
            "{k:?}"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert!(json["by_kernels"][0]["reset_us"].is_number());
        assert!(json["by_kernel_time"][2]["wait"]["p99"].is_number());
        assert!(table(&r).contains("reset p50"));
    }
}
