//! Model manifests and the model registry.
//!
//! A model is a JSON manifest (`daemon/models/*.json`, format in
//! `docs/models.md`) that lists its GPU kernels in launch order with their
//! launch configuration, resource use and execution times. The simulated GPU
//! runs a model for the sum of its kernel times; later steps use the
//! per-kernel detail to model preemption and kernel padding.
//!
//! The registry gives every model a `u32` id, assigned by sorted name so that
//! the same set of manifests always yields the same ids. Clients look a model
//! up by name once and then send its id in every request.
//!
//! [`ModelRegistry::builtin`] embeds the shipped manifests in the binary, so
//! the daemon works from a fresh clone with no files installed;
//! [`ModelRegistry::load_dir`] reads a directory of manifests instead.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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

/// A model manifest as stored in `daemon/models/<name>.json`.
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
}

impl Manifest {
    /// Parses and validates a manifest. `file` names it in errors.
    pub fn parse(file: &str, json: &str) -> Result<Self, ModelError> {
        let manifest: Self = serde_json::from_str(json).map_err(|source| ModelError::Parse {
            file: file.to_owned(),
            source,
        })?;
        manifest.validate().map_err(|source| ModelError::Invalid {
            file: file.to_owned(),
            source,
        })?;
        Ok(manifest)
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

/// Converts µs to whole ns, rounding; negative and NaN become 0, huge values
/// saturate.
fn us_to_ns(us: f64) -> u64 {
    // `as` saturates and maps NaN to 0.
    (us * 1000.0).round() as u64
}

/// A manifest that parsed but breaks a rule of `docs/models.md`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ManifestError {
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
    /// The kernel times do not add up to `total_time_us`.
    #[error(
        "model `{model}`: the kernel times sum to {sum_us} µs but total_time_us is {total_us}; \
         make them agree within 0.1% or 1 µs (regenerate with scripts/gen-models.py)"
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
    /// The directory holds no `*.json` file.
    #[error(
        "no *.json model manifest in {dir}; add one (see docs/models.md) or use the built-in models"
    )]
    Empty {
        /// The directory.
        dir: PathBuf,
    },
}

/// A model in the registry.
#[derive(Debug, Clone)]
pub struct Model {
    /// The model's id: its index in name order.
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
}

impl Model {
    /// The model's lookup name.
    pub fn name(&self) -> &str {
        &self.manifest.name
    }
}

/// The manifests compiled into the binary: (file name, contents).
const BUILTIN: &[(&str, &str)] = &[
    ("bert_base.json", include_str!("../models/bert_base.json")),
    ("echo_small.json", include_str!("../models/echo_small.json")),
    ("gpt2.json", include_str!("../models/gpt2.json")),
    ("null.json", include_str!("../models/null.json")),
    ("resnet152.json", include_str!("../models/resnet152.json")),
    ("vgg19.json", include_str!("../models/vgg19.json")),
    ("yolov3.json", include_str!("../models/yolov3.json")),
];

/// Every model the daemon can run, by id and by name. Immutable once built.
#[derive(Debug, Clone)]
pub struct ModelRegistry {
    /// Sorted by name; a model's id is its index.
    models: Vec<Model>,
}

impl ModelRegistry {
    /// The manifests shipped in `daemon/models/`, embedded at build time.
    ///
    /// # Panics
    ///
    /// If an embedded manifest is invalid, which the unit tests rule out.
    pub fn builtin() -> Self {
        let manifests = BUILTIN.iter().map(|(file, json)| {
            let file = format!("builtin:{file}");
            let manifest = Manifest::parse(&file, json)
                .unwrap_or_else(|e| panic!("embedded model manifest is broken: {e:?}"));
            (file, manifest)
        });
        Self::from_manifests(manifests)
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
            let manifest = Manifest::parse(&file, &json)?;
            manifests.push((file, manifest));
        }
        Self::from_manifests(manifests)
    }

    /// Builds a registry from `(file, manifest)` pairs, validating each.
    /// `file` only names the source in errors and in [`Model::file`].
    pub fn from_manifests(
        manifests: impl IntoIterator<Item = (String, Manifest)>,
    ) -> Result<Self, ModelError> {
        let mut all: Vec<(String, Manifest)> = manifests.into_iter().collect();
        for (file, manifest) in &all {
            manifest.validate().map_err(|source| ModelError::Invalid {
                file: file.clone(),
                source,
            })?;
        }
        // Stable: of two duplicates, the first given is reported first.
        all.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        for pair in all.windows(2) {
            if pair[0].1.name == pair[1].1.name {
                return Err(ModelError::Duplicate {
                    name: pair[0].1.name.clone(),
                    first: pair[0].0.clone(),
                    second: pair[1].0.clone(),
                });
            }
        }
        let models = all
            .into_iter()
            .zip(0u32..)
            .map(|((file, manifest), id)| Model {
                id,
                total_time_ns: manifest.total_time_ns(),
                input_bytes: manifest.input_bytes,
                output_bytes: manifest.output_bytes,
                manifest,
                file,
            })
            .collect();
        Ok(Self { models })
    }

    /// The model with id `id`.
    pub fn get(&self, id: u32) -> Option<&Model> {
        self.models.get(usize::try_from(id).ok()?)
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

    /// Every model with its id, in id (= name) order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u32, &Model)> + '_ {
        self.models.iter().map(|m| (m.id, m))
    }
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

    fn echo() -> Manifest {
        Manifest::parse("echo_small.json", include_str!("../models/echo_small.json")).unwrap()
    }

    fn parse_err(json: &str) -> String {
        chain(&Manifest::parse("bad.json", json).unwrap_err())
    }

    /// `echo_small` as JSON with `f` applied to the parsed value.
    fn edited(f: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v: serde_json::Value =
            serde_json::from_str(include_str!("../models/echo_small.json")).unwrap();
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

    #[test]
    fn shipped_models_match_reef_table1() {
        let reg = ModelRegistry::builtin();
        // REEF (TOCS'25) Table 1: TVM kernel counts, MI50 execution times.
        for (name, kernels, ms) in [
            ("resnet152", 207, 9.1),
            ("vgg19", 71, 3.7),
            ("yolov3", 144, 10.0),
            ("bert_base", 393, 8.1),
            ("gpt2", 440, 13.2),
        ] {
            let (_, m) = reg.lookup(name).unwrap();
            assert_eq!(m.manifest.kernels.len(), kernels, "{name}");
            let want_ns = (ms * 1e6_f64).round() as u64;
            assert_eq!(m.total_time_ns, want_ns, "{name}");
            assert_eq!(us_to_ns(m.manifest.total_time_us), want_ns, "{name}");
            assert!(m.input_bytes > 0 && m.input_bytes < 1 << 20, "{name}");
            assert!(m.output_bytes > 0 && m.output_bytes < 1 << 20, "{name}");
            assert!(m.manifest.provenance.contains("synthetic"), "{name}");
            assert!(m.manifest.provenance.contains("Table 1"), "{name}");
        }
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
                "bert_base",
                "echo_small",
                "gpt2",
                "null",
                "resnet152",
                "vgg19",
                "yolov3"
            ]
        );
        for (id, m) in reg.iter() {
            assert_eq!(m.id, id);
            assert_eq!(reg.get(id).unwrap().name(), m.name());
            assert_eq!(reg.lookup(m.name()).unwrap().0, id);
        }
        assert_eq!(reg.len(), 7);
        assert!(!reg.is_empty());
        assert!(reg.get(7).is_none());
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
        // Catches a manifest added to daemon/models/ but not to BUILTIN.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
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
    fn shipped_block_times_follow_the_occupancy_formula() {
        for (_, m) in ModelRegistry::builtin().iter() {
            for k in &m.manifest.kernels {
                let rounds = mi50_rounds(k) as f64;
                let err = (k.block_time_us * rounds - k.kernel_time_us).abs();
                // block_time_us is rounded to 1 ns.
                assert!(err <= 0.0005 * rounds + 1e-9, "{}: {k:?}", m.name());
            }
        }
    }

    #[test]
    fn shipped_models_have_some_non_idempotent_kernels() {
        let reg = ModelRegistry::builtin();
        for name in ["resnet152", "vgg19", "yolov3", "bert_base", "gpt2"] {
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
        let json = include_str!("../models/echo_small.json");
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
            include_str!("../models/echo_small.json"),
        )
        .unwrap();
        std::fs::write(dir.0.join("null.json"), include_str!("../models/null.json")).unwrap();
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
}
