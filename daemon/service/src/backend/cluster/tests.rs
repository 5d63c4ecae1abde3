//! The cluster backend in virtual time: batching, placement switches,
//! fallback, cancellation. Times are the GPU model's; nothing is timed on
//! the wall clock except the switch cost, which is printed, not asserted.

use std::collections::HashMap;

use shm_proto::sim::expected_output;
use sluice_planner::PlanError;

use super::setup::{model_mem_mb, monotone_rows};
use super::*;

const MODELS: [&str; 2] = ["mobilenet", "resnet18"];
const BATCHES: [u32; 4] = [1, 2, 4, 8];
const PARTS: [u32; 4] = [25, 50, 75, 100];

fn registry() -> Arc<ModelRegistry> {
    let all = ModelRegistry::builtin();
    let parts = all
        .iter()
        .filter(|(_, m)| MODELS.contains(&m.name()))
        .map(|(_, m)| (m.file.clone(), m.manifest.clone(), m.memory.clone()));
    Arc::new(ModelRegistry::from_parts(parts).unwrap())
}

fn setup(models: &ModelRegistry, gpus: usize, replan_ms: u64) -> ClusterSetup {
    let profile = DeviceProfile::mi50();
    let served = models
        .iter()
        .map(|(id, m)| {
            let pts =
                sluice_gpusim::lbp::measure(&profile, m, &BATCHES, &PARTS, |_, _| {}).unwrap();
            let rows = monotone_rows(sluice_gpusim::lbp::latency_rows_ms(&pts, PARTS.len()));
            let table = LatencyTable::new(BATCHES.to_vec(), PARTS.to_vec(), rows).unwrap();
            // Four times the batch-1 latency on the whole GPU.
            let slo_ms = 4.0 * table.latency_ms(1, 100).unwrap();
            ServedModel {
                id,
                name: m.name().to_owned(),
                slo_ms,
                mem_mb: model_mem_mb(m),
                table,
            }
        })
        .collect();
    ClusterSetup {
        gpus: vec![profile; gpus],
        gpu_mem_mb: 32 * 1024,
        policy: PolicyKind::Seq,
        models: served,
        partition_step_pct: 25,
        replan_ns: replan_ms * MS,
        rate_window_ns: 200 * MS,
        rate_change: 0.25,
        headroom: 1.2,
    }
}

/// Never finds a placement.
struct Hopeless;

impl Planner for Hopeless {
    fn name(&self) -> &'static str {
        "hopeless (test)"
    }
    fn plan(&self, _: &[ModelSpec], gpus: &GpuSpec) -> Result<Placement, PlanError> {
        Err(PlanError::NotSchedulable {
            planner: "hopeless",
            needed: u64::from(gpus.count) + 1,
            available: gpus.count,
        })
    }
}

/// A job of `model` (registry id) with its input filled from its id.
fn job(reg: &ModelRegistry, model: u32, client: u32, id: u64, at: u64) -> Job {
    let m = reg.get(model).unwrap();
    let j = sluice_backend::testmem::job(
        client,
        id,
        model,
        if id % 5 == 0 {
            Priority::RealTime
        } else {
            Priority::BestEffort
        },
        (m.input_bytes, m.output_bytes),
        at,
    );
    // Different per request, cheap to make (the inputs are 150–600 KB).
    let mut input = vec![(id % 251) as u8; m.input_bytes as usize];
    input[..8].copy_from_slice(&id.to_le_bytes());
    assert!(j.memory.write(0, &input));
    j
}

fn output_ok(reg: &ModelRegistry, j: &Job) -> bool {
    let m = reg.get(j.model).unwrap();
    let mut input = vec![0u8; m.input_bytes as usize];
    let mut got = vec![0u8; m.output_bytes as usize];
    assert!(j.memory.read(0, &mut input));
    assert!(j.memory.read(m.input_bytes, &mut got));
    let mut want = vec![0u8; got.len()];
    expected_output(j.model, &input, &mut want);
    got == want
}

/// Runs `arrivals` ((virtual ns, model, client)) through `b` in virtual
/// time, as the dispatcher does: submit at each arrival, poll at each
/// arrival and whenever the backend asks (`next_event_ns`); returns each
/// request's completions.
fn run(
    b: &mut ClusterBackend,
    reg: &ModelRegistry,
    arrivals: &[(u64, u32, u32)],
) -> (HashMap<u64, Vec<Finished>>, HashMap<u64, Job>) {
    let mut sent = HashMap::new();
    let mut done: HashMap<u64, Vec<Finished>> = HashMap::new();
    let mut out = Vec::new();
    let mut t = 0u64;
    let mut next = 0usize;
    let end = arrivals.last().map_or(0, |a| a.0) + 10_000 * MS;
    while t < end && (next < arrivals.len() || b.queued() > 0) {
        while next < arrivals.len() && arrivals[next].0 <= t {
            let (at, model, client) = arrivals[next];
            let j = job(reg, model, client, next as u64, at);
            sent.insert(next as u64, j.clone());
            b.submit(j, t);
            next += 1;
        }
        b.poll(t, &mut out);
        for f in out.drain(..) {
            done.entry(f.request_id).or_default().push(f);
        }
        let wake = b.next_event_ns().unwrap_or(u64::MAX);
        let arrival = arrivals.get(next).map_or(u64::MAX, |a| a.0);
        t = wake.min(arrival).max(t + 1);
    }
    (done, sent)
}

/// `n` arrivals of both models from 4 clients, `gap_ns` apart.
fn steady(reg: &ModelRegistry, n: usize, gap_ns: u64) -> Vec<(u64, u32, u32)> {
    (0..n)
        .map(|i| {
            let model = (i % reg.len()) as u32;
            (i as u64 * gap_ns, model, (i % 4) as u32)
        })
        .collect()
}

fn assert_each_once_ok(
    reg: &ModelRegistry,
    done: &HashMap<u64, Vec<Finished>>,
    sent: &HashMap<u64, Job>,
) {
    assert_eq!(done.len(), sent.len(), "some requests never completed");
    for (id, fs) in done {
        assert_eq!(fs.len(), 1, "request {id} completed {} times", fs.len());
        assert_eq!(fs[0].status, status::OK, "request {id}: {:?}", fs[0]);
        assert!(output_ok(reg, &sent[id]), "request {id}: wrong output");
    }
}

#[test]
fn requests_of_several_clients_are_batched_and_each_output_is_right() {
    let reg = registry();
    let mut b = ClusterBackend::new(
        setup(&reg, 2, 50),
        Box::new(sluice_planner::GreedyBestFit),
        Arc::clone(&reg),
        0,
    )
    .unwrap();
    // Far more than the GPUs serve one at a time: queues build, batches grow.
    let arrivals = steady(&reg, 600, 200_000);
    let (done, sent) = run(&mut b, &reg, &arrivals);
    assert_each_once_ok(&reg, &done, &sent);
    let l = b.layout.lock().unwrap().clone();
    for m in &l.models {
        assert!(m.max_batch > 1, "{}: never batched: {l:?}", m.name);
        assert!(m.batches < m.completed, "{l:?}");
    }
    assert!(l.switches >= 1, "{l:?}");
}

#[test]
fn a_placement_change_every_10_ms_loses_duplicates_and_fails_nothing() {
    let reg = registry();
    let mut b = ClusterBackend::new(
        setup(&reg, 2, 10),
        Box::new(sluice_planner::churn::Churn::default()),
        Arc::clone(&reg),
        0,
    )
    .unwrap();
    let arrivals = steady(&reg, 1000, 1_000_000);
    let (done, sent) = run(&mut b, &reg, &arrivals);
    assert_each_once_ok(&reg, &done, &sent);
    let l = b.layout.lock().unwrap().clone();
    // 1 s of arrivals, a switch every 10 ms.
    assert!(l.switches >= 90, "{} switches", l.switches);
    eprintln!(
        "{} switches; dispatcher time of the last {} ns, the longest {} ns (debug build)",
        l.switches, l.last_switch_ns, l.max_switch_ns
    );
    // Streams of drained partitions are reused, not piled up.
    for g in &b.gpus {
        assert!(g.owner.len() < 64, "{} streams on one GPU", g.owner.len());
    }
}

#[test]
fn a_planner_that_finds_nothing_falls_back_and_still_serves() {
    let reg = registry();
    let mut b =
        ClusterBackend::new(setup(&reg, 2, 20), Box::new(Hopeless), Arc::clone(&reg), 0).unwrap();
    let arrivals = steady(&reg, 100, 1_000_000);
    let (done, sent) = run(&mut b, &reg, &arrivals);
    assert_each_once_ok(&reg, &done, &sent);
    let l = b.layout.lock().unwrap().clone();
    let e = l.plan_error.clone().expect("the fallback says why");
    assert!(e.contains("needs 3 GPUs"), "{e}");
    assert_eq!(l.gpus.len(), 2);
    for g in &l.gpus {
        assert_eq!(g.partitions[0].size_pct, 100, "{l:?}");
        assert_eq!(g.partitions[0].models.len(), 2, "{l:?}");
    }
}

#[test]
fn a_departed_client_s_requests_are_dropped_and_nobody_else_s() {
    let reg = registry();
    let mut b = ClusterBackend::new(
        setup(&reg, 1, 0),
        Box::new(sluice_planner::GreedyBestFit),
        Arc::clone(&reg),
        0,
    )
    .unwrap();
    for i in 0..40u64 {
        b.submit(job(&reg, (i % 2) as u32, (i % 2) as u32, i, 0), 0);
    }
    let before = b.queued();
    let dropped = b.cancel_client(1);
    assert_eq!(dropped, 20);
    assert_eq!(b.queued(), before - 20);
    let mut out = Vec::new();
    let mut t = 0;
    while b.queued() > 0 {
        t += MS;
        b.poll(t, &mut out);
        assert!(t < 60_000 * MS, "never drained");
    }
    assert_eq!(out.len(), 20);
    assert!(out.iter().all(|f| f.client == 0 && f.status == status::OK));
}

#[test]
fn identical_placements_keep_their_partitions() {
    let reg = registry();
    let mut b = ClusterBackend::new(
        setup(&reg, 2, 0),
        Box::new(sluice_planner::GreedyBestFit),
        Arc::clone(&reg),
        0,
    )
    .unwrap();
    let p = b.fallback_placement();
    b.apply(&p);
    assert!(
        b.parts.iter().flatten().all(|p| !p.draining),
        "re-applying the placement in force drained a partition"
    );
    assert_eq!(b.parts.iter().flatten().count(), 2);
}

#[test]
fn start_up_refuses_an_slo_no_placement_can_meet() {
    let mut config = crate::config::Config::default();
    config.cluster.gpus = vec!["mi50".into(); 2];
    config.cluster.batches = vec![1, 2];
    config.cluster.partition_step_pct = 50;
    config
        .cluster
        .slo_ms_per_model
        .insert("resnet18".into(), 0.5);
    let e = setup::from_config(&config, registry(), 0, |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cluster.slo_ms_per_model.resnet18") && e.contains("0.5 ms"),
        "{e}"
    );
}

#[test]
fn a_manifest_s_own_table_is_used_instead_of_measuring() {
    let mut config = crate::config::Config::default();
    config.cluster.gpus = vec!["mi50".into()];
    config.cluster.batches = vec![1, 2];
    config.cluster.partition_step_pct = 50;
    let reg = registry();
    let (_, m) = reg.lookup("resnet18").unwrap();
    let mut man = m.manifest.clone();
    // A table no measurement would give: 60 ms at batch 1 on the whole GPU.
    man.lbp.push(sluice_model::LbpTable {
        device: "mi50".into(),
        simulated: true,
        rule: "test".into(),
        batches: vec![1, 2, 4],
        partitions_pct: vec![50, 100],
        latency_ms: vec![vec![90.0, 60.0], vec![95.0, 70.0], vec![99.0, 80.0]],
        mem_demand: vec![],
    });
    let one =
        Arc::new(ModelRegistry::from_parts([(m.file.clone(), man, m.memory.clone())]).unwrap());
    assert_eq!(
        setup::from_manifest(one.get(0).unwrap(), "mi50", &[1, 2], &[50, 100]),
        Some(vec![vec![90.0, 60.0], vec![95.0, 70.0]])
    );
    // Not for another device, nor for sizes it does not list.
    assert_eq!(
        setup::from_manifest(one.get(0).unwrap(), "h100", &[1], &[100]),
        None
    );
    assert_eq!(
        setup::from_manifest(one.get(0).unwrap(), "mi50", &[8], &[100]),
        None
    );
    let mut sources = Vec::new();
    let e = setup::cluster_setup(&config, &one, |s| sources.push(s.to_owned())).unwrap_err();
    assert!(
        e.to_string().contains("120.0"),
        "the manifest's 60 ms was used: {e}"
    );
    assert_eq!(sources, vec!["resnet18 (its manifest's table)".to_owned()]);
}

#[test]
fn a_planner_on_its_own_thread_switches_without_losing_anything() {
    let reg = registry();
    let mut b = ClusterBackend::new(
        setup(&reg, 2, 10),
        Box::new(sluice_planner::churn::Churn::default()),
        Arc::clone(&reg),
        0,
    )
    .unwrap()
    .with_planner_thread()
    .unwrap();
    let arrivals = steady(&reg, 300, 1_000_000);
    let (done, sent) = run(&mut b, &reg, &arrivals);
    assert_each_once_ok(&reg, &done, &sent);
    let l = b.layout.lock().unwrap().clone();
    assert!(l.switches >= 1, "{l:?}");
    assert_eq!(l.planner, "churn (test)");
}

#[test]
fn the_gpulet_planner_serves_too() {
    let reg = registry();
    let mut b = ClusterBackend::new(
        setup(&reg, 2, 50),
        Box::new(sluice_planner::Gpulet),
        Arc::clone(&reg),
        0,
    )
    .unwrap();
    // 250 requests/s of each model: within two GPUs.
    let arrivals = steady(&reg, 300, 2_000_000);
    let (done, sent) = run(&mut b, &reg, &arrivals);
    assert_each_once_ok(&reg, &done, &sent);
    let l = b.layout.lock().unwrap().clone();
    assert_eq!(l.planner, "gpulet");
    assert!(l.switches >= 1 && l.plan_error.is_none(), "{l:?}");
}
