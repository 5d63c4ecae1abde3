//! `sluice bench interference`: gpulet §3.4 and §4.4 on the GPU model.
//!
//! Pairs of models run side by side in two partitions of one simulated GPU
//! (pairs × batch sizes {2, 4, 8, 16, 32} × splits (2:8) … (8:2), both
//! models at the same batch, each closed-loop, one request after another),
//! and each model's mean latency is compared with its latency alone in the
//! same partition: the *interference factor* (1.0: none). Then gpulet's
//! linear model is fitted to the factors (§4.4; the GPU model has no L2
//! utilisation, so only its bandwidth demand and a constant:
//! `factor = c_own × mem_own + c_other × mem_other + c`) on 70 % of the
//! data and checked on the rest, and the gpulet authors' coefficients
//! (the repository's `data/gpulet/<gpu>/INT_MODEL_CONSTANT.CSV`, fitted on their
//! Nsight measurements) are evaluated on their own utilisations
//! (`UTIL.CSV`) for the corresponding pairs, as a measured-on-hardware
//! reference.

use std::collections::HashMap;

use serde::Serialize;
use sluice_gpu::{DeviceProfile, Event, KernelLaunch, Ns, OpError};
use sluice_gpusim::GpuSim;
use sluice_model::{Model, ModelRegistry};

use sluice_gpusim::lbp::{partition_cus, run_point};
use sluice_planner::{Interference, LinearInterference};

/// gpulet §3.4's five models, by our manifest and the name in gpulet's
/// data, with what ours is.
pub const PAIR_MODELS: [(&str, &str, &str); 5] = [
    ("inception", "googlenet", "GoogLeNet-family (REEF artifact)"),
    ("resnet50", "resnet50", "ResNet-50-class (REEF artifact)"),
    (
        "mobilenet",
        "ssd-mobilenetv1",
        "MobileNet (stand-in for SSD-MobileNet)",
    ),
    ("vgg19", "vgg16", "VGG-19 (stand-in for VGG-16)"),
    (
        "resnet18",
        "lenet",
        "ResNet-18 (stand-in for LeNet, not in the data)",
    ),
];
/// gpulet §3.4's batch sizes.
pub const BATCHES: [u32; 5] = [2, 4, 8, 16, 32];
/// gpulet §3.4's splits, percent of the CUs for the first model.
pub const SPLITS: [u32; 5] = [20, 40, 50, 60, 80];

/// One pair at one batch and split.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Case {
    /// First model (on the lowest CUs).
    pub a: String,
    /// Second model.
    pub b: String,
    /// Batch size of both.
    pub batch: u32,
    /// Percent of the CUs the first model has (the second has the rest).
    pub split_a_pct: u32,
    /// Latency factor of each against alone in its partition.
    pub factor_a: f64,
    /// See `factor_a`.
    pub factor_b: f64,
    /// Requests each completed in the co-run.
    pub requests: [u32; 2],
    /// Mean bandwidth demand of each alone in its partition.
    pub mem_a: f64,
    /// See `mem_a`.
    pub mem_b: f64,
    /// gpulet's fitted model on its own utilisations for the
    /// corresponding pair at this batch, per GPU of [`GPULET_GPUS`], for
    /// the first and the second model; `None` where the data lacks one of
    /// the two (or was not given).
    pub gpulet_factor: [Option<[f64; 2]>; 2],
}

/// The GPUs of gpulet's data.
pub const GPULET_GPUS: [&str; 2] = ["2080ti", "3080"];

/// gpulet's coefficients on their utilisations, over the cases whose pair
/// the data has.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuletStats {
    /// The GPU.
    pub gpu: String,
    /// Cases with data for both models.
    pub cases: usize,
    /// Predicted slowdown, percent: 50th, 90th, 95th, 99th percentile, max.
    pub slowdown_pct: [f64; 5],
    /// Share of data points under 18 %.
    pub under_18pct: f64,
}

/// The fit of gpulet's linear model to the GPU model's factors.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    /// `c_own`, `c_other`, `c`.
    pub coef: [f64; 3],
    /// Data points used to fit and to check.
    pub train: usize,
    /// See `train`.
    pub validate: usize,
    /// |predicted − simulated| / simulated over the validation points:
    /// 50th, 90th, 95th, 99th percentile and the largest.
    pub error_pct: [f64; 5],
    /// Share of validation points within 13.98 % (gpulet Fig. 10: 95 %).
    pub within_13_98: f64,
    /// Every validation point's error, %, ascending (for the CDF).
    pub errors_sorted: Vec<f64>,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InterferenceReport {
    /// Always true: the GPU model's figures.
    pub simulated: bool,
    /// Device profile.
    pub device: String,
    /// The models and what they stand for.
    pub models: Vec<String>,
    /// Every case.
    pub cases: Vec<Case>,
    /// Slowdown (factor − 1) over all data points, percent: 50th, 90th,
    /// 95th, 99th percentile and the largest.
    pub slowdown_pct: [f64; 5],
    /// Share of data points under 18 % slowdown (gpulet Fig. 7: 90 %).
    pub under_18pct: f64,
    /// gpulet's coefficients on their utilisations, per GPU.
    pub gpulet: Vec<GpuletStats>,
    /// The fit.
    pub fit: Fit,
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct InterferenceOptions {
    /// Device profile name.
    pub device: String,
    /// Batch sizes.
    pub batches: Vec<u32>,
    /// Splits, percent for the first model.
    pub splits: Vec<u32>,
    /// Requests each model completes at least, co-running.
    pub requests: u32,
    /// gpulet's data folder (with `2080ti/` and `3080/`); `None`: the
    /// built-in copy of the repository's `data/gpulet`.
    pub gpulet_data: Option<std::path::PathBuf>,
}

impl Default for InterferenceOptions {
    fn default() -> Self {
        Self {
            device: "mi50".into(),
            batches: BATCHES.to_vec(),
            splits: SPLITS.to_vec(),
            requests: 2,
            gpulet_data: None,
        }
    }
}

/// Two models closed-loop side by side: stream 0 (hardware queue 0) on the
/// lowest `cus_a` CUs, stream 1 on the rest. Runs until each has completed
/// `requests` requests; returns each one's mean latency over the requests
/// it completed (every one of them overlapped the other model's loop) and
/// their counts.
pub fn co_run(
    profile: &DeviceProfile,
    models: [&Model; 2],
    batch: u32,
    cus_a: u32,
    requests: u32,
) -> Result<([f64; 2], [u32; 2]), OpError> {
    let ncu = profile.compute_units;
    let mut gpu = GpuSim::new(profile.clone());
    let streams = [gpu.create_stream(0), gpu.create_stream(0)];
    let a: Vec<u32> = (0..cus_a).collect();
    let b: Vec<u32> = (cus_a..ncu).collect();
    gpu.set_partition(streams[0], Some(&a))?;
    gpu.set_partition(streams[1], Some(&b))?;
    let models = [models[0].at_batch(batch), models[1].at_batch(batch)];
    let launch = |gpu: &mut GpuSim, i: usize| -> Result<(), OpError> {
        for (k, kern) in models[i].manifest.kernels.iter().enumerate() {
            let l = KernelLaunch::from_model(kern, k as u64);
            gpu.launch(streams[i], l)?;
        }
        Ok(())
    };
    launch(&mut gpu, 0)?;
    launch(&mut gpu, 1)?;
    let mut started: [Ns; 2] = [0, 0];
    let mut sum: [f64; 2] = [0.0, 0.0];
    let mut done = [0u32; 2];
    let last = [
        models[0].manifest.kernels.len() as u64 - 1,
        models[1].manifest.kernels.len() as u64 - 1,
    ];
    while done.iter().any(|&d| d < requests) {
        let Some(e) = gpu.step() else { break };
        if let Event::KernelFinished {
            t, stream, kernel, ..
        } = e
        {
            let i = usize::from(stream == streams[1]);
            if kernel.tag == last[i] {
                sum[i] += (t - started[i]) as f64;
                done[i] += 1;
                started[i] = t;
                launch(&mut gpu, i)?;
            }
        }
    }
    Ok((
        [
            sum[0] / f64::from(done[0].max(1)),
            sum[1] / f64::from(done[1].max(1)),
        ],
        done,
    ))
}

/// Percentiles 50/90/95/99 and the largest of `v` (sorted in place).
fn percentiles(v: &mut [f64]) -> [f64; 5] {
    if v.is_empty() {
        return [0.0; 5];
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| sluice_stats::quantile(v, q);
    [at(0.5), at(0.9), at(0.95), at(0.99), v[v.len() - 1]]
}

/// Least squares for `y ≈ c0 x0 + c1 x1 + c2` (normal equations, 3 × 3).
fn fit3(x: &[[f64; 2]], y: &[f64]) -> [f64; 3] {
    let mut a = [[0.0f64; 4]; 3];
    for (xi, &yi) in x.iter().zip(y) {
        let r = [xi[0], xi[1], 1.0];
        for i in 0..3 {
            for j in 0..3 {
                a[i][j] += r[i] * r[j];
            }
            a[i][3] += r[i] * yi;
        }
    }
    // Gauss-Jordan with partial pivoting; a singular system (no spread
    // in a feature) leaves that coefficient 0.
    for col in 0..3 {
        let p = (col..3)
            .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
            .unwrap_or(col);
        a.swap(col, p);
        if a[col][col].abs() < 1e-12 {
            continue;
        }
        let d = a[col][col];
        for v in a[col].iter_mut() {
            *v /= d;
        }
        for r in 0..3 {
            if r != col {
                let f = a[r][col];
                let row = a[col];
                for (v, pv) in a[r].iter_mut().zip(row) {
                    *v -= f * pv;
                }
            }
        }
    }
    [a[0][3], a[1][3], a[2][3]]
}

/// gpulet's predicted factor for `m1` beside `m2` on whole-GPU
/// utilisations, both at exactly `batch` (`None` if either has no row
/// there); at least 1.
fn pair_factor(g: &LinearInterference, m1: &str, m2: &str, batch: u32) -> Option<f64> {
    g.util.get(m1)?.get(batch)?;
    g.util.get(m2)?.get(batch)?;
    Some(g.factor(m1, batch, 100, m2, batch, 100).max(1.0))
}

/// Runs every case, reporting `progress(done, total)`.
pub fn run(
    opts: &InterferenceOptions,
    mut progress: impl FnMut(usize, usize),
) -> Result<InterferenceReport, String> {
    let profile = DeviceProfile::builtin(&opts.device).map_err(|e| e.to_string())?;
    let reg = ModelRegistry::builtin();
    let mut models = Vec::new();
    for (ours, _, what) in PAIR_MODELS {
        let (_, m) = reg
            .lookup(ours)
            .ok_or_else(|| format!("model `{ours}` is not in the registry"))?;
        models.push((m, what));
    }
    if let Some(&s) = opts.splits.iter().find(|&&s| s == 0 || s >= 100) {
        return Err(format!(
            "split {s}% leaves one model no CUs; give percentages between 1 and 99"
        ));
    }
    if let Some(&b) = opts.batches.iter().find(|&&b| b == 0 || b > 4096) {
        return Err(format!("batch size {b} is outside 1..=4096"));
    }
    let load = |g: &str| {
        match &opts.gpulet_data {
            Some(d) => LinearInterference::load_dir(&d.join(g)),
            None => LinearInterference::builtin(g),
        }
        .map_err(|e| e.to_string())
    };
    let gpulet: [LinearInterference; 2] = [load(GPULET_GPUS[0])?, load(GPULET_GPUS[1])?];
    let ncu = profile.compute_units;
    let mut alone: HashMap<(usize, u32, u32), (f64, f64)> = HashMap::new();
    let mut alone_of = |i: usize, m: &Model, batch: u32, cus: u32| -> Result<(f64, f64), String> {
        if let Some(&v) = alone.get(&(i, batch, cus)) {
            return Ok(v);
        }
        let (ns, demand, _) = run_point(&profile, m, batch, cus).map_err(|e| e.to_string())?;
        alone.insert((i, batch, cus), (ns as f64, demand));
        Ok((ns as f64, demand))
    };
    let n = models.len();
    let total = n * (n - 1) / 2 * opts.batches.len() * opts.splits.len();
    let mut cases = Vec::with_capacity(total);
    for i in 0..n {
        for j in i + 1..n {
            for &batch in &opts.batches {
                for &split in &opts.splits {
                    let cus_a = partition_cus(&profile, split).min(ncu - 1);
                    let (la, ma) = alone_of(i, models[i].0, batch, cus_a)?;
                    let (lb, mb) = alone_of(j, models[j].0, batch, ncu - cus_a)?;
                    let (lat, reqs) = co_run(
                        &profile,
                        [models[i].0, models[j].0],
                        batch,
                        cus_a,
                        opts.requests,
                    )
                    .map_err(|e| e.to_string())?;
                    let (ni, nj) = (PAIR_MODELS[i].1, PAIR_MODELS[j].1);
                    let f = |g: usize| {
                        let m = &gpulet[g];
                        Some([
                            pair_factor(m, ni, nj, batch)?,
                            pair_factor(m, nj, ni, batch)?,
                        ])
                    };
                    let gpulet_factor = [f(0), f(1)];
                    cases.push(Case {
                        a: PAIR_MODELS[i].0.into(),
                        b: PAIR_MODELS[j].0.into(),
                        batch,
                        split_a_pct: split,
                        factor_a: lat[0] / la,
                        factor_b: lat[1] / lb,
                        requests: reqs,
                        mem_a: ma,
                        mem_b: mb,
                        gpulet_factor,
                    });
                    progress(cases.len(), total);
                }
            }
        }
    }
    // Data points: each model of each case, with (own, other) demand.
    let mut x = Vec::new();
    let mut y = Vec::new();
    for c in &cases {
        x.push([c.mem_a, c.mem_b]);
        y.push(c.factor_a);
        x.push([c.mem_b, c.mem_a]);
        y.push(c.factor_b);
    }
    // 70 % to fit, 30 % to check, by a fixed interleaving (gpulet: random
    // 1750 / 750 of 2500).
    let (mut xt, mut yt, mut xv, mut yv) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (k, (xi, &yi)) in x.iter().zip(&y).enumerate() {
        if k % 10 < 7 {
            xt.push(*xi);
            yt.push(yi);
        } else {
            xv.push(*xi);
            yv.push(yi);
        }
    }
    let coef = fit3(&xt, &yt);
    let mut err: Vec<f64> = xv
        .iter()
        .zip(&yv)
        .map(|(xi, &yi)| ((coef[0] * xi[0] + coef[1] * xi[1] + coef[2]) - yi).abs() / yi * 100.0)
        .collect();
    let within = err.iter().filter(|&&e| e <= 13.98).count() as f64 / err.len().max(1) as f64;
    let error_pct = percentiles(&mut err);
    let mut errors_sorted = err.clone();
    errors_sorted.sort_by(f64::total_cmp);
    let mut slow: Vec<f64> = y.iter().map(|f| (f - 1.0) * 100.0).collect();
    let under = slow.iter().filter(|&&s| s < 18.0).count() as f64 / slow.len().max(1) as f64;
    let slowdown_pct = percentiles(&mut slow);
    let gpulet_stats: Vec<GpuletStats> = (0..2)
        .map(|g| {
            let mut v: Vec<f64> = cases
                .iter()
                .filter_map(|c| c.gpulet_factor[g])
                .flat_map(|f| [(f[0] - 1.0) * 100.0, (f[1] - 1.0) * 100.0])
                .collect();
            let under = v.iter().filter(|&&s| s < 18.0).count() as f64 / v.len().max(1) as f64;
            GpuletStats {
                gpu: GPULET_GPUS[g].into(),
                cases: v.len() / 2,
                slowdown_pct: percentiles(&mut v),
                under_18pct: under,
            }
        })
        .collect();
    Ok(InterferenceReport {
        simulated: true,
        device: profile.name.clone(),
        models: models
            .iter()
            .map(|(m, what)| format!("{}: {what}", m.name()))
            .collect(),
        cases,
        slowdown_pct,
        under_18pct: under,
        gpulet: gpulet_stats,
        fit: Fit {
            coef,
            train: yt.len(),
            validate: yv.len(),
            error_pct,
            within_13_98: within,
            errors_sorted,
        },
    })
}

/// Slowdown below this is drawn at the left edge of the log axis.
const PLOT_FLOOR_PCT: f64 = 0.01;

/// Two CDFs as an SVG: the slowdown of every data point (the GPU model's,
/// and the gpulet authors' coefficients on their measured utilisations for
/// the same pairs) beside gpulet Fig. 7, and the error of the linear model
/// fitted to the GPU model's points beside Fig. 10.
pub fn plot(r: &InterferenceReport) -> Result<String, crate::plot::PlotError> {
    use crate::plot::{self, Series};
    use plotters::style::RGBColor;
    const BLUE: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
    let sorted = |mut v: Vec<f64>| {
        v.iter_mut().for_each(|x| *x = x.max(PLOT_FLOOR_PCT));
        v.sort_by(f64::total_cmp);
        v
    };
    let mut slow = vec![Series {
        name: format!("GPU model ({}, simulated)", r.device),
        color: BLUE,
        sorted: sorted(
            r.cases
                .iter()
                .flat_map(|c| [(c.factor_a - 1.0) * 100.0, (c.factor_b - 1.0) * 100.0])
                .collect(),
        ),
        dashed: false,
    }];
    for (g, gpu) in GPULET_GPUS.iter().enumerate() {
        let v: Vec<f64> = r
            .cases
            .iter()
            .filter_map(|c| c.gpulet_factor[g])
            .flat_map(|f| [(f[0] - 1.0) * 100.0, (f[1] - 1.0) * 100.0])
            .collect();
        if !v.is_empty() {
            slow.push(Series {
                name: format!("gpulet coefficients, {gpu} (measured inputs)"),
                color: if g == 0 {
                    RGBColor(0xd6, 0x27, 0x28)
                } else {
                    RGBColor(0x2c, 0xa0, 0x2c)
                },
                sorted: sorted(v),
                dashed: true,
            });
        }
    }
    let err = vec![Series {
        name: format!(
            "fit to the GPU model ({} checked points)",
            r.fit.errors_sorted.len()
        ),
        color: BLUE,
        sorted: sorted(r.fit.errors_sorted.clone()),
        dashed: false,
    }];
    plot::figure("interference.svg", (580, 640), None, |area| {
        let (top, bottom) = area.split_vertically(320);
        plot::cdf_chart(
            &top,
            "Slowdown beside another partition (gpulet Fig. 7: 90 % under 18 %)",
            "slowdown % (log; 0.01 % and below at the left edge)",
            &slow,
            (PLOT_FLOOR_PCT, 100.0),
            true,
        )?;
        plot::cdf_chart(
            &bottom,
            "Error of gpulet's linear model (Fig. 10: 95 % within 13.98 %)",
            "|predicted - simulated| / simulated, % (log)",
            &err,
            (PLOT_FLOOR_PCT, 100.0),
            true,
        )
    })
}

/// A summary table.
pub fn table(r: &InterferenceReport) -> String {
    let p = |v: &[f64; 5]| {
        format!(
            "p50 {:.1} %, p90 {:.1} %, p95 {:.1} %, p99 {:.1} %, max {:.1} %",
            v[0], v[1], v[2], v[3], v[4]
        )
    };
    let mut out = format!(
        "Interference on `{}` (simulated), {} cases ({} data points)\n\
         slowdown against alone in the same partition: {}; under 18 %: {:.1} % (gpulet Fig. 7: 90 %)\n",
        r.device,
        r.cases.len(),
        2 * r.cases.len(),
        p(&r.slowdown_pct),
        r.under_18pct * 100.0
    );
    for g in &r.gpulet {
        out += &format!(
            "gpulet's coefficients on its {} utilisations, {} of the cases: {}; under 18 %: {:.1} %\n",
            g.gpu,
            g.cases,
            p(&g.slowdown_pct),
            g.under_18pct * 100.0
        );
    }
    out += &format!(
        "fit factor = {:.3} mem_own + {:.3} mem_other + {:.3} on {} points; error on {}: {}; \
         within 13.98 %: {:.1} % (gpulet Fig. 10: 95 %)\n",
        r.fit.coef[0],
        r.fit.coef[1],
        r.fit.coef[2],
        r.fit.train,
        r.fit.validate,
        p(&r.fit.error_pct),
        r.fit.within_13_98 * 100.0
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_recovers_a_known_plane() {
        let x: Vec<[f64; 2]> = (0..20)
            .map(|i| [f64::from(i) / 10.0, f64::from((i * 7) % 11) / 5.0])
            .collect();
        let y: Vec<f64> = x.iter().map(|v| 0.3 * v[0] - 0.2 * v[1] + 1.1).collect();
        let c = fit3(&x, &y);
        for (got, want) in c.iter().zip([0.3, -0.2, 1.1]) {
            assert!((got - want).abs() < 1e-9, "{c:?}");
        }
    }

    #[test]
    fn co_running_in_partitions_is_no_faster_than_alone() {
        let reg = ModelRegistry::builtin();
        let (_, a) = reg.lookup("resnet18").unwrap();
        let (_, b) = reg.lookup("mobilenet").unwrap();
        let p = DeviceProfile::mi50();
        let (lat, done) = co_run(&p, [a, b], 2, 30, 2).unwrap();
        assert!(done.iter().all(|&d| d >= 2), "{done:?}");
        let alone_a = run_point(&p, a, 2, 30).unwrap().0 as f64;
        let alone_b = run_point(&p, b, 2, 30).unwrap().0 as f64;
        // Disjoint CUs: only the bandwidth term can slow either down.
        assert!(lat[0] >= alone_a * 0.999, "{} vs {alone_a}", lat[0]);
        assert!(lat[1] >= alone_b * 0.999, "{} vs {alone_b}", lat[1]);
    }

    #[test]
    fn the_plot_draws_both_cdfs_with_every_series() {
        let case = |fa: f64, fb: f64, g: Option<[f64; 2]>| Case {
            a: "resnet18".into(),
            b: "mobilenet".into(),
            batch: 2,
            split_a_pct: 50,
            factor_a: fa,
            factor_b: fb,
            requests: [2, 2],
            mem_a: 0.1,
            mem_b: 0.1,
            gpulet_factor: [g, None],
        };
        let r = InterferenceReport {
            simulated: true,
            device: "mi50".into(),
            models: vec![],
            cases: vec![case(1.0, 1.001, Some([1.2, 1.3])), case(1.05, 1.0, None)],
            slowdown_pct: [0.0; 5],
            under_18pct: 1.0,
            gpulet: vec![],
            fit: Fit {
                coef: [0.0, 0.0, 1.0],
                train: 3,
                validate: 1,
                error_pct: [0.0; 5],
                within_13_98: 1.0,
                errors_sorted: vec![0.5],
            },
        };
        let svg = plot(&r).unwrap();
        crate::plot::check_well_formed(&svg).unwrap();
        for want in [
            "GPU model (mi50, simulated)",
            "gpulet coefficients, 2080ti",
            "Fig. 7",
            "Fig. 10",
            "1 checked points",
        ] {
            assert!(svg.contains(want), "{want:?} missing");
        }
        // No 3080 points in these cases: no 3080 series.
        assert!(!svg.contains("3080"));
    }

    #[test]
    fn percentiles_pick_ranks() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentiles(&mut v), [50.0, 90.0, 95.0, 99.0, 100.0]);
    }
}
