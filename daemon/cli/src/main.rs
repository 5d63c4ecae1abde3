//! `sluice`: the command-line front end — demo, status, benchmarks.
//!
//! `main` parses the arguments and hands them to the subcommand's module
//! in `command/`, which does the work through library calls.

mod command;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use command::{
    bench, bench_client, check, client, completions, demo, inspect, kernels, models, profile, run,
    split, status, top, train,
};

/// sluice: share a GPU between real-time and best-effort DNN inference
/// without making the real-time work wait.
#[derive(Parser, Debug)]
#[command(name = "sluice", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// The subcommands, in the order `sluice --help` lists them; each one's
/// help is the doc comment of its `Args`.
#[derive(Subcommand, Debug)]
enum Cmd {
    Run(run::Args),
    Inspect(inspect::Args),
    /// Train a learned planner's agents on the GPU model: `sluice train
    /// inss` (InSS's two-stage SACD + TD3 scheduler, docs/inss.md).
    #[command(subcommand)]
    Train(train::Train),
    Demo(demo::Args),
    Status(status::Args),
    Top(top::Args),
    Models(models::Args),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::Bench),
    /// sluice's CUDA kernel library: list the kernels and their launch
    /// configurations, or compile them to PTX with NVRTC.
    #[command(subcommand)]
    Kernels(kernels::Kernels),
    Check(check::Args),
    Profile(profile::Args),
    Split(split::Args),
    Completions(completions::CompletionsArgs),
    Man(completions::ManArgs),
    #[command(name = "__client", hide = true)]
    Client(client::Args),
    #[command(name = "__bench-client", hide = true)]
    BenchClient(bench_client::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.cmd, Cmd::Train(_) | Cmd::Bench(bench::Bench::Inss(_))) {
        command::prepare_learned();
    }
    match cli.cmd {
        Cmd::Run(a) => run::run(a),
        Cmd::Inspect(a) => inspect::run(a),
        Cmd::Train(t) => train::run(t),
        Cmd::Demo(a) => demo::run(a),
        Cmd::Status(a) => status::run(a),
        Cmd::Top(a) => top::run(a),
        Cmd::Models(a) => models::run(a),
        Cmd::Bench(b) => bench::run(b),
        Cmd::Kernels(k) => kernels::run(k),
        Cmd::Check(a) => check::run(a),
        Cmd::Profile(a) => profile::run(a),
        Cmd::Split(a) => split::run(a),
        Cmd::Completions(a) => completions::completions(a, Cli::command()),
        Cmd::Man(a) => completions::man(a, Cli::command()),
        Cmd::Client(a) => client::run(a),
        Cmd::BenchClient(a) => bench_client::run(a),
    }
}
