//! `sluice check --device cuda` and `sluice profile --device cuda`: the
//! model builders' plans on a real GPU.
//!
//! - **check** ([`check_model`]): loads a model with seeded weights
//!   ([`DeviceModel`]), runs one seeded input through a virtual queue,
//!   and compares the output with the CPU reference
//!   ([`run_cpu`], which accumulates in f64) by [`compare`]. The verdict
//!   is [`Comparison::passes`]: every element finite and the largest
//!   absolute error at most `tol` (default [`DEFAULT_TOLERANCE`]) times
//!   the largest magnitude of the reference output. The largest relative
//!   error (over elements at least 1e-3 of that magnitude) is reported
//!   beside it. The tolerance is a choice, not a calibration: no GPU has
//!   run these kernels in this repository yet (`docs/hardware.md`).
//! - **profile** ([`profile_model`]): after one warm-up inference (so every
//!   activation holds real values), launches every step alone on an idle
//!   stream `reps` times ([`time_steps`]), each time waiting for its event
//!   by polling; a sample is the driver clock (the host's
//!   `CLOCK_MONOTONIC` on the real driver) from just before
//!   `cuLaunchKernel` to the event observed complete, so it includes the
//!   launch latency and one polling interval. The kernel's time is the
//!   median of the samples. [`measured_manifest_json`] writes the
//!   builders' manifest with those times, `block_time_us = kernel_time_us /
//!   waves` where waves are `ceil(blocks / (SMs × blocks per SM))` from the
//!   occupancy model of the h100 profile (with the device's SM count and
//!   the builders' register **estimates**), and a provenance naming the
//!   device and the date. The result loads through the daemon's manifest
//!   loader (checked before it is returned), so `models.dir` can point at
//!   it.
//!
//! - **partitions** ([`partition_profile`], `sluice profile --device cuda
//!   MODEL --partitions 25,50,100 --batches 1,8`): the partition latency
//!   curve and the switch cost of green contexts (below).
//!
//! Both are written against [`CuDriver`]; the tests run them on the fake
//! driver with [`fake_abi`](crate::plan_exec::fake_abi)'s
//! kernels. `check_cuda` and `profile_cuda` (feature `cuda`) open CUDA
//! device 0, compile the kernel library with NVRTC for its architecture and
//! call them.

use std::fmt::Write as _;

use serde::Serialize;

use crate::driver::{CuDriver, DriverError, StreamPriority, write_prologue};
use crate::plan_exec::{DeviceModel, InferError, KernelLibrary, LoadError, LoadOptions};
use crate::queue::{Command, VirtualQueue};
use sluice_gpu::DeviceProfile;
use sluice_model::{Manifest, ModelError, ModelRegistry};
use sluice_nn::builders::{
    self, BuildError, BuiltModel, ExportError, NoFit, Weights, estimate, run_cpu,
};

/// Default `tol` of [`Comparison::passes`]: the largest absolute error may
/// be 0.1 % of the reference output's largest magnitude.
pub const DEFAULT_TOLERANCE: f64 = 1e-3;

/// Default repetitions per kernel of `sluice profile`.
pub const DEFAULT_REPS: u32 = 20;

/// Elements whose reference magnitude is below this share of the largest
/// are left out of [`Comparison::max_rel_err`] (a relative error there
/// measures the noise of a near-zero value).
pub const REL_ERR_FLOOR: f64 = 1e-3;

// ---- comparison ----

/// A device output against the CPU reference.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Comparison {
    /// Elements compared.
    pub elements: usize,
    /// Largest `|device − cpu|`.
    pub max_abs_err: f64,
    /// Largest `|device − cpu| / |cpu|` over elements with `|cpu| ≥
    /// REL_ERR_FLOOR · scale`.
    pub max_rel_err: f64,
    /// Largest `|cpu|` (at least `f64::MIN_POSITIVE`).
    pub scale: f64,
    /// `max_abs_err / scale`, the quantity the tolerance bounds.
    pub normalised_err: f64,
    /// Index of the element with the largest absolute error.
    pub worst_index: usize,
    /// Device elements that are NaN or infinite.
    pub nonfinite: usize,
}

impl Comparison {
    /// Every device element finite and `normalised_err ≤ tol`.
    pub fn passes(&self, tol: f64) -> bool {
        self.nonfinite == 0 && self.normalised_err <= tol
    }
}

/// The outputs differ in length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the device output has {device} elements, the CPU reference {cpu}; they must match")]
pub struct LengthMismatch {
    /// Reference elements.
    pub cpu: usize,
    /// Device elements.
    pub device: usize,
}

/// Compares `device` with the reference `cpu`, element by element.
pub fn compare(cpu: &[f32], device: &[f32]) -> Result<Comparison, LengthMismatch> {
    if cpu.len() != device.len() {
        return Err(LengthMismatch {
            cpu: cpu.len(),
            device: device.len(),
        });
    }
    let scale = cpu
        .iter()
        .map(|&c| f64::from(c).abs())
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let mut c = Comparison {
        elements: cpu.len(),
        max_abs_err: 0.0,
        max_rel_err: 0.0,
        scale,
        normalised_err: 0.0,
        worst_index: 0,
        nonfinite: 0,
    };
    for (i, (&r, &d)) in cpu.iter().zip(device).enumerate() {
        if !d.is_finite() {
            c.nonfinite += 1;
            continue;
        }
        let (r, d) = (f64::from(r), f64::from(d));
        let err = (d - r).abs();
        if err > c.max_abs_err {
            c.max_abs_err = err;
            c.worst_index = i;
        }
        if r.abs() >= REL_ERR_FLOOR * scale {
            c.max_rel_err = c.max_rel_err.max(err / r.abs());
        }
    }
    c.normalised_err = c.max_abs_err / scale;
    Ok(c)
}

// ---- check ----

/// One model's check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckResult {
    /// The plan's name, e.g. `vgg19` or `vgg19_small`.
    pub model: String,
    /// Kernels launched.
    pub steps: usize,
    /// Seed of the weights (the input's is `seed + 1`).
    pub seed: u64,
    /// Device against CPU.
    pub comparison: Comparison,
    /// The tolerance applied.
    pub tolerance: f64,
    /// [`Comparison::passes`] at that tolerance.
    pub pass: bool,
}

impl CheckResult {
    /// One line: `PASS model (n kernels): max abs err …`.
    pub fn line(&self) -> String {
        let c = &self.comparison;
        let mut s = format!(
            "{} {} ({} kernels): max abs err {:.3e} (max |cpu| {:.3e}, normalised {:.3e}, \
             tolerance {:.1e}), max rel err {:.3e}",
            if self.pass { "PASS" } else { "FAIL" },
            self.model,
            self.steps,
            c.max_abs_err,
            c.scale,
            c.normalised_err,
            self.tolerance,
            c.max_rel_err,
        );
        if c.nonfinite > 0 {
            let _ = write!(s, ", {} non-finite outputs", c.nonfinite);
        }
        s
    }
}

/// A model's check or profile failed (not a FAIL verdict: it could not be
/// run).
#[derive(Debug, thiserror::Error)]
pub enum ModelRunError {
    /// The model cannot be built.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// Loading it on the device failed.
    #[error(transparent)]
    Load(Box<LoadError>),
    /// Running it failed.
    #[error(transparent)]
    Infer(Box<InferError>),
    /// The CPU reference failed.
    #[error("model `{model}`: the CPU reference run failed")]
    Cpu {
        /// The model.
        model: String,
        /// Why.
        #[source]
        source: Box<builders::RunError>,
    },
    /// The outputs cannot be compared.
    #[error("model `{model}`")]
    Length {
        /// The model.
        model: String,
        /// The lengths.
        #[source]
        source: LengthMismatch,
    },
    /// A driver call failed.
    #[error("model `{model}`: {what}")]
    Driver {
        /// The model.
        model: String,
        /// What was being done.
        what: String,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// A kernel's run did not complete in time while profiling.
    #[error(
        "model `{model}`: step {step} (`{kernel}`) did not complete within {waited_ns} ns of \
         driver time; the kernel hangs or faulted"
    )]
    Timeout {
        /// The model.
        model: String,
        /// The step.
        step: usize,
        /// Its kernel name.
        kernel: String,
        /// How long it waited.
        waited_ns: u64,
    },
    /// The measured manifest cannot be written.
    #[error(transparent)]
    Manifest(Box<ManifestWriteError>),
}

impl From<LoadError> for ModelRunError {
    fn from(e: LoadError) -> Self {
        Self::Load(Box::new(e))
    }
}

impl From<InferError> for ModelRunError {
    fn from(e: InferError) -> Self {
        Self::Infer(Box::new(e))
    }
}

impl From<ManifestWriteError> for ModelRunError {
    fn from(e: ManifestWriteError) -> Self {
        Self::Manifest(Box::new(e))
    }
}

/// `built` on the device with weights from `seed`, after one inference of
/// the input from `seed + 1`: what [`check_model`], [`standalone_ns`] and
/// [`profile_model`] start from. Hand it back to [`free_model`].
struct Loaded {
    dm: DeviceModel,
    weights: Weights,
    input: Vec<f32>,
    /// The first inference's output.
    output: Vec<f32>,
}

fn load_and_infer(
    drv: &mut dyn CuDriver,
    q: &mut VirtualQueue,
    lib: &KernelLibrary,
    built: &BuiltModel,
    seed: u64,
    opts: &LoadOptions,
) -> Result<Loaded, ModelRunError> {
    let weights = built.weights(seed);
    let input = built.random_input(seed.wrapping_add(1));
    let mut dm = DeviceModel::load(drv, q, built.plan(), &weights, lib, opts)?;
    let output = dm.infer(drv, q, &input)?;
    Ok(Loaded {
        dm,
        weights,
        input,
        output,
    })
}

/// Frees a model [`load_and_infer`] loaded.
fn free_model(drv: &mut dyn CuDriver, dm: DeviceModel) -> Result<(), ModelRunError> {
    let model = dm.name().to_owned();
    dm.free(drv).map_err(|source| ModelRunError::Driver {
        model,
        what: "freeing the model's device memory".into(),
        source,
    })
}

/// Loads `built` with weights from `seed`, runs the input from `seed + 1`
/// through `q`, compares with [`run_cpu`], and frees the model.
pub fn check_model(
    drv: &mut dyn CuDriver,
    q: &mut VirtualQueue,
    lib: &KernelLibrary,
    built: &BuiltModel,
    seed: u64,
    tol: f64,
    opts: &LoadOptions,
) -> Result<CheckResult, ModelRunError> {
    let plan = built.plan();
    let model = plan.name().to_owned();
    let Loaded {
        dm,
        weights,
        input,
        output: device,
    } = load_and_infer(drv, q, lib, built, seed, opts)?;
    free_model(drv, dm)?;
    let cpu = run_cpu(plan, &weights, &input).map_err(|source| ModelRunError::Cpu {
        model: model.clone(),
        source: Box::new(source),
    })?;
    let comparison = compare(&cpu, &device).map_err(|source| ModelRunError::Length {
        model: model.clone(),
        source,
    })?;
    Ok(CheckResult {
        model,
        steps: plan.steps().len(),
        seed,
        comparison,
        tolerance: tol,
        pass: comparison.passes(tol),
    })
}

/// Default timed inferences of [`standalone_ns`].
pub const STANDALONE_REPS: u32 = 5;

/// The standalone time of `built` on the device, ns: loads it (weights from
/// `seed`), runs one untimed inference (input from `seed + 1`), then `reps`
/// (at least 1) timed ones, each alone, and returns their median. A sample
/// is the driver clock around [`DeviceModel::infer`]: the input's copy in,
/// every kernel on `q`, the output's copy out. `sluice demo --backend cuda`
/// sets its real-time period from it.
pub fn standalone_ns(
    drv: &mut dyn CuDriver,
    q: &mut VirtualQueue,
    lib: &KernelLibrary,
    built: &BuiltModel,
    seed: u64,
    reps: u32,
    opts: &LoadOptions,
) -> Result<u64, ModelRunError> {
    let Loaded { mut dm, input, .. } = load_and_infer(drv, q, lib, built, seed, opts)?;
    let mut samples = Vec::with_capacity(reps.max(1) as usize);
    for _ in 0..reps.max(1) {
        let t0 = drv.now_ns();
        dm.infer(drv, q, &input)?;
        samples.push(drv.now_ns().saturating_sub(t0));
    }
    free_model(drv, dm)?;
    Ok(median(&samples))
}

// ---- profile ----

/// One step's measured times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepTiming {
    /// Step index.
    pub step: usize,
    /// Kernel name, `<abi name>:<label>`.
    pub kernel: String,
    /// Every sample, ns, in the order taken.
    pub samples_ns: Vec<u64>,
    /// Their median, ns.
    pub median_ns: u64,
}

/// The median of `v` (the mean of the two middle values, rounded down, for
/// an even count; 0 for none).
pub fn median(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    match s.len() {
        0 => 0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2,
    }
}

/// Times every kernel of `dm` alone: on a new stream with its own control
/// block, each step once untimed, then `reps` times (at least 1), each
/// launch followed by an event that is polled until complete. A sample is
/// the driver clock from before the launch to the event observed complete.
pub fn time_steps(
    drv: &mut dyn CuDriver,
    dm: &DeviceModel,
    reps: u32,
    timeout_ns: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<StepTiming>, ModelRunError> {
    let model = dm.name().to_owned();
    let driver = |what: String| {
        let model = model.clone();
        move |source| ModelRunError::Driver {
            model,
            what,
            source,
        }
    };
    let stream = drv
        .create_stream(StreamPriority::RealTime)
        .map_err(driver("creating the profiling stream".into()))?;
    let ctl = drv
        .create_ctl()
        .map_err(driver("creating the profiling control block".into()))?;
    let ctl_ptr = drv
        .ctl_device_ptr(ctl)
        .map_err(driver("addressing the profiling control block".into()))?;
    let cmds = dm.kernel_commands();
    let mut out = Vec::with_capacity(cmds.len());
    for (step, cmd) in cmds.iter().enumerate() {
        let Command::Kernel { kernel, dims, args } = cmd else {
            unreachable!("kernel_commands holds kernels only")
        };
        let name = dm.step_name(step).to_owned();
        let mut params = args.as_bytes().to_vec();
        write_prologue(&mut params, ctl_ptr, 0);
        let mut samples = Vec::with_capacity(reps as usize);
        for rep in 0..=reps.max(1) {
            let what = |w: &str| format!("{w} step {step} (`{name}`)");
            let t0 = drv.now_ns();
            drv.launch(stream, *kernel, dims, &params)
                .map_err(driver(what("launching")))?;
            let ev = drv
                .record_event(stream)
                .map_err(driver(what("recording the event after")))?;
            loop {
                if drv
                    .event_done(ev)
                    .map_err(driver(what("querying the event of")))?
                {
                    break;
                }
                let waited_ns = drv.now_ns().saturating_sub(t0);
                if waited_ns > timeout_ns {
                    return Err(ModelRunError::Timeout {
                        model,
                        step,
                        kernel: name,
                        waited_ns,
                    });
                }
                drv.wait_for_progress();
            }
            let t1 = drv.now_ns();
            drv.release_event(ev)
                .map_err(driver(what("releasing the event of")))?;
            // The first run is a warm-up (first launches may load code).
            if rep > 0 {
                samples.push(t1.saturating_sub(t0));
            }
        }
        out.push(StepTiming {
            step,
            kernel: name,
            median_ns: median(&samples),
            samples_ns: samples,
        });
        progress(step + 1, cmds.len());
    }
    Ok(out)
}

/// The device a profile was measured on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MeasuredOn {
    /// The device's name as the driver reports it.
    pub device: String,
    /// Its SM count (replaces the h100 profile's for the waves).
    pub sms: u32,
    /// UTC date of the measurement, `YYYY-MM-DD`.
    pub date: String,
    /// Repetitions per kernel.
    pub reps: u32,
}

/// [`measured_manifest_json`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ManifestWriteError {
    /// Not one time per step.
    #[error(
        "model `{model}` has {steps} kernels but {times} times were given; give one per kernel"
    )]
    Count {
        /// The model.
        model: String,
        /// Its kernels.
        steps: usize,
        /// Times given.
        times: usize,
    },
    /// The builders' manifest could not be produced.
    #[error("model `{model}`: the builders' manifest")]
    Export {
        /// The model.
        model: String,
        /// Why.
        #[source]
        source: Box<ExportError>,
    },
    /// The occupancy model has no waves for a step.
    #[error("model `{model}`: computing the waves")]
    Waves {
        /// The model.
        model: String,
        /// Which step does not fit.
        #[source]
        source: NoFit,
    },
    /// The builders' manifest is not the JSON expected (a bug here).
    #[error(
        "model `{model}`: the builders' manifest is not a JSON object with a kernels array: {detail}"
    )]
    Shape {
        /// The model.
        model: String,
        /// What is missing.
        detail: String,
    },
    /// The daemon's loader refused the measured manifest (a bug here).
    #[error("model `{model}`: the daemon's manifest loader refused the measured manifest")]
    Load {
        /// The model.
        model: String,
        /// Why.
        #[source]
        source: Box<ModelError>,
    },
}

/// Rounds µs to whole ns.
fn round_ns(us: f64) -> f64 {
    (us * 1000.0).round() / 1000.0
}

/// The builders' manifest of `built` with measured kernel times
/// (`kernel_ns[i]` for kernel `i`), block times `kernel time / waves` (the
/// h100 occupancy model with `on.sms` SMs and the builders' register
/// estimates), their total, and a provenance saying so. Checked with the
/// daemon's loader before it is returned.
pub fn measured_manifest_json(
    built: &BuiltModel,
    kernel_ns: &[u64],
    on: &MeasuredOn,
) -> Result<String, ManifestWriteError> {
    let plan = built.plan();
    let model = plan.name().to_owned();
    if kernel_ns.len() != plan.steps().len() {
        return Err(ManifestWriteError::Count {
            model,
            steps: plan.steps().len(),
            times: kernel_ns.len(),
        });
    }
    let shape = |detail: &str| ManifestWriteError::Shape {
        model: model.clone(),
        detail: detail.to_owned(),
    };
    let text = built
        .manifest_json()
        .map_err(|source| ManifestWriteError::Export {
            model: model.clone(),
            source: Box::new(source),
        })?;
    let mut doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| shape(&e.to_string()))?;
    let mut profile = DeviceProfile::h100();
    profile.compute_units = on.sms.max(1);
    let kernels = doc
        .get_mut("kernels")
        .and_then(serde_json::Value::as_array_mut)
        .ok_or_else(|| shape("no kernels array"))?;
    if kernels.len() != kernel_ns.len() {
        return Err(shape("a kernel count unlike the plan's"));
    }
    let mut total_ns = 0u64;
    let mut lines = Vec::with_capacity(kernels.len());
    for (i, (k, &ns)) in kernels.iter_mut().zip(kernel_ns).enumerate() {
        let waves = estimate(plan, i, &profile)
            .map_err(|source| ManifestWriteError::Waves {
                model: model.clone(),
                source,
            })?
            .rounds
            .max(1);
        let kernel_us = round_ns(ns as f64 / 1000.0);
        total_ns += (kernel_us * 1000.0).round() as u64;
        let obj = k
            .as_object_mut()
            .ok_or_else(|| shape("a kernel is not an object"))?;
        obj.insert("kernel_time_us".into(), kernel_us.into());
        obj.insert(
            "block_time_us".into(),
            round_ns(kernel_us / waves as f64).min(kernel_us).into(),
        );
        lines.push(format!("  {k}"));
    }
    let provenance = format!(
        "measured on {} {} with sluice profile: kernel_time_us is the median of {} runs of each \
         kernel alone on an idle stream, timed on the host clock (CLOCK_MONOTONIC) from before \
         cuLaunchKernel to its event observed complete by polling, so it includes the launch \
         latency. block_time_us = kernel_time_us / waves, waves = ceil(blocks / ({} SMs x \
         blocks per SM)) from the h100 profile's occupancy model with the device's SM count and \
         ESTIMATED registers per thread. regs_per_thread and shared_mem_bytes are the model \
         builders' estimates (not ptxas figures); grid, block, reads, writes and groups are the \
         builders' plan of {} ({:?} scale).",
        on.device,
        on.date,
        on.reps.max(1),
        profile.compute_units,
        plan.display_name(),
        built.options().scale,
    );
    let field = |name: &str| doc.get(name).cloned().unwrap_or(serde_json::Value::Null);
    let json = format!(
        "{{\n \"name\": {},\n \"display_name\": {},\n \"provenance\": {},\n \"input_bytes\": {},\n \
         \"output_bytes\": {},\n \"total_time_us\": {},\n \"kernels\": [\n{}\n ]\n}}\n",
        field("name"),
        field("display_name"),
        serde_json::Value::from(provenance),
        field("input_bytes"),
        field("output_bytes"),
        serde_json::Value::from(total_ns as f64 / 1000.0),
        lines.join(",\n"),
    );
    let file = format!("profile:{model}");
    let load = |source| ManifestWriteError::Load {
        model: model.clone(),
        source: Box::new(source),
    };
    let (manifest, memory): (Manifest, _) =
        Manifest::parse_with_memory(&file, &json).map_err(load)?;
    ModelRegistry::from_parts([(file, manifest, memory)]).map_err(load)?;
    Ok(json)
}

/// The UTC date of `unix_secs`, `YYYY-MM-DD` (proleptic Gregorian;
/// Hinnant's `civil_from_days`).
pub fn utc_date(unix_secs: u64) -> String {
    let z = (unix_secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Today's UTC date.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_date(secs)
}

/// What [`profile_model`] measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileReport {
    /// The plan's name.
    pub model: String,
    /// Where and when.
    pub on: MeasuredOn,
    /// Per step.
    pub steps: Vec<StepTiming>,
    /// Sum of the medians, µs.
    pub total_us: f64,
    /// The measured manifest ([`measured_manifest_json`]).
    #[serde(skip)]
    pub manifest_json: String,
}

impl ProfileReport {
    /// One line per kernel (median and spread), then the total.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{} on {} ({}, {} runs per kernel, medians; host clock, launch latency included)\n",
            self.model, self.on.device, self.on.date, self.on.reps
        );
        let _ = writeln!(
            s,
            "{:>5}  {:>12} {:>12} {:>12}  kernel",
            "step", "median us", "min us", "max us"
        );
        for t in &self.steps {
            let us = |ns: u64| ns as f64 / 1000.0;
            let min = t.samples_ns.iter().copied().min().unwrap_or(0);
            let max = t.samples_ns.iter().copied().max().unwrap_or(0);
            let _ = writeln!(
                s,
                "{:>5}  {:>12.3} {:>12.3} {:>12.3}  {}",
                t.step,
                us(t.median_ns),
                us(min),
                us(max),
                t.kernel
            );
        }
        let _ = writeln!(s, "total of the medians: {:.3} us", self.total_us);
        s
    }
}

/// Loads `built` (weights from `seed`), runs one inference (input from
/// `seed + 1`) so every activation holds real values, times every kernel
/// ([`time_steps`]) and writes the measured manifest.
#[allow(clippy::too_many_arguments)]
pub fn profile_model(
    drv: &mut dyn CuDriver,
    q: &mut VirtualQueue,
    lib: &KernelLibrary,
    built: &BuiltModel,
    seed: u64,
    on: &MeasuredOn,
    opts: &LoadOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<ProfileReport, ModelRunError> {
    let plan = built.plan();
    let Loaded { dm, .. } = load_and_infer(drv, q, lib, built, seed, opts)?;
    let steps = time_steps(drv, &dm, on.reps, opts.timeout_ns, progress)?;
    free_model(drv, dm)?;
    let medians: Vec<u64> = steps.iter().map(|t| t.median_ns).collect();
    let manifest_json = measured_manifest_json(built, &medians, on)?;
    Ok(ProfileReport {
        model: plan.name().to_owned(),
        on: on.clone(),
        total_us: medians.iter().sum::<u64>() as f64 / 1000.0,
        steps,
        manifest_json,
    })
}

/// Prepared switches timed by [`partition_profile`].
pub const SWITCH_REPS: usize = 200;

/// Median, 90th percentile and range of samples, µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Samples.
    pub n: usize,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// Smallest.
    pub min_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl Spread {
    /// Of samples in ns (nearest-rank percentiles); all 0 when empty.
    pub fn of_ns(mut ns: Vec<u64>) -> Self {
        ns.sort_unstable();
        let n = ns.len();
        let at = |q: f64| {
            if n == 0 {
                0.0
            } else {
                ns[((n - 1) as f64 * q).round() as usize] as f64 / 1e3
            }
        };
        Self {
            n,
            p50_us: at(0.5),
            p90_us: at(0.9),
            min_us: at(0.0),
            max_us: at(1.0),
        }
    }
}

/// One point of the partition latency curve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionRow {
    /// Batch size.
    pub batch: u32,
    /// Partition asked for, percent of the device's SMs.
    pub partition_pct: u32,
    /// SMs that is: ⌈pct × SMs / 100⌉ (the GPU model's rule).
    pub sms_asked: u32,
    /// SMs of the green context it became (whole granules), or the whole
    /// device.
    pub sms: u32,
    /// The whole device (primary context), no green context.
    pub whole_device: bool,
    /// Latency of one request, first launch to the last kernel's end, over
    /// the timed runs, µs.
    pub latency: Spread,
}

/// The cost of moving a stream between green contexts, on the dispatcher
/// (host wall clock around `Gpu::set_partition`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SwitchCost {
    /// SMs of the two prepared partitions switched between.
    pub between_sms: (u32, u32),
    /// A switch between the two prepared partitions, with kernels
    /// outstanding on the stream (so each switch makes the new stream wait
    /// for them).
    pub prepared: Spread,
    /// A switch into a partition never used before: the green context and
    /// the stream in it are created inside the call.
    pub first_use: Spread,
}

/// `sluice profile --device cuda MODEL --partitions …`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionReport {
    /// False: measured on the device the driver drives (the fake driver in
    /// the tests, where times are its virtual clock and its dispatcher-side
    /// costs).
    pub simulated: bool,
    /// The device.
    pub device: String,
    /// Its SMs, and SMs per granule of its split.
    pub sms: u32,
    /// SMs per granule.
    pub granule_sms: u32,
    /// Model.
    pub model: String,
    /// Where its kernels come from (its manifest's provenance).
    pub provenance: String,
    /// How each point is measured.
    pub rule: String,
    /// Points, batch-major.
    pub rows: Vec<PartitionRow>,
    /// Switch cost.
    pub switch: SwitchCost,
}

/// Why [`partition_profile`] failed.
#[derive(Debug, thiserror::Error)]
pub enum PartitionProfileError {
    /// A batch size outside 1..=4096.
    #[error("batch size {0} is outside 1..=4096; give batch sizes like 1,8")]
    BadBatch(u32),
    /// A partition size the device cannot make.
    #[error("{0}")]
    BadPartition(String),
    /// The device refused an operation.
    #[error("{what}")]
    Device {
        /// What was being done.
        what: String,
        /// The device's error.
        #[source]
        source: sluice_gpu::GpuError,
    },
    /// The device stopped before the request finished.
    #[error("the device stopped before {what} finished: {why}")]
    Stopped {
        /// The device's error, or why none is known.
        why: String,
        /// What was running.
        what: String,
    },
}

/// One request of `model` at `batch` on stream `s` of `gpu`, alone: ns
/// from the first launch to the last kernel's end (device clock).
fn one_request(
    gpu: &mut crate::CudaGpu,
    s: sluice_gpu::StreamId,
    model: &sluice_model::Model,
    batch: u32,
) -> Result<u64, PartitionProfileError> {
    use sluice_gpu::{Clocked, Event, Gpu};
    let what = || format!("{} at batch {batch}", model.name());
    let model = &model.at_batch(batch);
    let t0 = gpu.now();
    let n = launch_request(gpu, s, model, &what())?;
    let mut out = Vec::new();
    let mut finished = 0;
    let mut end = t0;
    while finished < n {
        out.clear();
        if gpu.advance(None, &mut out).is_none() && out.is_empty() {
            return Err(PartitionProfileError::Stopped {
                what: what(),
                why: gpu
                    .failure()
                    .unwrap_or_else(|| "the device reported no error".to_owned()),
            });
        }
        for e in &out {
            if let Event::KernelFinished { t, .. } = e {
                finished += 1;
                end = end.max(*t);
            }
        }
    }
    Ok(end - t0)
}

/// `sluice profile --device cuda A --pair B`: two partitions of one GPU
/// busy at once.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairReport {
    /// False: measured on the device the driver drives.
    pub simulated: bool,
    /// The device.
    pub device: String,
    /// How each point is measured.
    pub rule: String,
    /// The partition share asked for A, percent of the SMs (B gets the
    /// granules above A's).
    pub split_pct: u32,
    /// The two models, each with its batch, its partition's SMs, its
    /// latency alone and beside the other, and the ratio of the medians.
    pub sides: [PairSide; 2],
}

/// One model of a [`PairReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairSide {
    /// Model.
    pub model: String,
    /// Batch.
    pub batch: u32,
    /// SMs of its partition.
    pub sms: u32,
    /// One request alone on the device (the other partition idle), µs.
    pub alone: Spread,
    /// One request while the other partition runs the other model's
    /// requests back to back, µs.
    pub beside: Spread,
    /// `beside.p50_us / alone.p50_us`: the interference factor.
    pub factor: f64,
}

impl PairReport {
    /// The report as text.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{}: two partitions busy at once ({}), split {} %",
            self.device, self.rule, self.split_pct
        );
        let _ = writeln!(
            t,
            "model            batch  SMs  alone p50 us  beside p50 us  factor"
        );
        for x in &self.sides {
            let _ = writeln!(
                t,
                "{:<16} {:>5} {:>4} {:>13.1} {:>14.1} {:>7.3}",
                x.model, x.batch, x.sms, x.alone.p50_us, x.beside.p50_us, x.factor
            );
        }
        t
    }
}

/// Launches one request of `model` (already at its batch) on `s`; the
/// number of kernels launched. `what` names it in errors.
fn launch_request(
    gpu: &mut crate::CudaGpu,
    s: sluice_gpu::StreamId,
    model: &sluice_model::Model,
    what: &str,
) -> Result<usize, PartitionProfileError> {
    use sluice_gpu::{Gpu, KernelLaunch};
    for (i, k) in model.manifest.kernels.iter().enumerate() {
        gpu.launch(s, KernelLaunch::from_model(k, i as u64))
            .map_err(|source| PartitionProfileError::Device {
                what: format!("launching kernel {i} of {what}"),
                source,
            })?;
    }
    Ok(model.manifest.kernels.len())
}

/// `reps` requests of `fg` on stream `sf`, one after another, each timed
/// from its first launch to its last kernel's end, while `bg` (if any)
/// runs requests back to back on stream `sb`; ns per request.
fn timed_beside(
    gpu: &mut crate::CudaGpu,
    (sf, fg): (sluice_gpu::StreamId, &sluice_model::Model),
    bg: Option<(sluice_gpu::StreamId, &sluice_model::Model)>,
    reps: u32,
) -> Result<Vec<u64>, PartitionProfileError> {
    use sluice_gpu::{Clocked, Event, Gpu};
    let stopped = |gpu: &crate::CudaGpu, what: &str| PartitionProfileError::Stopped {
        what: what.to_owned(),
        why: gpu
            .failure()
            .unwrap_or_else(|| "the device reported no error".to_owned()),
    };
    // Background requests in flight (kernels left of the current one).
    let mut bg_left = match bg {
        Some((sb, m)) => launch_request(gpu, sb, m, m.name())?,
        None => 0,
    };
    let mut samples = Vec::with_capacity(reps as usize);
    let mut out = Vec::new();
    // One untimed request first, then the timed ones.
    for r in 0..=reps {
        let t0 = gpu.now();
        let mut left = launch_request(gpu, sf, fg, fg.name())?;
        let mut end = t0;
        while left > 0 {
            out.clear();
            if gpu.advance(None, &mut out).is_none() && out.is_empty() {
                return Err(stopped(gpu, fg.name()));
            }
            for e in &out {
                let Event::KernelFinished { t, stream, .. } = e else {
                    continue;
                };
                if *stream == sf {
                    left -= 1;
                    end = end.max(*t);
                } else if let Some((sb, m)) = bg
                    && *stream == sb
                {
                    bg_left -= 1;
                    if bg_left == 0 {
                        bg_left = launch_request(gpu, sb, m, m.name())?;
                    }
                }
            }
        }
        if r > 0 {
            samples.push(end - t0);
        }
    }
    // Let the background's last request finish, so the next measurement
    // starts on an idle device.
    while bg_left > 0 {
        out.clear();
        if gpu.advance(None, &mut out).is_none() && out.is_empty() {
            return Err(stopped(gpu, "the background requests"));
        }
        let sb = bg.map(|(s, _)| s);
        bg_left -= out
            .iter()
            .filter(|e| matches!(e, Event::KernelFinished { stream, .. } if Some(*stream) == sb))
            .count()
            .min(bg_left);
    }
    Ok(samples)
}

/// Pairwise interference: model `a` in a partition of `split_pct` % of
/// the SMs (⌈pct × SMs / 100⌉ rounded up to whole granules) and `b` in the
/// granules above it, each timed alone (`reps` requests after one
/// untimed, the other partition idle) and while the other partition runs
/// the other model's requests back to back. The factor of a side is the
/// ratio of its medians. The models' manifest kernels run as synthetic
/// kernels at their batch, as in [`partition_profile`].
pub fn pair_profile(
    gpu: &mut crate::CudaGpu,
    device: &str,
    a: (&sluice_model::Model, u32),
    b: (&sluice_model::Model, u32),
    split_pct: u32,
    reps: u32,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<PairReport, PartitionProfileError> {
    use crate::partition;
    use sluice_gpu::Gpu;
    for &(_, batch) in [&a, &b] {
        if batch == 0 || batch > 4096 {
            return Err(PartitionProfileError::BadBatch(batch));
        }
    }
    let dev_err = |what: String| move |source| PartitionProfileError::Device { what, source };
    let layout = gpu
        .sm_granules()
        .map_err(dev_err("reading the device's SM split".into()))?;
    let ia =
        partition::for_percent(&layout, split_pct).map_err(PartitionProfileError::BadPartition)?;
    let top = ia.granules.0.checked_ilog2().unwrap_or(0) + 1;
    if ia.whole_device || top >= layout.granules {
        return Err(PartitionProfileError::BadPartition(format!(
            "a split of {split_pct} % gives the first model every granule of the device ({} SMs in {} granules of {}), leaving none for the second; give a smaller split",
            layout.sm_count, layout.granules, layout.granule_sms
        )));
    }
    let cus_a: Vec<u32> = (0..top * layout.granule_sms).collect();
    let cus_b: Vec<u32> = (top * layout.granule_sms..layout.sm_count).collect();
    let ib = partition::for_cus(&layout, &cus_b).map_err(PartitionProfileError::BadPartition)?;
    let mut streams = Vec::new();
    for (cus, which) in [(&cus_a, "first"), (&cus_b, "second")] {
        let what = format!(
            "moving the {which} model's stream into its {} SMs",
            cus.len()
        );
        let s = gpu.create_stream(0).map_err(dev_err(what.clone()))?;
        gpu.prepare_partition_cus(cus)
            .map_err(dev_err(what.clone()))?;
        gpu.set_partition(s, Some(cus)).map_err(dev_err(what))?;
        streams.push(s);
    }
    let (sa, sb) = (streams[0], streams[1]);
    let ma = a.0.at_batch(a.1);
    let mb = b.0.at_batch(b.1);
    progress(0, 4);
    let a_alone = timed_beside(gpu, (sa, &ma), None, reps)?;
    progress(1, 4);
    let a_beside = timed_beside(gpu, (sa, &ma), Some((sb, &mb)), reps)?;
    progress(2, 4);
    let b_alone = timed_beside(gpu, (sb, &mb), None, reps)?;
    progress(3, 4);
    let b_beside = timed_beside(gpu, (sb, &mb), Some((sa, &ma)), reps)?;
    progress(4, 4);
    let side = |m: &sluice_model::Model, batch, sms, alone: Vec<u64>, beside: Vec<u64>| {
        let (alone, beside) = (Spread::of_ns(alone), Spread::of_ns(beside));
        PairSide {
            model: m.name().to_owned(),
            batch,
            sms,
            factor: if alone.p50_us > 0.0 {
                beside.p50_us / alone.p50_us
            } else {
                f64::NAN
            },
            alone,
            beside,
        }
    };
    Ok(PairReport {
        simulated: false,
        device: device.to_owned(),
        rule: format!(
            "{reps} timed requests after one untimed, device clock from the first launch to the last kernel's end; beside: the other partition runs the other model's requests back to back; the manifests' kernels as synthetic kernels"
        ),
        split_pct,
        sides: [
            side(a.0, a.1, ia.sms, a_alone, a_beside),
            side(b.0, b.1, ib.sms, b_alone, b_beside),
        ],
    })
}

/// The partition latency curve of `model` on `gpu` and the switch cost.
///
/// For each batch and partition (percent of the SMs, ⌈pct × SMs / 100⌉
/// rounded up to whole granules; a partition of every granule is the
/// whole device), one stream is moved into the partition (prepared first),
/// one untimed request runs, then `reps` timed ones, each alone: the
/// model's manifest kernels at that batch as synthetic kernels (the GPU
/// model's inputs, so the curve compares with `sluice profile --device
/// h100`). Then the switch cost: [`SWITCH_REPS`] switches between the
/// smallest and the largest partition asked for that is not the whole
/// device (or 25 % / 50 %), with up to 4 kernels outstanding, and `reps`
/// (at most 100) first uses of granule ranges never used before.
pub fn partition_profile(
    gpu: &mut crate::CudaGpu,
    device: &str,
    model: &sluice_model::Model,
    batches: &[u32],
    partitions: &[u32],
    reps: u32,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<PartitionReport, PartitionProfileError> {
    use crate::partition;
    use sluice_gpu::{Gpu, KernelLaunch};
    use std::time::Instant;
    if let Some(&b) = batches.iter().find(|&&b| b == 0 || b > 4096) {
        return Err(PartitionProfileError::BadBatch(b));
    }
    let dev_err = |what: String| move |source| PartitionProfileError::Device { what, source };
    let layout = gpu
        .sm_granules()
        .map_err(dev_err("reading the device's SM split".into()))?;
    let infos = partitions
        .iter()
        .map(|&pct| partition::for_percent(&layout, pct).map(|i| (pct, i)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(PartitionProfileError::BadPartition)?;
    let s = gpu
        .create_stream(0)
        .map_err(dev_err("creating the stream".into()))?;
    let cus_of = |i: &partition::PartitionInfo| -> Vec<u32> {
        i.granules
            .iter()
            .flat_map(|g| g * layout.granule_sms..(g + 1) * layout.granule_sms)
            .collect()
    };
    let total = batches.len() * infos.len() + 2;
    let mut done = 0;
    let mut rows = Vec::new();
    for &batch in batches {
        for &(pct, info) in &infos {
            let cus = cus_of(&info);
            let what = format!("moving the stream into {} SMs", info.sms);
            if info.whole_device {
                gpu.set_partition(s, None).map_err(dev_err(what))?;
            } else {
                gpu.prepare_partition_cus(&cus)
                    .map_err(dev_err(what.clone()))?;
                gpu.set_partition(s, Some(&cus)).map_err(dev_err(what))?;
            }
            one_request(gpu, s, model, batch)?;
            let mut samples = Vec::with_capacity(reps as usize);
            for _ in 0..reps {
                samples.push(one_request(gpu, s, model, batch)?);
            }
            rows.push(PartitionRow {
                batch,
                partition_pct: pct,
                sms_asked: (u64::from(layout.sm_count) * u64::from(pct)).div_ceil(100) as u32,
                sms: info.sms,
                whole_device: info.whole_device,
                latency: Spread::of_ns(samples),
            });
            done += 1;
            progress(done, total);
        }
    }
    // Switch cost between two prepared partitions.
    let parts: Vec<_> = infos.iter().filter(|(_, i)| !i.whole_device).collect();
    let pick =
        |pct| partition::for_percent(&layout, pct).map_err(PartitionProfileError::BadPartition);
    let (a, b) = match (
        parts.iter().min_by_key(|(_, i)| i.sms),
        parts.iter().max_by_key(|(_, i)| i.sms),
    ) {
        (Some(x), Some(y)) if x.1.granules != y.1.granules => (x.1, y.1),
        _ => (pick(25)?, pick(50)?),
    };
    let (ca, cb) = (cus_of(&a), cus_of(&b));
    let sw_err = || dev_err("switching between prepared partitions".into());
    gpu.prepare_partition_cus(&ca).map_err(sw_err())?;
    gpu.prepare_partition_cus(&cb).map_err(sw_err())?;
    let tiny = KernelLaunch {
        grid_blocks: 1,
        threads_per_block: 32,
        regs_per_thread: 32,
        shared_mem: 0,
        block_time_ns: 20_000,
        wave_ns: Vec::new(),
        idempotent: true,
        mem_intensity: None,
        tag: u64::MAX,
    };
    let mut prepared = Vec::with_capacity(SWITCH_REPS);
    let drain = |gpu: &mut crate::CudaGpu| {
        let mut out = Vec::new();
        while sluice_gpu::Clocked::advance(gpu, None, &mut out).is_some() {
            out.clear();
        }
    };
    for i in 0..SWITCH_REPS {
        if i % 16 == 0 {
            drain(gpu);
            for _ in 0..4 {
                gpu.launch(s, tiny.clone()).map_err(sw_err())?;
            }
            gpu.poll().map_err(|e| PartitionProfileError::Device {
                what: "polling the device".into(),
                source: sluice_gpu::GpuError::Driver {
                    backend: "cuda",
                    op: "poll",
                    message: e.to_string(),
                },
            })?;
        }
        let to = if i % 2 == 0 { &ca } else { &cb };
        let t0 = Instant::now();
        gpu.set_partition(s, Some(to)).map_err(sw_err())?;
        prepared.push(t0.elapsed().as_nanos() as u64);
    }
    drain(gpu);
    done += 1;
    progress(done, total);
    // First uses: granule ranges no green context was made of yet.
    let mut first_use = Vec::new();
    let want = reps.min(100) as usize;
    'ranges: for len in 1..layout.granules {
        for first in 0..=layout.granules - len {
            if first_use.len() >= want {
                break 'ranges;
            }
            let set = crate::driver::GranuleSet::range(first, len);
            if [a.granules, b.granules].contains(&set)
                || infos.iter().any(|(_, i)| i.granules == set)
            {
                continue;
            }
            let cus: Vec<u32> =
                (first * layout.granule_sms..(first + len) * layout.granule_sms).collect();
            let t0 = Instant::now();
            gpu.set_partition(s, Some(&cus))
                .map_err(dev_err("switching into a new partition".into()))?;
            first_use.push(t0.elapsed().as_nanos() as u64);
        }
    }
    gpu.set_partition(s, None)
        .map_err(dev_err("moving the stream back to the whole device".into()))?;
    done += 1;
    progress(done, total);
    Ok(PartitionReport {
        simulated: false,
        device: device.to_owned(),
        sms: layout.sm_count,
        granule_sms: layout.granule_sms,
        model: model.name().to_owned(),
        provenance: model.manifest.provenance.clone(),
        rule: format!(
            "one request alone on one stream, the manifest's kernels at batch b as synthetic \
             kernels (batch-scaled kernels have b times the blocks); partition p%: the stream \
             moved into the green context of ceil(p x SMs / 100) SMs rounded up to whole \
             granules of {} SMs (every granule: the whole device); 1 untimed + {reps} timed \
             requests per point, latency = device clock from the first launch to the last \
             kernel's end; switch = host wall clock around set_partition",
            layout.granule_sms
        ),
        rows,
        switch: SwitchCost {
            between_sms: (a.sms, b.sms),
            prepared: Spread::of_ns(prepared),
            first_use: Spread::of_ns(first_use),
        },
    })
}

impl PartitionReport {
    /// The curve as the manifest's `lbp` entry the planners and the
    /// daemon's cluster backend read: the median of each point, ms, batches
    /// and partitions ascending (a size given twice counts once: its first
    /// measurement).
    pub fn lbp_table(&self) -> sluice_model::LbpTable {
        let mut batches: Vec<u32> = self.rows.iter().map(|r| r.batch).collect();
        let mut pcts: Vec<u32> = self.rows.iter().map(|r| r.partition_pct).collect();
        batches.sort_unstable();
        batches.dedup();
        pcts.sort_unstable();
        pcts.dedup();
        let at = |b: u32, p: u32| {
            self.rows
                .iter()
                .find(|r| r.batch == b && r.partition_pct == p)
                .map_or(f64::NAN, |r| r.latency.p50_us / 1000.0)
        };
        sluice_model::LbpTable {
            device: self.device.clone(),
            simulated: self.simulated,
            rule: format!("{} (median of each point)", self.rule),
            latency_ms: batches
                .iter()
                .map(|&b| pcts.iter().map(|&p| at(b, p)).collect())
                .collect(),
            batches,
            partitions_pct: pcts,
            mem_demand: Vec::new(),
        }
    }

    /// The curve as a table (median µs, one row per batch, one column per
    /// partition) and the switch cost.
    pub fn table(&self) -> String {
        let mut pcts: Vec<u32> = self.rows.iter().map(|r| r.partition_pct).collect();
        pcts.sort_unstable();
        pcts.dedup();
        let mut out = format!(
            "partition latency of {} on {} ({} SMs, granules of {}), median us\nbatch \\ SMs % (SMs)",
            self.model, self.device, self.sms, self.granule_sms
        );
        for p in &pcts {
            let sms = self
                .rows
                .iter()
                .find(|r| r.partition_pct == *p)
                .map_or(0, |r| r.sms);
            let _ = write!(out, " {:>12}", format!("{p}% ({sms})"));
        }
        out.push('\n');
        let mut batches: Vec<u32> = self.rows.iter().map(|r| r.batch).collect();
        batches.dedup();
        for b in batches {
            let _ = write!(out, "{b:>19}");
            for p in &pcts {
                match self
                    .rows
                    .iter()
                    .find(|r| r.batch == b && r.partition_pct == *p)
                {
                    Some(r) => {
                        let _ = write!(out, " {:>12.1}", r.latency.p50_us);
                    }
                    None => out.push_str("            -"),
                }
            }
            out.push('\n');
        }
        let sw = &self.switch;
        let line = |name: &str, s: &Spread| {
            format!(
                "{name}: p50 {:.2} us, p90 {:.2} us, min {:.2} us, max {:.2} us over {}\n",
                s.p50_us, s.p90_us, s.min_us, s.max_us, s.n
            )
        };
        out += &format!(
            "switch between prepared partitions of {} and {} SMs (dispatcher wall clock)\n",
            sw.between_sms.0, sw.between_sms.1
        );
        out += &line("  prepared", &sw.prepared);
        out += &line(
            "  first use (creates green context + stream)",
            &sw.first_use,
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeDriver;
    use crate::plan_exec::fake_abi::{self, FakeTimes};
    use sluice_nn::builders::MODEL_NAMES;

    fn small(name: &str) -> BuiltModel {
        sluice_nn::builders::build_small(name).unwrap()
    }

    fn rig(times: FakeTimes) -> (FakeDriver, VirtualQueue, KernelLibrary) {
        fake_abi::rig(times)
    }

    #[test]
    fn compare_reports_errors_and_the_verdict() {
        let cpu = [1.0f32, -4.0, 0.001, 2.0];
        let dev = [1.002f32, -4.0, 0.0015, 2.0];
        let c = compare(&cpu, &dev).unwrap();
        assert_eq!(c.elements, 4);
        assert_eq!(c.scale, 4.0);
        assert!((c.max_abs_err - 0.002).abs() < 1e-6, "{c:?}");
        assert_eq!(c.worst_index, 0);
        // 0.001 is below REL_ERR_FLOOR x 4, so its 50 % error is left out.
        assert!((c.max_rel_err - 0.002).abs() < 1e-5, "{c:?}");
        assert!((c.normalised_err - 0.0005).abs() < 1e-6);
        assert!(c.passes(1e-3));
        assert!(!c.passes(1e-4));
        let c = compare(&cpu, &[1.0, f32::NAN, 0.001, 2.0]).unwrap();
        assert_eq!(c.nonfinite, 1);
        assert!(!c.passes(1.0));
        assert_eq!(
            compare(&cpu, &[1.0]).unwrap_err().to_string(),
            "the device output has 1 elements, the CPU reference 4; they must match"
        );
        let z = compare(&[0.0; 3], &[0.0; 3]).unwrap();
        assert!(z.passes(0.0) && z.normalised_err == 0.0);
    }

    #[test]
    fn check_passes_every_small_model_on_the_fake_device() {
        for name in MODEL_NAMES {
            let (mut d, mut q, lib) = rig(FakeTimes::default());
            let m = small(name);
            let r = check_model(
                &mut d,
                &mut q,
                &lib,
                &m,
                5,
                DEFAULT_TOLERANCE,
                &LoadOptions::default(),
            )
            .unwrap();
            assert!(r.pass, "{}", r.line());
            // The fake runs the same ops as the reference: exact.
            assert_eq!(r.comparison.max_abs_err, 0.0, "{}", r.line());
            assert_eq!(r.steps, m.plan().steps().len());
            assert!(
                r.line().starts_with(&format!("PASS {name}_small (")),
                "{}",
                r.line()
            );
        }
    }

    #[test]
    fn check_fails_a_kernel_that_computes_the_wrong_thing() {
        // Redefine sluice_eltwise after the library: a ReLU that lets
        // negatives through (op 2 computed as identity).
        let (mut d, mut q, _) = rig(FakeTimes::default());
        let sig = fake_abi::signature("sluice_eltwise").unwrap();
        d.define_kernel(
            "sluice_eltwise",
            crate::fake::FakeKernel::new(5_000).with_effect(move |mem, user, _| {
                let a = fake_abi::Args::new("sluice_eltwise", &sig, user);
                let n = a.size("n");
                let x = fake_abi::load(mem, a.ptr("a"), n);
                let b = (a.ptr("b").0 != 0).then(|| fake_abi::load(mem, a.ptr("b"), n));
                let y: Vec<u8> = x
                    .iter()
                    .enumerate()
                    .flat_map(|(i, v)| (v + b.as_ref().map_or(0.0, |b| b[i])).to_ne_bytes())
                    .collect();
                mem.write(a.ptr("y"), &y).unwrap();
            }),
        );
        let m2 = d.load_module("fake 2").unwrap();
        let lib = KernelLibrary::from_module(&mut d, m2).unwrap();
        let r = check_model(
            &mut d,
            &mut q,
            &lib,
            &small("resnet152"),
            5,
            DEFAULT_TOLERANCE,
            &LoadOptions::default(),
        )
        .unwrap();
        assert!(!r.pass, "{}", r.line());
        assert!(r.line().starts_with("FAIL resnet152_small"), "{}", r.line());
    }

    #[test]
    fn the_standalone_time_follows_the_kernels_on_the_fake_clock() {
        // Fake kernels of 20 us (polling) and 5 us (the rest) run back to
        // back: an inference takes at least the sum of its kernels; with
        // every kernel twice as long, about twice that.
        let m = small("vgg19");
        let sum = |t: &FakeTimes| -> u64 {
            m.plan()
                .steps()
                .iter()
                .map(|s| match s.op.kernel() {
                    builders::Kernel::Gemm
                    | builders::Kernel::Conv2d
                    | builders::Kernel::Attention => t.polling_ns,
                    _ => t.other_ns,
                })
                .sum()
        };
        let mut got = Vec::new();
        for scale in [1, 2] {
            let base = FakeTimes::default();
            let times = FakeTimes {
                polling_ns: base.polling_ns * scale,
                other_ns: base.other_ns * scale,
                ..base
            };
            let (mut d, mut q, lib) = rig(times);
            let t = standalone_ns(&mut d, &mut q, &lib, &m, 1, 3, &LoadOptions::default()).unwrap();
            assert!(t >= sum(&times), "{t} < {}", sum(&times));
            got.push((t, sum(&times)));
        }
        let ratio = got[1].0 as f64 / got[0].0 as f64;
        assert!((1.6..=2.1).contains(&ratio), "{got:?}");
    }

    #[test]
    fn profile_times_each_kernel_on_the_fake_clock_and_writes_a_loadable_manifest() {
        // Fake kernels: polling ones 20 us, others 5 us; a launch starts 2
        // us after issue and the event completes with the kernel, so every
        // sample is exactly 22 us or 7 us of virtual time.
        let (mut d, mut q, lib) = rig(FakeTimes::default());
        let m = small("bert_base");
        let on = MeasuredOn {
            device: "fake device".into(),
            sms: 132,
            date: "2025-01-02".into(),
            reps: 5,
        };
        let mut calls = 0;
        let r = profile_model(
            &mut d,
            &mut q,
            &lib,
            &m,
            1,
            &on,
            &LoadOptions::default(),
            &mut |done, total| {
                calls += 1;
                assert!(done <= total);
            },
        )
        .unwrap();
        let plan = m.plan();
        assert_eq!(calls, plan.steps().len());
        assert_eq!(r.steps.len(), plan.steps().len());
        for (t, s) in r.steps.iter().zip(plan.steps()) {
            let polls = matches!(
                s.op.kernel(),
                builders::Kernel::Gemm | builders::Kernel::Conv2d | builders::Kernel::Attention
            );
            let want = if polls { 22_000 } else { 7_000 };
            assert_eq!(t.samples_ns, vec![want; 5], "{}", t.kernel);
            assert_eq!(t.median_ns, want);
            assert_eq!(t.kernel, s.kernel_name());
        }
        // The manifest loads through the daemon's loader from a directory,
        // with the measured times.
        let dir = std::env::temp_dir().join(format!("sluice-profile-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("bert_base_small.json"), &r.manifest_json).unwrap();
        let reg = ModelRegistry::load_dir(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let (_, model) = reg.lookup("bert_base_small").unwrap();
        let k = &model.manifest.kernels;
        assert_eq!(k.len(), r.steps.len());
        for (k, t) in k.iter().zip(&r.steps) {
            assert_eq!(k.kernel_time_us, t.median_ns as f64 / 1000.0);
            assert!(k.block_time_us <= k.kernel_time_us && k.block_time_us > 0.0);
        }
        assert_eq!(model.total_time_ns, (r.total_us * 1000.0).round() as u64);
        assert!(
            model
                .manifest
                .provenance
                .starts_with("measured on fake device 2025-01-02 with sluice profile")
        );
        assert_eq!(model.memory.len(), k.len(), "reads/writes/groups kept");
        assert!(r.table().contains("total of the medians"));
    }

    #[test]
    fn measured_manifest_divides_by_the_waves_and_checks_the_count() {
        let m = small("vgg19");
        let n = m.plan().steps().len();
        let on = MeasuredOn {
            device: "X".into(),
            sms: 1,
            date: "2025-01-01".into(),
            reps: 3,
        };
        let times: Vec<u64> = (0..n as u64).map(|i| 10_000 + i * 1_001).collect();
        let json = measured_manifest_json(&m, &times, &on).unwrap();
        let (man, _) = Manifest::parse_with_memory("t", &json).unwrap();
        let mut profile = DeviceProfile::h100();
        profile.compute_units = 1;
        for (i, k) in man.kernels.iter().enumerate() {
            let e = estimate(m.plan(), i, &profile).unwrap();
            assert_eq!(k.kernel_time_us, times[i] as f64 / 1000.0);
            let want = round_ns(k.kernel_time_us / e.rounds as f64);
            assert_eq!(k.block_time_us, want, "{}", k.name);
        }
        // With one SM some kernel needs several waves.
        assert!(
            man.kernels
                .iter()
                .any(|k| k.block_time_us < k.kernel_time_us)
        );
        let e = measured_manifest_json(&m, &times[1..], &on).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "model `vgg19_small` has {n} kernels but {} times were given; give one per kernel",
                n - 1
            )
        );
    }

    #[test]
    fn median_and_dates() {
        assert_eq!(median(&[]), 0);
        assert_eq!(median(&[5, 1, 3]), 3);
        assert_eq!(median(&[4, 1, 3, 10]), 3);
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_735_689_599), "2024-12-31");
        assert_eq!(utc_date(1_735_689_600), "2025-01-01");
        assert_eq!(utc_date(4_107_542_400), "2100-03-01");
    }

    fn fake_gpu() -> (crate::CudaGpu, FakeDriver) {
        use crate::fake::FakeKernel;
        use crate::gpu::{Kill, SYNTHETIC_KERNEL};
        let mut d = FakeDriver::default();
        // `sluice_synthetic(ctl, kidx, float* sink, u64 block_ns)`.
        let k = d.kernel_handle(
            SYNTHETIC_KERNEL,
            FakeKernel::new(0).timed_by_arg(12).polling(1_000),
        );
        let probe = d.clone();
        let g =
            crate::CudaGpu::new(Box::new(d), k, DeviceProfile::h100(), Kill::Cooperative).unwrap();
        (g, probe)
    }

    /// The partition profile on the fake driver: every point, SMs rounded
    /// to granules of 8, the last point the whole device, latencies from
    /// the fake's clock (which does not slow kernels on fewer SMs), and the
    /// switch cost measured; the table and JSON name them.
    /// Two partitions busy at once on the fake driver: disjoint SMs that
    /// together are at most the device, every sample taken, and the
    /// factors the ratio of the medians; a split leaving nothing for the
    /// second model is refused with the rule.
    #[test]
    fn pair_profile_runs_on_the_fake_driver() {
        let reg = ModelRegistry::builtin();
        let (_, a) = reg.lookup("resnet18").unwrap();
        let (_, b) = reg.lookup("mobilenet").unwrap();
        let (mut g, _d) = fake_gpu();
        let mut seen = Vec::new();
        let r = pair_profile(&mut g, "fake", (a, 1), (b, 2), 25, 3, &mut |x, y| {
            seen.push((x, y))
        })
        .unwrap();
        assert_eq!(seen.last(), Some(&(4, 4)));
        let [x, y] = &r.sides;
        assert_eq!(
            (x.model.as_str(), y.model.as_str()),
            ("resnet18", "mobilenet")
        );
        assert_eq!((x.batch, y.batch), (1, 2));
        assert_eq!(x.sms, 40, "25 % of 132 SMs rounds up to 5 granules of 8");
        // The other 11 granules; the 4 SMs the split leaves over belong
        // to no green context.
        assert_eq!(y.sms, 88);
        for s in [x, y] {
            assert_eq!((s.alone.n, s.beside.n), (3, 3));
            assert!(s.alone.p50_us > 0.0);
            assert!((s.factor - s.beside.p50_us / s.alone.p50_us).abs() < 1e-12);
        }
        let t = r.table();
        assert!(t.contains("resnet18") && t.contains("factor"), "{t}");
        let e = pair_profile(&mut g, "fake", (a, 1), (b, 1), 100, 1, &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("leaving none for the second"), "{e}");
        let e = pair_profile(&mut g, "fake", (a, 0), (b, 1), 50, 1, &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("batch size 0"), "{e}");
    }

    #[test]
    fn partition_profile_runs_on_the_fake_driver() {
        let reg = ModelRegistry::builtin();
        let (_, m) = reg.lookup("resnet18").unwrap();
        let (mut g, d) = fake_gpu();
        let mut seen = Vec::new();
        let r = partition_profile(
            &mut g,
            "fake",
            m,
            &[1, 8],
            &[25, 50, 100],
            3,
            &mut |a, b| seen.push((a, b)),
        )
        .unwrap();
        assert_eq!(seen.last(), Some(&(8, 8)));
        let sms: Vec<(u32, u32, bool)> = r
            .rows
            .iter()
            .map(|x| (x.sms_asked, x.sms, x.whole_device))
            .collect();
        assert_eq!(
            &sms[..3],
            &[(33, 40, false), (66, 72, false), (132, 132, true)]
        );
        assert_eq!(r.rows.len(), 6);
        assert!(
            r.rows
                .iter()
                .all(|x| x.latency.n == 3 && x.latency.p50_us > 0.0)
        );
        assert_eq!(r.switch.between_sms, (40, 72));
        assert_eq!(r.switch.prepared.n, SWITCH_REPS);
        assert_eq!(r.switch.first_use.n, 3);
        assert!(d.green_ctx_count() >= 5);
        println!("{}", r.table());
        let t = r.table();
        assert!(t.contains("25% (40)") && t.contains("100% (132)"), "{t}");
        assert!(
            t.contains("first use (creates green context + stream)"),
            "{t}"
        );
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"between_sms\":[40,72]"), "{json}");
        // The manifest entry: medians in ms at every measured point.
        let t = r.lbp_table();
        assert_eq!(
            (t.batches.clone(), t.partitions_pct.clone()),
            (vec![1, 8], vec![25, 50, 100])
        );
        assert_eq!(t.device, "fake");
        for row in &r.rows {
            let bi = t.batches.iter().position(|&b| b == row.batch).unwrap();
            let pi = t
                .partitions_pct
                .iter()
                .position(|&p| p == row.partition_pct)
                .unwrap();
            assert_eq!(t.latency_ms[bi][pi], row.latency.p50_us / 1000.0);
        }
        // Bad sizes are refused with the value.
        let e = partition_profile(&mut g, "fake", m, &[1], &[0], 1, &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("0% is outside 1..=100"), "{e}");
        let e = partition_profile(&mut g, "fake", m, &[0], &[50], 1, &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("batch size 0"), "{e}");
        // A driver without green contexts says so.
        let (mut g, d) = fake_gpu();
        d.without_green_contexts(12020);
        let e = partition_profile(&mut g, "fake", m, &[1], &[50], 1, &mut |_, _| {}).unwrap_err();
        let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
        assert!(
            chain.contains("CUDA 12.4") && chain.contains("12020"),
            "{chain}"
        );
    }
}
