//! The daemon's own cluster backend as the serving engine of `sluice bench
//! cluster`, `bench trace` and `bench inss`: the partitions a benchmark
//! gives ([`SimPartition`], the same input as the request-level simulator
//! of [`crate::cluster::sim`]) become one placement that
//! [`ClusterBackend`] serves in virtual time, each request submitted to it
//! as the daemon's dispatcher would, with a deadline of its arrival plus
//! its model's SLO. What a figure then shows is what the daemon does with
//! that placement: its shared queue per model (partitions pull from it; no
//! routing), gpulet's adaptive batch of listed sizes from the observed
//! rate, the drop of a request that would miss its deadline in the batch
//! being formed, one batch at a time per partition with its models visited
//! round robin.
//!
//! A batch is one event ([`Execution::Timed`]): the slot's
//! `latency_ms[n − 1]` (interference included, as the benchmark computed
//! it). The backend serves a model at listed batch sizes only: 1, 2, 4, …,
//! up to the longest latency list its slots give. Arrivals are the
//! simulator's, stream for stream (same seed, same requests), so the two
//! engines are compared on the same requests. The simulator's `Routing`,
//! `Rounds` and `Batching` options do not apply here.
//!
//! Outcome, as the simulator counts it: a request violates its SLO when it
//! completes late, when the backend drops it (`DEADLINE_MISSED`), or when
//! it is not done when the run stops (the arrival window plus twice the
//! longest SLO plus 1 s). If the backend ever fell back from the given
//! placement (a model with queued requests and no partition), every GPU
//! would serve every model whole, each at the times of its first slot
//! (or 1 ms per request where it has none).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use shm_proto::{Priority, status};
use sluice_backend::{Backend, Finished, Job, TensorMemory, VecMemory};
use sluice_gpu::DeviceProfile;
use sluice_model::ModelRegistry;
use sluice_planner::{
    Assignment, GpuPlan, GpuSpec, LatencyTable, ModelSpec, PartitionPlan, Placement, PlanError,
    Planner,
};
use sluice_service::backend::cluster::{
    BatchTimes, ClusterBackend, ClusterSetup, Execution, ServedModel,
};

use crate::cluster::sim::{
    Arrivals, ModelOutcome, SimError, SimModel, SimOptions, SimPartition, SimResult, ns, validate,
};

/// The batch sizes the backend forms, as far as a slot's latencies reach.
const LISTED: [u32; 6] = [1, 2, 4, 8, 16, 32];

/// The backend's internal name of model `i`.
fn name(i: usize) -> String {
    format!("m{i}")
}

/// Always the benchmark's placement.
struct Fixed(Placement);

impl Planner for Fixed {
    fn name(&self) -> &'static str {
        "the benchmark's placement"
    }
    fn plan(&self, _: &[ModelSpec], _: &GpuSpec) -> Result<Placement, PlanError> {
        Ok(self.0.clone())
    }
}

/// The slots' batch times, ns.
struct Times {
    placement: Placement,
    /// `[gpu][partition][slot]`.
    ns: Vec<Vec<Vec<Vec<u64>>>>,
    /// Per model, its first slot's times (another placement's, module docs).
    first: Vec<Vec<u64>>,
}

impl BatchTimes for Times {
    fn slot_ns(&self, placement: &Placement, gpu: usize, part: usize, slot: usize) -> Vec<u64> {
        if *placement == self.placement {
            return self.ns[gpu][part][slot].clone();
        }
        let model = placement.gpus[gpu].partitions[part].models[slot]
            .model
            .strip_prefix('m')
            .and_then(|i| i.parse::<usize>().ok());
        model
            .and_then(|m| self.first.get(m))
            .filter(|v| !v.is_empty())
            .cloned()
            .unwrap_or_else(|| (1..=32).map(|n| n * 1_000_000).collect())
    }
}

/// Serves `parts` on the daemon's cluster backend for `opts.duration_s` of
/// `models`' arrivals; the result as [`crate::cluster::sim::simulate`]
/// gives it.
pub fn serve(
    models: &[SimModel],
    parts: &[SimPartition],
    opts: &SimOptions,
) -> Result<SimResult, SimError> {
    validate(models, parts, opts)?;
    let nm = models.len();
    let ngpu = parts.iter().map(|p| p.gpu + 1).max().unwrap_or(1);
    let slot_ns = |lat: &[f64]| -> Vec<u64> { lat.iter().map(|&l| ns(l).max(1)).collect() };

    let mut placement = Placement {
        gpus: vec![GpuPlan::default(); ngpu],
    };
    let mut times: Vec<Vec<Vec<Vec<u64>>>> = vec![Vec::new(); ngpu];
    let mut first: Vec<Vec<u64>> = vec![Vec::new(); nm];
    for p in parts {
        placement.gpus[p.gpu].partitions.push(PartitionPlan {
            size_pct: p.size_pct,
            duty_cycle_ms: p.duty_cycle_ms,
            models: p
                .slots
                .iter()
                .map(|s| Assignment {
                    model: name(s.model),
                    batch: s.batch,
                    share_rps: s.share_rps,
                })
                .collect(),
        });
        times[p.gpu].push(p.slots.iter().map(|s| slot_ns(&s.latency_ms)).collect());
        for s in &p.slots {
            if first[s.model].is_empty() {
                first[s.model] = slot_ns(&s.latency_ms);
            }
        }
    }

    // Zero-kernel models under the internal names: the backend needs
    // registry entries; nothing runs their kernels here.
    let builtin = ModelRegistry::builtin();
    let (_, null) = builtin
        .lookup("null")
        .ok_or_else(|| SimError::Engine("the built-in null model is missing".into()))?;
    let registry = ModelRegistry::from_parts((0..nm).map(|i| {
        let mut m = null.manifest.clone();
        m.name = name(i);
        (format!("engine:{}", name(i)), m, null.memory.clone())
    }))
    .map_err(|e| SimError::Engine(e.to_string()))?;

    let served = models
        .iter()
        .enumerate()
        .map(|(i, m)| {
            // Listed sizes up to the longest latency list of its slots; the
            // times (for the planner's view only: batches read their slot's
            // own) from its first slot, made non-decreasing.
            let longest = parts
                .iter()
                .flat_map(|p| &p.slots)
                .filter(|s| s.model == i)
                .map(|s| s.latency_ms.len())
                .max()
                .unwrap_or(1);
            let batches: Vec<u32> = LISTED
                .iter()
                .copied()
                .filter(|&b| b as usize <= longest)
                .collect();
            let mut prev = 0.0f64;
            let rows = batches
                .iter()
                .map(|&b| {
                    let ms = first[i]
                        .get(b as usize - 1)
                        .map_or(f64::from(b), |&v| v as f64 / 1e6);
                    prev = prev.max(ms);
                    vec![prev]
                })
                .collect();
            let table = LatencyTable::new(batches, vec![100], rows)
                .map_err(|e| SimError::Engine(format!("model {:?}: {e}", m.name)))?;
            Ok(ServedModel {
                id: i as u32,
                name: name(i),
                slo_ms: m.slo_ms,
                mem_mb: 0,
                table,
            })
        })
        .collect::<Result<Vec<_>, SimError>>()?;

    // A GPU of 100 CUs: a partition of p % is p CUs, exactly.
    let mut profile = DeviceProfile::mi50();
    profile.compute_units = 100;
    let setup = ClusterSetup {
        gpus: vec![profile; ngpu],
        gpu_mem_mb: u64::MAX / 4,
        policy: sluice_sched::PolicyKind::Seq,
        models: served,
        partition_step_pct: 1,
        sizes_pct: None,
        scaling: false,
        // The placement is the benchmark's: never re-planned.
        replan_ns: 0,
        rate_window_ns: u64::from(sluice_service::config::ClusterConfig::default().rate_window_ms)
            * 1_000_000,
        rate_change: f64::INFINITY,
        headroom: 1.0,
        burst: sluice_planner::Burst::Mean,
        execution: Execution::Timed(Arc::new(Times {
            placement: placement.clone(),
            ns: times,
            first,
        })),
    };
    let mut backend = ClusterBackend::new(setup, Box::new(Fixed(placement)), Arc::new(registry), 0)
        .map_err(|e| SimError::Engine(e.to_string()))?;
    backend.plan_now();

    let end = opts.duration_s;
    let seconds = end.ceil().min(1e7) as usize;
    let max_slo = models.iter().map(|m| m.slo_ms).fold(0.0, f64::max);
    let stop_ns = ns(end * 1e3 + 2.0 * max_slo + 1e3);
    let slo: Vec<u64> = models.iter().map(|m| ns(m.slo_ms)).collect();
    let mut out: Vec<ModelOutcome> = (0..nm)
        .map(|_| ModelOutcome {
            arrived: 0,
            completed: 0,
            violated: 0,
            dropped: 0,
            unserved: 0,
            latency_ms: [0.0; 3],
        })
        .collect();
    let mut hist: Vec<hdrhistogram::Histogram<u64>> = (0..nm)
        .map(|_| {
            hdrhistogram::Histogram::new_with_bounds(1, 86_400_000_000, 3)
                .expect("valid bounds: 1 µs to a day, 3 significant figures")
        })
        .collect();
    let mut good = vec![0u64; seconds];

    let mut arr: Vec<Arrivals> = models
        .iter()
        .enumerate()
        .map(|(i, m)| Arrivals::new(opts.seed, i, &m.rate, opts.arrivals))
        .collect();
    let mut heap: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::new();
    for (i, a) in arr.iter_mut().enumerate() {
        if let Some(t) = a.advance(end) {
            heap.push(Reverse((ns(t * 1e3), i as u32)));
        }
    }
    // No request reads or writes data here: one arena for all of them.
    let memory: Arc<dyn TensorMemory> = VecMemory::new(64);
    let mut done: Vec<Finished> = Vec::new();
    let mut events = 0u64;
    let mut last_t = 0u64;
    let mut next_id = 0u64;
    loop {
        let arrival = heap.peek().map(|r| r.0);
        let device = backend.next_event_ns().filter(|&t| t <= stop_ns);
        match (arrival, device) {
            // Arrivals before device events at the same nanosecond.
            (Some((t, m)), d) if d.is_none_or(|d| t <= d) => {
                heap.pop();
                let m = m as usize;
                events += 1;
                last_t = last_t.max(t);
                out[m].arrived += 1;
                if let Some(next) = arr[m].advance(end) {
                    heap.push(Reverse((ns(next * 1e3), m as u32)));
                }
                let mut job = Job::untyped(
                    m as u32,
                    next_id,
                    m as u32,
                    Priority::BestEffort,
                    (0, 0),
                    Arc::clone(&memory),
                    t,
                );
                job.deadline_ns = t + slo[m];
                next_id += 1;
                backend.submit(job, t);
            }
            (_, Some(t)) => {
                last_t = last_t.max(t);
                backend.poll(t, &mut done);
            }
            _ => break,
        }
        for f in done.drain(..) {
            let m = f.client as usize;
            match f.status {
                status::OK => {
                    let lat = f.finished_ns.saturating_sub(f.received_ns);
                    out[m].completed += 1;
                    if lat > slo[m] {
                        out[m].violated += 1;
                    } else if let Some(c) = good.get_mut((f.finished_ns / 1_000_000_000) as usize) {
                        *c += 1;
                    }
                    hist[m].saturating_record(lat / 1000);
                }
                status::DEADLINE_MISSED => {
                    out[m].dropped += 1;
                    out[m].violated += 1;
                }
                s => {
                    return Err(SimError::Engine(format!(
                        "the cluster backend completed a request of model {:?} with status {s}",
                        models[m].name
                    )));
                }
            }
        }
    }
    for m in &mut out {
        let left = m.arrived - m.completed - m.dropped;
        m.unserved += left;
        m.violated += left;
    }
    let reports = backend.partitions();
    let busy_gpus = reports
        .iter()
        .map(|p| f64::from(p.size_pct) / 100.0 * p.busy_ns as f64)
        .sum::<f64>()
        / (end * 1e9);
    let batches = reports.iter().map(|p| p.batches).sum::<u64>();
    let models = out
        .into_iter()
        .zip(&hist)
        .map(|(mut m, h)| {
            let q = sluice_stats::Summary::of(h);
            m.latency_ms = [q.p50, q.p99, q.max].map(|us| us as f64 / 1e3);
            m
        })
        .collect();
    Ok(SimResult {
        models,
        batches,
        events: events + batches,
        end_s: last_t as f64 / 1e9,
        busy_gpus,
        partition_completed: reports
            .iter()
            .filter(|p| !p.draining)
            .map(|p| p.completed)
            .collect(),
        goodput_per_s: good,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::sim::{Batching, Rounds, Routing, SimSlot, simulate};

    fn model(name: &str, rate: f64, slo_ms: f64) -> SimModel {
        SimModel {
            name: name.into(),
            slo_ms,
            rate: vec![(0.0, rate)],
        }
    }

    fn slot(model: usize, batch: u32, lat: impl Fn(u32) -> f64) -> SimSlot {
        SimSlot {
            model,
            batch,
            share_rps: 1.0,
            latency_ms: (1..=batch).map(lat).collect(),
        }
    }

    fn part(gpu: usize, size_pct: u32, slots: Vec<SimSlot>) -> SimPartition {
        SimPartition {
            gpu,
            size_pct,
            duty_cycle_ms: 10.0,
            slots,
        }
    }

    fn opts(duration_s: f64, seed: u64) -> SimOptions {
        SimOptions {
            duration_s,
            seed,
            routing: Routing::Random,
            rounds: Rounds::WorkConserving,
            batching: Batching::Planned,
            engine: crate::cluster::sim::Engine::Daemon,
            arrivals: crate::cluster::sim::ArrivalSeeding::Run,
        }
    }

    /// Every request is accounted for exactly once.
    fn conserved(r: &SimResult) {
        for m in &r.models {
            assert_eq!(m.arrived, m.completed + m.dropped + m.unserved, "{m:?}");
            assert!(m.violated >= m.dropped + m.unserved, "{m:?}");
        }
    }

    #[test]
    fn a_light_load_is_served_at_batch_one_latency_as_the_simulator_serves_it() {
        // 1 rps for 1000 s, L(1) = 2 ms: a request finds the partition busy
        // with probability ≈ 0.2 %, so both engines give a median of exactly
        // L(1), nothing late, and the same arrivals.
        let models = [model("a", 1.0, 100.0)];
        let parts = [part(0, 100, vec![slot(0, 4, |n| 2.0 * f64::from(n))])];
        let o = opts(1000.0, 7);
        let d = serve(&models, &parts, &o).unwrap();
        let s = simulate(&models, &parts, &o).unwrap();
        conserved(&d);
        assert_eq!(d.models[0].arrived, s.models[0].arrived);
        assert!(d.models[0].arrived > 900, "{d:?}");
        assert_eq!(d.violated(), 0, "{d:?}");
        assert_eq!(d.models[0].completed, d.models[0].arrived);
        for r in [&d, &s] {
            let p50 = r.models[0].latency_ms[0];
            assert!((p50 - 2.0).abs() < 0.01, "p50 {p50} ms: {r:?}");
        }
        // Busy 2 ms per request over the run, on a whole GPU.
        let want = d.models[0].completed as f64 * 2e-3 / 1000.0;
        assert!(
            (d.busy_gpus - want).abs() < 1e-3 * want.max(1e-9) + 1e-6,
            "{d:?}"
        );
        assert_eq!(d.partition_completed, vec![d.models[0].completed]);
    }

    #[test]
    fn an_overload_drops_what_misses_its_deadline_and_loses_nothing() {
        // L(n) = 10 ms + 1 ms per request: at most 32 / 42 ms ≈ 760 rps, at
        // batch 32. 2000 rps cannot be served within an SLO of 60 ms.
        let models = [model("a", 2000.0, 60.0)];
        let parts = [part(0, 100, vec![slot(0, 32, |n| 10.0 + f64::from(n))])];
        let r = serve(&models, &parts, &opts(5.0, 3)).unwrap();
        conserved(&r);
        let m = &r.models[0];
        assert!(m.dropped > 0, "{m:?}");
        assert!(r.violation_rate() > 0.4, "{r:?}");
        // It batched: fewer batches than completions.
        assert!(r.batches < m.completed, "{r:?}");
    }

    #[test]
    fn partitions_of_one_model_pull_from_its_one_queue() {
        let models = [model("a", 300.0, 50.0)];
        let parts = [
            part(0, 50, vec![slot(0, 8, |n| 4.0 + f64::from(n))]),
            part(1, 50, vec![slot(0, 8, |n| 4.0 + f64::from(n))]),
        ];
        let r = serve(&models, &parts, &opts(10.0, 5)).unwrap();
        conserved(&r);
        assert_eq!(r.partition_completed.len(), 2, "{r:?}");
        assert!(r.partition_completed.iter().all(|&c| c > 100), "{r:?}");
        assert_eq!(
            r.partition_completed.iter().sum::<u64>(),
            r.models[0].completed
        );
    }

    #[test]
    fn models_sharing_a_partition_take_turns_under_overload() {
        // Both models want more than the partition gives; round robin
        // serves each a fair part.
        let models = [model("a", 500.0, 80.0), model("b", 500.0, 80.0)];
        let parts = [part(
            0,
            100,
            vec![
                slot(0, 8, |n| 5.0 + f64::from(n)),
                slot(1, 8, |n| 5.0 + f64::from(n)),
            ],
        )];
        let r = serve(&models, &parts, &opts(5.0, 9)).unwrap();
        conserved(&r);
        let (a, b) = (r.models[0].completed, r.models[1].completed);
        assert!(a > 0 && b > 0, "{r:?}");
        let ratio = a as f64 / b as f64;
        assert!((0.8..1.25).contains(&ratio), "a {a}, b {b}");
    }

    #[test]
    fn a_model_with_no_partition_is_served_by_the_daemons_fallback() {
        // The daemon never leaves queued requests without a partition: the
        // simulator counts b unserved, the backend serves it.
        let models = [model("a", 10.0, 100.0), model("b", 10.0, 100.0)];
        let parts = [part(0, 100, vec![slot(0, 4, |n| 2.0 * f64::from(n))])];
        let o = opts(20.0, 11);
        let d = serve(&models, &parts, &o).unwrap();
        let s = simulate(&models, &parts, &o).unwrap();
        conserved(&d);
        assert_eq!(s.models[1].unserved, s.models[1].arrived);
        assert!(d.models[1].completed > 0, "{d:?}");
    }

    #[test]
    fn bad_input_is_refused_as_the_simulator_refuses_it() {
        let models = [model("a", 1.0, 100.0)];
        let parts = [part(0, 100, vec![slot(3, 4, f64::from)])];
        assert!(matches!(
            serve(&models, &parts, &opts(1.0, 1)),
            Err(SimError::Slot { model: 3, .. })
        ));
        assert!(matches!(
            serve(&models, &[], &opts(f64::NAN, 1)),
            Err(SimError::Duration(_))
        ));
    }
}
