//! ONNX import (`sluice_onnx::from_bytes`, what `sluice inspect`, `sluice
//! run` and the daemon's model repository run on a model file): any bytes
//! must import or give an error whose message can be printed, never panic
//! or allocate without bound; a model that imports must check at batch 1
//! and 2 or fail with a printable error. External data resolves against an
//! empty folder, so no file is read.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sluice_graph::Limits;
use sluice_onnx::{Options, from_bytes};

fn empty_dir() -> &'static Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("sluice-fuzz-onnx-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&d);
        d
    })
}

fuzz_target!(|data: &[u8]| {
    // Tighter than the defaults so that libFuzzer's 2 GiB RSS limit holds.
    let opts = Options { limits: Limits { max_tensor_bytes: 64 << 20, max_const_bytes: 256 << 20 } };
    match from_bytes(data, Path::new("fuzz.onnx"), empty_dir(), &opts) {
        Ok(m) => {
            for b in [1, 2] {
                match m.graph.specialize(b) {
                    Ok(s) => {
                        let _ = s.flops();
                    }
                    Err(e) => {
                        let _ = e.to_string();
                    }
                }
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
