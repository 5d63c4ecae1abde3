//! InSS's interference-aware latency analytical model (§4.1–4.2): plain
//! numbers in, predictions out; no device behind it.
//!
//! **Inputs**, per model ([`ModelProfile`]): the model run alone at a grid
//! of configurations ([`AlonePoint`]: InSS profiles 16, 4 shares × 4
//! batches), each with the three steps' times (upload, compute, feedback)
//! and the L2 and DRAM utilisation; co-run observations
//! ([`CoRunObservation`]: the model's compute time with other models in the
//! other partitions; InSS runs "three sets of multiple parallel runs"); and
//! its memory `m_i(b)` ([`MemoryUse`]).
//!
//! **Fitted parts**, per model ([`FittedModel`]), on one GPU type:
//!
//! - PCIe terms `t_d = α_d·b + β_d`, `t_r = α_r·b + β_r`: least squares
//!   over the alone points ([`Line::fit`]); InSS gives these coefficients
//!   only the GPU's subscript (its models all take 224 × 224 images); here
//!   they are per model, whose inputs may differ. Negative predictions are
//!   taken as 0.
//! - `o_r = LWR(b, ρ·C)`: locally weighted regression over the alone
//!   compute times ([`lwr`] says exactly how), floored at the smallest
//!   profiled compute time (the grid includes batch 1 on the whole GPU, the
//!   fastest configuration a model has, so anything below it is an
//!   extrapolation artefact).
//! - `l = α_c·(b/o_r) + β_c`, `e = α_u·(b/o_r) + β_u`: least squares over
//!   the alone points, throughput `b/compute_ms` (batches·items per ms) on
//!   the x axis; predictions are clamped to `[0, 1]` (utilisations).
//! - `α_cache`, `α_dram` ≥ 0: least squares of
//!   `t_c/o − 1 = α_cache·Σ_{others} l + α_dram·Σ_{others} e` over the
//!   co-run observations ([`fit::nonneg_2`]), where `o` is the model's
//!   measured alone time at the same configuration when the observation
//!   carries it, else `o_r`, and the co-runners' `l`, `e` are the fitted
//!   lines' predictions at their own batch and SMs (as at prediction time).
//!   A degenerate coefficient (its utilisation 0 in every observation, no
//!   observations) is 0, and [`Coef::status`] says so.
//!
//! **Predictions** ([`LatencyModel`], an [`ExecModel`]): `t_inf = t_d + t_c
//! + t_r` with `t_c = o_r·(1 + α_cache·Σ l + α_dram·Σ e)` over the
//! co-runners; [`LatencyModel::without_interference`] drops the factor
//! (InSS-ni). [`task_latency_ms`] is Eq. 3.

pub mod error;
pub mod fit;
pub mod lwr;
pub mod task;

use serde::{Deserialize, Serialize};

pub use error::{FitError, LatencyError};
pub use fit::{Coef, CoefStatus, Line};
pub use lwr::{DEFAULT_SPAN, Lwr, LwrConfig, LwrFeatures, Span};
pub use task::task_latency_ms;

use crate::types::{CoRunner, ExecModel};

/// A model run alone at one configuration: one of InSS §4.1's 16 profile
/// points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AlonePoint {
    /// Batch size `b`.
    pub batch: u32,
    /// SMs of the partition (`ρ·C`, as MPS rounds it: [`crate::sms_of_pct`]).
    pub sms: u32,
    /// Host-to-device copy of the batch's inputs, ms (`t_d`).
    pub upload_ms: f64,
    /// GPU compute of the batch, ms (`o_r` at this point).
    pub compute_ms: f64,
    /// Device-to-host copy of the batch's results, ms (`t_r`).
    pub feedback_ms: f64,
    /// L2 utilisation, fraction of 1 (`l`).
    pub l2_util: f64,
    /// DRAM utilisation, fraction of 1 (`e`).
    pub dram_util: f64,
}

/// A model's compute time while other models ran in the other partitions
/// of the same GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct CoRunObservation {
    /// The observed model's batch.
    pub batch: u32,
    /// The observed model's SMs.
    pub sms: u32,
    /// What ran beside it ([`CoRunner::model`] indexes the profiles given
    /// to [`LatencyModel::fit`]).
    pub others: Vec<CoRunner>,
    /// Its compute time beside them, ms.
    pub compute_ms: f64,
    /// Its compute time alone at the same batch and SMs, ms, when measured;
    /// otherwise `o_r` stands in.
    pub alone_compute_ms: Option<f64>,
}

/// `m_i(b) = fixed_mb + per_batch_mb·b`: the memory of a model served at
/// batch `b`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MemoryUse {
    /// What does not grow with the batch (weights), MB.
    pub fixed_mb: f64,
    /// What grows with each item of the batch (activations), MB.
    pub per_batch_mb: f64,
}

impl MemoryUse {
    /// `m(b)`, MB.
    pub fn at(&self, batch: u32) -> f64 {
        self.fixed_mb + self.per_batch_mb * f64::from(batch)
    }
}

/// A model's wave-count estimate (`sluice_gpusim::lbp::waves_ns`: its
/// kernels' blocks in whole rounds over the SMs, each round its wave time)
/// for every batch `1..=max_batch` and every SM count `1..=gpu_sms`, ms: the
/// prior [`LwrFeatures::LogBatchLogSmsOverWaves`] divides by. Known without
/// running the model: from its kernels' grids and wave times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaveTable {
    /// Largest batch in the table.
    pub max_batch: u32,
    /// SMs of the GPU: the table's columns are 1..=gpu_sms.
    pub gpu_sms: u32,
    /// Row-major, batch `b` and SMs `s` at `(b − 1) × gpu_sms + s − 1`.
    pub ms: Vec<f64>,
}

/// Batches a [`WaveTable`] covers: the largest any planner serves.
pub const WAVE_TABLE_BATCHES: u32 = 32;

impl WaveTable {
    /// The estimate at `batch` on `sms`, ms: SMs clamped to `1..=gpu_sms`;
    /// past `max_batch`, the last row grown in proportion to the batch.
    pub fn at(&self, batch: u32, sms: u32) -> f64 {
        let s = sms.clamp(1, self.gpu_sms.max(1)) as usize;
        let b = batch.clamp(1, self.max_batch.max(1));
        let v = self.ms[(b as usize - 1) * self.gpu_sms as usize + s - 1];
        v * f64::from(batch.max(1)) / f64::from(b)
    }

    /// `Err` with what is wrong when the table is not one positive, finite
    /// time per batch and SM count.
    fn check(&self) -> Result<(), String> {
        if self.max_batch == 0 || self.gpu_sms == 0 {
            return Err(format!(
                "it has {} batches and {} SMs",
                self.max_batch, self.gpu_sms
            ));
        }
        let want = self.max_batch as usize * self.gpu_sms as usize;
        if self.ms.len() != want {
            return Err(format!("it has {} entries, not {want}", self.ms.len()));
        }
        if let Some(i) = self.ms.iter().position(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(format!(
                "batch {} on {} SMs is {} ms",
                i / self.gpu_sms as usize + 1,
                i % self.gpu_sms as usize + 1,
                self.ms[i]
            ));
        }
        Ok(())
    }
}

/// Everything measured for one model on one GPU type.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelProfile {
    /// The model's name.
    pub name: String,
    /// Alone points (InSS: 4 shares × 4 batches).
    pub alone: Vec<AlonePoint>,
    /// Co-run observations for the interference coefficients.
    pub corun: Vec<CoRunObservation>,
    /// Its memory.
    pub memory: MemoryUse,
    /// Its wave-count estimate: needed by the wave-aware fit only.
    pub waves: Option<WaveTable>,
}

/// One model's fitted parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FittedModel {
    /// The model's name.
    pub name: String,
    /// `t_d = α_d·b + β_d`, ms.
    pub upload: Line,
    /// `t_r = α_r·b + β_r`, ms.
    pub feedback: Line,
    /// `o_r = LWR(b, SMs)`, ms (over [`FittedModel::waves`] when the fit
    /// is wave-aware).
    pub compute: Lwr,
    /// The wave-count estimate `o_r` is a multiple of, for the wave-aware
    /// fit ([`LwrFeatures::LogBatchLogSmsOverWaves`]); `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waves: Option<WaveTable>,
    /// For the wave-aware fit: `o_r` before its floor at every batch and
    /// SM count of `waves`, each the least raw prediction at that SM count
    /// or fewer (a larger partition never runs slower; the estimate's steps
    /// times a smooth ratio can rise between SM counts, which the planners'
    /// tables refuse). Not serialised: built by [`LatencyModel::fit`] and
    /// [`LatencyModel::prepare`]; without it the same minimum is computed
    /// per call.
    #[serde(skip)]
    monotone_ms: Vec<f64>,
    /// The floor of `o_r`: the smallest profiled compute time, ms.
    pub compute_floor_ms: f64,
    /// `l = α_c·(b/o_r) + β_c`.
    pub l2: Line,
    /// `e = α_u·(b/o_r) + β_u`.
    pub dram: Line,
    /// `α_cache`.
    pub alpha_cache: Coef,
    /// `α_dram`.
    pub alpha_dram: Coef,
    /// Co-run observations the two were fitted on.
    pub corun_observations: usize,
    /// Root-mean-square residual of that fit (of `t_c/o − 1`).
    pub interference_rms: f64,
    /// `m(b)`.
    pub memory: MemoryUse,
}

impl FittedModel {
    /// `o_r(b, SMs)`, ms: the compute time alone.
    pub fn compute_alone_ms(&self, batch: u32, sms: u32) -> f64 {
        let o = match &self.waves {
            None => self.compute.predict(f64::from(batch), f64::from(sms)),
            Some(w) => {
                let s = sms.clamp(1, w.gpu_sms.max(1));
                let i = (batch.max(1) as usize - 1) * w.gpu_sms as usize + s as usize - 1;
                match self.monotone_ms.get(i) {
                    Some(&v) if batch <= w.max_batch => v,
                    _ => (1..=s)
                        .map(|s| self.over_waves_ms(w, batch, s))
                        .fold(f64::INFINITY, f64::min),
                }
            }
        };
        o.max(self.compute_floor_ms)
    }

    /// The wave-aware fit's raw prediction: the regressed ratio times the
    /// estimate.
    fn over_waves_ms(&self, w: &WaveTable, batch: u32, sms: u32) -> f64 {
        self.compute.predict(f64::from(batch), f64::from(sms)) * w.at(batch, sms)
    }

    /// Builds [`FittedModel::monotone_ms`] (nothing without a wave table).
    fn prepare(&mut self) {
        let Some(w) = &self.waves else {
            self.monotone_ms.clear();
            return;
        };
        let mut t = Vec::with_capacity(w.ms.len());
        for b in 1..=w.max_batch {
            let mut least = f64::INFINITY;
            for s in 1..=w.gpu_sms {
                least = least.min(self.over_waves_ms(w, b, s));
                t.push(least);
            }
        }
        self.monotone_ms = t;
    }

    /// `(l, e)` alone at `(b, SMs)`: the fitted lines at `b/o_r`, in `[0, 1]`.
    pub fn util(&self, batch: u32, sms: u32) -> (f64, f64) {
        let thr = f64::from(batch) / self.compute_alone_ms(batch, sms);
        (
            self.l2.at(thr).clamp(0.0, 1.0),
            self.dram.at(thr).clamp(0.0, 1.0),
        )
    }

    /// `t_d`, ms (at least 0).
    pub fn upload_ms(&self, batch: u32) -> f64 {
        self.upload.at(f64::from(batch)).max(0.0)
    }

    /// `t_r`, ms (at least 0).
    pub fn feedback_ms(&self, batch: u32) -> f64 {
        self.feedback.at(f64::from(batch)).max(0.0)
    }
}

/// InSS's latency model of every model on one GPU type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyModel {
    gpu_sms: u32,
    gpu_mem_mb: f64,
    lwr: LwrConfig,
    models: Vec<FittedModel>,
    interference: bool,
}

impl LatencyModel {
    /// Fits every model's parts (see the module docs) on a GPU of
    /// `gpu_sms` SMs and `gpu_mem_mb` MB.
    pub fn fit(
        gpu_sms: u32,
        gpu_mem_mb: f64,
        profiles: &[ModelProfile],
        lwr: &LwrConfig,
    ) -> Result<LatencyModel, LatencyError> {
        if gpu_sms == 0 || !(gpu_mem_mb.is_finite() && gpu_mem_mb > 0.0) {
            return Err(LatencyError::BadGpu {
                sms: gpu_sms,
                mem_mb: gpu_mem_mb,
            });
        }
        if profiles.is_empty() {
            return Err(LatencyError::NoModels);
        }
        for (i, p) in profiles.iter().enumerate() {
            if profiles[..i].iter().any(|q| q.name == p.name) {
                return Err(LatencyError::Duplicate {
                    model: p.name.clone(),
                });
            }
        }
        let mut models = Vec::with_capacity(profiles.len());
        for p in profiles {
            models.push(fit_alone(gpu_sms, p, lwr)?);
        }
        // Interference: needs every model's utilisation lines.
        let mut coefs = Vec::with_capacity(profiles.len());
        for p in profiles {
            coefs.push(fit_interference(gpu_sms, p, &models)?);
        }
        for (m, (c, rms, n)) in models.iter_mut().zip(coefs) {
            m.alpha_cache = c[0];
            m.alpha_dram = c[1];
            m.interference_rms = rms;
            m.corun_observations = n;
        }
        Ok(LatencyModel {
            gpu_sms,
            gpu_mem_mb,
            lwr: *lwr,
            models,
            interference: true,
        })
    }

    /// Checks what a deserialised model cannot vouch for (a wave-aware fit
    /// has its wave table and the table covers batches 1–32 on every SM of
    /// the GPU with positive times; nothing else has one) and rebuilds what
    /// is not serialised (the wave-aware fit's table of least predictions).
    /// Call after deserialising: a model that fails it must not predict.
    pub fn prepare(&mut self) -> Result<(), LatencyError> {
        for m in &mut self.models {
            let aware = m.compute.features() == LwrFeatures::LogBatchLogSmsOverWaves;
            let bad = |why: String| LatencyError::BadWaves {
                model: m.name.clone(),
                why,
                max_batch: WAVE_TABLE_BATCHES,
                gpu_sms: self.gpu_sms,
            };
            match (&m.waves, aware) {
                (None, true) => return Err(bad("none was given".into())),
                (Some(_), false) => {
                    return Err(bad(format!(
                        "one was given, but its fit is {:?}",
                        m.compute.features()
                    )));
                }
                (Some(w), true) => {
                    w.check().map_err(bad)?;
                    if w.gpu_sms != self.gpu_sms || w.max_batch < WAVE_TABLE_BATCHES {
                        return Err(bad(format!(
                            "it covers batches 1..={} on 1..={} SMs",
                            w.max_batch, w.gpu_sms
                        )));
                    }
                }
                (None, false) => {}
            }
            m.prepare();
        }
        Ok(())
    }

    /// The same model predicting every co-located batch as if it ran alone
    /// (InSS-ni, the ablation without interference).
    pub fn without_interference(&self) -> LatencyModel {
        LatencyModel {
            interference: false,
            ..self.clone()
        }
    }

    /// Whether co-runners slow a model down in [`ExecModel::exec_ms`].
    pub fn interference_enabled(&self) -> bool {
        self.interference
    }

    /// The regression configuration the compute times were fitted with.
    pub fn lwr_config(&self) -> LwrConfig {
        self.lwr
    }

    /// Every model's fitted parts, in the order of the profiles.
    pub fn models(&self) -> &[FittedModel] {
        &self.models
    }

    /// Index of the model called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.models.iter().position(|m| m.name == name)
    }

    /// `o_r`: compute time of `model` at `batch` on `sms` SMs alone, ms.
    ///
    /// # Panics
    /// If `model` is not below [`ExecModel::model_count`].
    pub fn compute_alone_ms(&self, model: usize, batch: u32, sms: u32) -> f64 {
        self.models[model].compute_alone_ms(batch.max(1), sms.clamp(1, self.gpu_sms))
    }

    /// `1 + α_cache·Σ l + α_dram·Σ e` of `model` beside `others` (co-runners
    /// with batch or SMs 0 do not run and count nothing); 1 without
    /// interference.
    ///
    /// # Panics
    /// If `model` or a co-runner's model is not below
    /// [`ExecModel::model_count`].
    pub fn interference_factor(&self, model: usize, others: &[CoRunner]) -> f64 {
        if !self.interference {
            return 1.0;
        }
        let m = &self.models[model];
        let (mut l, mut e) = (0.0, 0.0);
        for o in others.iter().filter(|o| o.batch > 0 && o.sms > 0) {
            let (lo, eo) = self.models[o.model].util(o.batch, o.sms.min(self.gpu_sms));
            l += lo;
            e += eo;
        }
        1.0 + m.alpha_cache.value * l + m.alpha_dram.value * e
    }
}

impl ExecModel for LatencyModel {
    fn gpu_sms(&self) -> u32 {
        self.gpu_sms
    }

    fn gpu_mem_mb(&self) -> f64 {
        self.gpu_mem_mb
    }

    fn model_count(&self) -> usize {
        self.models.len()
    }

    /// # Panics
    /// If `model` is not below [`ExecModel::model_count`].
    fn model_name(&self, model: usize) -> &str {
        &self.models[model].name
    }

    /// `t_d + o_r·factor + t_r`; infinite for batch or SMs 0 (the model
    /// does not run); SMs above the GPU's count as the GPU's.
    ///
    /// # Panics
    /// If `model` or a co-runner's model is not below
    /// [`ExecModel::model_count`].
    fn exec_ms(&self, model: usize, batch: u32, sms: u32, others: &[CoRunner]) -> f64 {
        if batch == 0 || sms == 0 {
            return f64::INFINITY;
        }
        let m = &self.models[model];
        m.upload_ms(batch)
            + self.compute_alone_ms(model, batch, sms) * self.interference_factor(model, others)
            + m.feedback_ms(batch)
    }

    /// # Panics
    /// If `model` is not below [`ExecModel::model_count`].
    fn mem_mb(&self, model: usize, batch: u32) -> f64 {
        self.models[model].memory.at(batch)
    }

    /// # Panics
    /// If `model` is not below [`ExecModel::model_count`].
    fn util(&self, model: usize, batch: u32, sms: u32) -> (f64, f64) {
        self.models[model].util(batch.max(1), sms.clamp(1, self.gpu_sms))
    }
}

/// A model's alone parts (interference coefficients still 0).
fn fit_alone(gpu_sms: u32, p: &ModelProfile, lwr: &LwrConfig) -> Result<FittedModel, LatencyError> {
    let model = p.name.clone();
    let err = |part: &'static str| {
        let model = model.clone();
        move |source| LatencyError::Fit {
            model,
            part,
            source,
        }
    };
    if let Some((i, a)) = p.alone.iter().enumerate().find(|(_, a)| a.sms > gpu_sms) {
        return Err(LatencyError::TooManySms {
            model,
            what: format!("alone point {i} (batch {})", a.batch),
            sms: a.sms,
            gpu_sms,
        });
    }
    let mem = p.memory;
    if !(mem.fixed_mb.is_finite()
        && mem.per_batch_mb.is_finite()
        && mem.fixed_mb >= 0.0
        && mem.per_batch_mb >= 0.0)
    {
        return Err(LatencyError::BadMemory {
            model,
            fixed_mb: mem.fixed_mb,
            per_batch_mb: mem.per_batch_mb,
        });
    }
    let line = |part: &'static str, f: &dyn Fn(&AlonePoint) -> (f64, f64)| {
        Line::fit(part, &p.alone.iter().map(f).collect::<Vec<_>>()).map_err(err(part))
    };
    let waves = match lwr.features {
        LwrFeatures::LogBatchLogSmsOverWaves => {
            let bad = |why: String| LatencyError::BadWaves {
                model: model.clone(),
                why,
                max_batch: WAVE_TABLE_BATCHES,
                gpu_sms,
            };
            let w = p
                .waves
                .as_ref()
                .ok_or_else(|| bad("none was given".into()))?;
            w.check().map_err(bad)?;
            if w.gpu_sms != gpu_sms || w.max_batch < WAVE_TABLE_BATCHES {
                return Err(bad(format!(
                    "it covers batches 1..={} on 1..={} SMs",
                    w.max_batch, w.gpu_sms
                )));
            }
            Some(w.clone())
        }
        _ => None,
    };
    let prior = |a: &AlonePoint| waves.as_ref().map_or(1.0, |w| w.at(a.batch, a.sms));
    let pts: Vec<(u32, u32, f64)> = p
        .alone
        .iter()
        .map(|a| (a.batch, a.sms, a.compute_ms / prior(a)))
        .collect();
    // The LWR checks batches, SMs and compute times first, so the
    // throughputs below are finite.
    let compute = Lwr::fit(&pts, lwr).map_err(err("compute time (o_r, LWR)"))?;
    let compute_floor_ms = match waves {
        Some(_) => p
            .alone
            .iter()
            .map(|a| a.compute_ms)
            .fold(f64::INFINITY, f64::min),
        None => compute.min_y(),
    };
    let upload = line("upload time (t_d)", &|a| (f64::from(a.batch), a.upload_ms))?;
    let feedback = line("feedback time (t_r)", &|a| {
        (f64::from(a.batch), a.feedback_ms)
    })?;
    let thr = |a: &AlonePoint| f64::from(a.batch) / a.compute_ms;
    let l2 = line("L2 utilisation (l)", &|a| (thr(a), a.l2_util))?;
    let dram = line("DRAM utilisation (e)", &|a| (thr(a), a.dram_util))?;
    let mut fitted = FittedModel {
        name: p.name.clone(),
        upload,
        feedback,
        compute,
        waves,
        monotone_ms: Vec::new(),
        compute_floor_ms,
        l2,
        dram,
        alpha_cache: Coef::zero(CoefStatus::NoObservations),
        alpha_dram: Coef::zero(CoefStatus::NoObservations),
        corun_observations: 0,
        interference_rms: 0.0,
        memory: mem,
    };
    fitted.prepare();
    Ok(fitted)
}

/// `(α_cache, α_dram)`, the residual and the observation count of one
/// model, given every model's alone parts.
fn fit_interference(
    gpu_sms: u32,
    p: &ModelProfile,
    models: &[FittedModel],
) -> Result<([Coef; 2], f64, usize), LatencyError> {
    let me = models
        .iter()
        .find(|m| m.name == p.name)
        .expect("fit_interference is given the model it fits");
    let mut x = Vec::with_capacity(p.corun.len());
    let mut y = Vec::with_capacity(p.corun.len());
    for (k, o) in p.corun.iter().enumerate() {
        for c in &o.others {
            if c.model >= models.len() {
                return Err(LatencyError::UnknownCoRunner {
                    model: p.name.clone(),
                    observation: k,
                    index: c.model,
                    count: models.len(),
                });
            }
            if c.sms > gpu_sms {
                return Err(LatencyError::TooManySms {
                    model: p.name.clone(),
                    what: format!("co-runner {} of co-run observation {k}", c.model),
                    sms: c.sms,
                    gpu_sms,
                });
            }
        }
        if o.sms > gpu_sms {
            return Err(LatencyError::TooManySms {
                model: p.name.clone(),
                what: format!("co-run observation {k}"),
                sms: o.sms,
                gpu_sms,
            });
        }
        let alone = if o.batch == 0 || o.sms == 0 {
            f64::NAN
        } else {
            o.alone_compute_ms
                .unwrap_or_else(|| me.compute_alone_ms(o.batch, o.sms))
        };
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if !ok(alone) || !ok(o.compute_ms) {
            return Err(LatencyError::BadObservation {
                model: p.name.clone(),
                observation: k,
                compute_ms: o.compute_ms,
                alone_ms: alone,
                batch: o.batch,
                sms: o.sms,
            });
        }
        let (mut l, mut e) = (0.0, 0.0);
        for c in o.others.iter().filter(|c| c.batch > 0 && c.sms > 0) {
            let (lc, ec) = models[c.model].util(c.batch, c.sms);
            l += lc;
            e += ec;
        }
        x.push([l, e]);
        y.push(o.compute_ms / alone - 1.0);
    }
    let (c, rms) =
        fit::nonneg_2("co-run slowdowns", &x, &y).map_err(|source| LatencyError::Fit {
            model: p.name.clone(),
            part: "interference coefficients (α_cache, α_dram)",
            source,
        })?;
    Ok((c, rms, x.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BATCHES: [u32; 4] = [1, 4, 16, 32];
    const SMS: [u32; 4] = [10, 27, 54, 108];

    /// A synthetic model: compute `c0 + k·b/SMs` ms; upload `0.01·b + 0.05`;
    /// feedback `0.002·b + 0.01`; `l = 0.1·thr + 0.05`, `e = 0.2·thr`.
    fn profile(name: &str, c0: f64, k: f64) -> ModelProfile {
        let mut alone = Vec::new();
        for b in BATCHES {
            for s in SMS {
                let compute_ms = c0 + k * f64::from(b) / f64::from(s);
                let thr = f64::from(b) / compute_ms;
                alone.push(AlonePoint {
                    batch: b,
                    sms: s,
                    upload_ms: 0.01 * f64::from(b) + 0.05,
                    compute_ms,
                    feedback_ms: 0.002 * f64::from(b) + 0.01,
                    l2_util: 0.1 * thr + 0.05,
                    dram_util: 0.2 * thr,
                });
            }
        }
        ModelProfile {
            name: name.into(),
            alone,
            corun: Vec::new(),
            memory: MemoryUse {
                fixed_mb: 100.0,
                per_batch_mb: 2.5,
            },
            waves: None,
        }
    }

    /// A model of 12 kernels of `8·b` blocks, one block per SM per round of
    /// 1 ms: its time steps wherever a kernel needs a round more.
    fn stepped(b: u32, s: u32) -> f64 {
        12.0 * f64::from((8 * b).div_ceil(s))
    }

    fn stepped_profile(with_table: bool) -> ModelProfile {
        let sms = 108;
        let mut alone = Vec::new();
        for b in [1, 2, 3, 6, 12, 24, 32] {
            for pct in [1, 3, 5, 10, 15, 25, 35, 45, 55, 70, 85, 100] {
                let s = crate::sms_of_pct(pct, sms).max(1);
                alone.push(AlonePoint {
                    batch: b,
                    sms: s,
                    upload_ms: 0.0,
                    // A smooth effect beside the steps: 10 % more at batch 32.
                    compute_ms: stepped(b, s) * (1.0 + 0.1 * f64::from(b) / 32.0),
                    feedback_ms: 0.0,
                    l2_util: 0.0,
                    dram_util: 0.1,
                });
            }
        }
        let waves = with_table.then(|| WaveTable {
            max_batch: WAVE_TABLE_BATCHES,
            gpu_sms: sms,
            ms: (1..=WAVE_TABLE_BATCHES)
                .flat_map(|b| (1..=sms).map(move |s| stepped(b, s)))
                .collect(),
        });
        ModelProfile {
            name: "stepped".into(),
            alone,
            corun: Vec::new(),
            memory: MemoryUse {
                fixed_mb: 10.0,
                per_batch_mb: 1.0,
            },
            waves,
        }
    }

    /// The wave-aware fit of `profiles` on a 108-SM, 40 GB GPU.
    fn fit_waves(profiles: &[ModelProfile]) -> Result<LatencyModel, LatencyError> {
        LatencyModel::fit(108, 40960.0, profiles, &LwrConfig::WAVES_LOG_LOG_LOO)
    }

    #[test]
    fn the_wave_aware_fit_places_the_steps_the_plain_one_smooths_over() {
        let p = stepped_profile(true);
        let waves = fit_waves(std::slice::from_ref(&p)).unwrap();
        let plain = LatencyModel::fit(108, 40960.0, &[p], &LwrConfig::LOG_LOG_LOO).unwrap();
        // Off the profile grid in both batch and SMs.
        let mut worst = (0.0f64, 0.0f64);
        for b in [4, 8, 16] {
            for s in [9, 21, 33, 40, 65, 80, 100] {
                let truth = stepped(b, s) * (1.0 + 0.1 * f64::from(b) / 32.0);
                let e = |m: &LatencyModel| (m.compute_alone_ms(0, b, s) - truth).abs() / truth;
                worst = (worst.0.max(e(&waves)), worst.1.max(e(&plain)));
            }
        }
        assert!(worst.0 < 0.02, "wave-aware worst error {:.3}", worst.0);
        assert!(
            worst.1 > 0.05,
            "plain worst error {:.3}: the steps should show",
            worst.1
        );
        // The table travels with the fitted model.
        assert!(waves.models()[0].waves.is_some());
        assert!(plain.models()[0].waves.is_none());
    }

    #[test]
    fn a_saved_wave_aware_model_predicts_the_same_and_a_tampered_one_is_refused() {
        let m = fit_waves(&[stepped_profile(true)]).unwrap();
        let text = serde_json::to_string(&m).unwrap();
        let mut back: LatencyModel = serde_json::from_str(&text).unwrap();
        back.prepare().unwrap();
        // (serde_json may read a float back one ulp off.)
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
        for (b, s) in [(1, 1), (3, 40), (32, 108), (40, 50)] {
            let (x, y) = (back.compute_alone_ms(0, b, s), m.compute_alone_ms(0, b, s));
            assert!(
                close(x, y),
                "batch {b} on {s} SMs: {x} after saving, {y} before"
            );
        }
        // Unprepared: the same predictions, computed per call.
        let raw: LatencyModel = serde_json::from_str(&text).unwrap();
        assert!(close(
            raw.compute_alone_ms(0, 8, 33),
            m.compute_alone_ms(0, 8, 33)
        ));
        // The table dropped, or cut short: refused, naming the model.
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["models"][0]["waves"] = serde_json::Value::Null;
        let mut t: LatencyModel = serde_json::from_value(v.clone()).unwrap();
        let e = t.prepare().unwrap_err().to_string();
        assert!(
            e.contains("`stepped`") && e.contains("none was given"),
            "{e}"
        );
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["models"][0]["waves"]["ms"]
            .as_array_mut()
            .unwrap()
            .truncate(5);
        let mut t: LatencyModel = serde_json::from_value(v).unwrap();
        let e = t.prepare().unwrap_err().to_string();
        assert!(e.contains("it has 5 entries"), "{e}");
    }

    #[test]
    fn the_wave_aware_fit_names_a_missing_or_bad_table() {
        let e = fit_waves(&[stepped_profile(false)]).unwrap_err();
        assert!(e.to_string().contains("none was given"), "{e}");
        assert!(e.to_string().contains("`stepped`"), "{e}");
        let mut p = stepped_profile(true);
        if let Some(w) = p.waves.as_mut() {
            w.ms[5] = 0.0;
        }
        let e = fit_waves(&[p]).unwrap_err();
        assert!(e.to_string().contains("batch 1 on 6 SMs is 0 ms"), "{e}");
        let mut p = stepped_profile(true);
        if let Some(w) = p.waves.as_mut() {
            w.max_batch = 16;
            w.ms.truncate(16 * 108);
        }
        let e = fit_waves(&[p]).unwrap_err();
        assert!(e.to_string().contains("it covers batches 1..=16"), "{e}");
    }

    fn exact(c0: f64, k: f64, b: u32, s: u32) -> f64 {
        c0 + k * f64::from(b) / f64::from(s)
    }

    #[test]
    fn alone_predictions_add_the_three_steps_and_recover_the_lines() {
        let p = profile("a", 0.5, 20.0);
        let m = LatencyModel::fit(108, 40960.0, &[p], &LwrConfig::FAITHFUL).unwrap();
        let f = &m.models()[0];
        assert!((f.upload.slope - 0.01).abs() < 1e-12 && (f.upload.intercept - 0.05).abs() < 1e-12);
        assert!((f.feedback.slope - 0.002).abs() < 1e-12);
        assert!((f.l2.slope - 0.1).abs() < 1e-9 && (f.l2.intercept - 0.05).abs() < 1e-9);
        assert!((f.dram.slope - 0.2).abs() < 1e-9 && f.dram.intercept.abs() < 1e-9);
        // The total is t_d + o_r + t_r (LWR smooths: o_r need not equal
        // the profiled point's time).
        let o = m.compute_alone_ms(0, 16, 54);
        let t = m.exec_ms(0, 16, 54, &[]);
        assert!((t - (0.21 + o + 0.042)).abs() < 1e-12, "{t}");
        // Memory: 100 + 2.5·8.
        assert_eq!(m.mem_mb(0, 8), 120.0);
        assert_eq!(m.gpu_sms(), 108);
        assert_eq!(m.model_name(0), "a");
        assert!(m.exec_ms(0, 0, 54, &[]).is_infinite());
        assert!(m.exec_ms(0, 4, 0, &[]).is_infinite());
        // No co-run observations: coefficients 0, and it says so.
        assert_eq!(f.alpha_cache.status, CoefStatus::NoObservations);
        // Utilisation: e = 0.2·b/o_r.
        let (l, e) = m.util(0, 4, 27);
        let thr = 4.0 / m.compute_alone_ms(0, 4, 27);
        assert!((l - (0.1 * thr + 0.05)).abs() < 1e-9 && (e - 0.2 * thr).abs() < 1e-9);
    }

    /// Two models whose co-run slowdown is exactly
    /// `0.3·Σl + 0.1·Σe` (hand-made observations).
    fn with_coruns() -> (Vec<ModelProfile>, LatencyModel) {
        let mut ps = vec![profile("a", 0.5, 20.0), profile("b", 0.2, 5.0)];
        let alone = LatencyModel::fit(108, 40960.0, &ps, &LwrConfig::FAITHFUL).unwrap();
        for cfg in [(1u32, 4u32, 27u32), (0, 16, 54), (1, 32, 10), (1, 1, 54)] {
            let others = vec![CoRunner {
                model: cfg.0 as usize,
                batch: cfg.1,
                sms: cfg.2,
            }];
            let (l, e) = alone.util(cfg.0 as usize, cfg.1, cfg.2);
            let o = exact(0.5, 20.0, 8, 21);
            ps[0].corun.push(CoRunObservation {
                batch: 8,
                sms: 21,
                others,
                compute_ms: o * (1.0 + 0.3 * l + 0.1 * e),
                alone_compute_ms: Some(o),
            });
        }
        let m = LatencyModel::fit(108, 40960.0, &ps, &LwrConfig::FAITHFUL).unwrap();
        (ps, m)
    }

    #[test]
    fn interference_coefficients_are_recovered_and_applied() {
        let (_, m) = with_coruns();
        let f = &m.models()[0];
        assert!(
            (f.alpha_cache.value - 0.3).abs() < 1e-9,
            "{:?}",
            f.alpha_cache
        );
        assert!(
            (f.alpha_dram.value - 0.1).abs() < 1e-9,
            "{:?}",
            f.alpha_dram
        );
        assert_eq!(f.corun_observations, 4);
        // Model b had no observations.
        assert_eq!(m.models()[1].alpha_dram.status, CoefStatus::NoObservations);
        // Factor beside b at (4, 27): 1 + 0.3 l + 0.1 e, hand-computed from
        // b's utilisation.
        let others = [CoRunner {
            model: 1,
            batch: 4,
            sms: 27,
        }];
        let (l, e) = m.util(1, 4, 27);
        let want = 1.0 + 0.3 * l + 0.1 * e;
        assert!((m.interference_factor(0, &others) - want).abs() < 1e-12);
        assert!(want > 1.01, "{want}");
        let alone = m.exec_ms(0, 8, 21, &[]);
        let co = m.exec_ms(0, 8, 21, &others);
        let o = m.compute_alone_ms(0, 8, 21);
        assert!((co - alone - o * (want - 1.0)).abs() < 1e-12);
        // Co-runners that do not run count nothing.
        let idle = [CoRunner {
            model: 1,
            batch: 0,
            sms: 27,
        }];
        assert_eq!(m.exec_ms(0, 8, 21, &idle), alone);
        // InSS-ni: the same model, no factor.
        let ni = m.without_interference();
        assert!(!ni.interference_enabled());
        assert_eq!(ni.exec_ms(0, 8, 21, &others), alone);
        assert_eq!(ni.interference_factor(0, &others), 1.0);
    }

    #[test]
    fn zero_l2_utilisation_makes_alpha_cache_degenerate() {
        let (mut ps, _) = with_coruns();
        for p in &mut ps {
            for a in &mut p.alone {
                a.l2_util = 0.0;
            }
        }
        let m = LatencyModel::fit(108, 40960.0, &ps, &LwrConfig::FAITHFUL).unwrap();
        let f = &m.models()[0];
        assert_eq!(f.alpha_cache, Coef::zero(CoefStatus::Degenerate));
        assert!(f.alpha_dram.value > 0.0);
    }

    #[test]
    fn bad_profiles_are_refused_naming_the_model_and_value() {
        let p = profile("a", 0.5, 20.0);
        assert_eq!(
            LatencyModel::fit(108, 1.0, &[], &LwrConfig::FAITHFUL),
            Err(LatencyError::NoModels)
        );
        assert!(matches!(
            LatencyModel::fit(0, 1.0, std::slice::from_ref(&p), &LwrConfig::FAITHFUL),
            Err(LatencyError::BadGpu { sms: 0, .. })
        ));
        assert!(matches!(
            LatencyModel::fit(108, 1.0, &[p.clone(), p.clone()], &LwrConfig::FAITHFUL),
            Err(LatencyError::Duplicate { .. })
        ));
        let e =
            LatencyModel::fit(54, 1.0, std::slice::from_ref(&p), &LwrConfig::FAITHFUL).unwrap_err();
        assert!(
            matches!(
                e,
                LatencyError::TooManySms {
                    sms: 108,
                    gpu_sms: 54,
                    ..
                }
            ),
            "{e:?}"
        );
        let mut empty = p.clone();
        empty.alone.clear();
        let e = LatencyModel::fit(108, 1.0, &[empty], &LwrConfig::FAITHFUL).unwrap_err();
        assert!(e.to_string().contains("`a`"), "{e}");
        assert!(matches!(
            e,
            LatencyError::Fit {
                source: FitError::TooFew { got: 0, .. },
                ..
            }
        ));
        let mut one_batch = p.clone();
        one_batch.alone.retain(|a| a.batch == 4);
        assert!(matches!(
            LatencyModel::fit(108, 1.0, &[one_batch], &LwrConfig::FAITHFUL),
            Err(LatencyError::Fit {
                source: FitError::Collinear { .. },
                ..
            })
        ));
        let mut bad = p.clone();
        bad.corun.push(CoRunObservation {
            batch: 8,
            sms: 21,
            others: vec![CoRunner {
                model: 3,
                batch: 8,
                sms: 21,
            }],
            compute_ms: 1.0,
            alone_compute_ms: None,
        });
        assert!(matches!(
            LatencyModel::fit(108, 1.0, &[bad.clone()], &LwrConfig::FAITHFUL),
            Err(LatencyError::UnknownCoRunner {
                index: 3,
                count: 1,
                ..
            })
        ));
        bad.corun[0].others[0].model = 0;
        bad.corun[0].compute_ms = -1.0;
        assert!(matches!(
            LatencyModel::fit(108, 1.0, &[bad], &LwrConfig::FAITHFUL),
            Err(LatencyError::BadObservation { .. })
        ));
        let mut mem = p;
        mem.memory.per_batch_mb = f64::NAN;
        assert!(matches!(
            LatencyModel::fit(108, 1.0, &[mem], &LwrConfig::FAITHFUL),
            Err(LatencyError::BadMemory { .. })
        ));
    }

    #[test]
    fn compute_predictions_never_fall_below_the_fastest_profiled_point() {
        let p = profile("a", 0.5, 20.0);
        let m = LatencyModel::fit(108, 1.0, &[p], &LwrConfig::FAITHFUL).unwrap();
        let floor = m.models()[0].compute_floor_ms;
        assert!((floor - exact(0.5, 20.0, 1, 108)).abs() < 1e-12);
        // (b, SMs) features extrapolate linearly in SMs: at 1 SM and batch 1
        // that can fall below; the floor holds.
        assert!(m.compute_alone_ms(0, 1, 1) >= floor);
        assert!(m.compute_alone_ms(0, 1, 108) >= floor);
    }
}
