//! What one re-plan of 16 models on 8 GPUs costs: `plan_with_scaling`
//! around `GpuletInt` (gpulet's linear interference model) and, as the
//! baseline measured in the same run, around `Gpulet`, each timed over
//! repeated runs, starting from the GPU count in use and from one GPU. The daemon's cluster backend makes the same call once per
//! `cluster.replan_ms` on its planner thread (`cluster.planner =
//! "gpulet+int"`, `cluster.scaling = true`).
//!
//! ```sh
//! cargo run --release -p sluice-planner --example replan_cost -- [GPULET_DIR] [RUNS]
//! ```
//!
//! Inputs: the latency tables are synthetic (stated below, not measured);
//! the interference coefficients and utilisations are the gpulet authors'
//! measurements (`INT_MODEL_CONSTANT.CSV`, `UTIL.CSV` in `GPULET_DIR`,
//! default the built-in copy of the repository's `data/gpulet/2080ti`), the 16
//! models mapped onto its 9 bench names in turn. The rates are scaled up
//! until gpulet+int needs 7 or 8 of the 8 GPUs.

use std::time::Instant;

use sluice_planner::{
    GpuSpec, Gpulet, GpuletInt, LatencyTable, LinearInterference, ModelSpec, PartitionSizes,
    Planner, plan_with_scaling,
};

const MODELS: usize = 16;
const GPUS: u32 = 8;

/// Synthetic `L(b, p)`, ms: model `i`'s whole-GPU batch-1 time `k`
/// grows with `i` (0.6 to 4.35 ms), a batch costs `k·(0.3 + 0.7·b^0.9)`,
/// and a `p` % partition stretches it by `(100/p)^0.7` (a partition is
/// less than proportionally slower: the knee gpulet looks for).
fn table(i: usize) -> LatencyTable {
    let k = 0.6 + 0.25 * i as f64;
    LatencyTable::from_fn(
        vec![1, 2, 4, 8, 16, 32],
        vec![20, 40, 50, 60, 80, 100],
        |b, p| k * (0.3 + 0.7 * f64::from(b).powf(0.9)) * (100.0 / f64::from(p)).powf(0.7),
    )
    .expect("a valid table")
}

fn specs(scale: f64) -> Vec<ModelSpec> {
    (0..MODELS)
        .map(|i| ModelSpec {
            name: format!("m{i:02}"),
            slo_ms: [50.0, 100.0, 200.0][i % 3],
            rate_rps: scale * (50.0 + 25.0 * (i % 5) as f64),
            mem_mb: 1000,
            profile: table(i),
        })
        .collect()
}

fn time(
    planner: &dyn Planner,
    models: &[ModelSpec],
    gpus: &GpuSpec,
    from: u32,
    runs: usize,
) -> Vec<f64> {
    let mut us: Vec<f64> = (0..runs)
        .map(|_| {
            let t0 = Instant::now();
            let r = plan_with_scaling(planner, models, gpus, from, GPUS);
            let dt = t0.elapsed().as_secs_f64() * 1e6;
            std::hint::black_box(r).expect("schedulable");
            dt
        })
        .collect();
    us.sort_by(f64::total_cmp);
    us
}

fn main() {
    let mut args = std::env::args().skip(1);
    let data = match args.next() {
        Some(dir) => LinearInterference::load_dir(std::path::Path::new(&dir)),
        None => LinearInterference::builtin("2080ti"),
    }
    .unwrap_or_else(|e| panic!("{e}; give a folder of the two files as the first argument"));
    let runs: usize = args
        .next()
        .map_or(25, |r| r.parse().expect("RUNS is a number"));
    let benches: Vec<&String> = data.util.keys().collect();
    let mut intf = LinearInterference::new(data.coeffs);
    for i in 0..MODELS {
        let b = benches[i % benches.len()];
        intf = intf.with_util(&format!("m{i:02}"), data.util[b].clone());
    }
    let int = GpuletInt::new(intf);
    let gpus = GpuSpec::new(GPUS, 16_000, 10).with_sizes(PartitionSizes::gpulet());

    // The largest rate scale (5 % steps) gpulet+int still serves on 8 GPUs.
    let mut scale = 1.0;
    let mut used = 0;
    while let Ok((_, n)) = plan_with_scaling(&int, &specs(scale * 1.05), &gpus, 1, GPUS) {
        scale *= 1.05;
        used = n;
    }
    let models = specs(scale);
    let total: f64 = models.iter().map(|m| m.rate_rps).sum();
    println!(
        "{MODELS} models, {total:.0} requests/s in all (rate scale {scale:.2}); gpulet+int uses \
         {used} of {GPUS} GPUs; {runs} runs each, release build"
    );
    // From the count in use (a steady period: one planner run) and from
    // one GPU (the first plan, or a jump from low to high rates: a run per
    // count tried).
    let cases = [
        ("gpulet+int", &int as &dyn Planner, used),
        ("gpulet", &Gpulet, used),
        ("gpulet+int", &int, 1),
        ("gpulet", &Gpulet, 1),
    ];
    for (name, p, from) in cases {
        let us = time(p, &models, &gpus, from, runs);
        let q = |f: f64| us[((us.len() - 1) as f64 * f).round() as usize];
        println!(
            "{name:>10} from {from} GPU(s): median {:.0} µs, min {:.0} µs, p90 {:.0} µs, max {:.0} µs",
            q(0.5),
            us[0],
            q(0.9),
            us[us.len() - 1]
        );
    }
}
