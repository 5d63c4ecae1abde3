//! Imported ONNX models on the CUDA backend's fake driver: each fixture of
//! `scripts/onnx/make-fixtures.py` / `make-disb-models.py` (an `index.json`),
//! at its batch and with all its inputs, is lowered to the kernel library
//! (`sluice_nn::builders::lower_graph`) and, where it lowers, run through
//! the CUDA job path on the fake driver (whose kernels are the CPU
//! reference operators of the kernel ABI) and every output compared with
//! the graph's CPU executor. A model that does not lower prints the node
//! and reason. `--only NAME,...` runs just those fixtures.
//!
//! ```sh
//! cargo run --release -p sluice-cuda --features test-util --example onnx_fake_driver -- \
//!   --require vgg19,resnet50 target/onnx-fixtures/index.json
//! ```
//!
//! Exits 1 when a lowered model's output differs from the CPU executor's by
//! more than 1e-4 of that output's largest magnitude, or a `--require`d
//! model does not lower.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use sluice_cuda::plan_exec::LoadOptions;
use sluice_cuda::plan_exec::fake_abi::{self, FakeTimes};

/// One fixture: name, batch, model file, its inputs by name.
type Fixture = (String, usize, PathBuf, Vec<(String, PathBuf)>);

fn fixtures(index: &Path) -> Result<Vec<Fixture>, String> {
    let text = std::fs::read_to_string(index).map_err(|e| format!("{}: {e}", index.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", index.display()))?;
    let dir = index.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for e in v.as_array().ok_or("index.json is not a list")? {
        let batch = e
            .get("batch")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(1) as usize;
        let inputs = e
            .get("inputs")
            .and_then(|i| i.as_object())
            .ok_or("an entry has no inputs")?
            .iter()
            .map(|(k, v)| (k.clone(), dir.join(v.as_str().unwrap_or(""))))
            .collect();
        let name = e["name"].as_str().unwrap_or("?").to_owned();
        let model = dir.join(e["model"].as_str().unwrap_or(""));
        out.push((name, batch, model, inputs));
    }
    Ok(out)
}

fn read_npy(p: &Path) -> Result<sluice_graph::Tensor, String> {
    let f = std::fs::File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    sluice_graph::npy::read(std::io::BufReader::new(f), len).map_err(|e| e.to_string())
}

/// The largest error of any output relative to that output's largest
/// magnitude; `None` when the model does not lower.
fn run_one(
    name: &str,
    batch: usize,
    model: &Path,
    inputs: &[(String, PathBuf)],
) -> Result<Option<f32>, String> {
    let m = sluice_onnx::load(model, &Default::default()).map_err(|e| e.to_string())?;
    let s = m.graph.specialize(batch).map_err(|e| e.to_string())?;
    let kernels = match sluice_nn::builders::lower(&s, name) {
        Ok((p, _)) => p.steps().len(),
        Err(e) => {
            println!("{name}: not lowered: {e}");
            return Ok(None);
        }
    };
    let xs: Vec<(String, sluice_graph::Tensor)> = inputs
        .iter()
        .map(|(n, p)| read_npy(p).map(|t| (n.clone(), t)))
        .collect::<Result<_, _>>()?;
    let named: Vec<(&str, &sluice_graph::Tensor)> =
        xs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let want = s.run(&named).map_err(|e| e.to_string())?;
    let (mut d, mut q, lib) = fake_abi::rig(FakeTimes::default());
    let got = sluice_cuda::graph_run::infer_graph_tensors(
        &mut d,
        &mut q,
        &lib,
        &s,
        name,
        &named,
        &LoadOptions::default(),
    )
    .map_err(|e| error_chain(&e))?;
    let mut worst = 0f32;
    let mut line = String::new();
    for ((wn, w), (gn, g)) in want.iter().zip(&got) {
        let (w, g) = (
            w.as_f32().ok_or("an output is not f32")?,
            g.as_f32().ok_or("an output is not f32")?,
        );
        if wn != gn || w.len() != g.len() {
            return Err(format!(
                "output {gn} ({} values) against the CPU's {wn} ({})",
                g.len(),
                w.len()
            ));
        }
        let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = g.iter().zip(w).fold(0f32, |m, (a, b)| {
            if a.is_nan() != b.is_nan() {
                f32::INFINITY
            } else {
                m.max((a - b).abs())
            }
        });
        let rel = err / scale.max(1e-30);
        worst = worst.max(rel);
        line += &format!(" {gn}: {err:.3e} of max |ref| {scale:.3e} ({rel:.2e});");
    }
    println!("{name}: {kernels} kernels on the fake driver, largest error{line}");
    Ok(Some(worst))
}

/// An error with its sources, one clause each.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s += &format!(": {c}");
        src = c.source();
    }
    s
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut require: Vec<String> = Vec::new();
    if let Some(i) = args.iter().position(|a| a == "--require") {
        if i + 1 >= args.len() {
            eprintln!("--require takes a comma-separated list of fixture names");
            return ExitCode::from(2);
        }
        require = args[i + 1].split(',').map(str::to_owned).collect();
        args.drain(i..=i + 1);
    }
    let mut only: Vec<String> = Vec::new();
    if let Some(i) = args.iter().position(|a| a == "--only") {
        if i + 1 >= args.len() {
            eprintln!("--only takes a comma-separated list of fixture names");
            return ExitCode::from(2);
        }
        only = args[i + 1].split(',').map(str::to_owned).collect();
        args.drain(i..=i + 1);
    }
    if args.is_empty() {
        eprintln!("usage: onnx_fake_driver [--require NAME,...] [--only NAME,...] INDEX.json...");
        return ExitCode::from(2);
    }
    let (mut lowered, mut failed) = (Vec::new(), 0usize);
    for index in &args {
        let list = match fixtures(Path::new(index)) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        };
        for (name, batch, model, inputs) in list {
            if !only.is_empty() && !only.contains(&name) {
                continue;
            }
            match run_one(&name, batch, &model, &inputs) {
                Ok(Some(rel)) if rel <= 1e-4 => lowered.push(name),
                Ok(Some(rel)) => {
                    println!("{name}: FAIL: relative error {rel:.2e} above 1e-4");
                    failed += 1;
                }
                Ok(None) => {}
                Err(e) => {
                    println!("{name}: FAIL: {e}");
                    failed += 1;
                }
            }
        }
    }
    for r in &require {
        if !lowered.contains(r) {
            println!("{r}: FAIL: required to lower and match, did not");
            failed += 1;
        }
    }
    println!("{} passed, {failed} failed", lowered.len());
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
