//! Model manifests and the model registry.
//!
//! A model is a JSON manifest (`daemon/model/manifests/*.json`, format in
//! `docs/models.md`) that lists its GPU kernels in launch order with their
//! launch configuration, resource use and execution times. The simulated GPU
//! runs a model for the sum of its kernel times; later steps use the
//! per-kernel detail to model preemption and kernel padding.
//!
//! The registry gives every model a `u32` id, assigned by sorted name so that
//! the same set of manifests always yields the same ids. Clients look a model
//! up by name once and then send its id in every request.
//!
//! A manifest may also give each kernel's device-memory accesses (`reads`,
//! `writes`) and the start of its minimal idempotent group (`group_start`,
//! REEF §4.4), kept beside the manifest as [`KernelMemory`]; validation
//! recomputes the groups with [`idempotent::minimal_groups`] and refuses a
//! stale value. [`Model::group_start`] is the restore point a reset-based
//! policy relaunches from.
//!
//! [`ModelRegistry::builtin`] embeds the shipped manifests in the binary, so
//! the daemon works from a fresh clone with no files installed;
//! [`ModelRegistry::load_dir`] reads a directory of manifests instead.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

use crate::idempotent::{self, ByteRange, KernelAccess, NoIdempotentGroup};

/// Longest model name in bytes.
pub const MAX_NAME_LEN: usize = 31;
/// Largest input or output tensor a manifest may declare (64 MiB).
pub const MAX_TENSOR_BYTES: u64 = 64 << 20;
/// Most threads in one block (CUDA and HIP limit).
pub const MAX_BLOCK_THREADS: u64 = 1024;

/// One GPU kernel of a model, in launch order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kernel {
    /// Kernel name, for logs and traces.
    pub name: String,
    /// Grid dimensions in blocks (x, y, z); each at least 1.
    pub grid: [u32; 3],
    /// Block dimensions in threads (x, y, z); each at least 1, product at most 1024.
    pub block: [u32; 3],
    /// Registers per thread.
    pub regs_per_thread: u32,
    /// Static shared memory (LDS) per block in bytes.
    pub shared_mem_bytes: u32,
    /// Time to run the whole kernel alone on the GPU, in µs.
    pub kernel_time_us: f64,
    /// Time one block takes, in µs.
    pub block_time_us: f64,
    /// Whether re-running the kernel after a kill gives the same result.
    pub idempotent: bool,
    /// Measured wave times, µs: entry `j` is the time for `j + 1` blocks of
    /// this kernel resident side by side on one CU (REEF's per-occupancy
    /// `latency[j]` with the launch floor removed; `docs/models.md`). Empty
    /// when not measured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wave_us: Vec<f64>,
    /// Share of the device's memory bandwidth the kernel uses alone at full
    /// occupancy, 0 to 1 (derived from its buffer sizes over its measured
    /// time; `docs/models.md`). `None`: the device profile's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_intensity: Option<f64>,
}

impl Kernel {
    /// Number of blocks in the grid.
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&d| u64::from(d)).product()
    }

    /// Threads per block.
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&d| u64::from(d)).product()
    }

    /// [`Self::kernel_time_us`] in whole nanoseconds (0 for a negative or NaN
    /// time, which [`Manifest::validate`] rejects).
    pub fn kernel_time_ns(&self) -> u64 {
        us_to_ns(self.kernel_time_us)
    }
}

/// A kernel's device-memory accesses and idempotent group: the manifest
/// fields `reads`, `writes` and `group_start` (format in `docs/models.md`).
///
/// Kept beside [`Manifest`] (in [`Model::memory`]) rather than in [`Kernel`],
/// so that code building kernels by hand needs no change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelMemory {
    /// Bytes the kernel may read (`"reads": [[start, end], ...]`, half-open).
    pub reads: Vec<ByteRange>,
    /// Bytes the kernel writes on every complete run.
    pub writes: Vec<ByteRange>,
    /// Start of the minimal idempotent group ending at this kernel; required
    /// when the manifest declares ranges, and must equal
    /// [`idempotent::minimal_groups`] of the model's accesses.
    pub group_start: Option<u32>,
}

impl KernelMemory {
    /// The accesses in the form [`idempotent`] works on.
    pub fn access(&self) -> KernelAccess {
        KernelAccess {
            reads: self.reads.clone(),
            writes: self.writes.clone(),
        }
    }
}

/// `[[start, end], ...]` as byte ranges.
fn de_ranges<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ByteRange>, D::Error> {
    let pairs = Vec::<(u64, u64)>::deserialize(d)?;
    Ok(pairs
        .into_iter()
        .map(|(s, e)| ByteRange::new(s, e))
        .collect())
}

/// A kernel line of a manifest file, with the memory fields.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKernel {
    name: String,
    grid: [u32; 3],
    block: [u32; 3],
    regs_per_thread: u32,
    shared_mem_bytes: u32,
    kernel_time_us: f64,
    block_time_us: f64,
    idempotent: bool,
    #[serde(default)]
    wave_us: Vec<f64>,
    #[serde(default)]
    mem_intensity: Option<f64>,
    #[serde(default, deserialize_with = "de_ranges")]
    reads: Vec<ByteRange>,
    #[serde(default, deserialize_with = "de_ranges")]
    writes: Vec<ByteRange>,
    #[serde(default)]
    group_start: Option<u32>,
}

/// A manifest file before it is split into [`Manifest`] and [`KernelMemory`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    name: String,
    display_name: String,
    provenance: String,
    input_bytes: u64,
    output_bytes: u64,
    total_time_us: f64,
    kernels: Vec<RawKernel>,
    #[serde(default)]
    lbp: Vec<LbpTable>,
    #[serde(default)]
    splits: Vec<ModelSplit>,
}

impl RawManifest {
    /// Splits off the memory fields; the memory is empty when no kernel
    /// declares a range or a group.
    fn split(self) -> (Manifest, Vec<KernelMemory>) {
        let mut kernels = Vec::with_capacity(self.kernels.len());
        let mut memory = Vec::with_capacity(self.kernels.len());
        for k in self.kernels {
            kernels.push(Kernel {
                name: k.name,
                grid: k.grid,
                block: k.block,
                regs_per_thread: k.regs_per_thread,
                shared_mem_bytes: k.shared_mem_bytes,
                kernel_time_us: k.kernel_time_us,
                block_time_us: k.block_time_us,
                idempotent: k.idempotent,
                wave_us: k.wave_us,
                mem_intensity: k.mem_intensity,
            });
            memory.push(KernelMemory {
                reads: k.reads,
                writes: k.writes,
                group_start: k.group_start,
            });
        }
        if memory == vec![KernelMemory::default(); memory.len()] {
            memory.clear();
        }
        let manifest = Manifest {
            name: self.name,
            display_name: self.display_name,
            provenance: self.provenance,
            input_bytes: self.input_bytes,
            output_bytes: self.output_bytes,
            total_time_us: self.total_time_us,
            kernels,
            lbp: self.lbp,
            splits: self.splits,
        };
        (manifest, memory)
    }
}

/// A model manifest as stored in `daemon/model/manifests/<name>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Lookup name: 1 to 31 bytes of `[a-z0-9_]`.
    pub name: String,
    /// Human-readable name, e.g. `"ResNet-152"`.
    pub display_name: String,
    /// Where the numbers come from: what is measured and what is synthetic.
    pub provenance: String,
    /// Input tensor size in bytes; requests must send exactly this much.
    pub input_bytes: u64,
    /// Output tensor size in bytes; the device writes exactly this much.
    pub output_bytes: u64,
    /// Total GPU time of the model in µs (the sum of the kernel times).
    pub total_time_us: f64,
    /// The kernels in launch order.
    pub kernels: Vec<Kernel>,
    /// Profiled `L(b, p)` tables (`sluice profile --device <profile> MODEL
    /// --out FILE`), one per device; the multi-GPU planners read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lbp: Vec<LbpTable>,
    /// Block splits for block-level preemption (SPLIT, `sluice split MODEL
    /// --out FILE`), one per device profile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub splits: Vec<ModelSplit>,
}

/// A model cut into blocks at kernel boundaries: SPLIT's evenly sized
/// blocks (ICPP'23 §3.3), found for one device profile. A policy that
/// preempts at block boundaries runs the kernels of one block back to back
/// and may switch requests only between blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSplit {
    /// Device profile name the block times were taken on.
    pub device: String,
    /// Index of the first kernel of blocks 2..=m, ascending, each in
    /// `1..kernels.len()`; empty means one block (unsplit).
    pub cuts: Vec<u32>,
    /// Each block's time on that device, µs, boundary cost included
    /// (`cuts.len() + 1` entries).
    pub block_time_us: Vec<f64>,
    /// How the split was found and how a boundary is costed, in words.
    pub rule: String,
}

impl ModelSplit {
    /// Checks the cut points against a model of `kernels` kernels.
    pub fn check(&self, kernels: usize) -> Result<(), String> {
        if self.device.is_empty() {
            return Err("a split without a device name".into());
        }
        let ascending = self.cuts.windows(2).all(|w| w[0] < w[1]);
        let inside = self.cuts.iter().all(|&c| c >= 1 && (c as usize) < kernels);
        if !ascending || !inside {
            return Err(format!(
                "split for {}: cuts {:?} must be ascending kernel indices in 1..{kernels}",
                self.device, self.cuts
            ));
        }
        let times_ok = self.block_time_us.len() == self.cuts.len() + 1
            && self
                .block_time_us
                .iter()
                .all(|t| t.is_finite() && *t >= 0.0);
        if !times_ok {
            return Err(format!(
                "split for {}: block_time_us must be {} non-negative numbers",
                self.device,
                self.cuts.len() + 1
            ));
        }
        Ok(())
    }

    /// The block boundaries as kernel ranges: `[0, c1), [c1, c2), …,
    /// [c_last, kernels)`.
    pub fn blocks(&self, kernels: usize) -> Vec<std::ops::Range<usize>> {
        let mut starts = vec![0usize];
        starts.extend(self.cuts.iter().map(|&c| c as usize));
        let mut out = Vec::with_capacity(starts.len());
        for (i, &s) in starts.iter().enumerate() {
            let e = starts.get(i + 1).copied().unwrap_or(kernels);
            out.push(s..e);
        }
        out
    }
}

/// A model's latency at batch `b` on `p` % of a device's compute units,
/// alone, as `sluice profile` measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LbpTable {
    /// Device profile name (`mi50`, ...) or the CUDA device's name.
    pub device: String,
    /// Whether the GPU model produced it (`true`) or a real device.
    pub simulated: bool,
    /// How it was measured (the profiler's rule, in words).
    pub rule: String,
    /// Batch sizes, ascending.
    pub batches: Vec<u32>,
    /// Partition sizes, percent of the device, ascending.
    pub partitions_pct: Vec<u32>,
    /// `latency_ms[i][j]` = L(`batches[i]`, `partitions_pct[j]`), ms.
    pub latency_ms: Vec<Vec<f64>>,
    /// Mean memory-bandwidth demand at each point (share of the device's);
    /// same shape as `latency_ms`, or empty.
    #[serde(default)]
    pub mem_demand: Vec<Vec<f64>>,
}

impl LbpTable {
    /// Checks the shape and values; `why` says what is wrong.
    fn check(&self) -> Result<(), String> {
        if self.device.is_empty() {
            return Err("an lbp table without a device name".into());
        }
        let asc = |v: &[u32]| !v.is_empty() && v.windows(2).all(|w| w[0] < w[1]);
        if !asc(&self.batches) || self.batches[0] == 0 {
            return Err(format!(
                "lbp table of {}: batches {:?} are not ascending sizes ≥ 1",
                self.device, self.batches
            ));
        }
        if !asc(&self.partitions_pct) || self.partitions_pct.iter().any(|&p| p == 0 || p > 100) {
            return Err(format!(
                "lbp table of {}: partitions_pct {:?} are not ascending percentages in 1..=100",
                self.device, self.partitions_pct
            ));
        }
        let shape_ok = |m: &Vec<Vec<f64>>| {
            m.len() == self.batches.len() && m.iter().all(|r| r.len() == self.partitions_pct.len())
        };
        if !shape_ok(&self.latency_ms)
            || self
                .latency_ms
                .iter()
                .flatten()
                .any(|v| !(v.is_finite() && *v > 0.0))
        {
            return Err(format!(
                "lbp table of {}: latency_ms must be {} rows of {} positive numbers",
                self.device,
                self.batches.len(),
                self.partitions_pct.len()
            ));
        }
        if !self.mem_demand.is_empty()
            && (!shape_ok(&self.mem_demand)
                || self
                    .mem_demand
                    .iter()
                    .flatten()
                    .any(|v| !(v.is_finite() && *v >= 0.0)))
        {
            return Err(format!(
                "lbp table of {}: mem_demand must be empty or shaped like latency_ms, ≥ 0",
                self.device
            ));
        }
        Ok(())
    }
}

impl Manifest {
    /// Parses and validates a manifest, memory fields included, and drops
    /// the memory fields. `file` names it in errors.
    pub fn parse(file: &str, json: &str) -> Result<Self, ModelError> {
        Self::parse_with_memory(file, json).map(|(manifest, _)| manifest)
    }

    /// Parses and validates a manifest and its per-kernel memory fields
    /// (empty when the manifest declares none). `file` names it in errors.
    pub fn parse_with_memory(
        file: &str,
        json: &str,
    ) -> Result<(Self, Vec<KernelMemory>), ModelError> {
        let (manifest, memory) = parse_unchecked(file, json)?;
        let invalid = |source| ModelError::Invalid {
            file: file.to_owned(),
            source,
        };
        manifest.validate().map_err(invalid)?;
        manifest.validate_memory(&memory).map_err(invalid)?;
        Ok((manifest, memory))
    }

    /// Sum of the kernel times in nanoseconds (each kernel rounded to 1 ns).
    pub fn total_time_ns(&self) -> u64 {
        self.kernels
            .iter()
            .fold(0u64, |sum, k| sum.saturating_add(k.kernel_time_ns()))
    }

    /// Checks every constraint in `docs/models.md`.
    pub fn validate(&self) -> Result<(), ManifestError> {
        let model = &self.name;
        let name_ok = !model.is_empty()
            && model.len() <= MAX_NAME_LEN
            && model
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !name_ok {
            return Err(ManifestError::BadName {
                name: model.clone(),
            });
        }
        for (field, value) in [
            ("input_bytes", self.input_bytes),
            ("output_bytes", self.output_bytes),
        ] {
            if value > MAX_TENSOR_BYTES {
                return Err(ManifestError::TensorTooLarge {
                    model: model.clone(),
                    field,
                    value,
                });
            }
        }
        if !(self.total_time_us.is_finite() && self.total_time_us >= 0.0) {
            return Err(ManifestError::BadTotal {
                model: model.clone(),
                value: self.total_time_us,
            });
        }
        for t in &self.lbp {
            t.check().map_err(|why| ManifestError::BadLbp {
                model: model.clone(),
                why,
            })?;
        }
        for sp in &self.splits {
            sp.check(self.kernels.len())
                .map_err(|why| ManifestError::BadSplit {
                    model: model.clone(),
                    why,
                })?;
        }
        for (index, k) in self.kernels.iter().enumerate() {
            let at = || (model.clone(), index, k.name.clone());
            for (field, value) in [
                ("kernel_time_us", k.kernel_time_us),
                ("block_time_us", k.block_time_us),
            ] {
                if !(value.is_finite() && value >= 0.0) {
                    let (model, index, kernel) = at();
                    return Err(ManifestError::BadTime {
                        model,
                        index,
                        kernel,
                        field,
                        value,
                    });
                }
            }
            for (field, value) in [("grid", k.grid), ("block", k.block)] {
                if value.contains(&0) {
                    let (model, index, kernel) = at();
                    return Err(ManifestError::ZeroDim {
                        model,
                        index,
                        kernel,
                        field,
                        value,
                    });
                }
            }
            let threads = k.threads_per_block();
            if threads > MAX_BLOCK_THREADS {
                let (model, index, kernel) = at();
                return Err(ManifestError::TooManyThreads {
                    model,
                    index,
                    kernel,
                    block: k.block,
                    threads,
                });
            }
            // Both are rounded to 1 ns in the manifests; allow that much.
            if k.block_time_us > k.kernel_time_us + 0.001 {
                let (model, index, kernel) = at();
                return Err(ManifestError::BlockOutlastsKernel {
                    model,
                    index,
                    kernel,
                    block_time_us: k.block_time_us,
                    kernel_time_us: k.kernel_time_us,
                });
            }
        }
        let sum_ns = self.total_time_ns();
        let total_ns = us_to_ns(self.total_time_us);
        let tolerance_ns = (total_ns / 1000).max(1000);
        if sum_ns.abs_diff(total_ns) > tolerance_ns {
            return Err(ManifestError::TotalMismatch {
                model: model.clone(),
                sum_us: sum_ns as f64 / 1000.0,
                total_us: self.total_time_us,
            });
        }
        Ok(())
    }
}

impl Manifest {
    /// Checks the memory fields against the kernels (`docs/models.md`,
    /// "Memory accesses and idempotent groups"). `memory` is empty, or has one
    /// entry per kernel.
    ///
    /// Without ranges no kernel may have a `group_start`. With ranges, every
    /// kernel needs one, equal to [`idempotent::minimal_groups`] of the
    /// model's accesses (hence at most its index), and a kernel is flagged
    /// `idempotent` exactly when its own accesses are idempotent (its group
    /// is itself).
    pub fn validate_memory(&self, memory: &[KernelMemory]) -> Result<(), ManifestError> {
        let model = &self.name;
        let at = |index: usize| (model.clone(), index, self.kernels[index].name.clone());
        if memory.is_empty() {
            return Ok(());
        }
        if memory.len() != self.kernels.len() {
            return Err(ManifestError::MemoryLength {
                model: model.clone(),
                entries: memory.len(),
                kernels: self.kernels.len(),
            });
        }
        if memory
            .iter()
            .all(|m| m.reads.is_empty() && m.writes.is_empty())
        {
            let index = memory
                .iter()
                .position(|m| m.group_start.is_some())
                .unwrap_or(0);
            let (model, index, kernel) = at(index);
            return Err(ManifestError::GroupWithoutRanges {
                model,
                index,
                kernel,
            });
        }
        let accesses: Vec<KernelAccess> = memory.iter().map(KernelMemory::access).collect();
        let groups = idempotent::minimal_groups(&accesses).map_err(|source| {
            let (model, index, kernel) = at(source.kernel);
            ManifestError::NoGroup {
                model,
                index,
                kernel,
                source,
            }
        })?;
        for (index, (m, &computed)) in memory.iter().zip(&groups).enumerate() {
            let stored = m.group_start.map(|g| g as usize);
            if stored != Some(computed) {
                let (model, index, kernel) = at(index);
                return Err(ManifestError::StaleGroupStart {
                    model,
                    index,
                    kernel,
                    stored: m.group_start,
                    computed,
                });
            }
            let flag = self.kernels[index].idempotent;
            if flag != (computed == index) {
                let (model, index, kernel) = at(index);
                return Err(ManifestError::FlagDisagrees {
                    model,
                    index,
                    kernel,
                    flag,
                    computed,
                });
            }
        }
        Ok(())
    }
}

/// Parses a manifest file without validating it.
fn parse_unchecked(file: &str, json: &str) -> Result<(Manifest, Vec<KernelMemory>), ModelError> {
    let raw: RawManifest = serde_json::from_str(json).map_err(|source| ModelError::Parse {
        file: file.to_owned(),
        source,
    })?;
    Ok(raw.split())
}

/// Restore point of `kernel` from the `idempotent` flags alone, for
/// manifests without memory ranges: the kernel itself if flagged idempotent
/// (or past the end), else the nearest earlier kernel flagged idempotent, else
/// 0. Right when an in-place kernel's input was written by the last
/// idempotent kernel before it, as in the generated manifests; a manifest
/// with ranges gets the exact group instead.
pub fn flag_group_start(kernels: &[Kernel], kernel: usize) -> usize {
    if kernels.get(kernel).is_none_or(|k| k.idempotent) {
        return kernel;
    }
    (0..kernel)
        .rev()
        .find(|&i| kernels[i].idempotent)
        .unwrap_or(0)
}

/// The command that rewrites the shipped manifests' `group_start` fields.
pub const BLESS_COMMAND: &str =
    "SLUICE_BLESS=1 cargo test -p sluice-model --lib manifest::tests::group_starts_are_current";

/// Converts µs to whole ns, rounding; negative and NaN become 0, huge values
/// saturate.
fn us_to_ns(us: f64) -> u64 {
    // `as` saturates and maps NaN to 0.
    (us * 1000.0).round() as u64
}

/// A manifest that parsed but breaks a rule of `docs/models.md`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ManifestError {
    /// A `splits` entry whose cuts or block times do not fit the model.
    #[error("model `{model}`: {why}; re-run `sluice split {model} --out FILE`")]
    BadSplit {
        /// Model name.
        model: String,
        /// What is wrong.
        why: String,
    },
    /// An `lbp` table of the wrong shape or with bad values.
    #[error(
        "model `{model}`: {why}; re-run `sluice profile --device <profile> {model} --out FILE`"
    )]
    BadLbp {
        /// Model name.
        model: String,
        /// What is wrong.
        why: String,
    },
    /// The model name is empty, too long or has a character outside `[a-z0-9_]`.
    #[error(
        "model name {name:?} is not 1 to {MAX_NAME_LEN} bytes of [a-z0-9_]; \
         rename it (clients look models up by this name)"
    )]
    BadName {
        /// The offending name.
        name: String,
    },
    /// `input_bytes` or `output_bytes` is over [`MAX_TENSOR_BYTES`].
    #[error(
        "model `{model}`: {field} is {value} bytes, more than the limit of {MAX_TENSOR_BYTES} \
         (64 MiB); use a smaller tensor"
    )]
    TensorTooLarge {
        /// Model name.
        model: String,
        /// `"input_bytes"` or `"output_bytes"`.
        field: &'static str,
        /// The declared size.
        value: u64,
    },
    /// `total_time_us` is negative, infinite or NaN.
    #[error(
        "model `{model}`: total_time_us is {value}; it must be a finite number >= 0 \
         (the sum of the kernel times in µs)"
    )]
    BadTotal {
        /// Model name.
        model: String,
        /// The offending value.
        value: f64,
    },
    /// A kernel time is negative, infinite or NaN.
    #[error(
        "model `{model}`: kernel {index} (`{kernel}`): {field} is {value}; \
         it must be a finite number of µs >= 0"
    )]
    BadTime {
        /// Model name.
        model: String,
        /// Index of the kernel in `kernels`.
        index: usize,
        /// Kernel name.
        kernel: String,
        /// `"kernel_time_us"` or `"block_time_us"`.
        field: &'static str,
        /// The offending value.
        value: f64,
    },
    /// A grid or block dimension is 0.
    #[error(
        "model `{model}`: kernel {index} (`{kernel}`): {field} is {value:?}; \
         every dimension must be at least 1"
    )]
    ZeroDim {
        /// Model name.
        model: String,
        /// Index of the kernel in `kernels`.
        index: usize,
        /// Kernel name.
        kernel: String,
        /// `"grid"` or `"block"`.
        field: &'static str,
        /// The offending dimensions.
        value: [u32; 3],
    },
    /// A block has more than [`MAX_BLOCK_THREADS`] threads.
    #[error(
        "model `{model}`: kernel {index} (`{kernel}`): block {block:?} has {threads} threads, \
         more than {MAX_BLOCK_THREADS}; make x*y*z at most {MAX_BLOCK_THREADS}"
    )]
    TooManyThreads {
        /// Model name.
        model: String,
        /// Index of the kernel in `kernels`.
        index: usize,
        /// Kernel name.
        kernel: String,
        /// The offending block dimensions.
        block: [u32; 3],
        /// Their product.
        threads: u64,
    },
    /// `block_time_us` is longer than `kernel_time_us`.
    #[error(
        "model `{model}`: kernel {index} (`{kernel}`): block_time_us {block_time_us} is longer \
         than kernel_time_us {kernel_time_us}; a block cannot outlast its kernel \
         (block_time_us = kernel_time_us / rounds, see docs/models.md)"
    )]
    BlockOutlastsKernel {
        /// Model name.
        model: String,
        /// Index of the kernel in `kernels`.
        index: usize,
        /// Kernel name.
        kernel: String,
        /// The block time.
        block_time_us: f64,
        /// The kernel time.
        kernel_time_us: f64,
    },
    /// The memory fields do not have one entry per kernel.
    #[error(
        "model `{model}`: {entries} memory entries for {kernels} kernels; give every kernel \
         its reads, writes and group_start, or none of them"
    )]
    MemoryLength {
        /// Model name.
        model: String,
        /// Entries given.
        entries: usize,
        /// Kernels in the manifest.
        kernels: usize,
    },
    /// A kernel has a `group_start` but no kernel declares memory ranges.
    #[error(
        "model `{model}`: kernel {index} (`{kernel}`) has a group_start but the manifest declares \
         no reads/writes ranges to check it against; add the ranges or remove group_start"
    )]
    GroupWithoutRanges {
        /// Model name.
        model: String,
        /// Index of the kernel in `kernels`.
        index: usize,
        /// Kernel name.
        kernel: String,
    },
    /// Even the kernels from 0 to this one are not idempotent together.
    #[error("model `{model}`: kernel {index} (`{kernel}`) has no idempotent group")]
    NoGroup {
        /// Model name.
        model: String,
        /// Index of the kernel in `kernels`.
        index: usize,
        /// Kernel name.
        kernel: String,
        /// The clobbered bytes.
        #[source]
        source: NoIdempotentGroup,
    },
    /// A kernel's `group_start` is missing or differs from the group its
    /// ranges give.
    #[error(
        "model `{model}`: kernel {index} (`{kernel}`): group_start is {}, but its reads/writes \
         ranges give {computed}; set it to {computed} (`python3 scripts/gen-models.py` and \
         `python3 scripts/import-reef.py` regenerate the shipped manifests, `{BLESS_COMMAND}` \
         rewrites their group_start fields)",
        stored.map_or_else(|| "missing".to_owned(), |g| g.to_string())
    )]
    StaleGroupStart {
        /// Model name.
        model: String,
        /// Index of the kernel in `kernels`.
        index: usize,
        /// Kernel name.
        kernel: String,
        /// The manifest's value, if any.
        stored: Option<u32>,
        /// The start [`idempotent::minimal_groups`] computes.
        computed: usize,
    },
    /// A kernel's `idempotent` flag disagrees with its own ranges.
    #[error(
        "model `{model}`: kernel {index} (`{kernel}`) is flagged idempotent: {flag}, but its \
         reads/writes ranges {} (its group starts at {computed}); fix the flag or the ranges",
        if *flag { "overlap, so re-running it alone is not safe" } else { "are disjoint" }
    )]
    FlagDisagrees {
        /// Model name.
        model: String,
        /// Index of the kernel in `kernels`.
        index: usize,
        /// Kernel name.
        kernel: String,
        /// The manifest's flag.
        flag: bool,
        /// The group start the ranges give.
        computed: usize,
    },
    /// The kernel times do not add up to `total_time_us`.
    #[error(
        "model `{model}`: the kernel times sum to {sum_us} µs but total_time_us is {total_us}; \
         make them agree within 0.1% or 1 µs (regenerate with scripts/gen-models.py or \
         scripts/import-reef.py)"
    )]
    TotalMismatch {
        /// Model name.
        model: String,
        /// Sum of `kernel_time_us` over the kernels.
        sum_us: f64,
        /// The declared total.
        total_us: f64,
    },
}

/// Loading manifests into a registry failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The models directory could not be listed.
    #[error(
        "cannot list model directory {dir}; check the path (or leave it unset to use the built-in models)"
    )]
    ReadDir {
        /// The directory.
        dir: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A manifest file could not be read.
    #[error("cannot read model manifest {file}")]
    Read {
        /// The file.
        file: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A manifest is not valid JSON or does not match the schema.
    #[error(
        "{file}: not a valid model manifest; fix the JSON against the format in docs/models.md"
    )]
    Parse {
        /// The file.
        file: String,
        /// What the JSON parser said (names the key, line and column).
        #[source]
        source: serde_json::Error,
    },
    /// A manifest breaks a rule.
    #[error("{file}: invalid model manifest")]
    Invalid {
        /// The file.
        file: String,
        /// The broken rule, with the model, kernel and value.
        #[source]
        source: ManifestError,
    },
    /// Two manifests use the same model name.
    #[error("model `{name}` is defined twice, in {first} and in {second}; remove or rename one")]
    Duplicate {
        /// The shared name.
        name: String,
        /// The first file (in sorted path order).
        first: String,
        /// The second file.
        second: String,
    },
    /// Two models were given the same id (a bug in the caller).
    #[error("model id {id} is given to two models; this is a bug in sluice, please report it")]
    DuplicateId {
        /// The id.
        id: u32,
    },
    /// The directory holds no `*.json` file.
    #[error(
        "no *.json model manifest in {dir}; add one (see docs/models.md) or use the built-in models"
    )]
    Empty {
        /// The directory.
        dir: PathBuf,
    },
}

/// What [`ModelRegistry::from_entries`] builds a model from.
#[derive(Debug, Clone)]
pub struct ModelEntry {
    /// Where it came from (a path, or `builtin:<file>`), for errors.
    pub file: String,
    /// The manifest the GPU model runs.
    pub manifest: Manifest,
    /// Per-kernel memory accesses; empty or one per kernel.
    pub memory: Vec<KernelMemory>,
    /// Its inputs and outputs.
    pub io: crate::ModelIo,
}

impl From<Model> for ModelEntry {
    /// What the registry built `m` from (its id dropped).
    fn from(m: Model) -> Self {
        Self {
            file: m.file,
            manifest: m.manifest,
            memory: m.memory,
            io: m.io,
        }
    }
}

/// A model in the registry.
#[derive(Debug, Clone)]
pub struct Model {
    /// The model's id: its index in name order, or the id a reloading
    /// daemon keeps for its name ([`ModelRegistry::from_entries_with_ids`]).
    pub id: u32,
    /// The manifest as loaded.
    pub manifest: Manifest,
    /// Where the manifest came from (a path, or `builtin:<file>`).
    pub file: String,
    /// [`Manifest::total_time_ns`], precomputed.
    pub total_time_ns: u64,
    /// Input size in bytes.
    pub input_bytes: u64,
    /// Output size in bytes.
    pub output_bytes: u64,
    /// Per-kernel memory accesses and groups, validated; empty when the
    /// manifest declares none.
    pub memory: Vec<KernelMemory>,
    /// Named, typed inputs and outputs; [`ModelIo::untyped`] (one byte
    /// tensor each way, `input_bytes` and `output_bytes`) for a model
    /// known only by its manifest.
    pub io: crate::ModelIo,
}

impl Model {
    /// The model's lookup name.
    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    /// Per kernel, whether its grid grows with the batch size: whether it
    /// reads data that does (what running a model at batch `b` scales).
    ///
    /// A forward data flow over the declared memory in launch order: the
    /// input (the first `input_bytes` bytes) holds batch-sized data; a kernel
    /// reading any byte of batch-sized data is batch-scaled; what a kernel
    /// writes holds batch-sized data exactly when the kernel is batch-scaled
    /// (a write replaces what an identical earlier range held). Kernels that
    /// read only weights (e.g. a Winograd weight transform) keep their grid.
    /// Without declared memory every kernel is taken as batch-scaled.
    pub fn batch_scaled(&self) -> Vec<bool> {
        let n = self.manifest.kernels.len();
        if self.memory.len() != n {
            return vec![true; n];
        }
        let overlaps = |a: &ByteRange, b: &ByteRange| a.start < b.end && b.start < a.end;
        let mut held: Vec<(ByteRange, bool)> = vec![(ByteRange::new(0, self.input_bytes), true)];
        let mut out = Vec::with_capacity(n);
        for m in &self.memory {
            let scaled = m
                .reads
                .iter()
                .any(|r| held.iter().any(|(h, s)| *s && overlaps(h, r)));
            for w in &m.writes {
                held.retain(|(h, _)| h != w);
                held.push((*w, scaled));
            }
            out.push(scaled);
        }
        out
    }

    /// The model at batch size `batch`, measured or built at batch 1: each
    /// batch-scaled kernel ([`Model::batch_scaled`]) has `batch` times the
    /// blocks (the batch is one more grid dimension, folded into `grid[0]`)
    /// and `batch` times the kernel time, with the same block footprint,
    /// block time and wave times (TVM and cuDNN may tile a larger batch
    /// differently, which this does not model); other kernels are
    /// unchanged. The one place sluice's batch rule lives: the GPU model's
    /// `L(b, p)`, the interference study and the cluster backend all run
    /// these kernels.
    pub fn at_batch(&self, batch: u32) -> Model {
        let batch = batch.max(1);
        let mut m = self.clone();
        if batch == 1 {
            return m;
        }
        for (k, scaled) in m.manifest.kernels.iter_mut().zip(self.batch_scaled()) {
            if scaled {
                k.grid[0] = k.grid[0].saturating_mul(batch);
                k.kernel_time_us *= f64::from(batch);
            }
        }
        m.manifest.total_time_us = m.manifest.kernels.iter().map(|k| k.kernel_time_us).sum();
        m.total_time_ns = m.manifest.total_time_ns();
        m
    }

    /// Restore point of `kernel` (REEF §4.4): the first kernel of its minimal
    /// idempotent group, which a task killed while `kernel` was the first
    /// unfinished one re-launches from. `kernel` itself when it is idempotent
    /// alone or past the end.
    ///
    /// From the manifest's `group_start` when it declares memory ranges
    /// (validated against [`idempotent::minimal_groups`]); otherwise the
    /// flag-based approximation [`flag_group_start`].
    pub fn group_start(&self, kernel: usize) -> usize {
        match self.memory.get(kernel).and_then(|m| m.group_start) {
            Some(g) => g as usize,
            None => flag_group_start(&self.manifest.kernels, kernel),
        }
    }
}

/// The manifests compiled into the binary: (file name, contents).
const BUILTIN: &[(&str, &str)] = &[
    ("alexnet.json", include_str!("../manifests/alexnet.json")),
    ("bert205.json", include_str!("../manifests/bert205.json")),
    (
        "bert_base.json",
        include_str!("../manifests/bert_base.json"),
    ),
    ("densenet.json", include_str!("../manifests/densenet.json")),
    (
        "echo_small.json",
        include_str!("../manifests/echo_small.json"),
    ),
    (
        "efficientnet_b0.json",
        include_str!("../manifests/efficientnet_b0.json"),
    ),
    ("gpt2.json", include_str!("../manifests/gpt2.json")),
    (
        "inception.json",
        include_str!("../manifests/inception.json"),
    ),
    ("mnasnet.json", include_str!("../manifests/mnasnet.json")),
    (
        "mobilenet.json",
        include_str!("../manifests/mobilenet.json"),
    ),
    ("null.json", include_str!("../manifests/null.json")),
    (
        "resnet152.json",
        include_str!("../manifests/resnet152.json"),
    ),
    ("resnet18.json", include_str!("../manifests/resnet18.json")),
    ("resnet50.json", include_str!("../manifests/resnet50.json")),
    ("vgg16.json", include_str!("../manifests/vgg16.json")),
    ("vgg19.json", include_str!("../manifests/vgg19.json")),
    ("yolov3.json", include_str!("../manifests/yolov3.json")),
];

/// Every model the daemon can run, by id and by name. Immutable once built;
/// a daemon that reloads models builds a new one
/// ([`ModelRegistry::from_entries_with_ids`], keeping each name's id).
#[derive(Debug, Clone)]
pub struct ModelRegistry {
    /// Sorted by name.
    models: Vec<Model>,
    /// By id: the model's index in `models`, [`NO_MODEL`] for an id
    /// with no model (one unloaded). The identity for a registry built by
    /// [`ModelRegistry::from_entries`].
    by_id: Vec<u32>,
}

/// [`ModelRegistry::by_id`]'s mark of an id with no model.
const NO_MODEL: u32 = u32::MAX;

impl ModelRegistry {
    /// The JSON text of the shipped manifest of `name` (the file as
    /// embedded, memory ranges included), for tools that add to it.
    pub fn builtin_json(name: &str) -> Option<&'static str> {
        let file = format!("{name}.json");
        BUILTIN.iter().find(|(f, _)| *f == file).map(|(_, j)| *j)
    }

    /// The manifests shipped in `daemon/model/manifests/`, embedded at build time.
    ///
    /// # Panics
    ///
    /// If an embedded manifest is invalid, which the unit tests rule out.
    pub fn builtin() -> Self {
        let manifests = BUILTIN.iter().map(|(file, json)| {
            let file = format!("builtin:{file}");
            let (manifest, memory) = Manifest::parse_with_memory(&file, json)
                .unwrap_or_else(|e| panic!("embedded model manifest is broken: {e:?}"));
            (file, manifest, memory)
        });
        Self::from_parts(manifests)
            .unwrap_or_else(|e| panic!("embedded model manifests clash: {e}"))
    }

    /// Loads every `*.json` file in `dir` (not recursing).
    pub fn load_dir(dir: impl AsRef<Path>) -> Result<Self, ModelError> {
        let dir = dir.as_ref();
        let read_dir_err = |source| ModelError::ReadDir {
            dir: dir.to_owned(),
            source,
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read_dir_err)? {
            let path = entry.map_err(read_dir_err)?.path();
            if path.extension().is_some_and(|e| e == "json") && path.is_file() {
                files.push(path);
            }
        }
        if files.is_empty() {
            return Err(ModelError::Empty {
                dir: dir.to_owned(),
            });
        }
        files.sort();
        let mut manifests = Vec::with_capacity(files.len());
        for path in files {
            let json = std::fs::read_to_string(&path).map_err(|source| ModelError::Read {
                file: path.clone(),
                source,
            })?;
            let file = path.display().to_string();
            let (manifest, memory) = Manifest::parse_with_memory(&file, &json)?;
            manifests.push((file, manifest, memory));
        }
        Self::from_parts(manifests)
    }

    /// Builds a registry from `(file, manifest)` pairs, validating each.
    /// `file` only names the source in errors and in [`Model::file`].
    /// Such models have no memory ranges ([`Model::group_start`] falls back
    /// to the flags).
    pub fn from_manifests(
        manifests: impl IntoIterator<Item = (String, Manifest)>,
    ) -> Result<Self, ModelError> {
        Self::from_parts(manifests.into_iter().map(|(f, m)| (f, m, Vec::new())))
    }

    /// Builds a registry from `(file, manifest, memory)` triples, validating
    /// each; `memory` is empty or has one entry per kernel. Every model
    /// takes untyped bytes ([`crate::ModelIo::untyped`]).
    pub fn from_parts(
        manifests: impl IntoIterator<Item = (String, Manifest, Vec<KernelMemory>)>,
    ) -> Result<Self, ModelError> {
        Self::from_entries(manifests.into_iter().map(|(file, manifest, memory)| {
            let io = crate::ModelIo::untyped(manifest.input_bytes, manifest.output_bytes);
            ModelEntry {
                file,
                manifest,
                memory,
                io,
            }
        }))
    }

    /// Builds a registry from entries that may declare typed tensors,
    /// validating each manifest and its memory; ids are assigned in name
    /// order.
    pub fn from_entries(entries: impl IntoIterator<Item = ModelEntry>) -> Result<Self, ModelError> {
        let mut all: Vec<ModelEntry> = entries.into_iter().collect();
        for e in &all {
            let invalid = |source| ModelError::Invalid {
                file: e.file.clone(),
                source,
            };
            e.manifest.validate().map_err(invalid)?;
            e.manifest.validate_memory(&e.memory).map_err(invalid)?;
        }
        // Stable: of two duplicates, the first given is reported first.
        all.sort_by(|a, b| a.manifest.name.cmp(&b.manifest.name));
        for pair in all.windows(2) {
            if pair[0].manifest.name == pair[1].manifest.name {
                return Err(ModelError::Duplicate {
                    name: pair[0].manifest.name.clone(),
                    first: pair[0].file.clone(),
                    second: pair[1].file.clone(),
                });
            }
        }
        let ids: Vec<u32> = (0u32..).take(all.len()).collect();
        Ok(Self::assemble(all.into_iter().zip(ids).collect()))
    }

    /// Builds a registry from entries with the ids they keep (a daemon that
    /// reloads models gives a name the same id for as long as it runs),
    /// validating each manifest and its memory. Names and ids must be
    /// unique; ids may leave gaps (models unloaded).
    pub fn from_entries_with_ids(
        entries: impl IntoIterator<Item = (u32, ModelEntry)>,
    ) -> Result<Self, ModelError> {
        let mut all: Vec<(ModelEntry, u32)> = entries.into_iter().map(|(i, e)| (e, i)).collect();
        for (e, _) in &all {
            let invalid = |source| ModelError::Invalid {
                file: e.file.clone(),
                source,
            };
            e.manifest.validate().map_err(invalid)?;
            e.manifest.validate_memory(&e.memory).map_err(invalid)?;
        }
        all.sort_by(|a, b| a.0.manifest.name.cmp(&b.0.manifest.name));
        for pair in all.windows(2) {
            if pair[0].0.manifest.name == pair[1].0.manifest.name {
                return Err(ModelError::Duplicate {
                    name: pair[0].0.manifest.name.clone(),
                    first: pair[0].0.file.clone(),
                    second: pair[1].0.file.clone(),
                });
            }
        }
        let mut ids: Vec<u32> = all.iter().map(|(_, i)| *i).collect();
        ids.sort_unstable();
        if let Some(pair) = ids.windows(2).find(|p| p[0] == p[1]) {
            return Err(ModelError::DuplicateId { id: pair[0] });
        }
        if ids.last() == Some(&NO_MODEL) {
            return Err(ModelError::DuplicateId { id: NO_MODEL });
        }
        Ok(Self::assemble(all))
    }

    /// The registry of `all`, sorted by name, each with its id.
    fn assemble(all: Vec<(ModelEntry, u32)>) -> Self {
        let bound = all
            .iter()
            .map(|(_, id)| *id as usize + 1)
            .max()
            .unwrap_or(0);
        let mut by_id = vec![NO_MODEL; bound];
        let models = all
            .into_iter()
            .enumerate()
            .map(|(index, (e, id))| {
                by_id[id as usize] = index as u32;
                Model {
                    id,
                    io: e.io,
                    total_time_ns: e.manifest.total_time_ns(),
                    input_bytes: e.manifest.input_bytes,
                    output_bytes: e.manifest.output_bytes,
                    manifest: e.manifest,
                    file: e.file,
                    memory: e.memory,
                }
            })
            .collect();
        Self { models, by_id }
    }

    /// One more than the largest id (0 when empty): the size of a table
    /// indexed by id.
    pub fn id_bound(&self) -> usize {
        self.by_id.len()
    }

    /// This registry with `overrides`' models added, each replacing the
    /// model of the same name (e.g. manifests measured by `sluice profile`
    /// over the built-in ones). Ids are reassigned in name order.
    pub fn with_overrides(self, overrides: ModelRegistry) -> Result<Self, ModelError> {
        let names: Vec<String> = overrides
            .models
            .iter()
            .map(|m| m.manifest.name.clone())
            .collect();
        let parts = self
            .models
            .into_iter()
            .filter(|m| !names.contains(&m.manifest.name))
            .chain(overrides.models)
            .map(ModelEntry::from);
        Self::from_entries(parts)
    }

    /// The model with id `id`.
    pub fn get(&self, id: u32) -> Option<&Model> {
        let index = *self.by_id.get(usize::try_from(id).ok()?)?;
        self.models.get(index as usize)
    }

    /// The id and model called `name`.
    pub fn lookup(&self, name: &str) -> Option<(u32, &Model)> {
        let index = self
            .models
            .binary_search_by(|m| m.manifest.name.as_str().cmp(name))
            .ok()?;
        let model = &self.models[index];
        Some((model.id, model))
    }

    /// Number of models.
    pub fn len(&self) -> usize {
        self.models.len()
    }

    /// Whether the registry has no model.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// Every model with its id, in name order (= id order for a registry
    /// built by [`ModelRegistry::from_entries`]).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u32, &Model)> + '_ {
        self.models.iter().map(|m| (m.id, m))
    }
}

/// `text` (a manifest file, one kernel per line) with each kernel's
/// `group_start` set to `groups[kernel]`, replacing the field or appending it
/// at the end of the kernel's line; every other byte is kept.
#[cfg(test)]
fn rewrite_group_starts(text: &str, groups: &[usize]) -> String {
    let mut kernel = 0;
    let lines: Vec<String> = text
        .split('\n')
        .map(|line| {
            if !line.trim_start().starts_with("{\"name\":") {
                return line.to_owned();
            }
            let Some(&g) = groups.get(kernel) else {
                return line.to_owned();
            };
            kernel += 1;
            const KEY: &str = "\"group_start\": ";
            if let Some(at) = line.find(KEY) {
                let from = at + KEY.len();
                let digits = line[from..].bytes().take_while(u8::is_ascii_digit).count();
                format!("{}{g}{}", &line[..from], &line[from + digits..])
            } else if let Some(close) = line.rfind('}') {
                format!("{}, {KEY}{g}{}", &line[..close], &line[close..])
            } else {
                line.to_owned()
            }
        })
        .collect();
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error and all its sources, as a reporter would print them.
    fn chain(e: &dyn std::error::Error) -> String {
        let mut s = e.to_string();
        let mut cur = e.source();
        while let Some(inner) = cur {
            s.push_str(": ");
            s.push_str(&inner.to_string());
            cur = inner.source();
        }
        s
    }

    #[test]
    fn explicit_ids_may_leave_gaps_and_must_be_unique() {
        let entry = |name: &str| {
            let mut m = echo();
            m.name = name.to_owned();
            ModelEntry {
                file: format!("{name}.json"),
                io: crate::ModelIo::untyped(m.input_bytes, m.output_bytes),
                manifest: m,
                memory: Vec::new(),
            }
        };
        let reg = ModelRegistry::from_entries_with_ids([
            (5, entry("b")),
            (0, entry("a")),
            (9, entry("c")),
        ])
        .unwrap();
        assert_eq!(reg.len(), 3);
        assert_eq!(reg.id_bound(), 10);
        assert_eq!(reg.lookup("b").map(|(id, _)| id), Some(5));
        assert_eq!(reg.get(9).map(Model::name), Some("c"));
        assert!(reg.get(1).is_none() && reg.get(10).is_none() && reg.get(u32::MAX).is_none());
        let names: Vec<(u32, &str)> = reg.iter().map(|(id, m)| (id, m.name())).collect();
        assert_eq!(names, [(0, "a"), (5, "b"), (9, "c")]);
        let e =
            ModelRegistry::from_entries_with_ids([(1, entry("a")), (1, entry("b"))]).unwrap_err();
        assert!(matches!(e, ModelError::DuplicateId { id: 1 }), "{e}");
        let e =
            ModelRegistry::from_entries_with_ids([(1, entry("a")), (2, entry("a"))]).unwrap_err();
        assert!(matches!(e, ModelError::Duplicate { .. }), "{e}");
        // from_entries numbers by name from 0, as before.
        let reg = ModelRegistry::from_entries([entry("z"), entry("y")]).unwrap();
        assert_eq!(reg.lookup("y").map(|(id, _)| id), Some(0));
        assert_eq!(reg.id_bound(), 2);
    }

    fn echo() -> Manifest {
        Manifest::parse(
            "echo_small.json",
            include_str!("../manifests/echo_small.json"),
        )
        .unwrap()
    }

    fn parse_err(json: &str) -> String {
        chain(&Manifest::parse("bad.json", json).unwrap_err())
    }

    /// `echo_small` as JSON with `f` applied to the parsed value.
    fn edited(f: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v: serde_json::Value =
            serde_json::from_str(include_str!("../manifests/echo_small.json")).unwrap();
        f(&mut v);
        v.to_string()
    }

    /// A temporary directory removed on drop (no tempfile dependency).
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!(
                "sluice-model-test-{}-{tag}-{n}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Whether a shipped manifest is written by scripts/gen-models.py
    /// (estimated or synthetic) rather than imported from the REEF
    /// measurements.
    fn generated(m: &Model) -> bool {
        let p = &m.manifest.provenance;
        p.starts_with("synthetic") || p.starts_with("estimated")
    }

    #[test]
    fn batch_scaling_follows_the_data_from_the_input() {
        let reg = ModelRegistry::builtin();
        let (_, m) = reg.lookup("resnet50").unwrap();
        let scaled = m.batch_scaled();
        assert_eq!(scaled.len(), m.manifest.kernels.len());
        // The first kernel reads the input; the last writes the output.
        assert!(scaled[0] && scaled[scaled.len() - 1]);
        // A kernel keeps its grid exactly when it reads nothing written from
        // the input on: check the rule independently on one model.
        let written_from_input = |k: usize| {
            let mut held = vec![(ByteRange::new(0, m.input_bytes), true)];
            let mut flag = false;
            for (i, mem) in m.memory.iter().enumerate().take(k + 1) {
                flag = mem.reads.iter().any(|r| {
                    held.iter()
                        .any(|(h, s)| *s && r.start < h.end && h.start < r.end)
                });
                for w in &mem.writes {
                    held.retain(|(h, _)| h != w);
                    held.push((*w, flag));
                }
                if i == k {
                    break;
                }
            }
            flag
        };
        for k in [1, 7, 40, scaled.len() / 2] {
            assert_eq!(scaled[k], written_from_input(k), "kernel {k}");
        }
        // A model without declared memory scales every kernel.
        let mut e = m.clone();
        e.memory.clear();
        assert!(e.batch_scaled().iter().all(|&s| s));
        // Hand-built: a weight transform (reads only weights) keeps its grid.
        let mut w = m.clone();
        w.input_bytes = 100;
        w.memory = vec![
            KernelMemory {
                reads: vec![ByteRange::new(1000, 2000)],
                writes: vec![ByteRange::new(3000, 4000)],
                group_start: None,
            },
            KernelMemory {
                reads: vec![ByteRange::new(0, 100), ByteRange::new(3000, 4000)],
                writes: vec![ByteRange::new(5000, 6000)],
                group_start: None,
            },
            KernelMemory {
                reads: vec![ByteRange::new(5000, 6000)],
                writes: vec![ByteRange::new(3000, 4000)],
                group_start: None,
            },
            KernelMemory {
                reads: vec![ByteRange::new(1000, 2000)],
                writes: vec![ByteRange::new(7000, 8000)],
                group_start: None,
            },
        ];
        w.manifest.kernels.truncate(4);
        assert_eq!(w.batch_scaled(), vec![false, true, true, false]);
    }

    #[test]
    fn at_batch_scales_exactly_the_batch_scaled_kernels() {
        let reg = ModelRegistry::builtin();
        let (_, m) = reg.lookup("resnet50").unwrap();
        assert_eq!(m.at_batch(1).manifest, m.manifest);
        let scaled = m.batch_scaled();
        let b4 = m.at_batch(4);
        for ((k, k4), s) in m
            .manifest
            .kernels
            .iter()
            .zip(&b4.manifest.kernels)
            .zip(&scaled)
        {
            let f = if *s { 4 } else { 1 };
            assert_eq!(k4.blocks(), k.blocks() * f, "{}", k.name);
            assert_eq!(k4.kernel_time_us, k.kernel_time_us * f as f64, "{}", k.name);
            assert_eq!(
                (k4.block_time_us, &k4.wave_us),
                (k.block_time_us, &k.wave_us)
            );
        }
        assert_eq!(b4.total_time_ns, b4.manifest.total_time_ns());
        assert!(b4.manifest.validate().is_ok());
        assert_eq!(b4.memory, m.memory);
    }

    #[test]
    fn estimated_models_follow_their_layer_shapes() {
        let reg = ModelRegistry::builtin();
        // Kernels: one per operation of the real layer shapes in
        // scripts/gen-models.py; REEF (TOCS'25) Table 1's TVM counts and MI50
        // times, which the estimate is compared with but not fitted to.
        for (name, kernels, table1_kernels, table1_ms) in [
            ("yolov3", 109, 144, "10.0"),
            ("bert_base", 355, 393, "8.1"),
            ("gpt2", 332, 440, "13.2"),
        ] {
            let (_, m) = reg.lookup(name).unwrap();
            let p = &m.manifest.provenance;
            assert_eq!(m.manifest.kernels.len(), kernels, "{name}");
            let sum: u64 = m
                .manifest
                .kernels
                .iter()
                .map(|k| us_to_ns(k.kernel_time_us))
                .sum();
            assert_eq!(m.total_time_ns, sum, "{name}");
            assert_eq!(us_to_ns(m.manifest.total_time_us), sum, "{name}");
            assert!(m.input_bytes > 0 && m.input_bytes < 1 << 20, "{name}");
            assert!(m.output_bytes > 0 && m.output_bytes < 1 << 20, "{name}");
            assert!(p.starts_with("estimated, not measured"), "{name}: {p}");
            assert!(
                p.contains("max(floor, FLOPs / P, bytes / B)"),
                "{name}: {p}"
            );
            assert!(p.contains("mi50-roofline.json"), "{name}: {p}");
            assert!(
                p.contains(&format!("Table 1's TVM count of {table1_kernels}"))
                    && p.contains(&format!("Table 1 gives {table1_ms} ms")),
                "{name}: {p}"
            );
            assert!(p.contains("not fitted or rescaled"), "{name}: {p}");
            for k in &m.manifest.kernels {
                // Every estimate is at least the floor (4 us, the measured
                // median of REEF's smallest multi-block kernels).
                assert!(k.kernel_time_us >= 4.0, "{name}: {k:?}");
                let i = k
                    .mem_intensity
                    .expect("estimated kernels give mem_intensity");
                assert!((0.0..=1.0).contains(&i), "{name}: {k:?}");
            }
        }
    }

    #[test]
    fn estimated_cnns_follow_their_torchvision_shapes() {
        // gpulet (ATC'22) Table 3 and InSS Section 6.1 models the REEF
        // artifact lacks: kernels of the torchvision layer shapes in
        // scripts/gen-models.py, at least one depthwise convolution in the
        // two mobile models (the class calibrated on REEF's MobileNet).
        let reg = ModelRegistry::builtin();
        for (name, kernels, depthwise) in [
            ("vgg16", 21, 0),
            ("mnasnet", 64, 17),
            ("efficientnet_b0", 124, 16),
        ] {
            let (_, m) = reg.lookup(name).unwrap();
            let p = &m.manifest.provenance;
            assert_eq!(m.manifest.kernels.len(), kernels, "{name}");
            let dw = m
                .manifest
                .kernels
                .iter()
                .filter(|k| k.name.starts_with("depthwise_conv2d"))
                .count();
            assert_eq!(dw, depthwise, "{name}");
            assert_eq!((m.input_bytes, m.output_bytes), (602_112, 4000), "{name}");
            assert!(p.starts_with("estimated, not measured"), "{name}: {p}");
            assert!(
                p.contains(&format!(
                    "torchvision {}",
                    name.replace("mnasnet", "mnasnet1_0")
                )),
                "{name}: {p}"
            );
            assert!(
                p.contains("max(floor, FLOPs / P, bytes / B)"),
                "{name}: {p}"
            );
            assert!(p.contains("nothing fitted to any total"), "{name}: {p}");
            assert!(
                m.manifest.kernels.iter().all(|k| k.kernel_time_us >= 4.0),
                "{name}"
            );
            // Every kernel but the weight-only ones follows the input.
            assert!(
                m.batch_scaled().iter().filter(|&&s| s).count() >= kernels - 1,
                "{name}"
            );
        }
    }

    /// The models imported by scripts/import-reef.py from the REEF artifact
    /// (../shared/data/reef): name, kernels in the data, non-idempotent
    /// kernels (their buffers read and written).
    const MEASURED: [(&str, usize, usize); 9] = [
        ("resnet152", 207, 0),
        ("vgg19", 71, 0),
        ("bert205", 205, 6),
        ("resnet50", 330, 0),
        ("resnet18", 57, 0),
        ("densenet", 207, 0),
        ("inception", 146, 0),
        ("mobilenet", 31, 0),
        ("alexnet", 13, 0),
    ];

    #[test]
    fn measured_models_follow_the_reef_artifact() {
        let reg = ModelRegistry::builtin();
        let measured = reg.iter().filter(|(_, m)| !generated(m)).count();
        assert_eq!(measured, MEASURED.len());
        for (name, kernels, non_idempotent) in MEASURED {
            let (_, m) = reg.lookup(name).unwrap();
            let p = &m.manifest.provenance;
            assert!(p.starts_with("measured by the REEF authors"), "{name}: {p}");
            assert!(
                p.contains("SJTU-IPADS/reef") && p.contains("Apache-2.0"),
                "{name}"
            );
            assert!(
                p.contains("Estimated, not measured: regs_per_thread"),
                "{name}"
            );
            let ks = &m.manifest.kernels;
            assert_eq!(ks.len(), kernels, "{name}");
            assert_eq!(m.memory.len(), kernels, "{name}: has ranges");
            let non = ks.iter().filter(|k| !k.idempotent).count();
            assert_eq!(non, non_idempotent, "{name}");
            for k in ks {
                // The launch floor is removed and every time is at least 1 µs.
                assert!(
                    k.kernel_time_us >= 1.0 && k.block_time_us >= 1.0,
                    "{name}: {k:?}"
                );
                assert!(
                    !k.wave_us.is_empty() && k.wave_us.iter().all(|&w| w >= 1.0),
                    "{k:?}"
                );
                assert_eq!(k.block_time_us, k.wave_us[0].min(k.kernel_time_us), "{k:?}");
                let i = k.mem_intensity.unwrap();
                assert!((0.0..=1.0).contains(&i), "{name}: {k:?}");
                // Registers (estimated) let len(wave_us) blocks share a CU
                // unless threads, LDS or block slots already stop them.
                let waves = k.threads_per_block().div_ceil(64);
                let others = match k.shared_mem_bytes {
                    0 => 40 / waves,
                    s => (40 / waves).min(65536 / u64::from(s)),
                };
                let want = (k.wave_us.len() as u64).min(others);
                let by_regs = 4 * (256 / u64::from(k.regs_per_thread)) / waves;
                assert!(by_regs >= want, "{name}: {k:?}");
                assert!([128, 96, 64, 48, 32, 24, 16].contains(&k.regs_per_thread));
            }
        }
        // VGG-19 and ResNet-152 are the DISB builds at 3x64x64 fp32.
        for name in ["resnet152", "vgg19"] {
            assert_eq!(reg.lookup(name).unwrap().1.input_bytes, 3 * 64 * 64 * 4);
        }
    }

    #[test]
    fn bert205_softmax_updates_its_max_in_place() {
        // fused_nn_softmax_1_kernel2 reads and writes T_softmax_maxelem,
        // which kernel0 of the same softmax wrote: its group is the whole
        // softmax so far (kernel0..kernel2), and kernel0/1/3 are idempotent.
        let reg = ModelRegistry::builtin();
        let (_, m) = reg.lookup("bert205").unwrap();
        let ks = &m.manifest.kernels;
        let mut seen = 0;
        for (i, k) in ks.iter().enumerate() {
            if k.name == "fused_nn_softmax_1_kernel2" {
                assert!(!k.idempotent, "{i}");
                assert_eq!(m.group_start(i), i - 2, "{i}");
                assert_eq!(ks[i - 2].name, "fused_nn_softmax_1_kernel0");
                let mem = &m.memory[i];
                let r: idempotent::RangeSet = mem.reads.iter().collect();
                let w: idempotent::RangeSet = mem.writes.iter().collect();
                assert!(r.intersects(&w), "{i}");
                seen += 1;
            } else {
                assert!(k.idempotent, "{i} {}", k.name);
                assert_eq!(m.group_start(i), i);
            }
        }
        assert_eq!(seen, 6);
    }

    #[test]
    fn special_models() {
        let reg = ModelRegistry::builtin();
        let (_, null) = reg.lookup("null").unwrap();
        assert_eq!(null.manifest.kernels.len(), 0);
        assert_eq!(
            (null.total_time_ns, null.input_bytes, null.output_bytes),
            (0, 0, 0)
        );
        let (_, echo) = reg.lookup("echo_small").unwrap();
        assert_eq!(echo.manifest.kernels.len(), 1);
        assert_eq!(
            (echo.total_time_ns, echo.input_bytes, echo.output_bytes),
            (50_000, 64, 64)
        );
    }

    #[test]
    fn builtin_ids_are_sorted_names_and_stable() {
        let reg = ModelRegistry::builtin();
        let names: Vec<&str> = reg.iter().map(|(_, m)| m.name()).collect();
        assert_eq!(
            names,
            [
                "alexnet",
                "bert205",
                "bert_base",
                "densenet",
                "echo_small",
                "efficientnet_b0",
                "gpt2",
                "inception",
                "mnasnet",
                "mobilenet",
                "null",
                "resnet152",
                "resnet18",
                "resnet50",
                "vgg16",
                "vgg19",
                "yolov3"
            ]
        );
        for (id, m) in reg.iter() {
            assert_eq!(m.id, id);
            assert_eq!(reg.get(id).unwrap().name(), m.name());
            assert_eq!(reg.lookup(m.name()).unwrap().0, id);
        }
        assert_eq!(reg.len(), 17);
        assert!(!reg.is_empty());
        assert!(reg.get(17).is_none());
        assert!(reg.lookup("resnet").is_none());
        // Ids are a function of the name set, not of the input order.
        let mut shuffled: Vec<_> = reg
            .iter()
            .map(|(_, m)| (m.file.clone(), m.manifest.clone()))
            .collect();
        shuffled.reverse();
        let again = ModelRegistry::from_manifests(shuffled).unwrap();
        for (id, m) in again.iter() {
            assert_eq!(reg.get(id).unwrap().name(), m.name());
        }
    }

    #[test]
    fn builtin_matches_models_directory() {
        // Catches a manifest added to daemon/model/manifests/ but not to BUILTIN.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests");
        let on_disk = ModelRegistry::load_dir(&dir).unwrap();
        let builtin = ModelRegistry::builtin();
        assert_eq!(on_disk.len(), builtin.len());
        for ((a_id, a), (b_id, b)) in on_disk.iter().zip(builtin.iter()) {
            assert_eq!(a_id, b_id);
            assert_eq!(a.manifest, b.manifest);
        }
    }

    /// The simplified MI50 occupancy model of scripts/gen-models.py.
    fn mi50_rounds(k: &Kernel) -> u64 {
        let waves = k.threads_per_block().div_ceil(64);
        let by_slots = 40 / waves;
        let by_regs = 4 * (256 / u64::from(k.regs_per_thread)).min(10) / waves;
        let by_lds = match k.shared_mem_bytes {
            0 => by_slots,
            s => 65536 / u64::from(s),
        };
        let per_cu = by_slots.min(by_regs).min(by_lds);
        assert!(per_cu >= 1, "{k:?}");
        k.blocks().div_ceil(60 * per_cu)
    }

    #[test]
    fn generated_block_times_follow_the_occupancy_formula() {
        for (_, m) in ModelRegistry::builtin()
            .iter()
            .filter(|(_, m)| generated(m))
        {
            for k in &m.manifest.kernels {
                let rounds = mi50_rounds(k) as f64;
                let err = (k.block_time_us * rounds - k.kernel_time_us).abs();
                // block_time_us is rounded to 1 ns.
                assert!(err <= 0.0005 * rounds + 1e-9, "{}: {k:?}", m.name());
            }
        }
    }

    #[test]
    fn estimated_models_have_some_non_idempotent_kernels() {
        let reg = ModelRegistry::builtin();
        // VGG-16 has no in-place element-wise kernel to mark.
        for name in ["yolov3", "bert_base", "gpt2", "mnasnet", "efficientnet_b0"] {
            let ks = &reg.lookup(name).unwrap().1.manifest.kernels;
            let non = ks.iter().filter(|k| !k.idempotent).count();
            assert!(non >= 1 && non * 10 <= ks.len(), "{name}: {non}");
        }
    }

    #[test]
    fn unknown_field_is_rejected_by_name() {
        let e = parse_err(&edited(|v| v["colour"] = "blue".into()));
        assert!(e.contains("bad.json") && e.contains("colour"), "{e}");
        let e = parse_err(&edited(|v| v["kernels"][0]["warps"] = 4.into()));
        assert!(e.contains("warps"), "{e}");
        let e = parse_err(&edited(|v| {
            v.as_object_mut().unwrap().remove("output_bytes");
        }));
        assert!(e.contains("output_bytes"), "{e}");
    }

    #[test]
    fn bad_dims_are_rejected() {
        let e = parse_err(&edited(|v| {
            v["kernels"][0]["grid"] = serde_json::json!([4, 0, 1])
        }));
        assert!(
            e.contains("bad.json") && e.contains("echo_small") && e.contains("kernel 0"),
            "{e}"
        );
        assert!(e.contains("grid") && e.contains("[4, 0, 1]"), "{e}");
        let e = parse_err(&edited(|v| {
            v["kernels"][0]["block"] = serde_json::json!([64, 32, 1])
        }));
        assert!(
            e.contains("2048 threads") && e.contains("[64, 32, 1]"),
            "{e}"
        );
    }

    #[test]
    fn bad_times_are_rejected() {
        let e = parse_err(&edited(|v| v["total_time_us"] = 60.0.into()));
        assert!(
            e.contains("sum to 50 µs") && e.contains("total_time_us is 60"),
            "{e}"
        );
        let e = parse_err(&edited(|v| {
            v["kernels"][0]["kernel_time_us"] = (-1.0).into()
        }));
        assert!(e.contains("kernel_time_us is -1"), "{e}");
        let e = parse_err(&edited(|v| v["kernels"][0]["block_time_us"] = 51.0.into()));
        assert!(e.contains("block_time_us 51"), "{e}");
        // Within 1 µs is accepted.
        assert!(Manifest::parse("ok.json", &edited(|v| v["total_time_us"] = 50.9.into())).is_ok());
    }

    #[test]
    fn bad_names_and_sizes_are_rejected() {
        for name in ["", "ResNet", "a-b", "x".repeat(32).as_str()] {
            let e = parse_err(&edited(|v| v["name"] = name.into()));
            assert!(e.contains(&format!("{name:?}")), "{e}");
        }
        assert!(Manifest::parse("ok.json", &edited(|v| v["name"] = "x".repeat(31).into())).is_ok());
        let e = parse_err(&edited(|v| {
            v["input_bytes"] = (MAX_TENSOR_BYTES + 1).into()
        }));
        assert!(e.contains("input_bytes is 67108865"), "{e}");
    }

    #[test]
    fn total_time_ns_sums_rounded_kernel_times() {
        let mut m = echo();
        m.kernels.push(Kernel {
            kernel_time_us: 0.0015,
            ..m.kernels[0].clone()
        });
        assert_eq!(m.total_time_ns(), 50_002);
    }

    #[test]
    fn load_dir_rejects_duplicate_names() {
        let dir = TempDir::new("dup");
        let json = include_str!("../manifests/echo_small.json");
        std::fs::write(dir.0.join("a.json"), json).unwrap();
        std::fs::write(dir.0.join("b.json"), json).unwrap();
        std::fs::write(dir.0.join("notes.txt"), "not a manifest").unwrap();
        let e = ModelRegistry::load_dir(&dir.0).unwrap_err();
        assert!(matches!(e, ModelError::Duplicate { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("echo_small") && msg.contains("a.json") && msg.contains("b.json"),
            "{msg}"
        );
    }

    #[test]
    fn load_dir_loads_and_reports_errors() {
        let dir = TempDir::new("ok");
        std::fs::write(
            dir.0.join("echo_small.json"),
            include_str!("../manifests/echo_small.json"),
        )
        .unwrap();
        std::fs::write(
            dir.0.join("null.json"),
            include_str!("../manifests/null.json"),
        )
        .unwrap();
        let reg = ModelRegistry::load_dir(&dir.0).unwrap();
        assert_eq!(reg.len(), 2);
        assert_eq!(reg.lookup("null").unwrap().0, 1);
        assert!(reg.get(0).unwrap().file.ends_with("echo_small.json"));

        std::fs::write(dir.0.join("broken.json"), "{").unwrap();
        let e = ModelRegistry::load_dir(&dir.0).unwrap_err();
        assert!(chain(&e).contains("broken.json"), "{e}");

        let empty = TempDir::new("empty");
        let e = ModelRegistry::load_dir(&empty.0).unwrap_err();
        assert!(matches!(e, ModelError::Empty { .. }), "{e:?}");
        let e = ModelRegistry::load_dir(empty.0.join("missing")).unwrap_err();
        assert!(matches!(e, ModelError::ReadDir { .. }), "{e:?}");
    }

    // ---- memory accesses and idempotent groups ----

    /// `echo_small` extended to three kernels: K0 reads the input and writes
    /// A, K1 adds into A in place (reads and writes A), K2 reads A, writes B.
    fn three_kernels(group_start_1: u32) -> String {
        edited(|v| {
            let k0 = v["kernels"][0].clone();
            let k = |i: usize, r: serde_json::Value, w: serde_json::Value, g: u32, idem: bool| {
                let mut x = k0.clone();
                x["name"] = format!("k{i}").into();
                x["kernel_time_us"] = 50.0.into();
                x["reads"] = r;
                x["writes"] = w;
                x["group_start"] = g.into();
                x["idempotent"] = idem.into();
                x
            };
            use serde_json::json;
            v["kernels"] = json!([
                k(0, json!([[0, 64]]), json!([[256, 320]]), 0, true),
                k(
                    1,
                    json!([[256, 320], [512, 576]]),
                    json!([[256, 320]]),
                    group_start_1,
                    false
                ),
                k(2, json!([[256, 320]]), json!([[1024, 1088]]), 2, true),
            ]);
            v["total_time_us"] = 150.0.into();
        })
    }

    #[test]
    fn manifest_with_ranges_parses_and_gives_groups() {
        let (m, memory) = Manifest::parse_with_memory("ok.json", &three_kernels(0)).unwrap();
        assert_eq!(memory.len(), 3);
        assert_eq!(
            memory[1].reads,
            [ByteRange::new(256, 320), ByteRange::new(512, 576)]
        );
        let reg = ModelRegistry::from_parts([("ok.json".to_owned(), m.clone(), memory)]).unwrap();
        let model = reg.get(0).unwrap();
        assert_eq!(
            (0..4).map(|k| model.group_start(k)).collect::<Vec<_>>(),
            [0, 0, 2, 3]
        );
        // The plain manifest is the same; memory fields are kept beside it.
        assert_eq!(Manifest::parse("ok.json", &three_kernels(0)).unwrap(), m);
    }

    #[test]
    fn wrong_group_start_is_refused_with_both_values() {
        let e = parse_err(&three_kernels(1));
        assert!(
            e.contains("bad.json") && e.contains("kernel 1 (`k1`)"),
            "{e}"
        );
        assert!(
            e.contains("group_start is 1") && e.contains("give 0"),
            "{e}"
        );
        assert!(
            e.contains("scripts/gen-models.py") && e.contains(BLESS_COMMAND),
            "{e}"
        );
        // Missing, and after the kernel.
        let e = parse_err(&edited(|v| {
            let mut x: serde_json::Value = serde_json::from_str(&three_kernels(0)).unwrap();
            x["kernels"][2]
                .as_object_mut()
                .unwrap()
                .remove("group_start");
            *v = x;
        }));
        assert!(
            e.contains("kernel 2 (`k2`)") && e.contains("group_start is missing"),
            "{e}"
        );
        let e = parse_err(&edited(|v| {
            let mut x: serde_json::Value = serde_json::from_str(&three_kernels(0)).unwrap();
            x["kernels"][0]["group_start"] = 2.into();
            *v = x;
        }));
        assert!(
            e.contains("kernel 0") && e.contains("group_start is 2, but"),
            "{e}"
        );
    }

    #[test]
    fn flag_that_disagrees_with_ranges_is_refused() {
        let e = parse_err(&edited(|v| {
            let mut x: serde_json::Value = serde_json::from_str(&three_kernels(0)).unwrap();
            x["kernels"][2]["idempotent"] = false.into();
            *v = x;
        }));
        assert!(
            e.contains("kernel 2 (`k2`) is flagged idempotent: false"),
            "{e}"
        );
        assert!(e.contains("are disjoint"), "{e}");
    }

    #[test]
    fn group_without_ranges_and_ungroupable_kernels_are_refused() {
        let e = parse_err(&edited(|v| {
            let k = v["kernels"][0].as_object_mut().unwrap();
            k.remove("reads");
            k.remove("writes");
        }));
        assert!(
            e.contains("kernel 0 (`echo_0`)") && e.contains("no reads/writes"),
            "{e}"
        );
        // An in-place kernel with nothing before it has no group.
        let e = parse_err(&edited(|v| {
            v["kernels"][0]["reads"] = serde_json::json!([[0, 64]]);
            v["kernels"][0]["writes"] = serde_json::json!([[0, 64]]);
            v["kernels"][0]["group_start"] = 0.into();
        }));
        assert!(
            e.contains("kernel 0 (`echo_0`) has no idempotent group"),
            "{e}"
        );
        assert!(e.contains("0x0..0x40"), "{e}");
    }

    #[test]
    fn without_ranges_group_start_follows_the_flags() {
        let mut m = echo();
        let k = k_flag;
        m.kernels = vec![k(true), k(false), k(true), k(false), k(false), k(true)];
        m.total_time_us = 300.0;
        let reg = ModelRegistry::from_manifests([("t".to_owned(), m)]).unwrap();
        let model = reg.get(0).unwrap();
        assert!(model.memory.is_empty());
        let got: Vec<usize> = (0..7).map(|k| model.group_start(k)).collect();
        assert_eq!(got, [0, 0, 2, 2, 2, 5, 6]);
        let ks = [k_flag(false), k_flag(false)];
        assert_eq!(flag_group_start(&ks, 1), 0);
    }

    fn k_flag(idempotent: bool) -> Kernel {
        Kernel {
            idempotent,
            ..echo().kernels[0].clone()
        }
    }

    #[test]
    fn shipped_groups_are_non_trivial_exactly_for_in_place_kernels() {
        for (_, m) in ModelRegistry::builtin().iter() {
            let ks = &m.manifest.kernels;
            if ks.is_empty() {
                assert!(m.memory.is_empty());
                continue;
            }
            assert_eq!(m.memory.len(), ks.len(), "{} has ranges", m.name());
            for (i, k) in ks.iter().enumerate() {
                let g = m.group_start(i);
                if k.idempotent {
                    assert_eq!(g, i, "{} {}", m.name(), k.name);
                } else {
                    assert!(g < i, "{} {}: group {g}", m.name(), k.name);
                    assert!(!generated(m) || k.name.contains("_inplace_"), "{}", k.name);
                    // In place: it reads and writes the same bytes.
                    let mem = &m.memory[i];
                    let r: idempotent::RangeSet = mem.reads.iter().collect();
                    let w: idempotent::RangeSet = mem.writes.iter().collect();
                    assert!(r.intersects(&w), "{}", k.name);
                }
            }
        }
    }

    #[test]
    fn group_starts_are_current() {
        // Recomputes the groups of every shipped manifest from its ranges,
        // from the files on disk. With SLUICE_BLESS=1, rewrites stale
        // group_start fields in place.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests");
        let bless = std::env::var_os("SLUICE_BLESS").is_some_and(|v| v == "1");
        let mut stale = Vec::new();
        for (file, _) in BUILTIN {
            let path = dir.join(file);
            let text = std::fs::read_to_string(&path).unwrap();
            let (_, memory) = parse_unchecked(file, &text).unwrap();
            if memory.is_empty() {
                continue;
            }
            let accesses: Vec<KernelAccess> = memory.iter().map(KernelMemory::access).collect();
            let groups = idempotent::minimal_groups(&accesses)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let blessed = rewrite_group_starts(&text, &groups);
            if blessed == text {
                continue;
            }
            if bless {
                std::fs::write(&path, &blessed).unwrap();
            }
            let bad = memory
                .iter()
                .zip(&groups)
                .position(|(m, &g)| m.group_start.map(|s| s as usize) != Some(g));
            stale.push(format!("{} (first stale kernel: {bad:?})", path.display()));
        }
        assert!(
            bless || stale.is_empty(),
            "stale group_start in {stale:?}; run `{BLESS_COMMAND}` (and, for generated \
             manifests, fix the Python port in scripts/manifestgen/groups.py so that \
             `python3 scripts/gen-models.py --check` and `python3 scripts/import-reef.py --check` \
             agree)"
        );
    }

    #[test]
    fn rewrite_group_starts_replaces_or_appends() {
        let text = " \"kernels\": [\n  {\"name\": \"a\", \"group_start\": 17},\n  {\"name\": \"b\"}\n ]\n}\n";
        let want = " \"kernels\": [\n  {\"name\": \"a\", \"group_start\": 0},\n  {\"name\": \"b\", \"group_start\": 1}\n ]\n}\n";
        assert_eq!(rewrite_group_starts(text, &[0, 1]), want);
        assert_eq!(rewrite_group_starts(want, &[0, 1]), want);
    }

    // ---- restoring on the shipped ranges ----

    /// A deterministic machine over the *cells* of a model's layout: the
    /// pieces between consecutive range endpoints, so a buffer of megabytes
    /// is one cell (every range is a union of cells, and which cells a
    /// kernel touches is all that matters for idempotence).
    struct Machine {
        /// Per kernel: cells read, cells written.
        ks: Vec<(Vec<usize>, Vec<usize>)>,
        cells: usize,
    }

    impl Machine {
        fn new(memory: &[KernelMemory]) -> Self {
            let mut ends: Vec<u64> = memory
                .iter()
                .flat_map(|m| m.reads.iter().chain(&m.writes))
                .flat_map(|r| [r.start, r.end])
                .collect();
            ends.sort_unstable();
            ends.dedup();
            let cells_of = |rs: &[ByteRange]| -> Vec<usize> {
                let mut v: Vec<usize> = rs
                    .iter()
                    .flat_map(|r| {
                        let a = ends.binary_search(&r.start).unwrap();
                        let b = ends.binary_search(&r.end).unwrap();
                        a..b
                    })
                    .collect();
                v.sort_unstable();
                v.dedup();
                v
            };
            let ks = memory
                .iter()
                .map(|m| (cells_of(&m.reads), cells_of(&m.writes)))
                .collect();
            Self {
                ks,
                cells: ends.len(),
            }
        }

        fn mix(mut h: u64, v: u64) -> u64 {
            h ^= v;
            h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^ (h >> 29)
        }

        /// What kernel `i` writes to each of its cells, given memory.
        fn output(&self, mem: &[u64], i: usize) -> Vec<(usize, u64)> {
            let (reads, writes) = &self.ks[i];
            let seed = reads.iter().fold(Self::mix(0, i as u64), |h, &c| {
                Self::mix(Self::mix(h, c as u64), mem[c])
            });
            writes
                .iter()
                .map(|&c| (c, Self::mix(seed, c as u64)))
                .collect()
        }

        fn run(&self, mem: &mut [u64], from: usize, to: usize) {
            for i in from..to {
                for (c, v) in self.output(mem, i) {
                    mem[c] = v;
                }
            }
        }

        /// Runs to `cut`, lets kernel `cut` write its cells (`garbage`: a
        /// wrong value, else its right value, as if it finished just before
        /// the kill), restarts from `restart` and returns the final memory.
        fn interrupted(&self, cut: usize, garbage: bool, restart: usize) -> Vec<u64> {
            let mut mem: Vec<u64> = (0..self.cells as u64).map(|c| c * 7 + 1).collect();
            self.run(&mut mem, 0, cut);
            for (c, v) in self.output(&mem, cut) {
                mem[c] = if garbage { !v } else { v };
            }
            self.run(&mut mem, restart, self.ks.len());
            mem
        }
    }

    #[test]
    fn restarting_from_group_start_reproduces_an_uninterrupted_run() {
        let mut checked = 0;
        for (_, m) in ModelRegistry::builtin().iter() {
            if m.memory.is_empty() {
                continue;
            }
            let machine = Machine::new(&m.memory);
            let n = m.manifest.kernels.len();
            let mut want: Vec<u64> = (0..machine.cells as u64).map(|c| c * 7 + 1).collect();
            machine.run(&mut want, 0, n);
            for k in 0..n {
                // Every in-place kernel, and every 16th kernel besides.
                if m.manifest.kernels[k].idempotent && k % 16 != 0 {
                    continue;
                }
                let g = m.group_start(k);
                for garbage in [false, true] {
                    let got = machine.interrupted(k, garbage, g);
                    assert!(got == want, "{} kernel {k}: restart from {g}", m.name());
                }
                if g < k {
                    // The machine can tell: re-running the in-place kernel
                    // alone applies it twice.
                    assert!(machine.interrupted(k, false, k) != want, "{} {k}", m.name());
                    checked += 1;
                }
            }
        }
        assert!(checked > 50, "{checked}");
    }

    #[test]
    fn overrides_replace_models_of_the_same_name_and_keep_the_rest() {
        let base = ModelRegistry::builtin();
        let n = base.len();
        let vgg = base.lookup("vgg19").unwrap().1.clone();
        let mut fast = vgg.manifest.clone();
        for k in &mut fast.kernels {
            k.kernel_time_us /= 2.0;
            k.block_time_us /= 2.0;
        }
        fast.total_time_us /= 2.0;
        let over =
            ModelRegistry::from_manifests([("measured/vgg19.json".to_owned(), fast)]).unwrap();
        let r = base.with_overrides(over).unwrap();
        assert_eq!(r.len(), n);
        let (id, m) = r.lookup("vgg19").unwrap();
        assert_eq!(m.file, "measured/vgg19.json");
        assert_eq!(r.get(id).unwrap().total_time_ns, vgg.total_time_ns / 2);
        assert!(
            r.lookup("resnet152")
                .unwrap()
                .1
                .file
                .starts_with("builtin:")
        );
    }
}
