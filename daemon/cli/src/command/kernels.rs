//! `sluice kernels list|ptx`: sluice's CUDA kernel library.

use std::path::PathBuf;
use std::process::ExitCode;

use sluice_cuda::kernels::{self, Kernel};

use super::fail;

/// What `sluice kernels` does.
#[derive(clap::Subcommand, Debug)]
pub enum Kernels {
    /// Print every kernel: source file, block size, grid rule, whether its
    /// main loop polls the preemption flag, and its parameters.
    List,
    /// Compile every kernel source to PTX with NVRTC (needs a build with
    /// `--features cuda` and libnvrtc.so.12 on LD_LIBRARY_PATH; no GPU) and
    /// write DIR/<file>.compute_XY.ptx.
    Ptx {
        /// Target architectures: sm_80, compute_90, 80, ... (repeat or list).
        #[arg(long, value_delimiter = ',', default_value = "sm_80")]
        arch: Vec<String>,
        /// Directory for the .ptx files (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

/// Lists or compiles the kernels.
pub fn run(which: Kernels) -> ExitCode {
    match which {
        Kernels::List => {
            println!(
                "{:<22} {:<13} {:>5}  {:<38} {:<5}  params after (ctl, kidx)",
                "kernel", "file", "block", "grid", "polls"
            );
            for k in Kernel::ALL {
                println!(
                    "{:<22} {:<13} {:>5}  {:<38} {:<5}  {}",
                    k.name(),
                    k.file(),
                    k.block_threads(),
                    k.grid_rule(),
                    if k.polls() { "yes" } else { "no" },
                    k.params()
                );
            }
            println!(
                "{} kernels in {} files; dynamic shared memory 0 for all; \
                 main loops poll every {} iterations (synthetic: every iteration)",
                Kernel::ALL.len(),
                kernels::SOURCES.len(),
                kernels::POLL_EVERY
            );
            ExitCode::SUCCESS
        }
        Kernels::Ptx { arch, out } => ptx(&arch, &out),
    }
}

#[cfg(feature = "cuda")]
fn ptx(arches: &[String], out: &std::path::Path) -> ExitCode {
    // Refuse a bad --arch before looking for libnvrtc.
    if let Some(e) = arches.iter().find_map(|a| kernels::Arch::parse(a).err()) {
        return fail(e);
    }
    let (major, minor) = match kernels::nvrtc_version() {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    if let Err(e) = std::fs::create_dir_all(out) {
        return fail(format!("cannot create {}: {e}", out.display()));
    }
    for arch in arches {
        let modules = match kernels::compile_ptx(arch) {
            Ok(m) => m,
            Err(e) => return fail(e),
        };
        let mut n = 0;
        for m in &modules {
            let path = out.join(m.ptx_file_name());
            if let Err(e) = std::fs::write(&path, &m.ptx) {
                return fail(format!("cannot write {}: {e}", path.display()));
            }
            if !m.log.is_empty() {
                eprintln!("{} ({}): NVRTC says:\n{}", m.file, m.arch, m.log);
            }
            let names: Vec<&str> = m.kernels.iter().map(|k| k.name()).collect();
            println!("{}  {}", path.display(), names.join(" "));
            n += m.kernels.len();
        }
        let arch = modules.first().map_or(arch.as_str(), |m| m.arch.as_str());
        println!(
            "kernels: {n} compiled for {arch} in {} files (NVRTC {major}.{minor})",
            modules.len()
        );
    }
    ExitCode::SUCCESS
}

#[cfg(not(feature = "cuda"))]
fn ptx(_arches: &[String], _out: &std::path::Path) -> ExitCode {
    fail(
        "this sluice was built without `--features cuda`, so it cannot run NVRTC; \
         rebuild with `cargo build --release --features sluice-cli/cuda` \
         (no GPU or CUDA toolkit needed to build; libnvrtc.so.12 at run time)",
    )
}
