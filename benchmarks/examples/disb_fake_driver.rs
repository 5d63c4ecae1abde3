//! DISB on the DISB models' ONNX files, through the daemon's CUDA server
//! on the fake driver: what `sluice bench disb --device cuda --models DIR`
//! runs on a GPU, with every kernel run by its CPU twin in fake device
//! memory. It checks the path (the files lowered, loaded and served under
//! each policy, every request completed), not the figures: the fake
//! device's clock moves as it is polled, not in real time.
//!
//! ```text
//! python3 scripts/onnx/make-disb-models.py --out target/onnx-disb-small --small
//! cargo run --release -p sluice-bench --features test-util --example disb_fake_driver -- \
//!     target/onnx-disb-small/models [--workload A,D] [--policy reef,streams] [--duration-ms 300]
//! ```
//!
//! Exit status 0 when every run completed all its requests and every
//! workload's real-time client finished at least one.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use sluice_bench::disb::{self, DisbOptions, DisbWorkload};
use sluice_bench::error_chain;
use sluice_cuda::serve::{ServeOptions, fake_server_with_graphs};
use sluice_sched::PolicyKind;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("disb_fake_driver: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<bool, String> {
    let mut args = std::env::args().skip(1);
    let mut dir = None;
    let mut workloads = vec![DisbWorkload::A, DisbWorkload::D];
    let mut policies = vec![PolicyKind::Reef, PolicyKind::Streams, PolicyKind::Paella];
    let mut duration_ms = 300;
    while let Some(a) = args.next() {
        let mut value = |what: &str| args.next().ok_or(format!("{a} takes {what}"));
        match a.as_str() {
            "--workload" => {
                workloads = value("a list such as A,D")?
                    .split(',')
                    .map(|w| DisbWorkload::from_letter(w).ok_or(format!("no workload {w:?}")))
                    .collect::<Result<_, _>>()?;
            }
            "--policy" => {
                policies = value("a list such as reef,streams")?
                    .split(',')
                    .map(|p| PolicyKind::from_name(p).ok_or(format!("no policy {p:?}")))
                    .collect::<Result<_, _>>()?;
            }
            "--duration-ms" => {
                duration_ms = value("milliseconds")?
                    .parse()
                    .map_err(|e| format!("--duration-ms: {e}"))?;
            }
            _ if dir.is_none() && !a.starts_with('-') => dir = Some(PathBuf::from(a)),
            _ => return Err(format!("unknown argument {a:?}; see the example's docs")),
        }
    }
    let dir = dir.ok_or("give the folder of the DISB models' ONNX files")?;
    let (models, graphs, scale) = disb::onnx_models(&dir).map_err(|e| error_chain(&e))?;
    let shared = Arc::new(models.clone());
    let serve = ServeOptions {
        scale,
        ..ServeOptions::default()
    };
    let factory = Box::new(move |kind: PolicyKind| {
        fake_server_with_graphs(kind, shared.clone(), &serve, &graphs).map_err(|e| error_chain(&e))
    });
    let opts = DisbOptions {
        workloads,
        policies,
        device: "cuda".into(),
        duration_ms: Some(duration_ms),
        ..DisbOptions::default()
    };
    let mut progress = disb::stderr_progress();
    let r = disb::run_served(&opts, models, factory, "fake CUDA device", &mut progress)
        .map_err(|e| error_chain(&e))?;
    print!("{}", disb::table(&r));
    let mut ok = true;
    for c in &r.results {
        let line = format!(
            "{}/{}: {} real-time requests, {} unfinished",
            c.workload, c.policy, c.rt_norm_latency.count, c.unfinished
        );
        if c.rt_norm_latency.count == 0 || c.unfinished > 0 {
            ok = false;
            println!("FAIL {line}");
        } else {
            println!("PASS {line}");
        }
    }
    println!(
        "{} runs on {} ONNX models: {}",
        r.results.len(),
        r.standalone.len(),
        if ok { "all passed" } else { "FAILED" }
    );
    Ok(ok)
}
