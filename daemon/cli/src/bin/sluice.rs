//! `sluice`: the command-line front end — demo, status, benchmarks.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use sluice_cli::disb::{self, DisbWorkload};
use sluice_cli::roles::{self, BenchMode, BenchRole, ClientRole, Pattern};
use sluice_cli::{
    bench_hol, bench_ipc, bench_padding, bench_paella, bench_preempt, bench_sim, demo,
};
use sluice_gpu::DeviceProfile;
use sluice_sched::PolicyKind;
use sluice_service::Status;

/// sluice: share a GPU between real-time and best-effort DNN inference
/// without making the real-time work wait.
#[derive(Parser, Debug)]
#[command(name = "sluice", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Train a learned planner's agents on the GPU model: `sluice train
    /// inss` (InSS's two-stage SACD + TD3 scheduler, docs/inss.md).
    Train {
        #[command(subcommand)]
        which: TrainCmd,
    },
    /// Start an embedded daemon on the simulated GPU and run REEF's DISB
    /// workload C as separate client processes: a periodic real-time client
    /// (VGG-19 at 50 % of its standalone maximum) beside five closed-loop
    /// best-effort clients (one per DISB model). Once with the real-time
    /// client alone (the reference), then once per scheduler (default:
    /// reef, then streams); prints latencies and, per scheduler, a verdict:
    /// its real-time p99 against the reference, on the daemon's timestamps.
    Demo {
        /// Schedulers to compare, comma-separated: fifo, seq, streams,
        /// wait-preempt, reef, paella. Default: reef,streams.
        #[arg(long, value_delimiter = ',')]
        scheduler: Vec<String>,
        /// How long the clients run in all, in seconds (split between the
        /// reference run and the schedulers; at least 0.5 s each).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
        seconds: u64,
        /// Real-time model.
        #[arg(long, default_value = "vgg19")]
        rt_model: String,
        /// Real-time request period in milliseconds (default: workload C's,
        /// twice the model's standalone time: on the simulated GPU, or with
        /// `--backend cuda` measured on the device first, median of 5
        /// inferences alone).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        rt_period_ms: Option<u64>,
        /// Best-effort models, one closed-loop client each, comma-separated.
        /// Default: resnet152,vgg19,yolov3,bert_base,gpt2 on `sim`;
        /// resnet152 on `cuda` (whose builders are vgg19, resnet152,
        /// bert_base and gpt2).
        #[arg(long, alias = "be-model", value_delimiter = ',')]
        be_models: Vec<String>,
        /// GPU backend: `sim` (the simulated GPU) or `cuda` (the models'
        /// real layers on CUDA device 0; needs a build with `--features
        /// cuda`; without a driver it stops with the daemon's start-up
        /// error, which names the fix). Outputs of the cuda backend are
        /// not checked.
        #[arg(long, default_value = "sim")]
        backend: String,
        /// With `--backend cuda`: the small test models (`vgg19_small`,
        /// ...) instead of the full ones; name them with the `_small`
        /// suffix in --rt-model and --be-model.
        #[arg(long)]
        small: bool,
        /// Print the result as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Ask a running daemon for its clients, queues and counters.
    Status {
        /// Daemon socket (default: $SLUICE_SOCKET, else the per-user default).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Print the daemon's JSON as is.
        #[arg(long)]
        json: bool,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: Bench,
    },
    /// sluice's CUDA kernel library: list the kernels and their launch
    /// configurations, or compile them to PTX with NVRTC.
    Kernels {
        #[command(subcommand)]
        which: KernelsCmd,
    },
    /// Run a model on CUDA device 0 and compare its output with the CPU
    /// reference: PASS/FAIL per model (exit 1 if any fails). Needs a build
    /// with `--features cuda`.
    Check {
        /// The device: `cuda` (CUDA device 0).
        #[arg(long, value_parser = parse_cuda_only)]
        device: String,
        /// vgg19, resnet152, bert_base or gpt2 (default: all four).
        #[arg(value_parser = parse_model)]
        model: Option<String>,
        /// The Small builds (same layers, shrunk shapes).
        #[arg(long)]
        small: bool,
        /// Seed of the weights (the input's is seed + 1).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Largest absolute error allowed, as a fraction of the reference
        /// output's largest magnitude.
        #[arg(long, default_value_t = sluice_cli::cuda_models::DEFAULT_TOLERANCE)]
        tol: f64,
        /// Print one JSON array instead of one line per model.
        #[arg(long)]
        json: bool,
    },
    /// Profile a model. On a simulated device (`--device mi50|gv100|h100`):
    /// its latency L(b, p) at every batch size b and partition size p (percent
    /// of the CUs) on the GPU model, the table the multi-GPU planners take
    /// (docs/planners.md). On `--device cuda`: time every kernel on CUDA device
    /// 0 and write its manifest with the measured kernel and block times
    /// (needs a build with `--features cuda`).
    Profile {
        /// `cuda` (CUDA device 0) or a simulated device profile.
        #[arg(long, value_parser = parse_profile_device)]
        device: String,
        /// The model: on a simulated device a built-in manifest (alexnet,
        /// bert205, bert_base, densenet, efficientnet_b0, gpt2, inception,
        /// mnasnet, mobilenet, resnet152, resnet18, resnet50, vgg16, vgg19,
        /// yolov3; docs/models.md); on
        /// cuda a builder: vgg19, resnet152, bert_base or gpt2 (with
        /// --partitions: any built-in manifest, run as synthetic kernels).
        model: String,
        /// Batch sizes (simulated device: default 1,2,4,8,16,32; cuda, with
        /// --partitions: default 1).
        #[arg(long, value_delimiter = ',')]
        batches: Vec<u32>,
        /// Partition sizes, percent of the CUs (simulated device: default
        /// 10,20,...,100). On cuda: measure the model's latency in green
        /// contexts of that share of the SMs, and the cost of switching a
        /// stream between them, instead of timing kernels.
        #[arg(long, value_delimiter = ',')]
        partitions: Vec<u32>,
        /// Print one JSON object instead of a table (simulated device, or
        /// cuda with --partitions).
        #[arg(long)]
        json: bool,
        /// The manifest to write. On cuda (default: <model>.json here) the
        /// measured manifest; on a simulated device (no default) the L(b, p)
        /// table goes into this manifest as its `lbp` entry for the device,
        /// starting from the built-in manifest when the file is new
        /// (`[cluster]` then reads it instead of profiling at start-up).
        #[arg(long, value_name = "FILE.json")]
        out: Option<PathBuf>,
        /// Timed runs per kernel (the median is kept); on cuda with
        /// --partitions, timed requests per point and partitions created for
        /// the first-use switch cost (at most 100).
        #[arg(long, default_value_t = sluice_cli::cuda_models::DEFAULT_REPS, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        reps: u32,
        /// The Small build (same layers, shrunk shapes).
        #[arg(long)]
        small: bool,
        /// Seed of the weights (the input's is seed + 1).
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Split a model into evenly sized blocks (SPLIT, ICPP'23 §3.3) for
    /// block-level preemption on a device profile: a genetic search over
    /// cut points for SPLIT's Eq. 2 fitness, with each cut costed on
    /// sluice's path (the launch pipeline drains at a block boundary; see
    /// docs/split.md). Prints the cut points, block times, their standard
    /// deviation, the overhead, Eq. 1's expected wait of a short request,
    /// the generations to converge and the wall time; with --exhaustive
    /// also the exhaustive optimum and the GA's gap. Without --blocks it
    /// tries m = 1..=--max-blocks and picks the m with the least expected
    /// wait plus time added to the model.
    Split {
        /// A built-in model (alexnet, bert205, bert_base, densenet,
        /// efficientnet_b0, gpt2, inception, mnasnet, mobilenet, resnet152,
        /// resnet18, resnet50, vgg16, vgg19, yolov3; docs/models.md).
        model: String,
        /// Exactly this many blocks (default: choose among 1..=--max-blocks).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=64))]
        blocks: Option<u64>,
        /// Largest block count tried when --blocks is not given.
        #[arg(long, default_value_t = sluice_split::DEFAULT_MAX_BLOCKS as u64, value_parser = clap::value_parser!(u64).range(1..=64))]
        max_blocks: u64,
        /// Device profile whose launch costs price a cut (mi50, gv100, h100).
        #[arg(long, default_value = "mi50", value_parser = parse_device)]
        device: String,
        /// Seed of the genetic search (same seed, same result).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Also evaluate every cut set (refused above 50 million) and
        /// report the optimum, its wall time and the GA's gap.
        #[arg(long)]
        exhaustive: bool,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// Write the chosen split into this manifest as its `splits` entry
        /// for the device (replacing one for the same device; the built-in
        /// manifest is the starting point when the file is new); the
        /// exhaustive optimum when --exhaustive, else the GA's best.
        #[arg(long, value_name = "FILE.json")]
        out: Option<PathBuf>,
    },
    /// (internal) a demo client process.
    #[command(name = "__client", hide = true)]
    Client {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        name: String,
        #[arg(long)]
        model: String,
        #[arg(long, value_enum)]
        priority: Prio,
        #[arg(long)]
        period_us: Option<u64>,
        /// Closed loop: requests kept in flight.
        #[arg(long, default_value_t = 1)]
        window: u32,
        #[arg(long)]
        duration_ms: u64,
        #[arg(long, default_value_t = 200)]
        spin_us: u64,
        /// Do not check outputs (a real backend computes them).
        #[arg(long)]
        no_check: bool,
    },
    /// (internal) an IPC benchmark client process.
    #[command(name = "__bench-client", hide = true)]
    BenchClient {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long, value_enum)]
        mode: Mode,
        #[arg(long)]
        samples: u64,
        #[arg(long)]
        seconds: u64,
        #[arg(long)]
        inflight: u32,
        #[arg(long)]
        cpu: Option<usize>,
    },
}

#[derive(Subcommand, Debug)]
enum TrainCmd {
    /// InSS's two agents (Algorithm 1, Table 2's parameters) trained on
    /// its latency model fitted to the simulated GPU (default profile
    /// a100), ten instances of its eight models; writes a checkpoint
    /// directory `sluice bench inss --agents` reads. Runs on one CPU
    /// thread unless RAYON_NUM_THREADS says otherwise; the same seed gives
    /// the same agents.
    Inss(sluice_cli::bench_inss_cmd::TrainInssArgs),
}

#[derive(Subcommand, Debug)]
enum Bench {
    /// InSS's experiments (§6) on the simulated GPU (default profile a100):
    /// the latency model against the GPU model (Tables 3–4), the agents'
    /// training record (Fig. 8–9), and each planner's SLO-preserved
    /// maximum load on 4 and 64 GPUs — InSS, InSS-ni, gpulet, GSLICE,
    /// iGniter — with fragments and decision time (Fig. 10, 12, 15–19).
    /// docs/inss.md.
    Inss(sluice_cli::bench_inss_cmd::BenchInssArgs),
    /// Round-trip time of the request path (submit → daemon → completion
    /// seen by the client, zero-time model, separate processes): spinning,
    /// parked, and a plain Unix-socket request/response baseline measured
    /// in the same run; plus requests/s with many in flight.
    Ipc {
        /// Round trips per latency phase.
        #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(100..=100_000_000))]
        samples: u64,
        /// Seconds of the throughput phase.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=600))]
        seconds: u64,
        /// Requests kept in flight in the throughput phase.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
        inflight: u32,
        /// Print one JSON object (nanoseconds) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// REEF's DNN inference serving benchmark (DISB, workloads A-E of REEF
    /// Table 2, or a trace) on the simulated GPU, for every scheduling
    /// policy: RT latency over standalone time, normalised throughput,
    /// preemption latency, decision cost.
    Disb {
        /// Workload: A, B, C, D, E, a list such as A,C, or all (default:
        /// all, or none when --trace is given).
        #[arg(long, value_parser = parse_workloads)]
        workload: Option<Workloads>,
        /// Policies to run (repeat or list; default: all).
        #[arg(long = "policy", value_name = "NAME", num_args = 1.., value_delimiter = ',', value_parser = parse_policy)]
        policies: Vec<PolicyKind>,
        /// Device profile of the simulated GPU (mi50, gv100, h100), or
        /// `cuda`: CUDA device 0 (a build with `--features cuda`), running
        /// the models' kernels as synthetic kernels on their manifest
        /// timings, one run at a time, in real time.
        #[arg(long, default_value = "mi50", value_parser = parse_preempt_device)]
        device: String,
        /// Virtual time of each run, ms (default 2000 on mi50, 1000 on
        /// gv100 and h100; trace: until the last arrival).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
        duration_ms: Option<u64>,
        /// Seed of the arrival phases and Poisson gaps.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Trace CSV (client,priority,model,arrival_ms), run as workload
        /// `trace`.
        #[arg(long, value_name = "FILE.csv")]
        trace: Option<PathBuf>,
        /// Worker threads (default: the number of CPUs).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
        jobs: Option<u64>,
        /// Folder of model manifests (`*.json`) used instead of the
        /// built-in ones of the same name, e.g. profiles measured with
        /// `sluice profile --device cuda` to calibrate the GPU model.
        #[arg(long = "models", value_name = "DIR")]
        models_dir: Option<PathBuf>,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// Write an SVG plot (RT latency CDF and throughput per policy).
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
    },
    /// Preemption latency, wait-based against reset-based, as launched
    /// kernels and kernel time grow (REEF Fig. 19), and on the simulated GPU
    /// against device-queue capacity (REEF Fig. 21). `--device cuda` runs
    /// Fig. 19 on CUDA device 0 (a build with `--features cuda`).
    Preempt {
        /// Device profile of the simulated GPU (mi50, gv100, h100), or
        /// `cuda` for the real GPU.
        #[arg(long, default_value = "mi50", value_parser = parse_preempt_device)]
        device: String,
        /// `--device cuda`: repetitions per point (p50 and p99 over them).
        #[arg(long, default_value_t = 20)]
        reps: u32,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Paella's head-of-line blocking workload (Paella §2.1) on the
    /// simulated GPU: naive submission against `paella`, utilisation and
    /// p99 latency against offered load.
    Hol {
        /// Offered loads, fractions of capacity (default 0.1,0.2,...,1.0).
        #[arg(long, value_delimiter = ',', value_parser = parse_load)]
        loads: Vec<f64>,
        /// Jobs per load point.
        #[arg(long, value_parser = clap::value_parser!(u32).range(10..=10_000_000))]
        jobs: Option<u32>,
        /// Streams the naive submission cycles through.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
        naive_streams: Option<u32>,
        /// Seed of the arrival process.
        #[arg(long)]
        seed: Option<u64>,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// REEF §6.5's one-to-one dynamic kernel padding matrix on the
    /// simulated GPU: one closed-loop real-time and one closed-loop
    /// best-effort client for every ordered pair of models, under streams,
    /// reef without padding, reef with padding (DKP) and with multi-version
    /// selection (DKP-MV); RT latency over standalone and overall
    /// normalised throughput, beside REEF's published figures.
    Padding {
        /// Device profile of the simulated GPU (mi50, gv100, h100).
        #[arg(long, default_value = "mi50")]
        device: String,
        /// Models (default: the DISB five).
        #[arg(long = "model", value_delimiter = ',')]
        models: Vec<String>,
        /// Virtual time of each run, ms.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
        duration_ms: u64,
        /// Worker threads (default: the number of CPUs).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
        jobs: Option<u64>,
        /// Print one JSON object instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Paella's own evaluation (Paella SOSP'23 §7, Fig. 11 and Fig. 12) on
    /// the simulated GPU: open-loop lognormal arrivals (sigma 1.5 and 2) of
    /// a mix of Table 2's models with equal GPU time each (Fig. 11: p99 latency and
    /// throughput against offered load) and of ResNet-18 beside Inception
    /// (Fig. 12: p99 of each), for paella, streams (CUDA-MS), seq
    /// (CUDA-SS), paella-sjf and paella-rr. Loads are fractions of the
    /// serial capacity measured on the GPU model; the output gives them in
    /// requests/s. Clients and paella's deficit threshold are as in the
    /// authors' artifact (eniac/paella): each model's requests go to a pool
    /// of client instances, one request each at a time (187 in flight for
    /// Fig. 11, 125 for Fig. 12, split by share; one stream each under
    /// streams), and the threshold is 1000000. Without the paper's measured
    /// manifests it runs a fallback mix of the built-in models and says so.
    Paella {
        /// Device profile of the simulated GPU (mi50, gv100, h100).
        #[arg(long, default_value = "mi50", value_parser = parse_device)]
        device: String,
        /// Virtual seconds of arrivals per point, the first 10 % of them
        /// warm-up (more gives steadier p99s at a proportional cost; under
        /// 5 s a p99 may rest on fewer than 100 latencies)
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Offered loads, fractions of serial capacity (default
        /// 0.2,0.4,0.6,0.8,1.0,1.2,1.4,1.6).
        #[arg(long, value_delimiter = ',', value_parser = parse_load)]
        loads: Vec<f64>,
        /// Lognormal sigmas of the inter-arrival times (default 1.5,2).
        #[arg(long = "sigma", value_delimiter = ',')]
        sigmas: Vec<f64>,
        /// Policies to run (repeat or list; default: paella, streams, seq,
        /// paella-sjf, paella-rr).
        #[arg(long = "policy", value_name = "NAME", num_args = 1.., value_delimiter = ',', value_parser = parse_policy)]
        policies: Vec<PolicyKind>,
        /// Seed of the arrival times and model choices.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Worker threads (default: the number of CPUs).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
        jobs: Option<u64>,
        /// Fig. 12's long model (default inception, the paper's
        /// InceptionV3; on mi50 it is 3.9x resnet18, against 19.7x in the
        /// paper's Table 2: resnet50 is 9.2x, the largest measured ratio).
        #[arg(long, value_name = "MODEL")]
        long: Option<String>,
        /// paella's deficit threshold in kernels (Paella §6 (2); its Fig. 13
        /// sweeps it), or `inf` to turn fairness off. Only paella has one.
        /// Default 1000000: what the paper's Fig. 11 and 12 ran with (the
        /// authors' artifact leaves llis_server's --unfair at its default);
        /// the daemon's paella uses 16
        #[arg(long, value_name = "KERNELS", value_parser = parse_threshold)]
        threshold: Option<f64>,
        /// Print one JSON object instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// SPLIT's evaluation (ICPP'23 §5: Table 3, Fig. 6 and Fig. 7) on the
    /// simulated GPU (default profile jetson-nano, SPLIT's testbed): the
    /// five models of Table 1 scaled to its latencies, the six Poisson
    /// scenarios of Table 2 (1000 requests each), the violation rate
    /// against α = 2..20, latency jitter per model, and the splitter's
    /// block splits of ResNet-50 and VGG-19 (docs/split-eval.md).
    Split {
        /// Device profile of the simulated GPU.
        #[arg(long, default_value = "jetson-nano", value_parser = parse_device)]
        device: String,
        /// Policies to run (list; default split,seq,prema,rt-a; seq is the
        /// Clockwork baseline).
        #[arg(long, value_delimiter = ',')]
        policies: Vec<String>,
        /// Mean inter-arrival times of the scenarios, ms (default
        /// 160,150,140,130,120,110: SPLIT Table 2).
        #[arg(long, value_delimiter = ',')]
        scenarios: Vec<f64>,
        /// Requests per scenario.
        #[arg(long, default_value_t = 1000)]
        requests: usize,
        /// How requests get models: per-model (one Poisson stream of mean
        /// λ per model) or shared (one stream, uniform model draw).
        #[arg(long, default_value = "per-model")]
        mix: String,
        /// Clients per model; a model's requests go to them in turn.
        #[arg(long, default_value_t = 4)]
        clients_per_model: u32,
        /// Seed of the arrival times and model choices.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Worker threads (default: the number of CPUs).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
        jobs: Option<u64>,
        /// Write split-fig6.svg and split-fig7.svg into this directory.
        #[arg(long, value_name = "DIR")]
        plot: Option<PathBuf>,
        /// Print one JSON object instead of tables.
        #[arg(long)]
        json: bool,
        /// Print Markdown tables (the default output).
        #[arg(long, conflicts_with = "json")]
        markdown: bool,
    },
    /// gpulet's interference study (§3.4, §4.4) on the GPU model: pairs of
    /// models side by side in two partitions of one simulated GPU (pairs of
    /// inception, resnet50, mobilenet, vgg19, resnet18 × batches × splits),
    /// each one's latency against alone in its partition; the slowdown
    /// distribution (beside gpulet Fig. 7), gpulet's linear model fitted to
    /// it and its error (beside Fig. 10), and the gpulet authors' own
    /// coefficients on their measured utilisations for the same pairs.
    Interference {
        /// Device profile.
        #[arg(long, default_value = "mi50")]
        device: String,
        /// Batch sizes (both models; default 2,4,8,16,32).
        #[arg(long, value_delimiter = ',')]
        batches: Vec<u32>,
        /// Percent of the CUs for the first model of a pair (default
        /// 20,40,50,60,80).
        #[arg(long, value_delimiter = ',')]
        splits: Vec<u32>,
        /// Requests each model completes at least while co-running.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
        requests: u32,
        /// The gpulet authors' data (the folder with 2080ti/ and 3080/);
        /// default ../shared/data/gpulet if it exists.
        #[arg(long, value_name = "DIR")]
        gpulet_data: Option<PathBuf>,
        /// Also draw the slowdown CDF (beside gpulet Fig. 7) and the fit's
        /// error CDF (beside Fig. 10) into this SVG file.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
        /// Print one JSON object instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// gpulet's Fig. 15 rate trace, re-planned every period with GPU
    /// scaling (gpulet Algorithm 2), served in virtual time: throughput,
    /// GPUs, partition sizes and violations per window, and GPU-seconds,
    /// for each scheduling period given (gpulet: 20 s, an MPS restart per
    /// repartition; sluice repartitions in place, so 1 s). SIMULATED, on the
    /// scenario's device profile; the module docs of bench_cluster_trace.rs
    /// give every rule.
    Trace {
        /// Scenario: a shipped name or a .toml path (gpulet's Fig. 15 uses
        /// scen3).
        #[arg(long, default_value = "scen3")]
        scenario: String,
        /// Planner: sbp, greedy, gpulet, gpulet+int (needs interference
        /// data).
        #[arg(long, default_value = "gpulet+int", value_parser = parse_planner)]
        planner: sluice_cli::bench_cluster_scenario::PlannerKind,
        /// Scheduling periods to compare, s.
        #[arg(long, value_delimiter = ',', default_value = "20,1", value_parser = parse_duration)]
        periods: Vec<f64>,
        /// Length of the trace, s.
        #[arg(long, default_value_t = 3200.0, value_parser = parse_duration)]
        duration: f64,
        /// Total rate at the start and the end, rps.
        #[arg(long, default_value_t = 100.0, value_parser = parse_rate_from)]
        base: f64,
        /// Total rate at the first wave's peak, rps.
        #[arg(long, default_value_t = 500.0, value_parser = parse_rate_from)]
        peak1: f64,
        /// Total rate at the second wave's peak, rps.
        #[arg(long, default_value_t = 800.0, value_parser = parse_rate_from)]
        peak2: f64,
        /// Most GPUs the scaling may use.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=64))]
        gpus: u32,
        /// Plan for the counted rate times 1 + HEADROOM.
        #[arg(long, default_value_t = 0.1, value_parser = parse_headroom)]
        headroom: f64,
        /// Plan every batch so that at most the share EPS of the Poisson
        /// arrivals over the rounds a request can wait overflow them
        /// (sluice's burst rule, e.g. 0.01 for the 1 % violation target)
        /// instead of for the mean rate (the papers' rule, the default).
        /// docs/planners.md, "Burst rule".
        #[arg(long, value_name = "EPS", value_parser = parse_overflow)]
        burst_overflow: Option<f64>,
        /// Count each model's rate over the last SECONDS (whole periods,
        /// at least one) instead of the period just ended: a 1 s period
        /// with a 5 s window plans on a count with √5 less Poisson noise
        /// (the daemon's `rate_window_ms` beside its `replan_ms`). Default:
        /// the period.
        #[arg(long, value_name = "SECONDS", value_parser = parse_duration)]
        rate_window: Option<f64>,
        /// Plan with latencies times MARGIN (gpulet's artifact: 1.1).
        #[arg(long, default_value_t = 1.1, value_parser = parse_margin)]
        latency_margin: f64,
        /// Interference in planning (gpulet+int) and serving.
        #[arg(long, value_enum, default_value = "gpulet-2080ti")]
        interference: sluice_cli::bench_cluster::Interference,
        /// The gpulet authors' data (the folder with 2080ti/ and 3080/);
        /// default ../shared/data/gpulet if it exists.
        #[arg(long, value_name = "DIR")]
        gpulet_data: Option<PathBuf>,
        /// Seed of the arrivals.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print one JSON object instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Multi-GPU placement planners served in virtual time (gpulet §5.2's
    /// SLO-preserved max throughput): for each scenario (models, rates,
    /// GPUs, memory; shipped: game, traffic, scen1-scen5 of gpulet, and
    /// cluster-64gpu) and planner, every rate is scaled by one factor, the
    /// planner places the scaled rates, a request-level simulator serves
    /// the placement with Poisson arrivals and batch times L(b, p) measured
    /// on the GPU model, and the largest factor with at most 1 % of
    /// requests late, dropped or unserved is reported. SIMULATED figures,
    /// on the named device profile; docs/performance.md ("Serving on
    /// several GPUs") gives the rules.
    Cluster {
        /// Scenarios: shipped names (game, traffic, scen1..scen5,
        /// cluster-64gpu), paths to scenario .toml files, a list, or all.
        #[arg(long = "scenario", value_delimiter = ',', default_value = "all")]
        scenarios: Vec<String>,
        /// Planners: sbp, greedy (= greedy-best-fit), gpulet, gpulet+int
        /// (needs --interference gpulet-*), ideal (at most 8 GPUs); a list
        /// (default: the ones each scenario file names).
        #[arg(long = "planner", value_delimiter = ',', value_parser = parse_planner)]
        planners: Vec<sluice_cli::bench_cluster_scenario::PlannerKind>,
        /// Device profile of the L(b, p) tables for every scenario
        /// (default: each scenario's own).
        #[arg(long, value_parser = parse_device)]
        device: Option<String>,
        /// Virtual seconds of arrivals per simulation.
        #[arg(long, default_value_t = 60.0, value_parser = parse_duration)]
        duration: f64,
        /// Seed of the arrivals and of random routing.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How a model's requests are split over its partitions: random
        /// (weighted by planned share; each partition sees Poisson arrivals
        /// at its share) or wrr (smooth weighted round robin).
        #[arg(long, value_enum, default_value = "random")]
        routing: sluice_cli::bench_cluster_sim::Routing,
        /// When a partition starts its next round: work-conserving (as soon
        /// as the last ends) or fixed (every duty cycle, Nexus).
        #[arg(long, value_enum, default_value = "work-conserving")]
        rounds: sluice_cli::bench_cluster_sim::Rounds,
        /// How many queued requests a turn takes: planned (at most the
        /// planned batch) or deadline (more when they are queued, as long
        /// as the oldest still meets its SLO: a burst goes in one larger
        /// batch instead of waiting a round).
        #[arg(long, value_enum, default_value = "planned")]
        batching: sluice_cli::bench_cluster_sim::Batching,
        /// Latency factor for partitions sharing a GPU: none (the GPU
        /// model's finding), gpulet-2080ti or gpulet-3080 (gpulet's linear
        /// model and the authors' measured coefficients).
        #[arg(long, value_enum, default_value = "none")]
        interference: sluice_cli::bench_cluster::Interference,
        /// The gpulet authors' data (the folder with 2080ti/ and 3080/);
        /// default ../shared/data/gpulet if it exists.
        #[arg(long, value_name = "DIR")]
        gpulet_data: Option<PathBuf>,
        /// Simulate once at the scenario's own rates instead of searching
        /// the maximum (e.g. to time a large scenario).
        #[arg(long)]
        no_search: bool,
        /// Bisection steps after the maximum is bracketed (each halves the
        /// bracket).
        #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(0..=30))]
        search_steps: u32,
        /// Plan for each rate times 1 + HEADROOM while offering the rate
        /// itself (0: plan exactly the offered rates, as gpulet's planners
        /// do; 0.1: 10 % spare capacity against Poisson bursts).
        #[arg(long, default_value_t = 0.0, value_parser = parse_headroom)]
        headroom: f64,
        /// Plan every batch so that at most the share EPS of the Poisson
        /// arrivals over the rounds a request can wait overflow them
        /// (sluice's burst rule, e.g. 0.01 for the 1 % violation target)
        /// instead of for the mean rate (the papers' rule, the default).
        /// Applies to every planner alike; docs/planners.md, "Burst rule".
        #[arg(long, value_name = "EPS", value_parser = parse_overflow)]
        burst_overflow: Option<f64>,
        /// Plan with every latency times MARGIN while the simulation runs
        /// the latencies themselves (1: plan exactly the tables; gpulet's
        /// artifact plans with 1.1, its `Latency Ratio`). Applies to every
        /// planner alike.
        #[arg(long, default_value_t = 1.0, value_parser = parse_margin)]
        latency_margin: f64,
        /// How the maximum is searched: bisect (double from factor 1, then
        /// bisect; fast, but may step over a failing rate where the
        /// outcome is not monotone) or scan (gpulet §5.2: raise the rate by
        /// --scan-step from --scan-from rps in all and stop at the first
        /// failure).
        #[arg(long = "search", value_enum, default_value = "bisect")]
        search_mode: SearchArg,
        /// What a rate must do to pass: served (placed, and at most 1 % of
        /// requests late, dropped or unserved: the SLO-preserved maximum)
        /// or planned (placed: the largest rate the planner calls
        /// schedulable, with the violations served there and the worst
        /// served at any rate accepted on the way up; gpulet Fig. 14).
        #[arg(long, value_enum, default_value = "served")]
        pass: sluice_cli::bench_cluster::PassRule,
        /// Scan: relative step between probes.
        #[arg(long, default_value_t = 0.05, value_parser = parse_scan_step)]
        scan_step: f64,
        /// Scan: total offered rate of the first probe, rps.
        #[arg(long, default_value_t = 10.0, value_parser = parse_rate_from)]
        scan_from: f64,
        /// Partition sizes of gpulet, gpulet+int and ideal: step (every
        /// multiple of the scenario's partition step) or gpulet (20, 40,
        /// 50, 60, 80, 100 %: the gpulet artifact's sizes and §5.2's
        /// splits). SBP and greedy always use every multiple of the step.
        #[arg(long, value_enum, default_value = "step")]
        partition_sizes: SizesArg,
        /// Folder of model manifests (`*.json`) added to the built-in ones,
        /// replacing those of the same name.
        #[arg(long = "models", value_name = "DIR")]
        models_dir: Option<PathBuf>,
        /// List the shipped scenarios and exit.
        #[arg(long)]
        list: bool,
        /// Write gpulet Fig. 13 as an SVG into DIR (`gpulet-fig13.svg`, or
        /// `gpulet-fig13-burst.svg` under --burst-overflow): each planner's
        /// max rps over SBP's per scenario. Needs sbp among the planners and
        /// the served search (not --pass planned).
        #[arg(long, value_name = "DIR")]
        plot: Option<PathBuf>,
        /// Print one JSON object instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// gpulet's planner-level figures (Choi et al., ATC '22): Fig. 5/16
    /// (schedulable scenarios of the 3^9 - 1 rate vectors over Table 3's
    /// models on 4 GPUs: sbp, sbp on fixed 1:1 halves, gpulet+int, ideal),
    /// Fig. 17 (max schedulable rate of gpulet+int over the ideal's, game,
    /// traffic, scen1-scen5) and Fig. 6 (pairs on 2 GPUs: sbp, greedy,
    /// ideal). A scenario is schedulable when the planner places it; no
    /// serving. SIMULATED on the GPU model's L(b, p) tables; rules in
    /// docs/gpulet.md.
    Gpulet {
        /// Figures: 16 (also 5), 17, 6; a list.
        #[arg(long = "fig", value_delimiter = ',', value_parser = parse_fig, default_value = "16,17,6")]
        figs: Vec<sluice_cli::bench_gpulet::Fig>,
        /// Device profile of the L(b, p) tables (default: each scenario's
        /// own, mi50).
        #[arg(long, value_parser = parse_device)]
        device: Option<String>,
        /// The gpulet authors' data (the folder with 2080ti/); default
        /// ../shared/data/gpulet.
        #[arg(long, value_name = "DIR", default_value = "../shared/data/gpulet")]
        gpulet_data: PathBuf,
        /// Worker threads for Fig. 16 (default: the CPUs).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
        threads: Option<u32>,
        /// Scenarios of Fig. 17 (shipped names or .toml files).
        #[arg(
            long = "scenario",
            value_delimiter = ',',
            default_value = "game,traffic,scen1,scen2,scen3,scen4,scen5"
        )]
        scenarios: Vec<String>,
        /// Write the charts (gpulet-fig16.svg, gpulet-fig17.svg,
        /// gpulet-fig6.svg) into this folder, e.g. docs.
        #[arg(long, value_name = "DIR")]
        plot: Option<PathBuf>,
        /// Print one JSON object instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// What the GPU model itself costs: one real-time VGG-19 (DISB C's
    /// load) beside N closed-loop best-effort clients (the DISB models in
    /// turn), wall-clock seconds on this machine per simulated second, per
    /// device profile, policy and N. Compare rows of one run only.
    Sim {
        /// Device profiles (default mi50,gv100).
        #[arg(long = "device", value_delimiter = ',')]
        devices: Vec<String>,
        /// Policies (default reef,streams).
        #[arg(long = "policy", value_name = "NAME", num_args = 1.., value_delimiter = ',', value_parser = parse_policy)]
        policies: Vec<PolicyKind>,
        /// Best-effort client counts (default 1,5,20,100).
        #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=10_000))]
        clients: Vec<u32>,
        /// Virtual time during which clients issue tasks, ms; tasks in
        /// flight then finish.
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=600_000))]
        sim_ms: u64,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum KernelsCmd {
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

/// `--workload`'s value.
#[derive(Clone, Debug)]
struct Workloads(Vec<DisbWorkload>);

fn parse_workloads(s: &str) -> Result<Workloads, String> {
    if s.trim().eq_ignore_ascii_case("all") {
        return Ok(Workloads(DisbWorkload::ALL.to_vec()));
    }
    let mut v = Vec::new();
    for part in s.split(',') {
        let w = DisbWorkload::from_letter(part).ok_or_else(|| {
            format!(
                "`{part}` is not a DISB workload; use A, B, C, D, E, a list such as A,C, or all"
            )
        })?;
        if !v.contains(&w) {
            v.push(w);
        }
    }
    Ok(Workloads(v))
}

fn parse_policy(s: &str) -> Result<PolicyKind, String> {
    PolicyKind::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = PolicyKind::ALL.iter().map(|k| k.as_str()).collect();
        format!("`{s}` is not a policy; use one of {}", names.join(", "))
    })
}

fn parse_device(s: &str) -> Result<String, String> {
    if DeviceProfile::builtin_names().any(|n| n == s) {
        Ok(s.to_owned())
    } else {
        let names: Vec<&str> = DeviceProfile::builtin_names().collect();
        Err(format!(
            "`{s}` is not a device profile; use one of {}",
            names.join(", ")
        ))
    }
}

fn parse_preempt_device(s: &str) -> Result<String, String> {
    if s == "cuda" {
        return Ok(s.into());
    }
    parse_device(s).map_err(|e| format!("{e}, or cuda"))
}

fn parse_load(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 4.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a load; give a fraction of capacity above 0, at most 4 (e.g. 0.5)"
        )),
    }
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum Prio {
    Rt,
    Be,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum Mode {
    Spin,
    Parked,
    ParkedDevice,
    Uds,
    Throughput,
    Floor,
    FloorPair,
    Spin50,
    Adaptive,
}

fn exe() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find the sluice executable: {e}"))
}

/// The splitter `sluice bench split` cuts the long models with.
fn split_splitter() -> Result<Box<dyn sluice_cli::bench_split::Splitter>, String> {
    Ok(Box::new(sluice_cli::split_cmd::GaSplitter))
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("sluice: error: {msg}");
    ExitCode::FAILURE
}

/// Fails with [`sluice_cli::error_chain`].
fn fail_chain(e: &dyn std::error::Error) -> ExitCode {
    fail(sluice_cli::error_chain(e))
}

fn print_json<T: serde::Serialize>(v: &T) -> ExitCode {
    match serde_json::to_string(v) {
        Ok(s) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let learned = matches!(
        cli.cmd,
        Cmd::Train { .. }
            | Cmd::Bench {
                which: Bench::Inss(_)
            }
    );
    if learned && std::env::var_os("RAYON_NUM_THREADS").is_none() {
        // SAFETY: no thread has been started yet (argument parsing only),
        // so nothing can read the environment concurrently. One thread
        // makes training reproducible by default, and spares candle a
        // /proc/cpuinfo read per matrix product (crate sluice-rl's docs).
        unsafe { std::env::set_var("RAYON_NUM_THREADS", "1") };
    }
    if learned {
        keep_freed_memory();
    }
    match cli.cmd {
        Cmd::Train {
            which: TrainCmd::Inss(args),
        } => match sluice_cli::bench_inss_cmd::train_cmd(&args) {
            Ok(rec) if args.json => print_json(&rec),
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        },
        Cmd::Bench {
            which: Bench::Inss(args),
        } => match sluice_cli::bench_inss_cmd::bench_cmd(&args) {
            Ok(r) if args.json => print_json(&r),
            Ok(r) => {
                print!("{}", sluice_cli::bench_inss_cmd::table(&r));
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        },
        Cmd::Demo {
            scheduler,
            seconds,
            rt_model,
            rt_period_ms,
            be_models,
            backend,
            small,
            json,
        } => {
            sluice_service::startup::init_tracing_quiet();
            let Some(backend) = sluice_service::config::BackendKind::from_name(&backend) else {
                return fail(format!(
                    "unknown backend {backend:?}; use one of: {}",
                    sluice_service::config::BackendKind::ALL
                        .iter()
                        .map(|b| b.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            };
            if backend == sluice_service::config::BackendKind::Cuda
                && scheduler.iter().any(|s| s == "fifo")
            {
                return fail(
                    "scheduler \"fifo\" is the simulated device's; with --backend cuda use reef, streams, seq, wait-preempt or paella",
                );
            }
            let exe = match exe() {
                Ok(e) => e,
                Err(e) => return fail(e),
            };
            let schedulers = if scheduler.is_empty() {
                demo::default_schedulers()
            } else {
                let mut v = Vec::new();
                for name in &scheduler {
                    match sluice_service::config::Scheduler::from_name(name) {
                        Some(s) => v.push(s),
                        None => {
                            return fail(format!(
                                "unknown scheduler {name:?}; use one of: {}",
                                sluice_service::config::Scheduler::names().join(", ")
                            ));
                        }
                    }
                }
                v
            };
            let be_models = if be_models.is_empty() {
                demo::default_be_models(backend)
            } else {
                be_models
            };
            let opts = demo::DemoOptions {
                schedulers,
                seconds,
                rt_model,
                rt_period_us: rt_period_ms.map(|ms| ms * 1000),
                be_models,
                backend,
                model_scale: if small {
                    sluice_nn::builders::Scale::Small
                } else {
                    sluice_nn::builders::Scale::Full
                },
            };
            let d = match demo::run(&exe, &opts) {
                Ok(d) => d,
                Err(e) => return fail(e),
            };
            let bad = d
                .references
                .iter()
                .chain(&d.runs)
                .flat_map(|r| &r.clients)
                .any(|c| c.errors + c.wrong_outputs > 0 || c.ok == 0);
            let code = if json {
                print_json(&d)
            } else {
                print!("{}", demo::report(&d));
                ExitCode::SUCCESS
            };
            if bad {
                return fail("a client saw errors or wrong outputs (see the table)");
            }
            code
        }
        Cmd::Status { socket, json } => {
            let path = socket.unwrap_or_else(sluice_client::default_socket_path);
            // Every page of the client list, merged into one document
            // (so --json is one valid document at any number of clients).
            match sluice_cli::status::query_all(&path) {
                Ok(s) if json => print_json(&s),
                Ok(s) => {
                    print!("{}", status_table(&s));
                    ExitCode::SUCCESS
                }
                Err(e) => fail_chain(&e),
            }
        }
        Cmd::Bench {
            which:
                Bench::Ipc {
                    samples,
                    seconds,
                    inflight,
                    json,
                },
        } => {
            sluice_service::startup::init_tracing_quiet();
            let exe = match exe() {
                Ok(e) => e,
                Err(e) => return fail(e),
            };
            let o = bench_ipc::IpcOptions {
                samples,
                seconds,
                inflight,
            };
            match bench_ipc::run(&exe, &o) {
                Ok(r) if json => print_json(&r),
                Ok(r) => {
                    print!("{}", bench_ipc::table(&r));
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            }
        }
        Cmd::Bench {
            which:
                Bench::Disb {
                    workload,
                    policies,
                    device,
                    duration_ms,
                    seed,
                    trace,
                    jobs,
                    models_dir,
                    json,
                    plot,
                },
        } => {
            let workloads = match workload {
                Some(Workloads(w)) => w,
                None if trace.is_some() => Vec::new(),
                None => DisbWorkload::ALL.to_vec(),
            };
            let defaults = disb::DisbOptions::default();
            let opts = disb::DisbOptions {
                workloads,
                trace,
                policies: if policies.is_empty() {
                    PolicyKind::ALL.to_vec()
                } else {
                    policies
                },
                device,
                duration_ms,
                seed,
                jobs: jobs.map_or(defaults.jobs, |j| usize::try_from(j).unwrap_or(1)),
                models_dir,
            };
            let mut progress = disb::stderr_progress();
            let r = if opts.device == "cuda" {
                disb_on_cuda(&opts, &mut progress)
            } else {
                disb::run(&opts, &mut progress)
            };
            let r = match r {
                Ok(r) => r,
                Err(e) => return fail_chain(&e),
            };
            if let Some(path) = plot
                && let Err(e) = std::fs::write(&path, disb::plot(&r))
            {
                return fail(format!("cannot write the plot to {}: {e}", path.display()));
            }
            if json {
                print_json(&r)
            } else {
                print!("{}", disb::table(&r));
                ExitCode::SUCCESS
            }
        }
        Cmd::Bench {
            which: Bench::Preempt { device, json, reps },
        } if device == "cuda" => preempt_on_cuda(reps, json),
        Cmd::Bench {
            which: Bench::Preempt { device, json, .. },
        } => match bench_preempt::run(&bench_preempt::PreemptOptions {
            device: device.clone(),
        }) {
            Ok(r) if json => print_json(&r),
            Ok(r) => {
                print!("{}", bench_preempt::table(&r, &device));
                ExitCode::SUCCESS
            }
            Err(e) => fail_chain(&e),
        },
        Cmd::Bench {
            which:
                Bench::Hol {
                    loads,
                    jobs,
                    naive_streams,
                    seed,
                    json,
                },
        } => {
            let d = bench_hol::HolOptions::default();
            let opts = bench_hol::HolOptions {
                loads: if loads.is_empty() {
                    d.loads.clone()
                } else {
                    loads
                },
                jobs: jobs.unwrap_or(d.jobs),
                naive_streams: naive_streams.unwrap_or(d.naive_streams),
                seed: seed.unwrap_or(d.seed),
                ..d
            };
            let r = bench_hol::run(&opts);
            if json {
                print_json(&r)
            } else {
                print!("{}", bench_hol::table(&r));
                ExitCode::SUCCESS
            }
        }
        Cmd::Bench {
            which:
                Bench::Interference {
                    device,
                    batches,
                    splits,
                    requests,
                    gpulet_data,
                    plot,
                    json,
                },
        } => {
            use sluice_cli::bench_interference as bi;
            let d = bi::InterferenceOptions::default();
            let gpulet_data = gpulet_data.or_else(|| {
                let p = PathBuf::from("../shared/data/gpulet");
                p.is_dir().then_some(p)
            });
            if gpulet_data.is_none() {
                eprintln!(
                    "sluice bench interference: no gpulet data (--gpulet-data DIR); \
                     its coefficients are left out"
                );
            }
            let opts = bi::InterferenceOptions {
                device,
                batches: if batches.is_empty() {
                    d.batches
                } else {
                    batches
                },
                splits: if splits.is_empty() { d.splits } else { splits },
                requests,
                gpulet_data,
            };
            let r = bi::run(&opts, progress("sluice bench interference", "cases"));
            if let (Ok(r), Some(path)) = (&r, &plot)
                && let Err(e) = std::fs::write(path, bi::plot(r))
            {
                return fail(format!("cannot write the plot to {}: {e}", path.display()));
            }
            match r {
                Ok(r) if json => print_json(&r),
                Ok(r) => {
                    print!("{}", bi::table(&r));
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            }
        }
        Cmd::Bench {
            which:
                Bench::Trace {
                    scenario,
                    planner,
                    periods,
                    duration,
                    base,
                    peak1,
                    peak2,
                    gpus,
                    headroom,
                    burst_overflow,
                    rate_window,
                    latency_margin,
                    interference,
                    gpulet_data,
                    seed,
                    json,
                },
        } => {
            use sluice_cli::bench_cluster_trace as bt;
            let sc = match sluice_cli::bench_cluster_scenario::resolve(&scenario) {
                Ok(mut v) if v.len() == 1 => v.remove(0),
                Ok(_) => return fail(format!("--scenario {scenario}: give exactly one scenario")),
                Err(e) => return fail_chain(&e),
            };
            let gpulet_data = gpulet_data.or_else(|| {
                let p = PathBuf::from("../shared/data/gpulet");
                p.is_dir().then_some(p)
            });
            if interference != sluice_cli::bench_cluster::Interference::None
                && gpulet_data.is_none()
            {
                return fail(
                    "--interference gpulet-*: no gpulet data (../shared/data/gpulet is missing); give --gpulet-data DIR, or --interference none with a planner other than gpulet+int",
                );
            }
            let opts = bt::TraceOptions {
                planner,
                periods_s: periods,
                duration_s: duration,
                base_rps: base,
                peak1_rps: peak1,
                peak2_rps: peak2,
                gpu_limit: gpus,
                headroom,
                burst: burst_of(burst_overflow),
                rate_window_s: rate_window,
                latency_margin,
                interference,
                gpulet_data,
                seed,
                ..bt::TraceOptions::default()
            };
            match bt::run(
                &sc,
                &sluice_model::ModelRegistry::builtin(),
                &opts,
                progress("sluice bench trace", "periods"),
            ) {
                Ok(r) if json => print_json(&r),
                Ok(r) => {
                    print!("{}", bt::table(&r));
                    ExitCode::SUCCESS
                }
                Err(e) => fail_chain(&e),
            }
        }
        Cmd::Bench {
            which:
                Bench::Cluster {
                    scenarios,
                    planners,
                    device,
                    duration,
                    seed,
                    routing,
                    rounds,
                    batching,
                    interference,
                    gpulet_data,
                    no_search,
                    search_steps,
                    headroom,
                    burst_overflow,
                    latency_margin,
                    search_mode,
                    pass,
                    scan_step,
                    scan_from,
                    partition_sizes,
                    models_dir,
                    list,
                    plot,
                    json,
                },
        } => bench_cluster_cmd(
            scenarios,
            sluice_cli::bench_cluster::ClusterOptions {
                planners,
                device,
                duration_s: duration,
                seed,
                routing,
                rounds,
                batching,
                interference,
                gpulet_data: gpulet_data.or_else(|| {
                    let p = PathBuf::from("../shared/data/gpulet");
                    p.is_dir().then_some(p)
                }),
                search: !no_search,
                search_steps,
                headroom,
                burst: burst_of(burst_overflow),
                latency_margin,
                search_mode: match search_mode {
                    SearchArg::Bisect => sluice_cli::bench_cluster::SearchMode::Bisect,
                    SearchArg::Scan => sluice_cli::bench_cluster::SearchMode::Scan {
                        step: scan_step,
                        from_rps: scan_from,
                    },
                },
                pass,
                gpulet_sizes: match partition_sizes {
                    SizesArg::Step => None,
                    SizesArg::Gpulet => Some(sluice_planner::PartitionSizes::gpulet()),
                },
            },
            models_dir,
            list,
            plot,
            json,
        ),
        Cmd::Bench {
            which:
                Bench::Gpulet {
                    figs,
                    device,
                    gpulet_data,
                    threads,
                    scenarios,
                    plot,
                    json,
                },
        } => {
            let d = sluice_cli::bench_gpulet::GpuletOptions::default();
            let opts = sluice_cli::bench_gpulet::GpuletOptions {
                figs,
                device,
                gpulet_data,
                threads: threads.map_or(d.threads, |t| t as usize),
                fig17_scenarios: scenarios,
            };
            bench_gpulet_cmd(&opts, plot, json)
        }
        Cmd::Bench {
            which:
                Bench::Sim {
                    devices,
                    policies,
                    clients,
                    sim_ms,
                    json,
                },
        } => {
            let d = bench_sim::SimBenchOptions::default();
            let opts = bench_sim::SimBenchOptions {
                devices: if devices.is_empty() {
                    d.devices
                } else {
                    devices
                },
                policies: if policies.is_empty() {
                    d.policies
                } else {
                    policies
                },
                clients: if clients.is_empty() {
                    d.clients
                } else {
                    clients
                },
                sim_ms,
            };
            match bench_sim::run(&opts, &mut |line| eprintln!("{line}")) {
                Ok(r) if json => print_json(&r),
                Ok(r) => {
                    print!("{}", bench_sim::table(&r));
                    ExitCode::SUCCESS
                }
                Err(e) => fail_chain(&e),
            }
        }
        Cmd::Bench {
            which:
                Bench::Padding {
                    device,
                    models,
                    duration_ms,
                    jobs,
                    json,
                },
        } => {
            let d = bench_padding::PaddingOptions::default();
            let opts = bench_padding::PaddingOptions {
                device,
                models: if models.is_empty() { d.models } else { models },
                duration_ms,
                jobs: jobs.map_or(d.jobs, |j| j as usize),
            };
            let mut progress = progress("padding matrix", "runs");
            match bench_padding::run(&opts, &mut progress) {
                Ok(r) if json => print_json(&r),
                Ok(r) => {
                    print!("{}", bench_padding::table(&r));
                    ExitCode::SUCCESS
                }
                Err(e) => fail_chain(&e),
            }
        }
        Cmd::Bench {
            which:
                Bench::Paella {
                    device,
                    seconds,
                    loads,
                    sigmas,
                    policies,
                    seed,
                    jobs,
                    long,
                    threshold,
                    json,
                },
        } => {
            let d = bench_paella::PaellaBenchOptions::default();
            if !(seconds > 0.0 && seconds <= 3600.0) {
                return fail(format!(
                    "--seconds {seconds} is out of range; give 0 < S <= 3600"
                ));
            }
            if let Some(bad) = sigmas.iter().find(|s| !(**s > 0.0 && **s <= 4.0)) {
                return fail(format!(
                    "--sigma {bad} is out of range; give 0 < sigma <= 4 (the paper uses 1.5 and 2)"
                ));
            }
            let opts = bench_paella::PaellaBenchOptions {
                device,
                seconds,
                loads: if loads.is_empty() {
                    d.loads.clone()
                } else {
                    loads
                },
                sigmas: if sigmas.is_empty() {
                    d.sigmas.clone()
                } else {
                    sigmas
                },
                policies: if policies.is_empty() {
                    d.policies.clone()
                } else {
                    policies
                },
                seed,
                jobs: jobs.map_or(d.jobs, |j| usize::try_from(j).unwrap_or(1)),
                long,
                deficit_threshold: threshold,
                ..d
            };
            let mut progress = bench_paella::stderr_progress();
            match bench_paella::run(&opts, &mut progress) {
                Ok(r) if json => print_json(&r),
                Ok(r) => {
                    print!("{}", bench_paella::table(&r));
                    ExitCode::SUCCESS
                }
                Err(e) => fail_chain(&e),
            }
        }
        Cmd::Split {
            model,
            blocks,
            max_blocks,
            device,
            seed,
            exhaustive,
            json,
            out,
        } => split_cmd(
            sluice_cli::split_cmd::SplitArgs {
                model,
                blocks: blocks.map(|b| b as usize),
                max_blocks: max_blocks as usize,
                device,
                seed,
                exhaustive,
            },
            json,
            out,
        ),
        Cmd::Bench {
            which:
                Bench::Split {
                    device,
                    policies,
                    scenarios,
                    requests,
                    mix,
                    clients_per_model,
                    seed,
                    jobs,
                    plot,
                    json,
                    markdown: _,
                },
        } => {
            use sluice_cli::bench_split as bs;
            let d = bs::SplitBenchOptions::default();
            let mix = match bs::Mix::from_name(&mix) {
                Ok(m) => m,
                Err(e) => return fail(e),
            };
            let opts = bs::SplitBenchOptions {
                device,
                scenarios_ms: if scenarios.is_empty() {
                    d.scenarios_ms.clone()
                } else {
                    scenarios
                },
                requests,
                policies: if policies.is_empty() {
                    d.policies.clone()
                } else {
                    policies
                },
                mix,
                clients_per_model,
                seed,
                jobs: jobs.map_or(d.jobs, |j| usize::try_from(j).unwrap_or(1)),
            };
            let splitter = match split_splitter() {
                Ok(s) => s,
                Err(e) => return fail(e),
            };
            let mut progress = bs::stderr_progress();
            let r = match bs::run_with_progress(&opts, splitter.as_ref(), &mut progress) {
                Ok(r) => r,
                Err(e) => return fail(e),
            };
            if let Some(dir) = plot {
                if let Err(e) = std::fs::create_dir_all(&dir) {
                    return fail(format!(
                        "cannot create the plot directory {}: {e}",
                        dir.display()
                    ));
                }
                for (name, svg) in bs::plots(&r) {
                    let path = dir.join(name);
                    if let Err(e) = std::fs::write(&path, svg) {
                        return fail(format!("cannot write the plot to {}: {e}", path.display()));
                    }
                }
            }
            if json {
                print_json(&r)
            } else {
                print!("{}", bs::markdown(&r));
                ExitCode::SUCCESS
            }
        }
        Cmd::Kernels { which } => kernels_cmd(which),
        Cmd::Check {
            model,
            small,
            seed,
            tol,
            json,
            ..
        } => check_cmd(model, small, seed, tol, json),
        Cmd::Profile {
            device,
            model,
            batches,
            partitions,
            json,
            out,
            ..
        } if device != "cuda" => profile_sim_cmd(&device, &model, batches, partitions, json, out),
        Cmd::Profile {
            model,
            out,
            reps,
            small,
            seed,
            batches,
            partitions,
            json,
            ..
        } => {
            if !partitions.is_empty() {
                let batches = if batches.is_empty() { vec![1] } else { batches };
                return cuda_partitions_cmd(&model, &batches, &partitions, reps, json);
            }
            if !batches.is_empty() {
                return fail(
                    "--batches on cuda goes with --partitions (the partition latency curve); \
                     drop it to time the kernels at batch 1",
                );
            }
            if let Err(e) = parse_model(&model) {
                return fail(e);
            }
            profile_cmd(&model, out, reps, small, seed)
        }
        Cmd::Client {
            socket,
            name,
            model,
            priority,
            period_us,
            window,
            duration_ms,
            spin_us,
            no_check,
        } => {
            let role = ClientRole {
                check: !no_check,
                socket,
                name,
                model,
                priority: match priority {
                    Prio::Rt => sluice_client::Priority::RealTime,
                    Prio::Be => sluice_client::Priority::BestEffort,
                },
                pattern: period_us.map_or(Pattern::ClosedLoop { window }, |p| {
                    Pattern::Periodic(Duration::from_micros(p))
                }),
                duration: Duration::from_millis(duration_ms),
                spin: Duration::from_micros(spin_us),
            };
            match roles::run_client(&role) {
                Ok(r) => print_json(&r),
                Err(e) => fail(e),
            }
        }
        Cmd::BenchClient {
            socket,
            mode,
            samples,
            seconds,
            inflight,
            cpu,
        } => {
            let role = BenchRole {
                cpu,
                socket,
                mode: match mode {
                    Mode::Spin => BenchMode::Spin,
                    Mode::Parked => BenchMode::Parked,
                    Mode::ParkedDevice => BenchMode::ParkedDevice,
                    Mode::Uds => BenchMode::Uds,
                    Mode::Throughput => BenchMode::Throughput,
                    Mode::Floor => BenchMode::Floor,
                    Mode::FloorPair => BenchMode::FloorPair,
                    Mode::Spin50 => BenchMode::Spin50,
                    Mode::Adaptive => BenchMode::Adaptive,
                },
                samples,
                inflight,
                duration: Duration::from_secs(seconds),
            };
            match roles::run_bench(&role) {
                Ok(r) => print_json(&r),
                Err(e) => fail(e),
            }
        }
    }
}

fn kernels_cmd(which: KernelsCmd) -> ExitCode {
    use sluice_cuda::kernels::{self, Kernel};
    match which {
        KernelsCmd::List => {
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
        KernelsCmd::Ptx { arch, out } => kernels_ptx(&arch, &out),
    }
}

#[cfg(feature = "cuda")]
fn kernels_ptx(arches: &[String], out: &std::path::Path) -> ExitCode {
    use sluice_cuda::kernels;
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
fn kernels_ptx(_arches: &[String], _out: &std::path::Path) -> ExitCode {
    fail(
        "this sluice was built without `--features cuda`, so it cannot run NVRTC; \
         rebuild with `cargo build --release --features sluice-cli/cuda` \
         (no GPU or CUDA toolkit needed to build; libnvrtc.so.12 at run time)",
    )
}

/// `sluice bench cluster`.
fn bench_cluster_cmd(
    specs: Vec<String>,
    opts: sluice_cli::bench_cluster::ClusterOptions,
    models_dir: Option<PathBuf>,
    list: bool,
    plot: Option<PathBuf>,
    json: bool,
) -> ExitCode {
    use sluice_cli::bench_cluster as bc;
    use sluice_cli::bench_cluster_scenario as bs;
    if list {
        return match bs::all() {
            Ok(all) => {
                for s in all {
                    println!(
                        "{:<14} {} GPUs, {} models, {}: {}",
                        s.name,
                        s.gpus,
                        s.models.len(),
                        s.device,
                        s.description
                    );
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail_chain(&e),
        };
    }
    let mut scenarios = Vec::new();
    for spec in &specs {
        match bs::resolve(spec) {
            Ok(v) => scenarios.extend(v),
            Err(e) => return fail_chain(&e),
        }
    }
    let reg = match &models_dir {
        None => sluice_model::ModelRegistry::builtin(),
        Some(dir) => match sluice_model::ModelRegistry::load_dir(dir)
            .and_then(|o| sluice_model::ModelRegistry::builtin().with_overrides(o))
        {
            Ok(r) => r,
            Err(e) => return fail(format!("--models {}: {e}", dir.display())),
        },
    };
    if opts.interference != bc::Interference::None && opts.gpulet_data.is_none() {
        return fail(
            "--interference gpulet-*: no gpulet data (../shared/data/gpulet is missing); give --gpulet-data DIR",
        );
    }
    let r = bc::run(
        &scenarios,
        &reg,
        &opts,
        progress("sluice bench cluster: measuring L(b, p)", "models"),
        progress("sluice bench cluster", "scenario x planner runs"),
    );
    if let (Ok(r), Some(dir)) = (&r, &plot) {
        let Some((name, svg)) = bc::fig13_plot(r) else {
            return fail(
                "--plot: no Fig. 13 to draw; it needs sbp among the planners and the served search (drop --pass planned and --no-search)",
            );
        };
        if let Err(e) = std::fs::create_dir_all(dir) {
            return fail(format!(
                "cannot create the plot directory {}: {e}",
                dir.display()
            ));
        }
        let path = dir.join(name);
        if let Err(e) = std::fs::write(&path, svg) {
            return fail(format!("cannot write the plot to {}: {e}", path.display()));
        }
        eprintln!("sluice bench cluster: wrote {}", path.display());
    }
    match r {
        Ok(r) if json => print_json(&r),
        Ok(r) => {
            print!("{}", bc::table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => fail_chain(&e),
    }
}

/// `sluice bench gpulet`.
fn bench_gpulet_cmd(
    opts: &sluice_cli::bench_gpulet::GpuletOptions,
    plot: Option<PathBuf>,
    json: bool,
) -> ExitCode {
    use sluice_cli::bench_gpulet as bg;
    let mut last: Option<(String, std::time::Instant)> = None;
    let r = bg::run(
        &sluice_model::ModelRegistry::builtin(),
        opts,
        progress("sluice bench gpulet: measuring L(b, p)", "models"),
        |what, done, total| {
            let now = std::time::Instant::now();
            let started = match &last {
                Some((w, t)) if w == what => *t,
                _ => {
                    last = Some((what.to_owned(), now));
                    now
                }
            };
            eprint!(
                "\rsluice bench gpulet: {done}/{total} {what} ({:.0} s)",
                now.duration_since(started).as_secs_f64()
            );
            if done == total {
                eprintln!();
            }
        },
    );
    let r = match r {
        Ok(r) => r,
        Err(e) => return fail_chain(&e),
    };
    if let Some(dir) = plot {
        for (name, svg) in bg::plots(&r) {
            let path = dir.join(name);
            if let Err(e) = std::fs::write(&path, svg) {
                return fail(format!("--plot: cannot write {}: {e}", path.display()));
            }
            eprintln!("sluice bench gpulet: wrote {}", path.display());
        }
    }
    if json {
        print_json(&r)
    } else {
        print!("{}", bg::table(&r));
        ExitCode::SUCCESS
    }
}

fn parse_fig(s: &str) -> Result<sluice_cli::bench_gpulet::Fig, String> {
    sluice_cli::bench_gpulet::Fig::from_name(s).ok_or_else(|| {
        format!("`{s}` is not a figure of sluice bench gpulet; use 16 (or 5), 17 or 6")
    })
}

fn parse_planner(s: &str) -> Result<sluice_cli::bench_cluster_scenario::PlannerKind, String> {
    use sluice_cli::bench_cluster_scenario::PlannerKind;
    PlannerKind::from_name(s).ok_or_else(|| {
        format!(
            "`{s}` is not a planner; use one of {}",
            PlannerKind::NAMES.join(", ")
        )
    })
}

/// `--search` of `sluice bench cluster`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SearchArg {
    /// Double from factor 1 until the outcome flips, then bisect.
    Bisect,
    /// Raise the rate step by step from a low total and stop at the first
    /// failure (gpulet §5.2).
    Scan,
}

/// `--partition-sizes` of `sluice bench cluster`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SizesArg {
    /// Every multiple of the scenario's partition step.
    Step,
    /// gpulet's 20, 40, 50, 60, 80 and 100 %.
    Gpulet,
}

fn parse_margin(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(m) if m.is_finite() && (1.0..=10.0).contains(&m) => Ok(m),
        _ => Err(format!(
            "`{s}` is not a latency margin in [1, 10]; give e.g. 1.1 to plan with latencies 10 % longer than measured"
        )),
    }
}

/// A number or `inf`; `bench_paella::run` refuses what is not positive.
fn parse_threshold(s: &str) -> Result<f64, String> {
    s.parse::<f64>().map_err(|_| {
        format!("`{s}` is not a deficit threshold; give a number of kernels (e.g. 16) or inf")
    })
}

fn parse_scan_step(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && (0.001..=1.0).contains(&x) => Ok(x),
        _ => Err(format!(
            "`{s}` is not a scan step in [0.001, 1]; give e.g. 0.05 to raise the rate by 5 % per probe"
        )),
    }
}

fn parse_rate_from(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 1e6 => Ok(x),
        _ => Err(format!(
            "`{s}` is not a starting rate in (0, 1e6] rps; give e.g. 10"
        )),
    }
}

fn parse_overflow(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(eps) if eps > 0.0 && eps < 1.0 => Ok(eps),
        _ => Err(format!(
            "`{s}` is not a share strictly between 0 and 1; give e.g. 0.01 for a 1 % violation target"
        )),
    }
}

fn burst_of(q: Option<f64>) -> sluice_planner::Burst {
    q.map_or(sluice_planner::Burst::Mean, sluice_planner::Burst::Poisson)
}

fn parse_headroom(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(h) if h.is_finite() && (0.0..=10.0).contains(&h) => Ok(h),
        _ => Err(format!(
            "`{s}` is not a headroom in [0, 10]; give e.g. 0.1 for 10 % spare capacity"
        )),
    }
}

fn parse_duration(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(d) if d.is_finite() && d > 0.0 && d <= 86_400.0 => Ok(d),
        _ => Err(format!(
            "`{s}` is not a duration in seconds in (0, 86400]; give e.g. 60"
        )),
    }
}

/// A progress line on stderr, rewritten in place: `what: done/total unit`,
/// ended with a newline when `done` reaches `total`.
fn progress(what: &'static str, unit: &'static str) -> impl FnMut(usize, usize) {
    move |done, total| {
        eprint!("\r{what}: {done}/{total} {unit}");
        if done == total {
            eprintln!();
        }
    }
}

fn parse_profile_device(s: &str) -> Result<String, String> {
    if s == "cuda" || DeviceProfile::builtin_names().any(|n| n == s) {
        Ok(s.into())
    } else {
        Err(format!(
            "`{s}` is not a device; use cuda or a simulated profile ({})",
            DeviceProfile::builtin_names()
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

/// `sluice split MODEL`: SPLIT's evenly sized blocks.
fn split_cmd(args: sluice_cli::split_cmd::SplitArgs, json: bool, out: Option<PathBuf>) -> ExitCode {
    use sluice_cli::split_cmd as sc;
    let (r, graph) = match sc::run(&args) {
        Ok(x) => x,
        Err(e) => return fail_chain(&e),
    };
    if let Some(path) = &out {
        if let Err(e) = sc::write_into_manifest(&r, &graph, path) {
            return fail_chain(&e);
        }
        eprintln!(
            "sluice split: wrote the {}-block split of `{}` for `{}` into {}",
            r.chosen_blocks,
            r.model,
            r.device,
            path.display()
        );
    }
    if json {
        print_json(&r)
    } else {
        print!("{}", sc::table(&r));
        ExitCode::SUCCESS
    }
}

/// `sluice profile --device <simulated profile>`: L(b, p) on the GPU model.
fn profile_sim_cmd(
    device: &str,
    model: &str,
    batches: Vec<u32>,
    partitions: Vec<u32>,
    json: bool,
    out: Option<PathBuf>,
) -> ExitCode {
    use sluice_cli::profile_sim as ps;
    let profile = match DeviceProfile::builtin(device) {
        Ok(p) => p,
        Err(e) => return fail_chain(&e),
    };
    let reg = sluice_model::ModelRegistry::builtin();
    let Some((_, m)) = reg.lookup(model) else {
        let names: Vec<&str> = reg.iter().map(|(_, m)| m.name()).collect();
        return fail(format!(
            "no model `{model}`; use one of {}",
            names.join(", ")
        ));
    };
    let batches = if batches.is_empty() {
        ps::DEFAULT_BATCHES.to_vec()
    } else {
        batches
    };
    let partitions = if partitions.is_empty() {
        ps::DEFAULT_PARTITIONS.to_vec()
    } else {
        partitions
    };
    let r = ps::profile(
        &profile,
        m,
        &batches,
        &partitions,
        progress("sluice profile", "points"),
    );
    if let (Ok(r), Some(path)) = (&r, &out) {
        if let Err(e) = ps::write_into_manifest(r, path) {
            return fail_chain(&e);
        }
        eprintln!(
            "sluice profile: wrote the L(b, p) table of `{device}` into {}",
            path.display()
        );
    }
    match r {
        Ok(r) if json => print_json(&r),
        Ok(r) => {
            print!("{}", ps::table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => fail_chain(&e),
    }
}

fn parse_cuda_only(s: &str) -> Result<String, String> {
    if s == "cuda" {
        Ok(s.into())
    } else {
        Err(format!(
            "`{s}` is not a device for this command; use cuda (the simulated GPU runs no kernels)"
        ))
    }
}

fn parse_model(s: &str) -> Result<String, String> {
    use sluice_nn::builders::MODEL_NAMES;
    if MODEL_NAMES.contains(&s) {
        Ok(s.into())
    } else {
        Err(format!(
            "`{s}` is not a model builder; use one of {}",
            MODEL_NAMES.join(", ")
        ))
    }
}

/// `sluice check --device cuda`.
#[cfg(feature = "cuda")]
fn check_cmd(model: Option<String>, small: bool, seed: u64, tol: f64, json: bool) -> ExitCode {
    use sluice_cli::cuda_models as cm;
    use sluice_cuda::plan_exec::LoadOptions;
    use sluice_nn::builders::{self, BuildOptions, MODEL_NAMES, Scale};
    let names: Vec<&str> = match &model {
        Some(m) => vec![m.as_str()],
        None => MODEL_NAMES.to_vec(),
    };
    let mut rig = match sluice_cuda::open_cuda() {
        Ok(r) => r,
        Err(e) => return fail_chain(&e),
    };
    eprintln!("sluice check: {}", rig.drv.info());
    let scale = if small { Scale::Small } else { Scale::Full };
    let mut results = Vec::new();
    for name in names {
        let built = match builders::build(name, &BuildOptions { scale }) {
            Ok(b) => b,
            Err(e) => return fail_chain(&e),
        };
        eprintln!(
            "sluice check: {} ({} kernels; the CPU reference of a full model takes a while)",
            built.plan().name(),
            built.plan().steps().len()
        );
        let r = cm::check_model(
            &mut rig.drv,
            &mut rig.q,
            &rig.lib,
            &built,
            seed,
            tol,
            &LoadOptions::default(),
        );
        match r {
            Ok(r) => {
                if !json {
                    println!("{}", r.line());
                }
                results.push(r);
            }
            Err(e) => return fail_chain(&e),
        }
    }
    let code = if json {
        print_json(&results)
    } else {
        ExitCode::SUCCESS
    };
    if results.iter().all(|r| r.pass) {
        code
    } else {
        ExitCode::FAILURE
    }
}

/// `sluice profile --device cuda`.
#[cfg(feature = "cuda")]
fn profile_cmd(model: &str, out: Option<PathBuf>, reps: u32, small: bool, seed: u64) -> ExitCode {
    use sluice_cli::cuda_models as cm;
    use sluice_cuda::plan_exec::LoadOptions;
    use sluice_nn::builders::{self, BuildOptions, Scale};
    let scale = if small { Scale::Small } else { Scale::Full };
    let built = match builders::build(model, &BuildOptions { scale }) {
        Ok(b) => b,
        Err(e) => return fail_chain(&e),
    };
    let mut rig = match sluice_cuda::open_cuda() {
        Ok(r) => r,
        Err(e) => return fail_chain(&e),
    };
    let info = rig.drv.info().clone();
    eprintln!("sluice profile: {info}");
    let on = cm::MeasuredOn {
        device: info.name.clone(),
        sms: u32::try_from(info.sm_count).unwrap_or(1),
        date: cm::today(),
        reps,
    };
    let mut progress = progress("sluice profile", "kernels timed");
    let r = match cm::profile_model(
        &mut rig.drv,
        &mut rig.q,
        &rig.lib,
        &built,
        seed,
        &on,
        &LoadOptions::default(),
        &mut progress,
    ) {
        Ok(r) => r,
        Err(e) => return fail_chain(&e),
    };
    print!("{}", r.table());
    let path = out.unwrap_or_else(|| PathBuf::from(format!("{}.json", r.model)));
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        return fail(format!("cannot create {}: {e}", dir.display()));
    }
    if let Err(e) = std::fs::write(&path, &r.manifest_json) {
        return fail(format!("cannot write {}: {e}", path.display()));
    }
    println!("wrote the measured manifest {}", path.display());
    ExitCode::SUCCESS
}

/// `sluice profile --device cuda MODEL --partitions …`: the partition
/// latency curve on green contexts and the switch cost.
#[cfg(feature = "cuda")]
fn cuda_partitions_cmd(
    model: &str,
    batches: &[u32],
    partitions: &[u32],
    reps: u32,
    json: bool,
) -> ExitCode {
    use sluice_cli::cuda_models as cm;
    let reg = sluice_model::ModelRegistry::builtin();
    let Some((_, m)) = reg.lookup(model) else {
        return fail(format!("no built-in manifest `{model}`"));
    };
    let (mut gpu, info) = match sluice_cuda::open_device0(sluice_cuda::Kill::Cooperative) {
        Ok(g) => g,
        Err(e) => return fail_chain(&e),
    };
    eprintln!("sluice profile: {info}");
    let mut progress = progress("sluice profile", "points");
    match cm::partition_profile(
        &mut gpu,
        &info.name,
        m,
        batches,
        partitions,
        reps,
        &mut progress,
    ) {
        Ok(r) if json => print_json(&r),
        Ok(r) => {
            print!("{}", r.table());
            ExitCode::SUCCESS
        }
        Err(e) => fail_chain(&e),
    }
}

/// `sluice profile --device cuda --partitions` in a build without the
/// backend.
#[cfg(not(feature = "cuda"))]
fn cuda_partitions_cmd(
    _model: &str,
    _batches: &[u32],
    _partitions: &[u32],
    _reps: u32,
    _json: bool,
) -> ExitCode {
    no_cuda("profile")
}

/// `sluice check` / `sluice profile` in a build without the CUDA backend.
#[cfg(not(feature = "cuda"))]
fn no_cuda(cmd: &str) -> ExitCode {
    eprintln!(
        "error: sluice {cmd} --device cuda: this sluice was built without the CUDA backend; \
         rebuild with `cargo build --release --features sluice-cli/cuda`"
    );
    ExitCode::from(2)
}

/// `sluice check --device cuda` in a build without the backend.
#[cfg(not(feature = "cuda"))]
fn check_cmd(_model: Option<String>, _small: bool, _seed: u64, _tol: f64, _json: bool) -> ExitCode {
    no_cuda("check")
}

/// `sluice profile --device cuda` in a build without the backend.
#[cfg(not(feature = "cuda"))]
fn profile_cmd(
    _model: &str,
    _out: Option<PathBuf>,
    _reps: u32,
    _small: bool,
    _seed: u64,
) -> ExitCode {
    no_cuda("profile")
}

fn status_table(s: &Status) -> String {
    let mut out = format!(
        "sluiced pid {} v{} (protocol {}), up {:.0} s, socket {}\n\
         device: {}   dispatcher: {}\n{}\
         kill mechanism: {}\n\
         models: {}\n\
         requests: {} submitted, {} completed, {} errors; {} on the device\n\
         {}\
         sessions refused: {}, clients dropped for corrupting their region: {}\n\
         dispatcher parks: {}, client wake-ups sent: {}\n\n",
        s.pid,
        s.version,
        s.protocol,
        s.uptime_s,
        s.socket,
        s.device,
        s.dispatcher,
        if s.dispatcher_warning.is_empty() {
            String::new()
        } else {
            format!("WARNING: {}\n", s.dispatcher_warning)
        },
        s.kill_mechanism,
        s.models.join(", "),
        s.submitted,
        s.completed,
        s.errors,
        s.device_queued,
        sluice_cli::status::missed_line(&s.deadline_missed),
        s.refused,
        s.dropped_clients,
        s.parks,
        s.wakes
    );
    if let Some(c) = &s.cluster {
        out += &sluice_cli::status::cluster_table(c);
        out.push('\n');
    }
    out += &format!(
        "{:>4} {:<20} {:>8} {:>6} {:>10} {:>10} {:>8} {:>9} {:>10}\n",
        "id", "name", "pid", "uid", "submitted", "completed", "errors", "on device", "connected"
    );
    for c in &s.clients {
        out += &format!(
            "{:>4} {:<20} {:>8} {:>6} {:>10} {:>10} {:>8} {:>9} {:>9.0}s\n",
            c.id,
            c.name,
            c.pid,
            c.uid,
            c.submitted,
            c.completed,
            c.errors,
            c.on_device,
            c.connected_s
        );
    }
    if s.clients.is_empty() {
        out += "(no clients connected)\n";
    }
    let c = &s.control;
    out += &format!(
        "\ncontrol socket: {} connections open ({} in handshake, this query among them); closed at accept (not \
         allowed): {}, handshake timeouts: {}, handshakes evicted: {}, out of fds: {} \
         ({} shed), RLIMIT_NOFILE {}\n",
        c.open_connections,
        c.handshaking,
        c.not_allowed,
        c.handshake_timeouts,
        c.handshakes_evicted,
        c.fd_exhausted,
        c.shed,
        c.nofile_limit
            .map_or_else(|| "unlimited".to_owned(), |n| n.to_string())
    );
    out
}

/// `sluice bench preempt --device cuda`.
#[cfg(feature = "cuda")]
fn preempt_on_cuda(reps: u32, json: bool) -> ExitCode {
    use sluice_cli::bench_preempt_device as dev;
    let mut last = 0;
    let mut progress = |done: usize, total: usize| {
        let pct = done * 100 / total.max(1);
        if pct != last || done == total {
            last = pct;
            eprint!("\rbench preempt --device cuda: {done}/{total} measurements ({pct}%)");
            if done == total {
                eprintln!();
            }
        }
    };
    match dev::run_cuda(reps, &mut progress) {
        Ok(r) if json => print_json(&r),
        Ok(r) => {
            print!("{}", dev::table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => fail_chain(&e),
    }
}

/// `sluice bench preempt --device cuda` in a build without the backend.
#[cfg(not(feature = "cuda"))]
fn preempt_on_cuda(_reps: u32, _json: bool) -> ExitCode {
    eprintln!(
        "error: --device cuda: this sluice was built without the CUDA backend; rebuild with \
         `cargo build --release --features sluice-cli/cuda`"
    );
    ExitCode::from(2)
}

/// `sluice bench disb --device cuda`.
#[cfg(feature = "cuda")]
fn disb_on_cuda(
    opts: &disb::DisbOptions,
    progress: &mut dyn FnMut(&disb::Progress),
) -> Result<disb::DisbReport, disb::DisbError> {
    use sluice_cuda::{Kill, open_device0};
    let (g, info) =
        open_device0(Kill::Cooperative).map_err(|e| disb::DisbError::Device(e.to_string()))?;
    let name = format!("cuda: {}", info.name);
    disb::run_on_device(
        opts,
        &sluice_sched::make_policy,
        Box::new(g),
        &name,
        progress,
    )
}

/// `sluice bench disb --device cuda` in a build without the backend.
#[cfg(not(feature = "cuda"))]
fn disb_on_cuda(
    _: &disb::DisbOptions,
    _: &mut dyn FnMut(&disb::Progress),
) -> Result<disb::DisbReport, disb::DisbError> {
    Err(disb::DisbError::Device(
        "--device cuda: this sluice was built without the CUDA backend; rebuild with \
         `cargo build --release --features sluice-cli/cuda`"
            .into(),
    ))
}
