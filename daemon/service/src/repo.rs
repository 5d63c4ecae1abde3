//! The model repository: what `[models] dir` holds, the versions of each
//! model the daemon serves, and reloading them while it runs.
//!
//! # Files
//!
//! - `NAME.onnx`: a model imported through `sluice_onnx`, with an optional
//!   `NAME.toml` beside it ([`ModelSettings`]: `max_batch`, `precision`,
//!   `priority`, `slo_ms`). It enters the registry with its inputs and
//!   outputs read off the graph ([`sluice_model::ModelIo`]: names, element
//!   types, dimensions at batch 1, a symbolic first dimension as the batch)
//!   and a manifest **estimated** from the graph by
//!   `sluice_nn::graph_manifest`, so the simulated backends can schedule it
//!   too.
//! - `NAME.json`: a manifest (`docs/models.md`), as before; served by the
//!   simulated backends only (it has no graph to run on the CPU).
//!
//! Any other file is ignored. A bad file is an error naming the file. At
//! start-up every error is fatal (the daemon does not start with part of
//! its models); at a reload it is not: the model keeps its old version (or
//! stays absent), the error is logged, returned to `sluice models` and
//! shown by `sluice status` until the next reload succeeds.
//!
//! # Versions and ids
//!
//! [`LiveModels`] holds the snapshot in force ([`Served`]): a
//! [`ModelRegistry`] (what the dispatcher validates requests against and
//! the control plane looks names up in) and, per id, the version loaded
//! ([`LoadedModel`]). A reload builds a whole new snapshot off the request
//! path (on the repository's own thread: an ONNX import may take seconds)
//! and swaps one `Arc`; the dispatcher picks it up at the top of its next
//! pass by comparing one generation counter. A name keeps its id for as
//! long as the daemon runs, across versions and across an unload and a
//! later load; a new name gets the next unused id; ids are never reused
//! for another name.
//!
//! A replaced or unloaded version stays reachable as the id's *previous*
//! version until the next change of that id, or the first change to the
//! repository at least [`RETIRE_GRACE`] later, so a request validated
//! against the old snapshot and handed to the device after the swap still
//! finds a version whose inputs it fits. Requests the device already holds
//! keep their version alive themselves.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error_chain;
use serde::{Deserialize, Serialize};
use shm_proto::Priority;
use sluice_model::{ElemType, ModelEntry, ModelError, ModelIo, ModelRegistry, TensorSpec};

/// Most ids a daemon hands out in its lifetime (names ever loaded); the
/// per-model counters are sized for this many.
pub const MAX_MODEL_IDS: u32 = 4096;

/// Largest `max_batch` a `NAME.toml` may ask for.
pub const MAX_BATCH: u32 = 1024;

/// How long a replaced or unloaded version stays reachable for requests
/// validated against it, at least.
pub const RETIRE_GRACE: Duration = Duration::from_secs(30);

/// Which backend the repository loads for: what a directory may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The simulated GPU: manifests and ONNX models (estimated manifests).
    Sim,
    /// The CPU backend: ONNX models only, `precision = "fp32"`.
    Cpu,
}

/// `NAME.toml`: how a model is served.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSettings {
    /// Largest batch a typed request may carry. Default 1. More than 1
    /// needs a model whose inputs have a symbolic first dimension.
    pub max_batch: u32,
    /// The numeric precision to run at: `"fp32"` (the default), `"fp16"`
    /// or `"bf16"`. The CPU backend runs fp32 only.
    pub precision: String,
    /// The highest class the model's requests are served in: `"real-time"`
    /// (the default: as each request asks) or `"best-effort"` (every
    /// request of the model runs best-effort).
    pub priority: Priority,
    /// A request that carries no deadline gets `received + slo_ms` as its
    /// deadline (it orders it among the others, and a request that could
    /// not start by then is not run). Default: none.
    pub slo_ms: Option<f64>,
}

impl Default for ModelSettings {
    fn default() -> Self {
        Self {
            max_batch: 1,
            precision: "fp32".to_owned(),
            priority: Priority::RealTime,
            slo_ms: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    max_batch: Option<i64>,
    precision: Option<String>,
    priority: Option<String>,
    slo_ms: Option<f64>,
}

/// One version of a model, as served.
#[derive(Debug)]
pub struct LoadedModel {
    /// Lookup name (the file's stem).
    pub name: String,
    /// 1 for the first version loaded, one more for each reload.
    pub version: u32,
    /// Where it came from: the file (and its `NAME.toml`).
    pub source: String,
    /// The graph the CPU backend runs; `None` for a manifest.
    pub graph: Option<Arc<sluice_graph::Graph>>,
    /// Its inputs and outputs.
    pub io: ModelIo,
    /// Its `NAME.toml`.
    pub settings: ModelSettings,
    /// When this version was loaded.
    pub loaded_at: std::time::SystemTime,
}

/// A snapshot of what is served.
#[derive(Debug)]
pub struct Served {
    /// What requests are validated against and names looked up in.
    pub registry: ModelRegistry,
    /// By id: the version in force.
    pub current: BTreeMap<u32, Arc<LoadedModel>>,
    /// By id: the version replaced or unloaded last, and when.
    pub previous: BTreeMap<u32, (Arc<LoadedModel>, Instant)>,
}

impl Served {
    /// A snapshot of `registry`'s models, each at version 1, with no graph
    /// (the built-in models and the CUDA backend's builders).
    pub fn fixed(registry: ModelRegistry) -> Self {
        let current = registry
            .iter()
            .map(|(id, m)| {
                (
                    id,
                    Arc::new(LoadedModel {
                        name: m.name().to_owned(),
                        version: 1,
                        source: m.file.clone(),
                        graph: None,
                        io: m.io.clone(),
                        settings: ModelSettings::default(),
                        loaded_at: std::time::SystemTime::now(),
                    }),
                )
            })
            .collect();
        Self {
            registry,
            current,
            previous: BTreeMap::new(),
        }
    }

    /// Each model served, by name.
    pub fn list(&self) -> Vec<ModelVersion> {
        self.registry
            .iter()
            .filter_map(|(id, m)| {
                let l = self.current.get(&id)?;
                Some(ModelVersion {
                    id,
                    name: m.name().to_owned(),
                    version: l.version,
                    source: l.source.clone(),
                    inputs: l.io.inputs.iter().map(describe).collect(),
                    outputs: l.io.outputs.iter().map(describe).collect(),
                    max_batch: l.io.max_batch,
                    runs_on_cpu: l.graph.is_some(),
                })
            })
            .collect()
    }
}

fn describe(t: &TensorSpec) -> String {
    format!("{}: {}", t.name, t.describe())
}

/// One model in `sluice models list` and `sluice status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelVersion {
    /// Its id (stable across versions).
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Its version: 1 at first load, one more per reload.
    pub version: u32,
    /// Where it came from.
    pub source: String,
    /// Its inputs, `name: type[dims]` with the batch written `N`.
    #[serde(default)]
    pub inputs: Vec<String>,
    /// Its outputs.
    #[serde(default)]
    pub outputs: Vec<String>,
    /// Largest batch a request may carry.
    #[serde(default)]
    pub max_batch: u32,
    /// Whether it has a graph the CPU backend runs (an ONNX model).
    #[serde(default)]
    pub runs_on_cpu: bool,
}

/// Whether the models served can change while the daemon runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reload {
    /// `sluice models load|unload` and SIGHUP re-scan `[models] dir`.
    Supported,
    /// They are refused, with this reason and fix.
    Refused(String),
}

/// The snapshot in force, swapped whole by a reload; read by the
/// dispatcher (one generation load per pass), the backend and the control
/// plane.
#[derive(Debug)]
pub struct LiveModels {
    current: Mutex<Arc<Served>>,
    /// Bumped (Release) after each swap.
    generation: AtomicU64,
    reload: Reload,
    /// The last reload's errors (empty when it succeeded).
    last_errors: Mutex<Vec<String>>,
}

impl LiveModels {
    /// `served`, changeable as `reload` says.
    pub fn new(served: Served, reload: Reload) -> Self {
        Self {
            current: Mutex::new(Arc::new(served)),
            generation: AtomicU64::new(0),
            reload,
            last_errors: Mutex::new(Vec::new()),
        }
    }

    /// Why a daemon on `backend` (a `device.backend` name) refuses
    /// reloads.
    pub fn refusal(backend: &str) -> String {
        format!(
            "device.backend = \"{backend}\" serves the models it started with; restart the \
             daemon to change them, or serve ONNX models with device.backend = \"cpu\", which \
             reloads"
        )
    }

    /// A registry that never changes: reloads are refused with `why`.
    pub fn fixed(registry: ModelRegistry, why: String) -> Self {
        Self::new(Served::fixed(registry), Reload::Refused(why))
    }

    /// The snapshot in force.
    pub fn current(&self) -> Arc<Served> {
        match self.current.lock() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Changes with every swap; compare it to know whether
    /// [`LiveModels::current`] is still the one you hold.
    pub fn generation(&self) -> u64 {
        // SYNC: Acquire pairs with the Release in `install`: whoever sees
        // the new generation then locks and reads the new snapshot.
        self.generation.load(Ordering::Acquire)
    }

    /// Puts `served` in force.
    pub fn install(&self, served: Served) {
        let served = Arc::new(served);
        match self.current.lock() {
            Ok(mut c) => *c = served,
            Err(p) => *p.into_inner() = served,
        }
        // SYNC: Release pairs with the Acquire in `generation`.
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Whether reloads are supported.
    pub fn reload(&self) -> &Reload {
        &self.reload
    }

    /// The last reload's errors.
    pub fn last_errors(&self) -> Vec<String> {
        self.last_errors
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default()
    }

    fn set_errors(&self, errors: Vec<String>) {
        if let Ok(mut e) = self.last_errors.lock() {
            *e = errors;
        }
    }
}

/// A file of the repository could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    /// The directory could not be listed.
    #[error("cannot list the model directory {}; check models.dir", dir.display())]
    ReadDir {
        /// The directory.
        dir: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The directory holds no model.
    #[error(
        "no model in {}: add NAME.onnx files (with an optional NAME.toml) or *.json \
         manifests (docs/onnx.md, docs/models.md)",
        dir.display()
    )]
    Empty {
        /// The directory.
        dir: PathBuf,
    },
    /// A file could not be read.
    #[error("cannot read {}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// An ONNX file did not import.
    #[error("{}: cannot import the ONNX model", file.display())]
    Import {
        /// The file.
        file: PathBuf,
        /// Why.
        #[source]
        source: Box<sluice_onnx::ImportError>,
    },
    /// A graph could not be specialised at batch 1 or its batch size.
    #[error("{}: the graph does not run at batch {batch}", file.display())]
    Graph {
        /// The file.
        file: PathBuf,
        /// The batch.
        batch: u32,
        /// Why.
        #[source]
        source: Box<sluice_graph::GraphError>,
    },
    /// `NAME.toml` is not valid TOML or has an unknown key.
    #[error("{}: {message}", file.display())]
    Settings {
        /// The file.
        file: PathBuf,
        /// The key and value at fault, and the fix.
        message: String,
    },
    /// A `NAME.toml` without its `NAME.onnx`.
    #[error(
        "{}: settings for a model that is not there; add {} or remove the .toml",
        file.display(),
        onnx.display()
    )]
    Orphan {
        /// The `.toml`.
        file: PathBuf,
        /// The missing `.onnx`.
        onnx: PathBuf,
    },
    /// The model's manifest could not be estimated or did not load.
    #[error("{}: cannot estimate the model's manifest for the GPU model", file.display())]
    Manifest {
        /// The file.
        file: PathBuf,
        /// Why.
        #[source]
        source: Box<sluice_nn::builders::ExportError>,
    },
    /// A manifest file (`*.json`) is bad, or two files define one name.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A `*.json` manifest in the directory of the CPU backend.
    #[error(
        "{}: a manifest, which the cpu backend cannot run (it has no graph); remove it from \
         models.dir or serve it with device.backend = \"sim\"",
        file.display()
    )]
    ManifestOnCpu {
        /// The file.
        file: PathBuf,
    },
    /// No file of that name in the directory (`sluice models load NAME`).
    #[error("no model {name:?} in {}: there is no {name}.onnx or {name}.json there", dir.display())]
    NotFound {
        /// The name.
        name: String,
        /// The directory.
        dir: PathBuf,
    },
    /// `sluice models unload NAME` of a model not served.
    #[error("model {name:?} is not loaded; `sluice models list` shows what is")]
    NotLoaded {
        /// The name.
        name: String,
    },
    /// Every id has been handed out.
    #[error(
        "cannot give {name:?} a model id: this daemon has handed out all {MAX_MODEL_IDS}; \
         restart it to number the models afresh"
    )]
    OutOfIds {
        /// The name.
        name: String,
    },
}

/// What a file of the repository is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Onnx,
    Json,
}

/// A model file found in the directory, with what identifies its
/// contents (to see what changed at a re-scan).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Found {
    name: String,
    kind: Kind,
    path: PathBuf,
    /// (device, inode, length, mtime ns) of the file and of its `.toml`.
    stamp: Vec<(u64, u64, u64, i128)>,
}

fn stamp(path: &Path) -> Option<(u64, u64, u64, i128)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((
        m.dev(),
        m.ino(),
        m.len(),
        i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    ))
}

/// Every model file in `dir`, by name. A `.toml` without its `.onnx`, and
/// a name given by both a `.onnx` and a `.json`, are errors.
fn scan(dir: &Path) -> Result<BTreeMap<String, Found>, RepoError> {
    let read_dir = |source| RepoError::ReadDir {
        dir: dir.to_owned(),
        source,
    };
    let mut found: BTreeMap<String, Found> = BTreeMap::new();
    let mut tomls = Vec::new();
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_dir)? {
        paths.push(entry.map_err(read_dir)?.path());
    }
    paths.sort();
    for path in paths {
        let (Some(stem), Some(ext)) = (path.file_stem(), path.extension()) else {
            continue;
        };
        let (Some(stem), Some(ext)) = (stem.to_str(), ext.to_str()) else {
            continue;
        };
        // Half-written files of an editor or a copy are not models.
        if stem.starts_with('.') || !path.is_file() {
            continue;
        }
        let kind = match ext {
            "onnx" => Kind::Onnx,
            "json" => Kind::Json,
            "toml" => {
                tomls.push((stem.to_owned(), path));
                continue;
            }
            _ => continue,
        };
        let Some(s) = stamp(&path) else {
            continue;
        };
        if let Some(other) = found.get(stem) {
            return Err(RepoError::Model(ModelError::Duplicate {
                name: stem.to_owned(),
                first: other.path.display().to_string(),
                second: path.display().to_string(),
            }));
        }
        found.insert(
            stem.to_owned(),
            Found {
                name: stem.to_owned(),
                kind,
                path,
                stamp: vec![s],
            },
        );
    }
    for (stem, toml) in tomls {
        match found.get_mut(&stem) {
            Some(f) if f.kind == Kind::Onnx => {
                f.stamp.extend(stamp(&toml));
            }
            _ => {
                return Err(RepoError::Orphan {
                    onnx: toml.with_extension("onnx"),
                    file: toml,
                });
            }
        }
    }
    Ok(found)
}

/// Reads `NAME.toml` (absent: the defaults).
pub fn read_settings(path: &Path, target: Target) -> Result<ModelSettings, RepoError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ModelSettings::default()),
        Err(source) => {
            return Err(RepoError::Read {
                file: path.to_owned(),
                source,
            });
        }
    };
    let bad = |message: String| RepoError::Settings {
        file: path.to_owned(),
        message,
    };
    let raw: RawSettings = toml::from_str(&text).map_err(|e| {
        let msg = e.message().to_owned();
        if msg.starts_with("unknown field") {
            bad(format!(
                "{msg}; a model's .toml may set only max_batch, precision, priority and slo_ms"
            ))
        } else {
            bad(format!("not valid model settings: {msg}"))
        }
    })?;
    let mut s = ModelSettings::default();
    if let Some(b) = raw.max_batch {
        if !(1..=i64::from(MAX_BATCH)).contains(&b) {
            return Err(bad(format!(
                "max_batch = {b} is out of range; use 1 to {MAX_BATCH}"
            )));
        }
        s.max_batch = b as u32;
    }
    if let Some(p) = raw.precision {
        match (p.as_str(), target) {
            ("fp32", _) => {}
            ("fp16" | "bf16", Target::Sim) => {}
            ("fp16" | "bf16", Target::Cpu) => {
                return Err(bad(format!(
                    "precision = {p:?}: the cpu backend runs fp32 only; set precision = \
                     \"fp32\" or remove the key"
                )));
            }
            _ => {
                return Err(bad(format!(
                    "precision = {p:?} is not a precision; use \"fp32\" (the cpu backend runs \
                     fp32 only), \"fp16\" or \"bf16\""
                )));
            }
        }
        s.precision = p;
    }
    if let Some(p) = raw.priority {
        s.priority = match p.as_str() {
            "real-time" => Priority::RealTime,
            "best-effort" => Priority::BestEffort,
            _ => {
                return Err(bad(format!(
                    "priority = {p:?} is not a class; use \"real-time\" or \"best-effort\""
                )));
            }
        };
    }
    if let Some(ms) = raw.slo_ms {
        if !(ms.is_finite() && ms > 0.0 && ms <= 3_600_000.0) {
            return Err(bad(format!(
                "slo_ms = {ms} is out of range; use a number of milliseconds above 0 and at \
                 most 3600000"
            )));
        }
        s.slo_ms = Some(ms);
    }
    Ok(s)
}

fn elem_type(d: sluice_graph::DType) -> ElemType {
    use sluice_graph::DType;
    match d {
        DType::F32 => ElemType::F32,
        DType::F16 => ElemType::F16,
        DType::BF16 => ElemType::BF16,
        DType::I64 => ElemType::I64,
        DType::I32 => ElemType::I32,
        DType::Bool => ElemType::Bool,
    }
}

/// What loading one file gives: the registry's entry and the version's
/// contents (its version number is given when it is put in force).
struct Loaded {
    entry: ModelEntry,
    graph: Option<Arc<sluice_graph::Graph>>,
    settings: ModelSettings,
    source: String,
}

/// Imports `found` for `target`.
fn load_file(found: &Found, target: Target) -> Result<Loaded, RepoError> {
    match found.kind {
        Kind::Json => {
            if target == Target::Cpu {
                return Err(RepoError::ManifestOnCpu {
                    file: found.path.clone(),
                });
            }
            let json = std::fs::read_to_string(&found.path).map_err(|source| RepoError::Read {
                file: found.path.clone(),
                source,
            })?;
            let file = found.path.display().to_string();
            let (manifest, memory) = sluice_model::Manifest::parse_with_memory(&file, &json)?;
            let io = ModelIo::untyped(manifest.input_bytes, manifest.output_bytes);
            Ok(Loaded {
                entry: ModelEntry {
                    file: file.clone(),
                    manifest,
                    memory,
                    io,
                },
                graph: None,
                settings: ModelSettings::default(),
                source: file,
            })
        }
        Kind::Onnx => load_onnx(&found.path, &found.name, target),
    }
}

fn load_onnx(path: &Path, name: &str, target: Target) -> Result<Loaded, RepoError> {
    let toml = path.with_extension("toml");
    let settings = read_settings(&toml, target)?;
    let model = sluice_onnx::load(path, &sluice_onnx::Options::default()).map_err(|e| {
        RepoError::Import {
            file: path.to_owned(),
            source: Box::new(e),
        }
    })?;
    let graph = model.graph;
    let graph_err = |batch: u32| {
        move |e| RepoError::Graph {
            file: path.to_owned(),
            batch,
            source: Box::new(e),
        }
    };
    let one = graph.specialize(1).map_err(graph_err(1))?;
    if settings.max_batch > 1 && !graph.has_batch() {
        return Err(RepoError::Settings {
            file: toml.clone(),
            message: format!(
                "max_batch = {} but the model's inputs have a fixed first dimension, so it \
                 takes batch 1 only; export it with a symbolic batch dimension, or set \
                 max_batch = 1",
                settings.max_batch
            ),
        });
    }
    let inputs: Vec<TensorSpec> = graph
        .inputs()
        .iter()
        .map(|i| TensorSpec {
            name: i.name.clone(),
            elem: elem_type(i.dtype),
            dims: i
                .shape
                .iter()
                .map(|d| match d {
                    sluice_graph::Dim::Fixed(n) => *n as u64,
                    sluice_graph::Dim::Batch => 1,
                })
                .collect(),
            batched: matches!(i.shape.first(), Some(sluice_graph::Dim::Batch)),
        })
        .collect();
    // An output is batched when its first dimension grows with the batch:
    // compared at batch 1 and batch 2.
    let two = if graph.has_batch() {
        Some(graph.specialize(2).map_err(graph_err(2))?)
    } else {
        None
    };
    let mut outputs = Vec::new();
    for o in one.outputs() {
        let (dtype, shape) = one.info(o.id).unwrap_or((sluice_graph::DType::F32, &[]));
        let batched = two.as_ref().is_some_and(|t| {
            let s2 = t.info(o.id).map(|(_, s)| s.to_vec()).unwrap_or_default();
            shape.first() == Some(&1) && s2.first() == Some(&2) && s2.get(1..) == shape.get(1..)
        });
        if settings.max_batch > 1 && !batched {
            return Err(RepoError::Settings {
                file: toml.clone(),
                message: format!(
                    "max_batch = {} but output {:?} does not grow with the batch (shape {:?} at \
                     batch 1); set max_batch = 1",
                    settings.max_batch, o.name, shape
                ),
            });
        }
        outputs.push(TensorSpec {
            name: o.name.clone(),
            elem: elem_type(dtype),
            dims: shape.iter().map(|&d| d as u64).collect(),
            batched,
        });
    }
    let source = if toml.is_file() {
        format!("{} (+ {})", path.display(), toml.display())
    } else {
        path.display().to_string()
    };
    let m = sluice_nn::graph_manifest::manifest(&one, name, &path.display().to_string()).map_err(
        |e| RepoError::Manifest {
            file: path.to_owned(),
            source: Box::new(e),
        },
    )?;
    let io = ModelIo {
        inputs,
        outputs,
        max_batch: settings.max_batch,
    };
    Ok(Loaded {
        entry: ModelEntry {
            file: path.display().to_string(),
            manifest: m.manifest,
            memory: m.memory,
            io,
        },
        graph: Some(Arc::new(graph)),
        settings,
        source,
    })
}

/// One model's change in a reload: its new version (and the file it came
/// from), or `None` to unload it.
type Change = (String, Option<(Found, Loaded)>);

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReloadReport {
    /// Models loaded for the first time (or again after an unload).
    pub loaded: Vec<String>,
    /// Models replaced by a new version.
    pub reloaded: Vec<String>,
    /// Models no longer served.
    pub unloaded: Vec<String>,
    /// Files that failed; their models keep the version they had.
    pub errors: Vec<String>,
    /// What is served now (the first of them, by name, when they do not
    /// all fit one control frame: see `models_omitted`).
    pub models: Vec<ModelVersion>,
    /// Models served but left out of `models` to keep the reply within a
    /// control frame.
    #[serde(default)]
    pub models_omitted: usize,
}

impl ReloadReport {
    /// The report as JSON of at most `budget` bytes: models are left out
    /// from the end (and counted in `models_omitted`) until it fits.
    pub fn to_json_within(mut self, budget: usize) -> String {
        loop {
            let json = serde_json::to_string(&self).unwrap_or_default();
            if json.len() <= budget || self.models.is_empty() {
                return json;
            }
            let drop = self.models.len().div_ceil(8);
            self.models.truncate(self.models.len() - drop);
            self.models_omitted += drop;
        }
    }
}

/// `[models] dir` and the ids and versions of what it served: the state
/// reloads work on. Owned by one thread at a time (the repository's).
#[derive(Debug)]
pub struct ModelRepo {
    dir: PathBuf,
    target: Target,
    live: Arc<LiveModels>,
    /// Every name ever loaded, with its id.
    ids: BTreeMap<String, u32>,
    next_id: u32,
    /// What each served model was loaded from.
    files: BTreeMap<String, Found>,
}

impl ModelRepo {
    /// Loads every model of `dir`; any bad file is an error (start-up is
    /// all or nothing). Ids are given in name order, from 0. The live
    /// table it returns supports reloads; for a backend that does not,
    /// take its registry ([`Served::registry`]) and drop the repository.
    pub fn open(dir: &Path, target: Target) -> Result<Self, RepoError> {
        let found = scan(dir)?;
        if found.is_empty() {
            return Err(RepoError::Empty {
                dir: dir.to_owned(),
            });
        }
        let mut ids = BTreeMap::new();
        let mut entries = Vec::new();
        let mut current = BTreeMap::new();
        for (id, (name, f)) in (0u32..).zip(&found) {
            let l = load_file(f, target)?;
            ids.insert(name.clone(), id);
            current.insert(id, Arc::new(version_of(name, 1, &l)));
            entries.push((id, l.entry));
        }
        let registry = ModelRegistry::from_entries_with_ids(entries)?;
        let next_id = found.len() as u32;
        let served = Served {
            registry,
            current,
            previous: BTreeMap::new(),
        };
        Ok(Self {
            dir: dir.to_owned(),
            target,
            live: Arc::new(LiveModels::new(served, Reload::Supported)),
            ids,
            next_id,
            files: found,
        })
    }

    /// The live table.
    pub fn live(&self) -> &Arc<LiveModels> {
        &self.live
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Re-scans the directory: new files are loaded, changed ones loaded
    /// as a new version, models whose file is gone unloaded. A file that
    /// fails keeps its model's version in force (or the model absent);
    /// the errors are in the report.
    pub fn rescan(&mut self) -> ReloadReport {
        let mut report = ReloadReport::default();
        let found = match scan(&self.dir) {
            Ok(f) => f,
            Err(e) => {
                report.errors.push(error_chain(&e));
                return self.finish(report, None);
            }
        };
        let mut changes: Vec<Change> = Vec::new();
        for (name, f) in &found {
            if self.files.get(name) == Some(f) {
                continue;
            }
            match load_file(f, self.target) {
                Ok(l) => changes.push((name.clone(), Some((f.clone(), l)))),
                Err(e) => report.errors.push(error_chain(&e)),
            }
        }
        for name in self.files.keys() {
            if !found.contains_key(name) {
                changes.push((name.clone(), None));
            }
        }
        self.finish(report, Some(changes))
    }

    /// Loads (or reloads, as a new version, even if unchanged) `name`.
    pub fn load(&mut self, name: &str) -> ReloadReport {
        let mut report = ReloadReport::default();
        let change = scan(&self.dir).and_then(|found| {
            let f = found.get(name).ok_or_else(|| RepoError::NotFound {
                name: name.to_owned(),
                dir: self.dir.clone(),
            })?;
            Ok((f.clone(), load_file(f, self.target)?))
        });
        match change {
            Ok(c) => self.finish(report, Some(vec![(name.to_owned(), Some(c))])),
            Err(e) => {
                report.errors.push(error_chain(&e));
                self.finish(report, None)
            }
        }
    }

    /// Unloads `name`: new requests for it are refused (`UNKNOWN_MODEL`);
    /// those already accepted complete on the version they were accepted
    /// for.
    pub fn unload(&mut self, name: &str) -> ReloadReport {
        if !self.files.contains_key(name) {
            let mut report = ReloadReport::default();
            report.errors.push(error_chain(&RepoError::NotLoaded {
                name: name.to_owned(),
            }));
            return self.finish(report, None);
        }
        self.finish(ReloadReport::default(), Some(vec![(name.to_owned(), None)]))
    }

    /// What is served now.
    pub fn list(&mut self) -> ReloadReport {
        self.finish(ReloadReport::default(), None)
    }

    /// Applies `changes` (a name with its new version, or `None` to
    /// unload it) as one new snapshot, and fills in the report.
    fn finish(&mut self, mut report: ReloadReport, changes: Option<Vec<Change>>) -> ReloadReport {
        let old = self.live.current();
        let Some(changes) = changes.filter(|c| !c.is_empty()) else {
            if !report.errors.is_empty() {
                for e in &report.errors {
                    tracing::error!("model repository: {e}; the version in force is kept");
                }
                self.live.set_errors(report.errors.clone());
            }
            report.models = old.list();
            return report;
        };
        let now = Instant::now();
        let mut current = old.current.clone();
        let mut previous: BTreeMap<u32, (Arc<LoadedModel>, Instant)> = old
            .previous
            .iter()
            .filter(|(_, (_, at))| now.duration_since(*at) < RETIRE_GRACE)
            .map(|(id, p)| (*id, p.clone()))
            .collect();
        let mut entries: BTreeMap<u32, ModelEntry> = old
            .registry
            .iter()
            .map(|(id, m)| (id, ModelEntry::from(m.clone())))
            .collect();
        let mut files = self.files.clone();
        let mut ids = self.ids.clone();
        let mut next_id = self.next_id;
        let mut applied = Vec::new();
        for (name, change) in changes {
            match change {
                Some((found, l)) => {
                    let id = match ids.get(&name) {
                        Some(&id) => id,
                        None if next_id >= MAX_MODEL_IDS => {
                            report
                                .errors
                                .push(error_chain(&RepoError::OutOfIds { name: name.clone() }));
                            continue;
                        }
                        None => {
                            let id = next_id;
                            next_id += 1;
                            ids.insert(name.clone(), id);
                            id
                        }
                    };
                    let version = current
                        .get(&id)
                        .or_else(|| previous.get(&id).map(|(p, _)| p))
                        .map_or(1, |v| v.version + 1);
                    let v = Arc::new(version_of(&name, version, &l));
                    match current.insert(id, v) {
                        Some(was) => {
                            previous.insert(id, (was, now));
                            applied.push((name.clone(), 'r', version));
                        }
                        None => applied.push((name.clone(), 'l', version)),
                    }
                    entries.insert(id, l.entry);
                    files.insert(name, found);
                }
                None => {
                    let Some(&id) = ids.get(&name) else {
                        continue;
                    };
                    if let Some(was) = current.remove(&id) {
                        previous.insert(id, (was, now));
                    }
                    entries.remove(&id);
                    files.remove(&name);
                    applied.push((name, 'u', 0));
                }
            }
        }
        let registry = match ModelRegistry::from_entries_with_ids(entries) {
            Ok(r) => r,
            Err(e) => {
                report.errors.push(error_chain(&e));
                for e in &report.errors {
                    tracing::error!("model repository: {e}; the version in force is kept");
                }
                self.live.set_errors(report.errors.clone());
                report.models = old.list();
                return report;
            }
        };
        for (name, what, version) in applied {
            match what {
                'l' => {
                    tracing::info!(model = %name, version, "model loaded");
                    report.loaded.push(name);
                }
                'r' => {
                    tracing::info!(model = %name, version, "model reloaded");
                    report.reloaded.push(name);
                }
                _ => {
                    tracing::info!(model = %name, "model unloaded");
                    report.unloaded.push(name);
                }
            }
        }
        for e in &report.errors {
            tracing::error!("model repository: {e}; the version in force is kept");
        }
        self.files = files;
        self.ids = ids;
        self.next_id = next_id;
        let served = Served {
            registry,
            current,
            previous,
        };
        report.models = served.list();
        self.live.install(served);
        self.live.set_errors(report.errors.clone());
        report
    }
}

fn version_of(name: &str, version: u32, l: &Loaded) -> LoadedModel {
    LoadedModel {
        name: name.to_owned(),
        version,
        source: l.source.clone(),
        graph: l.graph.clone(),
        io: l.entry.io.clone(),
        settings: l.settings.clone(),
        loaded_at: std::time::SystemTime::now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_onnx::test_models::gemm;

    /// A fresh directory under the system's temp dir, removed on drop.
    pub(crate) struct TempDir(pub(crate) PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> Self {
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "sluice-repo-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }
        pub(crate) fn write(&self, file: &str, bytes: impl AsRef<[u8]>) {
            // Write aside and rename, as an operator's deploy would.
            let tmp = self.0.join(format!(".{file}.tmp"));
            std::fs::write(&tmp, bytes).unwrap();
            std::fs::rename(&tmp, self.0.join(file)).unwrap();
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A 4 → 3 Gemm whose weights are all `w`.
    pub(crate) fn fc(w: f32, batched: bool) -> Vec<u8> {
        gemm(4, 3, &[w; 12], &[0.5, -0.5, 1.0], batched)
    }

    fn open_err(dir: &TempDir, target: Target) -> String {
        match ModelRepo::open(&dir.0, target) {
            Ok(_) => panic!("expected an error"),
            Err(e) => error_chain(&e),
        }
    }

    #[test]
    fn onnx_models_enter_with_their_tensors_settings_and_an_estimated_manifest() {
        let dir = TempDir::new("scan");
        dir.write("fc.onnx", fc(1.0, true));
        dir.write(
            "fc.toml",
            "max_batch = 4\nslo_ms = 5.0\npriority = \"best-effort\"\n",
        );
        dir.write("fixed.onnx", fc(2.0, false));
        dir.write("notes.txt", "not a model");
        let repo = ModelRepo::open(&dir.0, Target::Cpu).unwrap();
        let served = repo.live().current();
        let names: Vec<&str> = served.registry.iter().map(|(_, m)| m.name()).collect();
        assert_eq!(names, ["fc", "fixed"]);
        let (id, m) = served.registry.lookup("fc").unwrap();
        assert_eq!(id, 0);
        assert_eq!(m.io.max_batch, 4);
        assert_eq!(m.io.inputs.len(), 1);
        assert_eq!(m.io.inputs[0].name, "x");
        assert_eq!(m.io.inputs[0].elem, ElemType::F32);
        assert_eq!(m.io.inputs[0].dims, [1, 4]);
        assert!(m.io.inputs[0].batched);
        assert_eq!(m.io.outputs[0].dims, [1, 3]);
        assert!(m.io.outputs[0].batched);
        assert_eq!(m.input_bytes, 16);
        assert_eq!(m.output_bytes, 12);
        assert!(
            m.manifest.provenance.to_lowercase().contains("estimate"),
            "{}",
            m.manifest.provenance
        );
        let v = &served.current[&id];
        assert_eq!(v.version, 1);
        assert_eq!(v.settings.max_batch, 4);
        assert_eq!(v.settings.slo_ms, Some(5.0));
        assert_eq!(v.settings.priority, Priority::BestEffort);
        assert!(v.source.contains("fc.onnx") && v.source.contains("fc.toml"));
        assert!(v.graph.is_some());
        let (_, fixed) = served.registry.lookup("fixed").unwrap();
        assert!(!fixed.io.inputs[0].batched);
        assert_eq!(fixed.io.max_batch, 1);
        // The simulated backends take ONNX models and manifests side by side.
        dir.write(
            "echo_small.json",
            ModelRegistry::builtin_json("echo_small").unwrap(),
        );
        let sim = ModelRepo::open(&dir.0, Target::Sim).unwrap();
        assert_eq!(sim.live().current().registry.len(), 3);
        let e = open_err(&dir, Target::Cpu);
        assert!(
            e.contains("echo_small.json") && e.contains("device.backend = \"sim\""),
            "{e}"
        );
    }

    #[test]
    fn bad_settings_name_the_file_the_key_and_the_fix() {
        let dir = TempDir::new("toml");
        dir.write("fc.onnx", fc(1.0, true));
        let cases = [
            ("max_batchh = 2", "unknown field `max_batchh`"),
            ("max_batch = 0", "max_batch = 0 is out of range"),
            ("precision = \"fp16\"", "the cpu backend runs fp32 only"),
            ("precision = \"int4\"", "\"int4\" is not a precision"),
            ("priority = \"urgent\"", "\"urgent\" is not a class"),
            ("slo_ms = -1.0", "slo_ms = -1 is out of range"),
            ("max_batch = [", "not valid model settings"),
        ];
        for (toml, want) in cases {
            dir.write("fc.toml", toml);
            let e = open_err(&dir, Target::Cpu);
            assert!(e.contains("fc.toml") && e.contains(want), "{toml}: {e}");
        }
        // fp16 is for the simulated backends only.
        dir.write("fc.toml", "precision = \"fp16\"");
        ModelRepo::open(&dir.0, Target::Sim).unwrap();
        // A batch on a model with a fixed first dimension.
        dir.write("fc.onnx", fc(1.0, false));
        dir.write("fc.toml", "max_batch = 2");
        let e = open_err(&dir, Target::Cpu);
        assert!(e.contains("fixed first dimension"), "{e}");
        // Settings without their model.
        std::fs::remove_file(dir.0.join("fc.onnx")).unwrap();
        let e = open_err(&dir, Target::Cpu);
        assert!(e.contains("fc.toml") && e.contains("fc.onnx"), "{e}");
    }

    #[test]
    fn a_bad_onnx_file_is_fatal_at_start_and_keeps_the_old_version_at_reload() {
        let dir = TempDir::new("bad");
        dir.write("fc.onnx", b"\x08\x07garbage, not a protobuf".as_slice());
        let e = open_err(&dir, Target::Cpu);
        assert!(e.contains("fc.onnx") && e.contains("cannot import"), "{e}");

        dir.write("fc.onnx", fc(1.0, true));
        let mut repo = ModelRepo::open(&dir.0, Target::Cpu).unwrap();
        dir.write("fc.onnx", b"garbage".as_slice());
        let report = repo.rescan();
        assert_eq!(report.errors.len(), 1, "{report:?}");
        assert!(report.errors[0].contains("fc.onnx"), "{report:?}");
        assert!(report.reloaded.is_empty() && report.unloaded.is_empty());
        assert_eq!(report.models.len(), 1);
        assert_eq!(report.models[0].version, 1);
        assert_eq!(repo.live().last_errors(), report.errors);
        let served = repo.live().current();
        assert!(served.current[&0].graph.is_some());
        // Fixed: the next scan loads it as version 2 and clears the error.
        dir.write("fc.onnx", fc(3.0, true));
        let report = repo.rescan();
        assert_eq!(report.reloaded, ["fc"]);
        assert!(report.errors.is_empty());
        assert_eq!(report.models[0].version, 2);
        assert!(repo.live().last_errors().is_empty());
        // An explicit load of a broken file fails and keeps version 2.
        dir.write("fc.toml", "max_batch = \"four\"");
        let report = repo.load("fc");
        assert!(report.errors[0].contains("fc.toml"), "{report:?}");
        assert_eq!(repo.live().current().current[&0].version, 2);
    }

    #[test]
    fn a_report_too_large_for_a_frame_leaves_models_out_and_says_how_many() {
        let model = |i: u32| ModelVersion {
            id: i,
            name: format!("m{i}"),
            version: 1,
            source: "x".repeat(200),
            inputs: vec![],
            outputs: vec![],
            max_batch: 1,
            runs_on_cpu: true,
        };
        let report = ReloadReport {
            models: (0..100).map(model).collect(),
            ..ReloadReport::default()
        };
        let whole = report.clone().to_json_within(usize::MAX);
        let cut = report.to_json_within(whole.len() / 2);
        assert!(cut.len() <= whole.len() / 2);
        let back: ReloadReport = serde_json::from_str(&cut).unwrap();
        assert_eq!(back.models.len() + back.models_omitted, 100);
        assert!(back.models_omitted > 0);
        assert_eq!(back.models[0].name, "m0");
    }

    #[test]
    fn ids_are_stable_across_versions_and_never_reused() {
        let dir = TempDir::new("ids");
        dir.write("a.onnx", fc(1.0, true));
        dir.write("b.onnx", fc(2.0, true));
        let mut repo = ModelRepo::open(&dir.0, Target::Cpu).unwrap();
        let gen0 = repo.live().generation();
        let id = |repo: &ModelRepo, name: &str| {
            repo.live()
                .current()
                .registry
                .lookup(name)
                .map(|(id, _)| id)
        };
        assert_eq!((id(&repo, "a"), id(&repo, "b")), (Some(0), Some(1)));
        // Unchanged files: a re-scan changes nothing.
        let r = repo.rescan();
        assert!(r.loaded.is_empty() && r.reloaded.is_empty() && r.unloaded.is_empty());
        assert_eq!(repo.live().generation(), gen0);
        // An explicit load is a new version even if unchanged.
        let r = repo.load("a");
        assert_eq!(r.reloaded, ["a"]);
        assert_eq!(id(&repo, "a"), Some(0));
        assert_eq!(repo.live().current().current[&0].version, 2);
        assert_eq!(repo.live().current().previous[&0].0.version, 1);
        // Unload a; a new name gets a new id, not a's.
        let r = repo.unload("a");
        assert_eq!(r.unloaded, ["a"]);
        assert_eq!(id(&repo, "a"), None);
        assert!(repo.live().current().registry.get(0).is_none());
        dir.write("c.onnx", fc(3.0, true));
        let r = repo.rescan();
        // a's file is still there: the scan loads it back (with its id),
        // and c is new.
        assert_eq!(r.loaded, ["a", "c"]);
        assert_eq!(id(&repo, "c"), Some(2));
        assert_eq!(id(&repo, "a"), Some(0));
        assert_eq!(repo.live().current().current[&0].version, 3);
        // A removed file is unloaded by the scan.
        std::fs::remove_file(dir.0.join("b.onnx")).unwrap();
        let r = repo.rescan();
        assert_eq!(r.unloaded, ["b"]);
        assert_eq!(id(&repo, "b"), None);
        assert_eq!(repo.live().current().registry.id_bound(), 3);
        // Unloading what is not there, or loading what is not there, fails.
        assert!(repo.unload("b").errors[0].contains("not loaded"));
        assert!(repo.load("zzz").errors[0].contains("no model \"zzz\""));
        assert!(repo.live().generation() > gen0);
    }
}
