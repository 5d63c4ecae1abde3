//! Value parsers that more than one subcommand's arguments use (a parser
//! only one command uses lives in that command's file). Each refuses a bad
//! value with a message naming the value and what to give instead.

use sluice_bench::cluster::scenario::PlannerKind;
use sluice_gpu::DeviceProfile;
use sluice_sched::PolicyKind;

/// A scheduling policy by name.
pub fn policy(s: &str) -> Result<PolicyKind, String> {
    PolicyKind::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = PolicyKind::ALL.iter().map(|k| k.as_str()).collect();
        format!("`{s}` is not a policy; use one of {}", names.join(", "))
    })
}

/// A built-in device profile of the GPU model.
pub fn device(s: &str) -> Result<String, String> {
    if DeviceProfile::builtin_names().any(|n| n == s) {
        Ok(s.to_owned())
    } else {
        let names: Vec<&str> = DeviceProfile::builtin_names().collect();
        Err(format!(
            "`{s}` is not a device profile; use one of {}",
            names.join(", ")
        ))
    }
}

/// A built-in device profile, or `cuda` (CUDA device 0).
pub fn device_or_cuda(s: &str) -> Result<String, String> {
    if s == "cuda" {
        return Ok(s.into());
    }
    device(s).map_err(|e| format!("{e}, or cuda"))
}

/// An offered load, a fraction of capacity in (0, 4].
pub fn load(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 4.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a load; give a fraction of capacity above 0, at most 4 (e.g. 0.5)"
        )),
    }
}

/// A multi-GPU planner by name.
pub fn planner(s: &str) -> Result<PlannerKind, String> {
    PlannerKind::from_name(s).ok_or_else(|| {
        format!(
            "`{s}` is not a planner; use one of {}",
            PlannerKind::NAMES.join(", ")
        )
    })
}

/// A latency margin in [1, 10].
pub fn margin(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(m) if m.is_finite() && (1.0..=10.0).contains(&m) => Ok(m),
        _ => Err(format!(
            "`{s}` is not a latency margin in [1, 10]; give e.g. 1.1 to plan with latencies 10 % longer than measured"
        )),
    }
}

/// A rate in (0, 1e6] rps.
pub fn rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 1e6 => Ok(x),
        _ => Err(format!(
            "`{s}` is not a starting rate in (0, 1e6] rps; give e.g. 10"
        )),
    }
}

/// The burst rule's overflow share, strictly between 0 and 1.
pub fn overflow(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(eps) if eps > 0.0 && eps < 1.0 => Ok(eps),
        _ => Err(format!(
            "`{s}` is not a share strictly between 0 and 1; give e.g. 0.01 for a 1 % violation target"
        )),
    }
}

/// The planners' rule for `--burst-overflow`: the mean rate without it,
/// Poisson arrivals with it.
pub fn burst_of(q: Option<f64>) -> sluice_planner::Burst {
    q.map_or(sluice_planner::Burst::Mean, sluice_planner::Burst::Poisson)
}

/// A planning headroom in [0, 10].
pub fn headroom(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(h) if h.is_finite() && (0.0..=10.0).contains(&h) => Ok(h),
        _ => Err(format!(
            "`{s}` is not a headroom in [0, 10]; give e.g. 0.1 for 10 % spare capacity"
        )),
    }
}

/// A duration in seconds, in (0, 86400].
pub fn duration(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(d) if d.is_finite() && d > 0.0 && d <= 86_400.0 => Ok(d),
        _ => Err(format!(
            "`{s}` is not a duration in seconds in (0, 86400]; give e.g. 60"
        )),
    }
}

/// A model builder of `sluice-nn` (the models `check` and `profile` run on
/// CUDA).
pub fn model_builder(s: &str) -> Result<String, String> {
    use sluice_nn::builders::MODEL_NAMES;
    if MODEL_NAMES.contains(&s) {
        Ok(s.into())
    } else {
        Err(format!(
            "`{s}` is not a model builder; use one of {}",
            MODEL_NAMES.join(", ")
        ))
    }
}
