//! Imported ONNX models on the CUDA backend's fake driver: each fixture of
//! `scripts/onnx/make-fixtures.py` / `make-disb-models.py` (an `index.json`)
//! with one input, at batch 1, is lowered to the kernel library
//! (`sluice_nn::builders::lower`) and, where it lowers, run through the
//! CUDA job path on the fake driver (whose kernels are the CPU reference
//! operators of the kernel ABI) and compared with the graph's CPU executor.
//! A model that does not lower prints the node and reason.
//!
//! ```sh
//! cargo run --release -p sluice-cuda --features test-util --example onnx_fake_driver -- \
//!   --require vgg19,resnet50 target/onnx-fixtures/index.json
//! ```
//!
//! Exits 1 when a lowered model's output differs from the CPU executor's by
//! more than 1e-4 of its largest magnitude, or a `--require`d model does not
//! lower.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use sluice_cuda::plan_exec::LoadOptions;
use sluice_cuda::plan_exec::fake_abi::{self, FakeTimes};

/// One fixture: name, model file, its one input file.
fn fixtures(index: &Path) -> Result<Vec<(String, PathBuf, PathBuf)>, String> {
    let text = std::fs::read_to_string(index).map_err(|e| format!("{}: {e}", index.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", index.display()))?;
    let dir = index.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for e in v.as_array().ok_or("index.json is not a list")? {
        let batch = e
            .get("batch")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(1);
        let inputs = e
            .get("inputs")
            .and_then(|i| i.as_object())
            .ok_or("an entry has no inputs")?;
        if batch != 1 || inputs.len() != 1 {
            continue;
        }
        let name = e["name"].as_str().unwrap_or("?").to_owned();
        let model = dir.join(e["model"].as_str().unwrap_or(""));
        let input = dir.join(
            inputs
                .values()
                .next()
                .and_then(|v| v.as_str())
                .unwrap_or(""),
        );
        out.push((name, model, input));
    }
    Ok(out)
}

fn run_one(name: &str, model: &Path, input: &Path) -> Result<Option<f32>, String> {
    let m = sluice_onnx::load(model, &Default::default()).map_err(|e| e.to_string())?;
    let s = m.graph.specialize(1).map_err(|e| e.to_string())?;
    if let Err(e) = sluice_nn::builders::lower(&s, name) {
        println!("{name}: not lowered: {e}");
        return Ok(None);
    }
    let f = std::fs::File::open(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    let x = sluice_graph::npy::read(std::io::BufReader::new(f), len).map_err(|e| e.to_string())?;
    let want = s
        .run(&[(s.inputs()[0].name.as_str(), &x)])
        .map_err(|e| e.to_string())?
        .remove(0)
        .1;
    let (mut d, mut q, lib) = fake_abi::rig(FakeTimes::default());
    let xin = x.as_f32().ok_or("the input is not f32")?;
    let got = sluice_cuda::graph_run::infer_graph(
        &mut d,
        &mut q,
        &lib,
        &s,
        name,
        xin,
        &LoadOptions::default(),
    )
    .map_err(|e| sluice_service_free_chain(&e))?;
    let w = want.as_f32().ok_or("the output is not f32")?;
    if got.len() != w.len() {
        return Err(format!(
            "{} outputs against the CPU's {}",
            got.len(),
            w.len()
        ));
    }
    let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = got
        .iter()
        .zip(w)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    let kernels = sluice_nn::builders::lower(&s, name)
        .map(|(p, _)| p.steps().len())
        .unwrap_or(0);
    println!(
        "{name}: {kernels} kernels on the fake driver, largest error {err:.3e} against max |ref| {scale:.3e} ({:.2e})",
        err / scale.max(1e-30)
    );
    Ok(Some(err / scale.max(1e-30)))
}

/// An error with its sources, one clause each.
fn sluice_service_free_chain(e: &dyn std::error::Error) -> String {
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
    if args.is_empty() {
        eprintln!("usage: onnx_fake_driver [--require NAME,...] INDEX.json...");
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
        for (name, model, input) in list {
            match run_one(&name, &model, &input) {
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
