//! `sluice bench inss`: InSS's experiments (§6) on the GPU model
//! ([`sluice_bench::inss::cmd`]). Its arguments are
//! [`BenchInssArgs`], which that module defines beside the code that reads
//! them; the help is on `Bench::Inss`.

use std::process::ExitCode;

use sluice_bench::inss::cmd::{self as inss, BenchInssArgs};

use crate::command::{fail, print_json};

/// Runs the experiments asked for.
pub fn run(args: BenchInssArgs) -> ExitCode {
    match inss::bench_cmd(&args) {
        Ok(r) if args.json => print_json(&r),
        Ok(r) => {
            print!("{}", inss::table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
