//! `sluice bench <name>`: one module per benchmark, each calling its
//! module of `sluice-bench`.

pub mod cluster;
pub mod disb;
pub mod gpulet;
pub mod hol;
pub mod inss;
pub mod interference;
pub mod ipc;
pub mod padding;
pub mod paella;
pub mod preempt;
pub mod sim;
pub mod split;
pub mod trace;

use std::path::PathBuf;
use std::process::ExitCode;

/// `--tables DIR` and `--tables-device NAME`, for the benchmarks that plan
/// on `L(b, p)` tables (`bench cluster`, `bench trace`, `bench gpulet`).
#[derive(clap::Args, Debug)]
pub struct TableArgs {
    /// Plan and serve on the L(b, p) tables of DIR/<model>.json, one
    /// manifest per scenario model, instead of measuring them on the GPU
    /// model: measured ones (`sluice profile --device cuda MODEL
    /// --partitions 10,20,30,40,50,60,70,80,90,100 --batches
    /// 1,2,4,8,16,32 --out DIR/MODEL.json`) or a simulated profile's
    /// (`sluice profile --device mi50 MODEL --out DIR/MODEL.json`). The
    /// serving is still in virtual time.
    #[arg(long, value_name = "DIR")]
    tables: Option<PathBuf>,
    /// With --tables: take each file's table of this device (`mi50`,
    /// `NVIDIA H200`, ...); default: each file's only table.
    #[arg(long, value_name = "NAME", requires = "tables")]
    tables_device: Option<String>,
}

impl TableArgs {
    /// The benchmarks' table source.
    pub fn source(self) -> sluice_bench::cluster::TableSource {
        match self.tables {
            None => sluice_bench::cluster::TableSource::GpuModel,
            Some(dir) => sluice_bench::cluster::TableSource::Dir {
                dir,
                device: self.tables_device,
            },
        }
    }
}

/// The benchmarks, in the order `sluice bench --help` lists them; each
/// one's help is the doc comment of its `Args`.
#[derive(clap::Subcommand, Debug)]
pub enum Bench {
    /// InSS's experiments (§6) on the simulated GPU (default profile a100):
    /// the latency model against the GPU model (Tables 3–4), the agents'
    /// training record (Fig. 8–9), and each planner's SLO-preserved
    /// maximum load on 4 and 64 GPUs — InSS, InSS-ni, gpulet, GSLICE,
    /// iGniter — with fragments and decision time (Fig. 10, 12, 15–19).
    /// docs/inss.md.
    Inss(sluice_bench::inss::cmd::BenchInssArgs),
    Ipc(ipc::Args),
    Disb(disb::Args),
    Preempt(preempt::Args),
    Hol(hol::Args),
    Padding(padding::Args),
    Paella(paella::Args),
    Split(split::Args),
    Interference(interference::Args),
    Trace(trace::Args),
    Cluster(cluster::Args),
    Gpulet(gpulet::Args),
    Sim(sim::Args),
}

/// Runs the benchmark.
pub fn run(which: Bench) -> ExitCode {
    match which {
        Bench::Inss(a) => inss::run(a),
        Bench::Ipc(a) => ipc::run(a),
        Bench::Disb(a) => disb::run(a),
        Bench::Preempt(a) => preempt::run(a),
        Bench::Hol(a) => hol::run(a),
        Bench::Padding(a) => padding::run(a),
        Bench::Paella(a) => paella::run(a),
        Bench::Split(a) => split::run(a),
        Bench::Interference(a) => interference::run(a),
        Bench::Trace(a) => trace::run(a),
        Bench::Cluster(a) => cluster::run(a),
        Bench::Gpulet(a) => gpulet::run(a),
        Bench::Sim(a) => sim::run(a),
    }
}
