//! `sluice profile --device <profile|cuda> MODEL`: L(b, p) on the GPU model
//! ([`sluice_cli::profile_sim`]), or a model measured on CUDA device 0
//! ([`sluice_cuda::measure`]).

use std::path::PathBuf;
use std::process::ExitCode;

use sluice_gpu::DeviceProfile;

use super::{fail, fail_chain, parse, print_json, progress};

/// Profile a model. On a simulated device (`--device mi50|gv100|h100`):
/// its latency L(b, p) at every batch size b and partition size p (percent
/// of the CUs) on the GPU model, the table the multi-GPU planners take
/// (docs/planners.md). On `--device cuda`: time every kernel on CUDA device
/// 0 and write its manifest with the measured kernel and block times
/// (needs a build with `--features cuda`).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// `cuda` (CUDA device 0) or a simulated device profile.
    #[arg(long, value_parser = profile_device)]
    device: String,
    /// The model: on a simulated device a built-in manifest (alexnet,
    /// bert205, bert_base, densenet, efficientnet_b0, gpt2, inception,
    /// mnasnet, mobilenet, resnet152, resnet18, resnet50, vgg16, vgg19,
    /// yolov3; docs/models.md); on
    /// cuda a builder: vgg19, resnet152, bert_base or gpt2 (with
    /// --partitions: any built-in manifest, run as synthetic kernels).
    model: String,
    /// Batch sizes (simulated device: default 1,2,4,8,16,32; cuda, with
    /// --partitions: default 1).
    #[arg(long, value_delimiter = ',')]
    batches: Vec<u32>,
    /// Partition sizes, percent of the CUs (simulated device: default
    /// 10,20,...,100). On cuda: measure the model's latency in green
    /// contexts of that share of the SMs, and the cost of switching a
    /// stream between them, instead of timing kernels.
    #[arg(long, value_delimiter = ',')]
    partitions: Vec<u32>,
    /// On cuda: measure pairwise interference instead: MODEL in a partition
    /// of --split % of the SMs and OTHER (any built-in manifest) in the
    /// granules above it, each timed alone and while the other runs back to
    /// back; --batches gives MODEL's batch and OTHER's (default 1,1).
    #[arg(long, value_name = "OTHER", conflicts_with = "partitions")]
    pair: Option<String>,
    /// With --pair: MODEL's share of the SMs, percent.
    #[arg(long, default_value_t = 50, requires = "pair", value_parser = clap::value_parser!(u32).range(1..=99))]
    split: u32,
    /// Print one JSON object instead of a table (simulated device, or
    /// cuda with --partitions or --pair).
    #[arg(long)]
    json: bool,
    /// The manifest to write. On cuda (default: <model>.json here) the
    /// measured manifest; on a simulated device, and on cuda with
    /// --partitions (no default for either), the L(b, p) table goes into
    /// this manifest as its `lbp` entry for the device (the profile's name,
    /// or the CUDA device's), starting from the built-in manifest when the
    /// file is new (`[cluster]` then reads it instead of profiling at
    /// start-up; `sluice bench cluster --tables DIR` plans and serves on
    /// it).
    #[arg(long, value_name = "FILE.json")]
    out: Option<PathBuf>,
    /// Timed runs per kernel (the median is kept); on cuda with
    /// --partitions, timed requests per point and partitions created for
    /// the first-use switch cost (at most 100).
    #[arg(long, default_value_t = sluice_cuda::measure::DEFAULT_REPS, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    reps: u32,
    /// The Small build (same layers, shrunk shapes).
    #[arg(long)]
    small: bool,
    /// Seed of the weights (the input's is seed + 1).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// `cuda` or a built-in device profile.
fn profile_device(s: &str) -> Result<String, String> {
    if s == "cuda" || DeviceProfile::builtin_names().any(|n| n == s) {
        Ok(s.into())
    } else {
        Err(format!(
            "`{s}` is not a device; use cuda or a simulated profile ({})",
            DeviceProfile::builtin_names()
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

/// Profiles on the GPU model, or on CUDA (kernel times, or the partition
/// curve with `--partitions`).
pub fn run(a: Args) -> ExitCode {
    if let Some(other) = &a.pair {
        if a.device != "cuda" {
            return fail(
                "--pair measures two partitions of a real GPU busy at once: give --device cuda",
            );
        }
        let batches = match a.batches.as_slice() {
            [] => (1, 1),
            [x] => (*x, *x),
            [x, y] => (*x, *y),
            more => {
                return fail(format!(
                    "--batches with --pair takes MODEL's batch and OTHER's, not {} values",
                    more.len()
                ));
            }
        };
        return cuda_pair(&a.model, other, batches, a.split, a.reps, a.json);
    }
    if a.device != "cuda" {
        return on_sim(&a.device, &a.model, a.batches, a.partitions, a.json, a.out);
    }
    if !a.partitions.is_empty() {
        let batches = if a.batches.is_empty() {
            vec![1]
        } else {
            a.batches
        };
        return cuda_partitions(&a.model, &batches, &a.partitions, a.reps, a.json, a.out);
    }
    if !a.batches.is_empty() {
        return fail(
            "--batches on cuda goes with --partitions (the partition latency curve); \
             drop it to time the kernels at batch 1",
        );
    }
    if let Err(e) = parse::model_builder(&a.model) {
        return fail(e);
    }
    cuda_kernels(&a.model, a.out, a.reps, a.small, a.seed)
}

/// `sluice profile --device <simulated profile>`: L(b, p) on the GPU model.
fn on_sim(
    device: &str,
    model: &str,
    batches: Vec<u32>,
    partitions: Vec<u32>,
    json: bool,
    out: Option<PathBuf>,
) -> ExitCode {
    use sluice_cli::profile_sim as ps;
    let profile = match DeviceProfile::builtin(device) {
        Ok(p) => p,
        Err(e) => return fail_chain(&e),
    };
    let reg = sluice_model::ModelRegistry::builtin();
    let Some((_, m)) = reg.lookup(model) else {
        let names: Vec<&str> = reg.iter().map(|(_, m)| m.name()).collect();
        return fail(format!(
            "no model `{model}`; use one of {}",
            names.join(", ")
        ));
    };
    let batches = if batches.is_empty() {
        ps::DEFAULT_BATCHES.to_vec()
    } else {
        batches
    };
    let partitions = if partitions.is_empty() {
        ps::DEFAULT_PARTITIONS.to_vec()
    } else {
        partitions
    };
    let r = ps::profile(
        &profile,
        m,
        &batches,
        &partitions,
        progress("sluice profile", "points"),
    );
    if let (Ok(r), Some(path)) = (&r, &out) {
        if let Err(e) = ps::write_into_manifest(r, path) {
            return fail_chain(&e);
        }
        eprintln!(
            "sluice profile: wrote the L(b, p) table of `{device}` into {}",
            path.display()
        );
    }
    match r {
        Ok(r) if json => print_json(&r),
        Ok(r) => {
            print!("{}", ps::table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => fail_chain(&e),
    }
}

/// `sluice profile --device cuda`: every kernel timed, the measured
/// manifest written.
#[cfg(feature = "cuda")]
fn cuda_kernels(model: &str, out: Option<PathBuf>, reps: u32, small: bool, seed: u64) -> ExitCode {
    use sluice_cuda::measure as cm;
    use sluice_cuda::plan_exec::LoadOptions;
    use sluice_nn::builders::{self, BuildOptions, Scale};
    let scale = if small { Scale::Small } else { Scale::Full };
    let built = match builders::build(model, &BuildOptions { scale }) {
        Ok(b) => b,
        Err(e) => return fail_chain(&e),
    };
    let mut rig = match sluice_cuda::open_cuda() {
        Ok(r) => r,
        Err(e) => return fail_chain(&e),
    };
    let info = rig.drv.info().clone();
    eprintln!("sluice profile: {info}");
    let on = cm::MeasuredOn {
        device: info.name.clone(),
        sms: u32::try_from(info.sm_count).unwrap_or(1),
        date: cm::today(),
        reps,
    };
    let mut progress = progress("sluice profile", "kernels timed");
    let r = match cm::profile_model(
        &mut rig.drv,
        &mut rig.q,
        &rig.lib,
        &built,
        seed,
        &on,
        &LoadOptions::default(),
        &mut progress,
    ) {
        Ok(r) => r,
        Err(e) => return fail_chain(&e),
    };
    print!("{}", r.table());
    let path = out.unwrap_or_else(|| PathBuf::from(format!("{}.json", r.model)));
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        return fail(format!("cannot create {}: {e}", dir.display()));
    }
    if let Err(e) = std::fs::write(&path, &r.manifest_json) {
        return fail(format!("cannot write {}: {e}", path.display()));
    }
    println!("wrote the measured manifest {}", path.display());
    ExitCode::SUCCESS
}

/// `sluice profile --device cuda MODEL --partitions …`: the partition
/// latency curve on green contexts and the switch cost.
#[cfg(feature = "cuda")]
fn cuda_partitions(
    model: &str,
    batches: &[u32],
    partitions: &[u32],
    reps: u32,
    json: bool,
    out: Option<PathBuf>,
) -> ExitCode {
    use sluice_cuda::measure as cm;
    let reg = sluice_model::ModelRegistry::builtin();
    let Some((_, m)) = reg.lookup(model) else {
        return fail(format!("no built-in manifest `{model}`"));
    };
    let (mut gpu, info) = match sluice_cuda::open_device0(sluice_cuda::Kill::Cooperative) {
        Ok(g) => g,
        Err(e) => return fail_chain(&e),
    };
    eprintln!("sluice profile: {info}");
    let mut progress = progress("sluice profile", "points");
    let r = cm::partition_profile(
        &mut gpu,
        &info.name,
        m,
        batches,
        partitions,
        reps,
        &mut progress,
    );
    if let (Ok(r), Some(path)) = (&r, &out) {
        let t = r.lbp_table();
        let entry = match serde_json::to_value(&t) {
            Ok(v) => v,
            Err(e) => return fail(format!("cannot encode the L(b, p) table: {e}")),
        };
        if let Err(e) =
            sluice_cli::profile_sim::write_device_entry(&r.model, path, "lbp", &t.device, entry)
        {
            return fail_chain(&e);
        }
        eprintln!(
            "sluice profile: wrote the L(b, p) table of `{}` into {}",
            t.device,
            path.display()
        );
    }
    match r {
        Ok(r) if json => print_json(&r),
        Ok(r) => {
            print!("{}", r.table());
            ExitCode::SUCCESS
        }
        Err(e) => fail_chain(&e),
    }
}

/// `sluice profile --device cuda MODEL --pair OTHER`: two partitions busy
/// at once.
#[cfg(feature = "cuda")]
fn cuda_pair(
    model: &str,
    other: &str,
    (batch_a, batch_b): (u32, u32),
    split: u32,
    reps: u32,
    json: bool,
) -> ExitCode {
    use sluice_cuda::measure as cm;
    let reg = sluice_model::ModelRegistry::builtin();
    let look = |m: &str| {
        reg.lookup(m)
            .map(|(_, x)| x)
            .ok_or_else(|| format!("no built-in manifest `{m}`"))
    };
    let (a, b) = match (look(model), look(other)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    let (mut gpu, info) = match sluice_cuda::open_device0(sluice_cuda::Kill::Cooperative) {
        Ok(g) => g,
        Err(e) => return fail_chain(&e),
    };
    eprintln!("sluice profile: {info}");
    let mut progress = progress("sluice profile", "measurements");
    match cm::pair_profile(
        &mut gpu,
        &info.name,
        (a, batch_a),
        (b, batch_b),
        split,
        reps,
        &mut progress,
    ) {
        Ok(r) if json => print_json(&r),
        Ok(r) => {
            print!("{}", r.table());
            ExitCode::SUCCESS
        }
        Err(e) => fail_chain(&e),
    }
}

/// `sluice profile --device cuda MODEL --pair OTHER` in a build without the
/// backend.
#[cfg(not(feature = "cuda"))]
fn cuda_pair(
    _model: &str,
    _other: &str,
    _batches: (u32, u32),
    _split: u32,
    _reps: u32,
    _json: bool,
) -> ExitCode {
    super::check::no_cuda("profile")
}

/// `sluice profile --device cuda` in a build without the backend.
#[cfg(not(feature = "cuda"))]
fn cuda_kernels(
    _model: &str,
    _out: Option<PathBuf>,
    _reps: u32,
    _small: bool,
    _seed: u64,
) -> ExitCode {
    super::check::no_cuda("profile")
}

/// `sluice profile --device cuda --partitions` in a build without the
/// backend.
#[cfg(not(feature = "cuda"))]
fn cuda_partitions(
    _model: &str,
    _batches: &[u32],
    _partitions: &[u32],
    _reps: u32,
    _json: bool,
    _out: Option<PathBuf>,
) -> ExitCode {
    super::check::no_cuda("profile")
}
