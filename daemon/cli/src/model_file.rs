//! `sluice run MODEL.onnx` and `sluice inspect MODEL.onnx`: one model file,
//! outside the daemon (the arguments are in the binary's `command/run.rs`
//! and `command/inspect.rs`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use sluice_graph::{Tensor, fmt_dims, npy};

/// What `sluice run` is asked to do.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The ONNX model file.
    pub model: PathBuf,
    /// Inputs as `NAME=FILE.npy`.
    pub inputs: Vec<String>,
    /// Folder for the outputs' `.npy` files.
    pub out: Option<PathBuf>,
    /// `cpu` or `cuda`.
    pub device: String,
    /// Batch size, or from the inputs.
    pub batch: Option<usize>,
}

/// What `sluice inspect` is asked to do.
#[derive(Debug, Clone)]
pub struct InspectRequest {
    /// The ONNX model file.
    pub model: PathBuf,
    /// Where to write the GPU model's manifest, if anywhere.
    pub manifest: Option<PathBuf>,
    /// The manifest's batch.
    pub batch: usize,
}

/// An output file name: the output's name with every character outside
/// `[A-Za-z0-9._-]` replaced by `_`, plus `.npy`.
pub fn output_file_name(output: &str) -> String {
    let s: String = output
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{s}.npy")
}

fn read_npy(path: &Path) -> Result<Tensor, String> {
    let f =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let len = f
        .metadata()
        .map_err(|e| format!("cannot stat {}: {e}", path.display()))?
        .len();
    npy::read(std::io::BufReader::new(f), len).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs `sluice run`; the text to print, or an error naming what is wrong.
pub fn run(args: &RunRequest) -> Result<String, String> {
    if args.device == "cuda" && !cfg!(feature = "cuda") {
        return Err("--device cuda: this sluice was built without CUDA; build it with `cargo build --release --features sluice-cli/cuda` (libcuda is loaded at run time)".into());
    }
    let t0 = Instant::now();
    let model = sluice_onnx::load(&args.model, &sluice_onnx::Options::default())
        .map_err(|e| e.to_string())?;
    let load_s = t0.elapsed().as_secs_f64();
    let g = &model.graph;
    let mut given = Vec::new();
    for spec in &args.inputs {
        let (name, file) = spec.split_once('=').ok_or_else(|| {
            format!(
                "--input {spec:?}: expected NAME=FILE.npy (the model's inputs: {})",
                input_list(g)
            )
        })?;
        if given.iter().any(|(n, _): &(String, Tensor)| n == name) {
            return Err(format!("--input {name} is given twice"));
        }
        given.push((name.to_owned(), read_npy(Path::new(file))?));
    }
    let batch = match args.batch {
        Some(b) => b,
        None if g.has_batch() => {
            let from = g.inputs().iter().find_map(|i| {
                let pos = i
                    .shape
                    .iter()
                    .position(|d| *d == sluice_graph::Dim::Batch)?;
                given
                    .iter()
                    .find(|(n, _)| *n == i.name)
                    .and_then(|(_, t)| t.shape().get(pos).copied())
            });
            from.ok_or_else(|| {
                format!(
                    "cannot tell the batch size: give the inputs ({}) or --batch",
                    input_list(g)
                )
            })?
        }
        None => 1,
    };
    let s = g
        .specialize(batch)
        .map_err(|e| format!("{}: {e}", args.model.display()))?;
    let refs: Vec<(&str, &Tensor)> = given.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let t1 = Instant::now();
    let outs = s
        .run(&refs)
        .map_err(|e| format!("{}: {e}", args.model.display()))?;
    let run_s = t1.elapsed().as_secs_f64();
    let mut text = String::new();
    let (outs, device_line) = if args.device == "cuda" {
        let (dev, line) = run_cuda(&s, &args.model, &given, &outs)?;
        (dev, Some(line))
    } else {
        (outs, None)
    };
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    for (name, t) in &outs {
        text.push_str(&format!("output {name}: {} {:?}", t.dtype(), t.shape()));
        if let Some(dir) = &args.out {
            let path = dir.join(output_file_name(name));
            let f = std::fs::File::create(&path)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            npy::write(std::io::BufWriter::new(f), t)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            text.push_str(&format!(" -> {}", path.display()));
        }
        text.push('\n');
    }
    text.push_str(&format!(
        "device cpu (reference executor), batch {batch}: load {:.1} ms, run {:.1} ms ({} kernels)\n",
        load_s * 1e3,
        run_s * 1e3,
        s.nodes().len()
    ));
    if let Some(line) = device_line {
        text.push_str(&line);
    }
    Ok(text)
}

/// The graph on CUDA device 0 (lowered to the kernel library): the
/// outputs to write and a line with its time and each output's largest
/// error against the CPU reference `cpu`.
#[cfg(feature = "cuda")]
fn run_cuda(
    s: &sluice_graph::Static,
    model: &Path,
    given: &[(String, Tensor)],
    cpu: &[(String, Tensor)],
) -> Result<(Vec<(String, Tensor)>, String), String> {
    let name = model
        .file_stem()
        .map_or_else(|| "model".to_owned(), |n| n.to_string_lossy().into_owned());
    let inputs: Vec<(&str, &Tensor)> = given.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut rig = sluice_cuda::open_cuda().map_err(|e| crate::error_chain(&e))?;
    let t = Instant::now();
    let out = sluice_cuda::graph_run::infer_graph_tensors(
        &mut rig.drv,
        &mut rig.q,
        &rig.lib,
        s,
        &name,
        &inputs,
        &sluice_cuda::plan_exec::LoadOptions::default(),
    )
    .map_err(|e| format!("{}: {}", model.display(), crate::error_chain(&e)))?;
    let secs = t.elapsed().as_secs_f64();
    let mut line = format!(
        "device cuda ({}): load + run {:.1} ms; largest error against the CPU reference:",
        rig.drv.info(),
        secs * 1e3
    );
    for ((oname, got), (_, reference)) in out.iter().zip(cpu) {
        let want = reference.as_f32().unwrap_or(&[]);
        let g = got.as_f32().unwrap_or(&[]);
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = g
            .iter()
            .zip(want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        line += &format!(
            " {oname} {err:.3e} ({:.2e} of max |ref| {scale:.3e});",
            if scale > 0.0 { err / scale } else { 0.0 }
        );
    }
    line.push('\n');
    Ok((out, line))
}

#[cfg(not(feature = "cuda"))]
fn run_cuda(
    _s: &sluice_graph::Static,
    _model: &Path,
    _given: &[(String, Tensor)],
    _cpu: &[(String, Tensor)],
) -> Result<(Vec<(String, Tensor)>, String), String> {
    Err("--device cuda needs a build with --features sluice-cli/cuda".into())
}

fn input_list(g: &sluice_graph::Graph) -> String {
    g.inputs()
        .iter()
        .map(|i| format!("{} {} {}", i.name, i.dtype, fmt_dims(&i.shape)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs `sluice inspect`.
pub fn inspect(args: &InspectRequest) -> Result<String, String> {
    let model = sluice_onnx::load(&args.model, &sluice_onnx::Options::default())
        .map_err(|e| e.to_string())?;
    let s = model
        .graph
        .specialize(1)
        .map_err(|e| format!("{}: {e}", args.model.display()))?;
    let mut text = sluice_onnx::summary::report(&model, Some(&s));
    if let Some(out) = &args.manifest {
        let at = model
            .graph
            .specialize(args.batch)
            .map_err(|e| format!("{}: {e}", args.model.display()))?;
        let name = args
            .model
            .file_stem()
            .map_or_else(|| "model".to_owned(), |n| n.to_string_lossy().into_owned());
        let json =
            sluice_nn::graph_manifest::manifest_json(&at, &name, &args.model.display().to_string())
                .map_err(|e| {
                    format!(
                        "{}: cannot make the GPU model's manifest: {}",
                        args.model.display(),
                        crate::error_chain(&e)
                    )
                })?;
        // The daemon's own loader checks it before it is written.
        sluice_model::Manifest::parse_with_memory(&name, &json)
            .map_err(|e| format!("generated manifest refused: {e}"))?;
        std::fs::write(out, json).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
        text.push_str(&format!(
            "manifest   {} (batch {}, estimated on h100)\n",
            out.display(),
            args.batch
        ));
    }
    Ok(text)
}
