//! One module per subcommand of `sluice`: its arguments (a clap `Args`
//! struct whose doc comment is the command's help) and a short `run` that
//! calls library code and prints the result. `bench`, `train` and
//! `kernels` group their subcommands in an enum of their own.
//!
//! Adding a subcommand `sluice foo`: write `command/foo.rs` with `pub
//! struct Args` and `pub fn run(args: Args) -> ExitCode`, declare it here,
//! and add `Foo(command::foo::Args)` to `Cmd` in `main.rs` with its arm in
//! `main`'s `match` (`sluice bench foo`: the same under `command/bench/`).

pub mod bench;
pub mod bench_client;
pub mod check;
pub mod client;
pub mod completions;
pub mod demo;
pub mod inspect;
pub mod kernels;
pub mod models;
pub mod parse;
pub mod profile;
pub mod run;
pub mod split;
pub mod status;
pub mod top;
pub mod train;

use std::path::PathBuf;
use std::process::ExitCode;

/// Prints `sluice: error: {msg}` on stderr; exit status 1.
pub fn fail(msg: impl std::fmt::Display) -> ExitCode {
    // Ends a progress line left open, so the error starts a line of its own.
    if PROGRESS_OPEN.swap(false, std::sync::atomic::Ordering::Relaxed) {
        eprintln!();
    }
    eprintln!("sluice: error: {msg}");
    ExitCode::FAILURE
}

/// A [`progress`] line is on stderr without its newline yet.
static PROGRESS_OPEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Fails with [`sluice_cli::error_chain`].
pub fn fail_chain(e: &dyn std::error::Error) -> ExitCode {
    fail(sluice_cli::error_chain(e))
}

/// Prints `v` as one line of JSON.
pub fn print_json<T: serde::Serialize>(v: &T) -> ExitCode {
    match serde_json::to_string(v) {
        Ok(s) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// This executable, which the demo and the IPC benchmark start again as
/// their client processes (`__client`, `__bench-client`).
pub fn exe() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find the sluice executable: {e}"))
}

/// A progress line on stderr, rewritten in place: `what: done/total unit`,
/// ended with a newline when `done` reaches `total`.
pub fn progress(what: &'static str, unit: &'static str) -> impl FnMut(usize, usize) {
    move |done, total| {
        eprint!("\r{what}: {done}/{total} {unit}");
        let open = done != total;
        if !open {
            eprintln!();
        }
        PROGRESS_OPEN.store(open, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Sets up the process for the learned planners' commands (`train inss`,
/// `bench inss`): one rayon thread unless `RAYON_NUM_THREADS` says
/// otherwise, and [`keep_freed_memory`]. Called before any thread starts.
pub fn prepare_learned() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        // SAFETY: no thread has been started yet (argument parsing only),
        // so nothing can read the environment concurrently. One thread
        // makes training reproducible by default, and spares candle a
        // /proc/cpuinfo read per matrix product (crate sluice-rl's docs).
        unsafe { std::env::set_var("RAYON_NUM_THREADS", "1") };
    }
    keep_freed_memory();
}

/// Makes glibc's `malloc` keep the memory it frees instead of returning it
/// to the kernel. candle allocates a fresh buffer for every tensor, and a
/// 256 × 256 `f32` matrix (256 KiB) is above glibc's initial 128 KiB `mmap`
/// threshold, so every activation and gradient of a training step was an
/// `mmap`, zero-filled page faults and an `munmap`: a third of a training
/// run's CPU time went to the kernel. With blocks up to 32 MiB (glibc's
/// largest threshold on 64-bit) served from the heap and the heap not
/// trimmed below 1 GiB of free top, a training episode takes ~0.6 of the
/// time (docs/inss.md, "Training time"), with bitwise-identical agents (the
/// arithmetic is untouched). The cost: the process keeps its peak heap
/// until it exits, which a training or benchmark run soon does.
/// `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=…` does the same from outside.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` only sets allocator parameters and is called
        // before any thread starts; glibc refuses (returns 0 for) a value
        // out of its range and keeps its default, which is only slower.
        let ok = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20)
                & libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30)
        };
        if ok == 0 {
            eprintln!(
                "warning: glibc refused mallopt's thresholds; training and benchmarks run \
                 with its defaults (correct, slower)"
            );
        }
    }
}
