//! `sluice bench preempt`: REEF's preemption micro-benchmarks (TOCS 2025
//! §6.4, Figures 19 and 21) on the simulated GPU ([`sluice_gpu`]).
//!
//! - **By launched kernels** (Fig. 19a): `n` kernels of 100 µs, **by kernel
//!   time** (Fig. 19b): 100 kernels of 10 µs … 1 ms. Each kernel is one full
//!   round of blocks (one 256-thread block per CU), all launched on one
//!   stream at t = 0. The stream is preempted once every kernel has had time
//!   to reach the device queue (`n × host_launch_ns`) and the kernel then on
//!   the CUs is half done: at `n × host_launch_ns + cp_fetch_ns + launch_ns
//!   + kernel / 2`. **Wait-based** (the baseline of REEF §6.4) keeps the
//!   profile's default device-queue capacity and lets every launched kernel
//!   finish; **reset-based** (REEF §4) runs with the device-queue capacity
//!   REEF adopts, 4, and resets the host queue, sets the preemption flag and
//!   kills the running blocks. Latency: request to stream idle
//!   ([`sluice_gpu::PreemptReport::latency_ns`]); for reset-based, the mean
//!   over 8 requests spread over one kernel's cycle (launch + run) from that
//!   point, since whether the device queue has just freed a slot is a matter
//!   of phase. This is the set-up of the model's own tests
//!   (`sluice_gpusim` `tests::fig19`).
//! - **By lanes** (REEF Fig. 20(a)'s question, on one hardware queue):
//!   `lanes` best-effort streams share hardware queue 0, each with a
//!   capacity-4 device queue and 100 µs kernels on a fifth of the CUs; all
//!   are preempted (reset-based) at once. `reset_us`: until the last is
//!   idle, the worst of 8 request times spread over a kernel's cycle.
//! - **By device-queue capacity** (Fig. 21): ResNet-152 alone on one stream
//!   whose device queue holds `capacity` kernels. `exec_ms`: its normal
//!   execution time. `preempt_us`: the reset-based latency, the mean over
//!   nine preemptions at 10 %, 20 %, …, 90 % of that execution time (one
//!   fresh run each), so that where the fetch engine is in its cycle when the
//!   request lands averages out.
//!
//! Everything is virtual time: the same on every machine.

pub mod device;

use serde::{Deserialize, Serialize};

use sluice_gpu::{DeviceProfile, Event, KernelLaunch, Ns, OpError, PreemptReport, ProfileError};
use sluice_gpusim::GpuSim;
use sluice_model::ModelRegistry;

/// Kernel counts of the first sweep (100 µs kernels).
pub const KERNEL_COUNTS: [u64; 7] = [10, 20, 50, 100, 200, 500, 1000];
/// Kernel times of the second sweep, µs (100 kernels).
pub const KERNEL_TIMES_US: [u64; 7] = [10, 20, 50, 100, 200, 500, 1000];
/// Device-queue capacities of the third sweep.
pub const DQ_CAPACITIES: [u32; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];
/// The device-queue capacity of reset-based preemption (REEF §6.4's default).
pub const RESET_DQ_CAPACITY: u32 = 4;
/// The model of the capacity sweep (REEF Fig. 21 uses RNET).
pub const DQ_MODEL: &str = "resnet152";
/// Best-effort streams on one hardware queue, fourth sweep.
pub const LANES: [u32; 5] = [1, 2, 4, 8, 16];
/// Preemption requests per point, spread over one kernel's cycle.
const PHASES: u64 = 8;

/// Options.
#[derive(Debug, Clone)]
pub struct PreemptOptions {
    /// Device profile name.
    pub device: String,
}

impl Default for PreemptOptions {
    fn default() -> Self {
        Self {
            device: "mi50".into(),
        }
    }
}

/// One point of the kernel-count sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ByKernels {
    /// Kernels launched.
    pub kernels: u64,
    /// Wait-based preemption latency, µs.
    pub wait_us: f64,
    /// Reset-based preemption latency, µs.
    pub reset_us: f64,
}

/// One point of the kernel-time sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ByKernelTime {
    /// Execution time of each kernel, µs.
    pub kernel_us: u64,
    /// Wait-based preemption latency, µs.
    pub wait_us: f64,
    /// Reset-based preemption latency, µs.
    pub reset_us: f64,
}

/// One point of the device-queue capacity sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ByDqCapacity {
    /// Device-queue capacity, kernels.
    pub capacity: u32,
    /// Reset-based preemption latency, µs (mean of nine preemption points).
    pub preempt_us: f64,
    /// Normal execution time of the model, ms.
    pub exec_ms: f64,
}

/// One point of the lanes sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ByLanes {
    /// Best-effort streams sharing one hardware queue, all preempted.
    pub lanes: u32,
    /// Reset-based latency until the last is idle, µs (worst of 8 points).
    pub reset_us: f64,
}

/// The four sweeps (REEF Fig. 19a-c's, plus `by_lanes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreemptResult {
    /// REEF Fig. 19a.
    pub by_kernels: Vec<ByKernels>,
    /// REEF Fig. 19b.
    pub by_kernel_time: Vec<ByKernelTime>,
    /// REEF Fig. 21.
    pub by_dq_capacity: Vec<ByDqCapacity>,
    /// Best-effort lanes sharing one hardware queue.
    pub by_lanes: Vec<ByLanes>,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum PreemptBenchError {
    /// Unknown device profile.
    #[error("bad device profile")]
    Profile(#[from] ProfileError),
    /// The model refused an operation (a bug in this benchmark or the model).
    #[error("the GPU model refused an operation in the {what} sweep")]
    Sim {
        /// Which sweep.
        what: &'static str,
        /// Why.
        #[source]
        source: OpError,
    },
    /// The model went idle without reporting the preemption.
    #[error("the GPU model went idle without a Preempted event in the {what} sweep")]
    NoReport {
        /// Which sweep.
        what: &'static str,
    },
    /// The capacity sweep's model is missing.
    #[error("model `{DQ_MODEL}` is not in the registry")]
    MissingModel,
}

/// Steps until the preemption report (with a watchdog).
fn until_preempted(gpu: &mut GpuSim) -> Option<PreemptReport> {
    for _ in 0..50_000_000u64 {
        match gpu.step()? {
            Event::Preempted(r) => return Some(r),
            _ => continue,
        }
    }
    None
}

/// Fig. 19 set-up: latency (ns) of preempting `n` kernels of `kernel_ns`;
/// for reset-based, the mean over [`PHASES`] request times.
fn fig19(
    profile: &DeviceProfile,
    n: u64,
    kernel_ns: Ns,
    reset: bool,
    what: &'static str,
) -> Result<Ns, PreemptBenchError> {
    if !reset {
        return fig19_at(profile, n, kernel_ns, false, 0, what);
    }
    let cycle = kernel_ns + profile.queues.launch_ns;
    let mut sum = 0;
    for j in 0..PHASES {
        sum += fig19_at(profile, n, kernel_ns, true, j * cycle / PHASES, what)?;
    }
    Ok(sum / PHASES)
}

/// One Fig. 19 preemption, requested `shift` after the set-up's point.
fn fig19_at(
    profile: &DeviceProfile,
    n: u64,
    kernel_ns: Ns,
    reset: bool,
    shift: Ns,
    what: &'static str,
) -> Result<Ns, PreemptBenchError> {
    let sim = |source| PreemptBenchError::Sim { what, source };
    let q = profile.queues.clone();
    let mut gpu = GpuSim::new(profile.clone());
    let s = gpu.create_stream(0);
    if reset {
        gpu.set_dq_capacity(s, RESET_DQ_CAPACITY).map_err(sim)?;
    }
    for i in 0..n {
        let k = KernelLaunch {
            grid_blocks: profile.compute_units,
            threads_per_block: 256,
            regs_per_thread: 32,
            shared_mem: 0,
            block_time_ns: kernel_ns,
            wave_ns: Vec::new(),
            idempotent: true,
            mem_intensity: None,
            tag: i,
        };
        gpu.launch(s, k).map_err(sim)?;
    }
    gpu.run_until(n * q.host_launch_ns + q.cp_fetch_ns + q.launch_ns + kernel_ns / 2 + shift);
    if reset {
        gpu.preempt_reset(s).map_err(sim)?;
    } else {
        gpu.wait_based_preempt(s).map_err(sim)?;
    }
    until_preempted(&mut gpu)
        .map(|r| r.latency_ns())
        .ok_or(PreemptBenchError::NoReport { what })
}

/// Fig. 21 set-up: ResNet-152 with device-queue capacity `cap`; preempted
/// at `at` (reset-based), or run to the end (`None`). Returns the latency
/// or the execution time, ns.
fn fig21(
    profile: &DeviceProfile,
    models: &ModelRegistry,
    cap: u32,
    at: Option<Ns>,
) -> Result<Ns, PreemptBenchError> {
    const WHAT: &str = "device-queue capacity";
    let sim = |source| PreemptBenchError::Sim { what: WHAT, source };
    let (_, m) = models
        .lookup(DQ_MODEL)
        .ok_or(PreemptBenchError::MissingModel)?;
    let mut gpu = GpuSim::new(profile.clone());
    let s = gpu.create_stream(0);
    gpu.set_dq_capacity(s, cap).map_err(sim)?;
    for (i, k) in m.manifest.kernels.iter().enumerate() {
        gpu.launch(s, KernelLaunch::from_model(k, i as u64))
            .map_err(sim)?;
    }
    match at {
        Some(t) => {
            gpu.run_until(t);
            gpu.preempt_reset(s).map_err(sim)?;
            until_preempted(&mut gpu)
                .map(|r| r.latency_ns())
                .ok_or(PreemptBenchError::NoReport { what: WHAT })
        }
        None => {
            for _ in 0..50_000_000u64 {
                if gpu.step().is_none() {
                    break;
                }
            }
            Ok(gpu.now())
        }
    }
}

/// Lanes set-up: `lanes` best-effort streams on hardware queue 0, all
/// preempted at `at`; latency until the last is idle, ns.
fn lanes_at(profile: &DeviceProfile, lanes: u32, at: Ns) -> Result<Ns, PreemptBenchError> {
    const WHAT: &str = "lanes";
    let sim = |source| PreemptBenchError::Sim { what: WHAT, source };
    let hwqs = profile.queues.hw_queues;
    let mut gpu = GpuSim::new(profile.clone());
    let mut be = Vec::new();
    for i in 0..lanes * hwqs {
        let s = gpu.create_stream(0);
        if i % hwqs == 0 {
            be.push(s);
        }
    }
    for &s in &be {
        gpu.set_dq_capacity(s, RESET_DQ_CAPACITY).map_err(sim)?;
        for i in 0..100 {
            let k = KernelLaunch {
                grid_blocks: profile.compute_units.div_ceil(5),
                threads_per_block: 256,
                regs_per_thread: 32,
                shared_mem: 0,
                block_time_ns: 100_000,
                wave_ns: Vec::new(),
                idempotent: true,
                mem_intensity: None,
                tag: i,
            };
            gpu.launch(s, k).map_err(sim)?;
        }
    }
    gpu.run_until(at);
    let t0 = gpu.now();
    for &s in &be {
        gpu.preempt_reset(s).map_err(sim)?;
    }
    let mut left = be.len();
    let mut idle = t0;
    while left > 0 {
        let r = until_preempted(&mut gpu).ok_or(PreemptBenchError::NoReport { what: WHAT })?;
        idle = idle.max(r.idle_at);
        left -= 1;
    }
    Ok(idle - t0)
}

/// Runs the four sweeps.
pub fn run(opts: &PreemptOptions) -> Result<PreemptResult, PreemptBenchError> {
    let profile = DeviceProfile::builtin(&opts.device)?;
    let us = |ns: Ns| ns as f64 / 1e3;
    let mut by_kernels = Vec::new();
    for n in KERNEL_COUNTS {
        let what = "launched-kernels";
        by_kernels.push(ByKernels {
            kernels: n,
            wait_us: us(fig19(&profile, n, 100_000, false, what)?),
            reset_us: us(fig19(&profile, n, 100_000, true, what)?),
        });
    }
    let mut by_kernel_time = Vec::new();
    for k in KERNEL_TIMES_US {
        let what = "kernel-time";
        by_kernel_time.push(ByKernelTime {
            kernel_us: k,
            wait_us: us(fig19(&profile, 100, k * 1000, false, what)?),
            reset_us: us(fig19(&profile, 100, k * 1000, true, what)?),
        });
    }
    let models = ModelRegistry::builtin();
    let mut by_dq_capacity = Vec::new();
    for cap in DQ_CAPACITIES {
        let exec = fig21(&profile, &models, cap, None)?;
        let mut sum = 0;
        for tenth in 1..=9u64 {
            sum += fig21(&profile, &models, cap, Some(exec * tenth / 10))?;
        }
        by_dq_capacity.push(ByDqCapacity {
            capacity: cap,
            preempt_us: us(sum) / 9.0,
            exec_ms: exec as f64 / 1e6,
        });
    }
    let mut by_lanes = Vec::new();
    let cycle = 100_000 + profile.queues.launch_ns;
    for lanes in LANES {
        let mut worst = 0;
        for j in 0..PHASES {
            worst = worst.max(lanes_at(&profile, lanes, 1_000_000 + j * cycle / PHASES)?);
        }
        by_lanes.push(ByLanes {
            lanes,
            reset_us: us(worst),
        });
    }
    Ok(PreemptResult {
        by_kernels,
        by_kernel_time,
        by_dq_capacity,
        by_lanes,
    })
}

/// The result as tables.
pub fn table(r: &PreemptResult, device: &str) -> String {
    let mut s = format!(
        "Preemption latency on the simulated {device} GPU (virtual time, us)\n\n\
         launched kernels (100 us each)   wait-based   reset-based   wait/reset\n"
    );
    for p in &r.by_kernels {
        s += &format!(
            "{:>30} {:>12.1} {:>13.1} {:>11.1}x\n",
            p.kernels,
            p.wait_us,
            p.reset_us,
            p.wait_us / p.reset_us.max(1e-9)
        );
    }
    s += "\nkernel time, us (100 kernels)    wait-based   reset-based   wait/reset\n";
    for p in &r.by_kernel_time {
        s += &format!(
            "{:>30} {:>12.1} {:>13.1} {:>11.1}x\n",
            p.kernel_us,
            p.wait_us,
            p.reset_us,
            p.wait_us / p.reset_us.max(1e-9)
        );
    }
    s += &format!(
        "\n{DQ_MODEL}: DQ capacity   reset latency us (mean of 9 points)   normal execution ms\n"
    );
    for p in &r.by_dq_capacity {
        s += &format!(
            "{:>23} {:>37.1} {:>21.3}\n",
            p.capacity, p.preempt_us, p.exec_ms
        );
    }
    s += "\nbest-effort lanes on one hardware queue, all preempted   reset latency us (worst of 8)\n";
    for p in &r.by_lanes {
        s += &format!("{:>55} {:>28.1}\n", p.lanes, p.reset_us);
    }
    s += &format!(
        "\nwait-based: default device queue, every launched kernel runs to the end; \
         reset-based: device queue of {RESET_DQ_CAPACITY}, host-queue reset + lazy eviction + kill.\n"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_preempt_json_has_the_documented_shape() {
        let r = run(&PreemptOptions::default()).unwrap();
        let v = serde_json::to_value(&r).unwrap();
        let top: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(top.len(), 4);
        let keys = |list: &str| -> Vec<Vec<String>> {
            v[list]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    let mut k: Vec<String> = e.as_object().unwrap().keys().cloned().collect();
                    k.sort();
                    k
                })
                .collect()
        };
        for k in keys("by_kernels") {
            assert_eq!(k, ["kernels", "reset_us", "wait_us"]);
        }
        for k in keys("by_kernel_time") {
            assert_eq!(k, ["kernel_us", "reset_us", "wait_us"]);
        }
        for k in keys("by_dq_capacity") {
            assert_eq!(k, ["capacity", "exec_ms", "preempt_us"]);
        }
        for k in keys("by_lanes") {
            assert_eq!(k, ["lanes", "reset_us"]);
        }
        assert_eq!(v["by_kernels"][0]["kernels"], 10);
        assert_eq!(
            v["by_kernels"].as_array().unwrap().len(),
            KERNEL_COUNTS.len()
        );
        let back: PreemptResult = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
        assert!(table(&r, "mi50").contains("wait-based"));
    }

    #[test]
    fn bench_preempt_reset_is_flat_while_wait_grows() {
        for device in ["mi50", "gv100"] {
            let r = run(&PreemptOptions {
                device: device.into(),
            })
            .unwrap();
            let (first, last) = (r.by_kernels[0], r.by_kernels[r.by_kernels.len() - 1]);
            assert!(last.wait_us > 50.0 * first.wait_us, "{device}: {r:?}");
            assert!(last.reset_us < 1.2 * first.reset_us, "{device}: {r:?}");
            let (first, last) = (
                r.by_kernel_time[0],
                r.by_kernel_time[r.by_kernel_time.len() - 1],
            );
            assert!(last.wait_us > 20.0 * first.wait_us, "{device}: {r:?}");
            let lo = r
                .by_kernel_time
                .iter()
                .map(|p| p.reset_us)
                .fold(f64::MAX, f64::min);
            let hi = r
                .by_kernel_time
                .iter()
                .map(|p| p.reset_us)
                .fold(0.0, f64::max);
            // mi50: within 1.2x. gv100's 15 us kill outlasts a 10 us
            // kernel, so short kernels are often done before it lands.
            let spread = if device == "mi50" { 1.2 } else { 1.5 };
            assert!(hi < spread * lo, "{device}: {r:?}");
            for p in &r.by_kernels {
                assert!(p.reset_us < p.wait_us, "{device}: {p:?}");
            }
            // Lanes sharing a hardware queue are evicted in parallel.
            let (one, most) = (r.by_lanes[0], r.by_lanes[r.by_lanes.len() - 1]);
            assert!(most.reset_us < 1.2 * one.reset_us, "{device}: {r:?}");
            if device == "mi50" {
                // REEF §6.4: 30–38 µs; a check of the component costs.
                assert!(r.by_kernels.iter().all(|p| p.reset_us <= 40.0), "{r:?}");
            }
        }
    }

    #[test]
    fn bench_preempt_capacity_trades_latency_for_execution_time() {
        let r = run(&PreemptOptions::default()).unwrap();
        let c = &r.by_dq_capacity;
        for w in c.windows(2) {
            assert!(w[1].exec_ms <= w[0].exec_ms, "{c:?}");
        }
        assert!(c[0].exec_ms > c[c.len() - 1].exec_ms, "{c:?}");
        assert!(c[c.len() - 1].preempt_us > 10.0 * c[0].preempt_us, "{c:?}");
        // Linear while the queue is full: one launch per queued kernel.
        let launch_us = DeviceProfile::mi50().queues.launch_ns as f64 / 1e3;
        let (a, b) = (c[2], c[4]);
        let slope = (b.preempt_us - a.preempt_us) / f64::from(b.capacity - a.capacity);
        assert!((slope - launch_us).abs() < 0.1 * launch_us, "{slope} {c:?}");
    }

    #[test]
    fn bench_preempt_refuses_unknown_devices() {
        let e = run(&PreemptOptions {
            device: "tpu".into(),
        })
        .unwrap_err();
        assert!(matches!(e, PreemptBenchError::Profile(_)));
    }
}
