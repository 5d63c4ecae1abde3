//! The head-of-line (HOL) blocking benchmark of Paella §2.1 (Figure 2), in
//! virtual time on the GPU model.
//!
//! Workload, as in the paper: jobs of 8 kernels, each kernel one block of 128
//! threads and 9 registers, no shared memory, running 300 µs; Poisson
//! arrivals at a fraction of the device's capacity. Device: a GTX 1660
//! SUPER-like profile ([`profile`]): 22 SMs of 1024 threads, so 8 blocks per
//! SM and at most 176 kernels at once, and 32 hardware queues.
//!
//! Two ways of submitting the same jobs are compared:
//!
//! - **naive**: each job's 8 kernels go onto a stream at once, as soon as it
//!   arrives; job `i` uses stream `i mod naive_streams`, and stream `s` feeds
//!   hardware queue `s mod 32`. A hardware queue serves only its head, and a
//!   job's next kernel waits for the previous one, so each queue runs about
//!   one kernel at a time: at most about 32 of the 176 slots are used.
//! - **paella**: [`sluice_sched::paella::Paella`], which sends a kernel only
//!   when it can be placed.
//!
//! For each load the result gives the achieved utilisation and the p99 job
//! latency. Utilisation here is *block-slot* occupancy: the block time the
//! finished kernels ran, over `slots × makespan`, with `slots` = SMs × blocks
//! per SM (176) and the makespan from 0 to the last completion. The model's
//! own [`sluice_gpusim::GpuSim::utilisation`] counts an SM busy as soon as one
//! block is resident, which 32 single-block kernels already achieve on 22
//! SMs, so it cannot show the effect.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use shm_proto::Priority;

use sluice_gpu::{DeviceProfile, Event, Footprint, KernelLaunch, Ns, StreamId, blocks_per_cu};
use sluice_gpusim::GpuSim;
use sluice_model::{Kernel, Manifest, ModelRegistry};
use sluice_sched::paella::{Paella, PaellaConfig};
use sluice_sched::workload::{self, Arrival, ClientSpec, Workload};
use sluice_sched::{Ctx, Policy, Task, TaskDone, TaskId, tag, untag};
use sluice_stats::Summary;

/// Kernels per job (Paella §2.1).
pub const KERNELS_PER_JOB: usize = 8;
/// Threads per block (Paella §2.1).
pub const THREADS: u32 = 128;
/// Registers per thread (Paella §2.1).
pub const REGS: u32 = 9;
/// Kernel (= block) time, µs (Paella §2.1: "~300 µs").
pub const KERNEL_US: f64 = 300.0;

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct HolOptions {
    /// Offered loads, as fractions of the device's capacity in jobs/s.
    pub loads: Vec<f64>,
    /// Jobs per load point (arrivals last `jobs / rate`).
    pub jobs: u32,
    /// Streams the naive submission cycles through.
    pub naive_streams: u32,
    /// Paella's parameters.
    pub paella: PaellaConfig,
    /// Seed of the arrival process.
    pub seed: u64,
}

impl Default for HolOptions {
    fn default() -> Self {
        Self {
            loads: (1..=10).map(|i| f64::from(i) / 10.0).collect(),
            jobs: 3000,
            naive_streams: 64,
            paella: PaellaConfig::default(),
            seed: 1,
        }
    }
}

/// One load point of one submission method.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HolPoint {
    /// Offered load (fraction of capacity).
    pub load: f64,
    /// Achieved block-slot occupancy, 0 to 1.
    pub utilization: f64,
    /// 99th percentile job latency, ms.
    pub p99_ms: f64,
}

/// Every load point of both methods.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HolResult {
    /// Naive submission.
    pub naive: Vec<HolPoint>,
    /// Paella.
    pub paella: Vec<HolPoint>,
}

/// The device of Paella §2.1 (GeForce GTX 1660 SUPER, Turing, cc 7.5),
/// derived from the `gv100` profile. Changed: `compute_units` 80 → 22,
/// `cu.max_threads` 2048 → 1024, `cu.max_blocks` 32 → 16,
/// `cu.shared_mem_bytes` 96 KB → 64 KB (CUDA guide, cc 7.5), and
/// `memory.default_intensity` 0.3 → 0 (the synthetic kernels only compute,
/// so co-running ones do not slow each other down). Kept: 32 hardware
/// queues (Paella §2.1), the 5 µs host launch and 4 µs fetch.
pub fn profile() -> DeviceProfile {
    let mut p = DeviceProfile::gv100();
    p.name = "gtx1660s-hol".to_owned();
    p.compute_units = 22;
    p.cu.max_threads = 1024;
    p.cu.max_blocks = 16;
    p.cu.shared_mem_bytes = 64 * 1024;
    p.memory.default_intensity = 0.0;
    p.queues.hw_queues = 32;
    p
}

/// The one-model registry: `hol_job`, 8 single-block kernels of 300 µs.
pub fn registry() -> ModelRegistry {
    let kernel = |i: usize| Kernel {
        name: format!("spin{i}"),
        grid: [1, 1, 1],
        block: [THREADS, 1, 1],
        regs_per_thread: REGS,
        shared_mem_bytes: 0,
        kernel_time_us: KERNEL_US,
        block_time_us: KERNEL_US,
        idempotent: true,
        wave_us: Vec::new(),
        mem_intensity: None,
    };
    let manifest = Manifest {
        name: "hol_job".to_owned(),
        display_name: "Paella §2.1 synthetic job".to_owned(),
        provenance: "synthetic: Paella SOSP'23 §2.1 (8 kernels, 1 block of 128 threads, \
                     9 registers, ~300 us each)"
            .to_owned(),
        input_bytes: 0,
        output_bytes: 0,
        total_time_us: KERNEL_US * KERNELS_PER_JOB as f64,
        kernels: (0..KERNELS_PER_JOB).map(kernel).collect(),
        lbp: Vec::new(),
        splits: Vec::new(),
    };
    ModelRegistry::from_manifests([("builtin:hol_job".to_owned(), manifest)])
        .unwrap_or_else(|e| panic!("the HOL model is valid by construction: {e}"))
}

/// Block slots of the device for the HOL kernel (176 on [`profile`]).
pub fn slots(p: &DeviceProfile) -> u32 {
    let fp = Footprint::new(p, THREADS, REGS, 0);
    blocks_per_cu(p, &fp).0 * p.compute_units
}

/// Jobs per second that fill every slot.
pub fn capacity_jobs_per_s(p: &DeviceProfile) -> f64 {
    f64::from(slots(p)) / (KERNELS_PER_JOB as f64 * KERNEL_US * 1e-6)
}

/// Naive submission: all of a job's kernels onto a stream at arrival.
#[derive(Debug)]
pub struct Naive {
    nstreams: u32,
    streams: Vec<StreamId>,
    launches: Vec<Vec<KernelLaunch>>,
    tasks: HashMap<TaskId, Task>,
}

impl Naive {
    /// Cycles jobs through `nstreams` streams.
    pub fn new(models: &ModelRegistry, nstreams: u32) -> Self {
        Self {
            nstreams: nstreams.max(1),
            streams: Vec::new(),
            launches: models
                .iter()
                .map(|(_, m)| {
                    m.manifest
                        .kernels
                        .iter()
                        .map(|k| KernelLaunch::from_model(k, 0))
                        .collect()
                })
                .collect(),
            tasks: HashMap::new(),
        }
    }
}

impl Policy for Naive {
    fn name(&self) -> &'static str {
        "naive"
    }

    fn on_arrival(&mut self, cx: &mut Ctx<'_>, task: Task) {
        while self.streams.len() < self.nstreams as usize {
            match cx.gpu.create_stream(0) {
                Ok(s) => self.streams.push(s),
                Err(e) => return cx.fail(task, e),
            }
        }
        let stream = self.streams[(task.id % u64::from(self.nstreams)) as usize];
        let ks = self
            .launches
            .get(task.model as usize)
            .map_or(&[][..], |v| v);
        if ks.is_empty() {
            let finished = cx.gpu.now();
            cx.done.push(TaskDone { task, finished });
            return;
        }
        for (i, k) in ks.iter().enumerate() {
            let mut l = k.clone();
            l.tag = tag(task.id, i);
            if cx.gpu.launch(stream, l).is_err() {
                // Cannot run on this device: report it done rather than lose it.
                let finished = cx.gpu.now();
                cx.done.push(TaskDone { task, finished });
                return;
            }
        }
        self.tasks.insert(task.id, task);
    }

    fn on_event(&mut self, cx: &mut Ctx<'_>, ev: &Event) {
        if let Event::KernelFinished { t, kernel, .. } = ev {
            let (id, k) = untag(kernel.tag);
            let Some(task) = self.tasks.get(&id).copied() else {
                return;
            };
            let n = self.launches.get(task.model as usize).map_or(0, Vec::len);
            if k + 1 == n {
                self.tasks.remove(&id);
                cx.done.push(TaskDone { task, finished: *t });
            }
        }
    }
}

/// Forwards to a policy and integrates resident kernels over a window.
/// Every HOL kernel is one block, so a kernel holds one slot from its
/// `KernelStarted` to its `KernelFinished`.
struct Metered<'a> {
    inner: &'a mut dyn Policy,
    window: Ns,
    started: HashMap<u64, Ns>,
    busy_slot_ns: u128,
}

impl Policy for Metered<'_> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn on_arrival(&mut self, cx: &mut Ctx<'_>, task: Task) {
        self.inner.on_arrival(cx, task);
    }

    fn on_event(&mut self, cx: &mut Ctx<'_>, ev: &Event) {
        match ev {
            Event::KernelStarted { t, kernel, .. } => {
                self.started.insert(kernel.tag, *t);
            }
            Event::KernelFinished { t, kernel, .. } => {
                if let Some(t0) = self.started.remove(&kernel.tag) {
                    let (a, b) = (t0.min(self.window), (*t).min(self.window));
                    self.busy_slot_ns += u128::from(b - a);
                }
            }
            Event::Preempted(_) | Event::BlocksCompleted { .. } => {}
        }
        self.inner.on_event(cx, ev);
    }
}

/// Runs `policy` at `load` and measures it: utilisation over the arrival
/// window, latency of every job.
fn point(
    policy: &mut dyn Policy,
    models: &Arc<ModelRegistry>,
    opts: &HolOptions,
    load: f64,
) -> HolPoint {
    let p = profile();
    let rate = load * capacity_jobs_per_s(&p);
    let duration_ns = (f64::from(opts.jobs) / rate * 1e9) as Ns;
    let workload = Workload {
        clients: vec![ClientSpec {
            priority: Priority::BestEffort,
            model: 0,
            arrival: Arrival::Poisson {
                rate_per_s: rate,
                seed: opts.seed,
            },
        }],
        duration_ns,
    };
    let mut metered = Metered {
        inner: policy,
        window: duration_ns,
        started: HashMap::new(),
        busy_slot_ns: 0,
    };
    let r = workload::run_on(&mut GpuSim::new(p.clone()), models, &mut metered, &workload);
    let mut h = sluice_stats::histogram();
    for d in &r.done {
        h.saturating_record(d.finished - d.task.arrival);
    }
    HolPoint {
        load,
        utilization: metered.busy_slot_ns as f64 / (f64::from(slots(&p)) * duration_ns as f64),
        p99_ms: Summary::of(&h).p99 as f64 / 1e6,
    }
}

/// Runs every load point with both methods.
pub fn run(opts: &HolOptions) -> HolResult {
    let models = Arc::new(registry());
    let mut naive = Vec::with_capacity(opts.loads.len());
    let mut paella = Vec::with_capacity(opts.loads.len());
    for &load in &opts.loads {
        let mut n = Naive::new(&models, opts.naive_streams);
        naive.push(point(&mut n, &models, opts, load));
        let mut pa = Paella::with_config(&models, opts.paella);
        paella.push(point(&mut pa, &models, opts, load));
    }
    HolResult { naive, paella }
}

/// The result as a terminal table.
pub fn table(r: &HolResult) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>6} | {:>10} {:>10} | {:>10} {:>10} | {:>7}",
        "load", "naive util", "naive p99", "paella util", "paella p99", "util x"
    );
    let _ = writeln!(s, "{}", "-".repeat(70));
    for (n, p) in r.naive.iter().zip(&r.paella) {
        let ratio = if n.utilization > 0.0 {
            p.utilization / n.utilization
        } else {
            f64::NAN
        };
        let _ = writeln!(
            s,
            "{:>5.0}% | {:>9.1}% {:>8.2}ms | {:>10.1}% {:>8.2}ms | {:>6.2}x",
            n.load * 100.0,
            n.utilization * 100.0,
            n.p99_ms,
            p.utilization * 100.0,
            p.p99_ms,
            ratio
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_has_176_slots_and_32_queues() {
        let p = profile();
        p.validate("gtx1660s-hol")
            .expect("derived profile is valid");
        assert_eq!(slots(&p), 176);
        assert_eq!(p.queues.hw_queues, 32);
    }

    #[test]
    fn json_has_the_documented_shape() {
        let r = HolResult {
            naive: vec![HolPoint {
                load: 0.5,
                utilization: 0.2,
                p99_ms: 3.0,
            }],
            paella: vec![HolPoint {
                load: 0.5,
                utilization: 0.45,
                p99_ms: 2.5,
            }],
        };
        let v = serde_json::to_value(&r).expect("serialises");
        assert_eq!(v["naive"][0]["load"], 0.5);
        assert_eq!(v["naive"][0]["utilization"], 0.2);
        assert_eq!(v["naive"][0]["p99_ms"], 3.0);
        assert_eq!(v["paella"][0]["utilization"], 0.45);
        assert!(table(&r).contains("2.25x"), "{}", table(&r));
    }

    #[test]
    fn at_high_load_naive_leaves_slots_idle_and_paella_fills_them() {
        let opts = HolOptions {
            loads: vec![0.9],
            jobs: 600,
            ..HolOptions::default()
        };
        let r = run(&opts);
        let (n, p) = (r.naive[0], r.paella[0]);
        eprintln!("{}", table(&r));
        assert!(n.utilization < 0.4, "naive {n:?}");
        // Paella keeps most of the offered 90%: launches cost 7.75 us each
        // on the mi50 profile (REEF Fig. 20(b)) and are not all hidden.
        assert!(p.utilization > 0.6, "paella {p:?}");
        assert!(p.utilization >= 2.0 * n.utilization, "{n:?} vs {p:?}");
        assert!(p.p99_ms < n.p99_ms, "{n:?} vs {p:?}");
    }

    #[test]
    fn at_low_load_both_keep_up() {
        let opts = HolOptions {
            loads: vec![0.1],
            jobs: 200,
            ..HolOptions::default()
        };
        let r = run(&opts);
        let (n, p) = (r.naive[0], r.paella[0]);
        for x in [n, p] {
            assert!((x.utilization - 0.1).abs() < 0.03, "{x:?}");
            // 8 kernels of 300 us, plus launch and fetch costs.
            assert!(x.p99_ms < 4.0, "{x:?}");
        }
    }

    /// Prints the full table: `cargo test -p sluice-bench --release --lib
    /// hol::tests::print_hol_table -- --ignored --nocapture`.
    #[test]
    #[ignore = "prints the benchmark table; run in release"]
    fn print_hol_table() {
        let r = run(&HolOptions::default());
        println!("{}", table(&r));
        println!("{}", serde_json::to_string(&r).expect("serialises"));
        // Paella's decision cost (wall clock, this machine) at full load.
        let models = Arc::new(registry());
        let p = profile();
        let w = Workload {
            clients: vec![ClientSpec {
                priority: Priority::BestEffort,
                model: 0,
                arrival: Arrival::Poisson {
                    rate_per_s: capacity_jobs_per_s(&p),
                    seed: 1,
                },
            }],
            duration_ns: 50_000_000,
        };
        let mut pa = Paella::new(&models);
        let d = Summary::of(
            &workload::run_on(&mut GpuSim::new(p.clone()), &models, &mut pa, &w).decision_ns,
        );
        println!("paella callback cost: p50 {} ns, p99 {} ns", d.p50, d.p99);
    }
}
