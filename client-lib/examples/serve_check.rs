//! Typed requests by name against a model the daemon serves from its model
//! repository, each output checked against either version's reference
//! outputs; the Rust half of `scripts/onnx/serve-check.sh` (the C half is
//! `serve_check.c`).
//!
//! ```text
//! cargo run --release -p sluice-client --example serve_check -- SOCKET MODEL DIR N
//! ```
//!
//! `DIR` as for `serve_check.c`: `DIR/<input>.bin` (the whole batch),
//! `DIR/v1/<output>.bin` and `DIR/v2/<output>.bin`, raw little-endian f32.
//! `N` requests one after another; `N = 0`: until the file `DIR/stop`
//! exists.

use std::path::Path;
use std::process::ExitCode;

use sluice_client::{Client, Infer, Priority, last_error_message};

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Whether `got` is within 1e-4 × max |want| of `want`.
fn close_to(got: &[u8], want: &[f32]) -> bool {
    let got = f32s(got);
    let scale = want.iter().fold(0f32, |m, w| m.max(w.abs()));
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= 1e-4 * scale + 1e-30)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, socket, model, dir, n] = args.as_slice() else {
        eprintln!("usage: serve_check SOCKET MODEL DIR N");
        return ExitCode::from(2);
    };
    let (dir, n): (&Path, u64) = (Path::new(dir), n.parse().expect("N is a number"));
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let mut c = match Client::connect(socket, "serve-check-rust") {
        Ok(c) => c,
        Err(e) => {
            eprintln!("serve_check: connect: {e}: {}", last_error_message());
            return ExitCode::FAILURE;
        }
    };
    let m = match c.lookup_model(model) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("serve_check: model {model}: {e}: {}", last_error_message());
            return ExitCode::FAILURE;
        }
    };
    let inputs: Vec<(String, Vec<u8>)> = m
        .inputs
        .iter()
        .map(|t| (t.name.clone(), read(&dir.join(format!("{}.bin", t.name)))))
        .collect();
    let per_sample = m.inputs[0].bytes(1).expect("size");
    let batch = u32::try_from(inputs[0].1.len() as u64 / per_sample).expect("batch");
    let want: Vec<Vec<Vec<f32>>> = ["v1", "v2"]
        .iter()
        .map(|v| {
            m.outputs
                .iter()
                .map(|t| f32s(&read(&dir.join(v).join(format!("{}.bin", t.name)))))
                .collect()
        })
        .collect();
    let named: Vec<(&str, &[u8])> = inputs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    let (mut on, mut failed, mut mismatched) = ([0u64; 2], 0u64, 0u64);
    let stop = dir.join("stop");
    let mut r = 0u64;
    while if n > 0 { r < n } else { !stop.exists() } {
        r += 1;
        let req = Infer {
            priority: Priority::BestEffort,
            deadline_ns: 0,
            batch,
            arena_off: 0,
            inputs: &named,
        };
        match c.infer(&m, &req) {
            Ok(outs) => {
                let version = (0..2).find(|&v| {
                    outs.iter()
                        .zip(&want[v])
                        .all(|((_, got), w)| close_to(got, w))
                });
                match version {
                    Some(v) => on[v] += 1,
                    None => {
                        eprintln!("serve_check: request {r}: outputs match neither version");
                        mismatched += 1;
                    }
                }
            }
            Err(e) => {
                eprintln!("serve_check: request {r}: {e}: {}", last_error_message());
                failed += 1;
            }
        }
    }
    println!(
        "serve_check (Rust): {r} requests at batch {batch}: {} on v1, {} on v2, {failed} failed, \
         {mismatched} mismatched",
        on[0], on[1]
    );
    if failed == 0 && mismatched == 0 && on[0] + on[1] == r && r > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
