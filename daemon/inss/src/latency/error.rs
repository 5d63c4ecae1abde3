//! Why a fit or the latency model could not be built.

/// Why one fit (a line, the locally weighted regression) failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    /// Fewer points than the fit has unknowns.
    #[error("{what}: {got} points, need at least {need}; profile more configurations")]
    TooFew {
        /// The data.
        what: &'static str,
        /// Points given.
        got: usize,
        /// Points needed.
        need: usize,
    },
    /// Every point has the same `x`: the slope is not determined.
    #[error(
        "{what}: all {n} points have x = {x}, so a line through them is not determined; \
         measure at two or more distinct batch sizes (or throughputs)"
    )]
    NoSpread {
        /// The data.
        what: &'static str,
        /// The one `x`.
        x: f64,
        /// Points given.
        n: usize,
    },
    /// A NaN or infinite measurement.
    #[error("{what}: value {index} is {value}; give finite measurements")]
    NotFinite {
        /// The data.
        what: &'static str,
        /// Position in the flattened data.
        index: usize,
        /// The value.
        value: f64,
    },
    /// Regressors and responses of different lengths.
    #[error("{what}: {x} rows of regressors but {y} responses; give one response per row")]
    Mismatch {
        /// The data.
        what: &'static str,
        /// Rows of regressors.
        x: usize,
        /// Responses.
        y: usize,
    },
    /// A span that is not a positive finite number.
    #[error("LWR span {span} is not a positive number; give a fraction such as 0.75")]
    BadSpan {
        /// The span.
        span: f64,
    },
    /// A span so small that the neighbourhood cannot hold a local plane.
    #[error(
        "LWR span {span} keeps {q} of {n} points, and a local plane in two features needs \
         at least {need} (one of which gets weight 0); raise the span to at least {need}/{n}"
    )]
    SpanTooSmall {
        /// The span.
        span: f64,
        /// Neighbours it keeps.
        q: usize,
        /// Points.
        n: usize,
        /// Neighbours needed.
        need: usize,
    },
    /// The points do not span the plane of the two features.
    #[error(
        "LWR: the {n} profile points lie on one line in (batch, SMs), e.g. all at one \
         batch size or one share; profile at least two batch sizes and two shares"
    )]
    Collinear {
        /// Points.
        n: usize,
    },
    /// A configuration that cannot run (batch or SMs of 0).
    #[error("profile point {index} has batch {batch} and {sms} SMs; both must be at least 1")]
    BadConfig {
        /// Position in the profile.
        index: usize,
        /// Its batch.
        batch: u32,
        /// Its SMs.
        sms: u32,
    },
    /// A compute time that is not positive.
    #[error(
        "profile point {index} (batch {batch}, {sms} SMs) has compute time {ms} ms; \
         a batch takes time, give the measured positive latency"
    )]
    NonPositive {
        /// Position in the profile.
        index: usize,
        /// Its batch.
        batch: u32,
        /// Its SMs.
        sms: u32,
        /// The time.
        ms: f64,
    },
}

/// Why [`super::LatencyModel::fit`] failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LatencyError {
    /// No model profiles at all.
    #[error("no model profiles given; profile each model alone (InSS §4.1: 4 shares × 4 batches)")]
    NoModels,
    /// A GPU of 0 SMs or a non-positive memory.
    #[error(
        "GPU of {sms} SMs and {mem_mb} MB; give the device's SM count and memory (both positive)"
    )]
    BadGpu {
        /// SMs.
        sms: u32,
        /// Memory, MB.
        mem_mb: f64,
    },
    /// Two profiles with one name.
    #[error("model `{model}` is profiled twice; give one profile per model")]
    Duplicate {
        /// The name.
        model: String,
    },
    /// One part of one model's fit.
    #[error("model `{model}`: fitting {part}")]
    Fit {
        /// The model.
        model: String,
        /// Which part (e.g. "upload time (t_d)").
        part: &'static str,
        /// What went wrong.
        #[source]
        source: FitError,
    },
    /// A configuration with more SMs than the GPU has.
    #[error(
        "model `{model}`: {what} uses {sms} SMs but the GPU has {gpu_sms}; \
         give SMs as sms_of_pct(share, {gpu_sms})"
    )]
    TooManySms {
        /// The model.
        model: String,
        /// Which configuration.
        what: String,
        /// SMs asked for.
        sms: u32,
        /// SMs of the GPU.
        gpu_sms: u32,
    },
    /// A co-run observation naming a model that is not profiled.
    #[error(
        "model `{model}`: co-run observation {observation} names co-runner {index}, but only \
         {count} models are profiled; co-runners index the profiles"
    )]
    UnknownCoRunner {
        /// The model observed.
        model: String,
        /// Which observation.
        observation: usize,
        /// The index given.
        index: usize,
        /// Profiles.
        count: usize,
    },
    /// A co-run observation with a bad latency or configuration.
    #[error(
        "model `{model}`: co-run observation {observation} has compute {compute_ms} ms \
         (alone {alone_ms} ms) at batch {batch} on {sms} SMs; give positive measured times \
         and a configuration of at least batch 1 on 1 SM"
    )]
    BadObservation {
        /// The model observed.
        model: String,
        /// Which observation.
        observation: usize,
        /// Its co-run compute time.
        compute_ms: f64,
        /// Its alone time (measured or predicted).
        alone_ms: f64,
        /// Its batch.
        batch: u32,
        /// Its SMs.
        sms: u32,
    },
    /// The wave-aware fit without a wave-count table, or with a bad one.
    #[error(
        "model `{model}`: the wave-aware fit (`log_batch_log_sms_over_waves`) needs a wave-count \
         table of positive, finite times for batches 1..={max_batch} on 1..={gpu_sms} SMs; {why}"
    )]
    BadWaves {
        /// The model.
        model: String,
        /// What is wrong.
        why: String,
        /// Batches the table must cover.
        max_batch: u32,
        /// SMs it must cover (the GPU's).
        gpu_sms: u32,
    },
    /// A memory rule that is negative or not finite.
    #[error(
        "model `{model}`: memory {fixed_mb} MB + {per_batch_mb} MB per batch item; \
         give finite, non-negative sizes"
    )]
    BadMemory {
        /// The model.
        model: String,
        /// Fixed part.
        fixed_mb: f64,
        /// Per batch item.
        per_batch_mb: f64,
    },
}
