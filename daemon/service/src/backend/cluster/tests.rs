//! The cluster backend in virtual time: batching, placement switches,
//! fallback, cancellation. Times are the GPU model's; nothing is timed on
//! the wall clock except the switch cost, which is printed, not asserted.

use std::collections::{BTreeMap, HashMap};

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
        sizes_pct: None,
        scaling: false,
        replan_ns: replan_ms * MS,
        rate_window_ns: 200 * MS,
        rate_change: 0.25,
        headroom: 1.2,
        burst: sluice_planner::Burst::Mean,
        execution: Execution::GpuModel,
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
    run_watching(b, reg, arrivals, |_, _| {})
}

/// [`run`], calling `watch(virtual ns, backend)` after every poll.
fn run_watching(
    b: &mut ClusterBackend,
    reg: &ModelRegistry,
    arrivals: &[(u64, u32, u32)],
    mut watch: impl FnMut(u64, &ClusterBackend),
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
        watch(t, b);
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
/// Runs `arrivals`, checks that each completed once with the right output,
/// and returns the layout afterwards.
fn serve_ok(b: &mut ClusterBackend, reg: &ModelRegistry, arrivals: &[(u64, u32, u32)]) -> Layout {
    let (done, sent) = run(b, reg, arrivals);
    assert_each_once_ok(reg, &done, &sent);
    b.layout.lock().unwrap().clone()
}

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

/// Serves 400 steady requests through `b` and checks each completes once
/// with the right output; returns the partition sizes in force at some
/// point (draining ones aside) and the layout at the end.
fn serve_steady_watching_sizes(
    b: &mut ClusterBackend,
    reg: &ModelRegistry,
) -> (std::collections::BTreeSet<u32>, Layout) {
    let mut sizes = std::collections::BTreeSet::new();
    let arrivals = steady(reg, 400, 2_000_000);
    let (done, sent) = run_watching(b, reg, &arrivals, |_, b| {
        for p in b.parts.iter().flatten().filter(|p| !p.draining) {
            sizes.insert(p.size_pct);
        }
    });
    assert_each_once_ok(reg, &done, &sent);
    let l = b.layout.lock().unwrap().clone();
    (sizes, l)
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
    let l = serve_ok(&mut b, &reg, &arrivals);
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
    let l = serve_ok(&mut b, &reg, &arrivals);
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
    let l = serve_ok(&mut b, &reg, &arrivals);
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
    let l = serve_ok(&mut b, &reg, &arrivals);
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
    let l = serve_ok(&mut b, &reg, &arrivals);
    assert_eq!(l.planner, "gpulet");
    assert!(l.switches >= 1 && l.plan_error.is_none(), "{l:?}");
}

/// gpulet, recording the burst rule of every `GpuSpec` it is asked under.
struct SeesBurst(Arc<std::sync::Mutex<Vec<sluice_planner::Burst>>>);

impl Planner for SeesBurst {
    fn name(&self) -> &'static str {
        "gpulet"
    }
    fn plan(&self, models: &[ModelSpec], gpus: &GpuSpec) -> Result<Placement, PlanError> {
        self.0.lock().unwrap().push(gpus.burst);
        sluice_planner::Gpulet.plan(models, gpus)
    }
}

#[test]
fn the_burst_rule_reaches_the_planner_and_its_plans_serve() {
    let reg = registry();
    let rule = sluice_planner::Burst::Poisson(0.01);
    let mut s = setup(&reg, 2, 50);
    s.burst = rule;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut b = ClusterBackend::new(
        s,
        Box::new(SeesBurst(Arc::clone(&seen))),
        Arc::clone(&reg),
        0,
    )
    .unwrap();
    // 62.5 requests/s of each model. (At the 250 of
    // `the_gpulet_planner_serves_too` the rule asks for 6 GPUs: these SLOs,
    // 4.5 and 9 ms, leave one round to absorb a burst.)
    let arrivals = steady(&reg, 100, 8_000_000);
    let l = serve_ok(&mut b, &reg, &arrivals);
    assert!(l.switches >= 1 && l.plan_error.is_none(), "{l:?}");
    let seen = seen.lock().unwrap();
    assert!(
        !seen.is_empty() && seen.iter().all(|&r| r == rule),
        "{seen:?}"
    );
}

/// gpulet's 2080 Ti coefficients
/// (`data/gpulet/2080ti/INT_MODEL_CONSTANT.CSV`, measured by the gpulet
/// authors), as text: unit tests read no file.
const COEFFS_2080TI: &str = "l2_util_m1,l2_util_m2,dram_util_m1,dram_util_m2,constant\n\
    0.11290838746224496,0.7159598718755424,0.35486591956022895,0.0882038259888065,0.8953693917277343\n";

/// Rows in `UTIL.CSV`'s format; the values are made up for the test
/// (not gpulet's measurements).
const UTIL_ROWS: &str = "bench,batch,avg_duration(ms),SM_util(%),l2_util(%),mem_util(%),achieved occupancy,theoretical occupancy\n\
    mobilenet_v2,1,0.01,30,20,40,20,60,\n\
    mobilenet_v2,8,0.02,60,40,70,30,60,\n\
    resnet50,1,0.02,40,30,50,25,60,\n\
    resnet50,8,0.05,80,60,80,35,60,\n";

fn names(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[test]
fn interference_data_maps_daemon_names_to_bench_rows_and_names_bad_files() {
    let dir = std::path::Path::new("/d/2080ti");
    let served = ["mobilenet", "resnet18"];
    let (m, unmapped) = setup::interference_from_text(
        dir,
        COEFFS_2080TI,
        UTIL_ROWS,
        &names(&[("mobilenet", "mobilenet_v2")]),
        &served,
    )
    .unwrap();
    assert_eq!(unmapped, vec!["resnet18".to_owned()]);
    assert_eq!(m.util.keys().collect::<Vec<_>>(), vec!["mobilenet"]);
    // Unmapped: factor 1 both ways.
    use sluice_planner::Interference;
    assert_eq!(m.factor("mobilenet", 1, 50, "resnet18", 1, 50), 1.0);
    assert_eq!(m.factor("resnet18", 1, 50, "mobilenet", 1, 50), 1.0);
    // Both mapped (one bench row may serve two models): mobilenet at batch
    // 1 on 50 % (l2 0.2, dram 0.4, halved) next to resnet18 at batch 8 on
    // 50 % (l2 0.6, dram 0.8, halved).
    let (m, unmapped) = setup::interference_from_text(
        dir,
        COEFFS_2080TI,
        UTIL_ROWS,
        &names(&[("mobilenet", "mobilenet_v2"), ("resnet18", "resnet50")]),
        &served,
    )
    .unwrap();
    assert!(unmapped.is_empty());
    let c = [
        0.11290838746224496,
        0.7159598718755424,
        0.35486591956022895,
        0.0882038259888065,
        0.8953693917277343,
    ];
    let want = c[0] * 0.1 + c[1] * 0.3 + c[2] * 0.2 + c[3] * 0.4 + c[4];
    let got = m.factor("mobilenet", 1, 50, "resnet18", 8, 50);
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");

    for (coeffs, util, map, want) in [
        (
            "a,b\n1,2\n",
            UTIL_ROWS,
            names(&[]),
            "/d/2080ti/INT_MODEL_CONSTANT.CSV: interference coefficients: the header is `a,b`",
        ),
        (
            COEFFS_2080TI,
            "bench,batch,d,sm,l2,mem\nx,1,0.1,10,20,30\nx,2,0.1,10,20,oops\n",
            names(&[]),
            "/d/2080ti/UTIL.CSV: utilisation line 3: mem_util `oops`",
        ),
        (
            COEFFS_2080TI,
            UTIL_ROWS,
            names(&[("resnet18", "resnet18")]),
            "cluster.util_names.resnet18 = \"resnet18\", but the file has no rows of that bench; \
             it lists mobilenet_v2, resnet50",
        ),
        (
            COEFFS_2080TI,
            UTIL_ROWS,
            names(&[("vgg16", "vgg16")]),
            "cluster.util_names.vgg16 names a model the cluster does not serve; the cluster \
             serves mobilenet, resnet18",
        ),
    ] {
        let e = setup::interference_from_text(dir, coeffs, util, &map, &served)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}\nwant {want}");
    }
}

#[test]
fn start_up_names_a_missing_interference_file() {
    let mut config = crate::config::Config::default();
    config.cluster.gpus = vec!["mi50".into()];
    config.cluster.planner = crate::config::PlannerKind::GpuletInt;
    config.cluster.interference_data = Some("/nonexistent/sluice-test/gpulet".into());
    let e = setup::planner(&config, &["resnet18"])
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("/nonexistent/sluice-test/gpulet/INT_MODEL_CONSTANT.CSV")
            && e.contains("name a folder holding INT_MODEL_CONSTANT.CSV and UTIL.CSV")
            && e.contains("\"gpulet-2080ti\""),
        "{e}"
    );
    config.cluster.interference_data = None;
    let e = setup::planner(&config, &["resnet18"])
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(e.contains("set cluster.interference_data"), "{e}");
}

/// `cluster.interference_data = "gpulet-2080ti"` (or `"gpulet-3080"`) is
/// the built-in copy of the repository's `data/gpulet/<gpu>/`: no file is
/// read, the bench names are the data's, and errors name the built-in data.
#[test]
fn built_in_interference_data_needs_no_folder() {
    assert_eq!(
        setup::builtin_interference_data(std::path::Path::new("gpulet-2080ti"))
            .map(|(g, c, _)| (g, c.lines().nth(1))),
        Some(("2080ti", COEFFS_2080TI.lines().nth(1)))
    );
    assert!(setup::builtin_interference_data(std::path::Path::new("gpulet-3080")).is_some());
    for folder in ["gpulet-a100", "./gpulet-2080ti", "/d/2080ti"] {
        assert!(setup::builtin_interference_data(std::path::Path::new(folder)).is_none());
    }
    let mut config = crate::config::Config::default();
    config.cluster.gpus = vec!["mi50".into()];
    config.cluster.planner = crate::config::PlannerKind::GpuletInt;
    for gpu in ["gpulet-2080ti", "gpulet-3080"] {
        config.cluster.interference_data = Some(gpu.into());
        config.cluster.util_names = names(&[("resnet18", "resnet50")]);
        setup::planner(&config, &["resnet18", "mobilenet"]).unwrap();
        config.cluster.util_names = names(&[("resnet18", "resnet18")]);
        let e = setup::planner(&config, &["resnet18"])
            .map(|_| ())
            .unwrap_err()
            .to_string();
        let g = gpu.trim_start_matches("gpulet-");
        assert!(
            e.contains(&format!("data/gpulet/{g} (built in)/UTIL.CSV"))
                && e.contains("no rows of that bench"),
            "{e}"
        );
    }
}

#[test]
fn the_gpulet_int_planner_serves_on_gpulet_sizes() {
    let reg = registry();
    let (intf, _) = setup::interference_from_text(
        std::path::Path::new("test"),
        COEFFS_2080TI,
        UTIL_ROWS,
        &names(&[("mobilenet", "mobilenet_v2"), ("resnet18", "resnet50")]),
        &["mobilenet", "resnet18"],
    )
    .unwrap();
    let mut s = setup(&reg, 2, 50);
    // 25 % steps: only 25, 50 and 100 may be used.
    s.sizes_pct = Some(sluice_planner::PartitionSizes::new(&[25, 50, 100]).unwrap());
    let mut b = ClusterBackend::new(
        s,
        Box::new(sluice_planner::GpuletInt::new(intf)),
        Arc::clone(&reg),
        0,
    )
    .unwrap();
    let (sizes, l) = serve_steady_watching_sizes(&mut b, &reg);
    assert_eq!(l.planner, "gpulet+int");
    assert!(l.switches >= 2 && l.plan_error.is_none(), "{l:?}");
    assert!(
        sizes.iter().all(|s| [25, 50, 100].contains(s)),
        "a size outside the list: {sizes:?}"
    );
}

/// Needs `ceil(total rate / 300)` GPUs and spreads every model over every
/// GPU it is given, whole: it never leaves a GPU idle by itself, so only
/// GPU scaling keeps its count down.
struct Spread;

impl Planner for Spread {
    fn name(&self) -> &'static str {
        "spread (test)"
    }
    fn plan(&self, models: &[ModelSpec], gpus: &GpuSpec) -> Result<Placement, PlanError> {
        let total: f64 = models.iter().map(|m| m.rate_rps).sum();
        let needed = (total / 300.0).ceil().max(1.0) as u64;
        if needed > u64::from(gpus.count) {
            return Err(PlanError::NotSchedulable {
                planner: "spread",
                needed,
                available: gpus.count,
            });
        }
        let part = sluice_planner::PartitionPlan {
            size_pct: 100,
            duty_cycle_ms: 0.0,
            models: models
                .iter()
                .map(|m| sluice_planner::Assignment {
                    model: m.name.clone(),
                    batch: 8,
                    share_rps: m.rate_rps / f64::from(gpus.count),
                })
                .collect(),
        };
        Ok(Placement {
            gpus: (0..gpus.count)
                .map(|_| sluice_planner::GpuPlan {
                    partitions: vec![part.clone()],
                })
                .collect(),
        })
    }
}

/// `per_model_rps` of each model for `ms`, from `start_ns`, both models
/// interleaved, 4 clients.
fn phase(start_ns: u64, per_model_rps: u64, ms: u64) -> Vec<(u64, u32, u32)> {
    let gap = 1_000_000_000 / (2 * per_model_rps);
    (0..ms * MS / gap)
        .map(|i| (start_ns + i * gap, (i % 2) as u32, (i % 4) as u32))
        .collect()
}

/// Low, high, low: 100, 500 and 100 requests/s of each model, `ms` each.
fn rise_and_fall(ms: u64) -> Vec<(u64, u32, u32)> {
    let mut a = phase(0, 100, ms);
    a.extend(phase(ms * MS, 500, ms));
    a.extend(phase(2 * ms * MS, 100, ms));
    a
}

#[test]
fn gpu_scaling_grows_with_the_rate_and_shrinks_when_it_falls() {
    let reg = registry();
    let mut s = setup(&reg, 4, 50);
    s.scaling = true;
    let mut b =
        ClusterBackend::new(s, Box::new(sluice_planner::Gpulet), Arc::clone(&reg), 0).unwrap();
    // GPUs in use by phase, from the first plan on.
    let mut seen: [Vec<u32>; 3] = Default::default();
    let mut history = Vec::new();
    let (done, sent) = run_watching(&mut b, &reg, &rise_and_fall(500), |t, b| {
        if b.switches > 0 {
            seen[((t / (500 * MS)) as usize).min(2)].push(b.gpus_in_use);
        }
        let l = b.layout.lock().unwrap();
        if l.recent_plans.last() != history.last() {
            history.extend(l.recent_plans.last().cloned());
        }
    });
    assert_each_once_ok(&reg, &done, &sent);
    let max = |v: &[u32]| v.iter().copied().max().unwrap_or(0);
    let last = |v: &[u32]| v.last().copied().unwrap_or(0);
    let summary: Vec<(u64, u32)> = history.iter().map(|p| (p.at_ms, p.gpus_in_use)).collect();
    assert_eq!(max(&seen[0]), 1, "low rate: one GPU suffices: {summary:?}");
    assert!(max(&seen[1]) >= 2, "high rate: more GPUs: {summary:?}");
    assert_eq!(last(&seen[2]), 1, "low again: back to one: {summary:?}");
    let l = b.layout.lock().unwrap().clone();
    assert!(
        history.iter().all(|p| !p.fallback) && l.plan_error.is_none(),
        "{summary:?} {l:?}"
    );
    assert!(l.recent_plans.len() <= sluice_backend::RECENT_PLANS);
    assert_eq!(l.gpus_in_use, 1, "{l:?}");
    // Idle GPUs show no partition.
    assert!(l.gpus[1..].iter().all(|g| g.partitions.is_empty()), "{l:?}");
}

#[test]
fn without_scaling_a_planner_gets_every_gpu_and_with_it_the_last_count() {
    let reg = registry();
    for scaling in [false, true] {
        let mut s = setup(&reg, 3, 50);
        s.scaling = scaling;
        let mut b = ClusterBackend::new(s, Box::new(Spread), Arc::clone(&reg), 0).unwrap();
        let mut counts = Vec::new();
        let (done, sent) = run_watching(&mut b, &reg, &rise_and_fall(300), |_, b| {
            if b.switches > 0 && counts.last() != Some(&b.gpus_in_use) {
                counts.push(b.gpus_in_use);
            }
        });
        assert_each_once_ok(&reg, &done, &sent);
        if scaling {
            // From one GPU, growing only when the plan needs more; Spread
            // never gives one back (Algorithm 2 starts from the count in use).
            assert_eq!(counts.first(), Some(&1), "{counts:?}");
            assert!(counts.windows(2).all(|w| w[0] < w[1]), "{counts:?}");
            assert!(counts.len() >= 2, "{counts:?}");
        } else {
            assert_eq!(counts, vec![3], "every plan on every GPU");
        }
    }
}

/// The InSS planner (feature `inss`).
#[cfg(feature = "inss")]
mod inss {
    use super::*;

    /// The agents the repository ships (`agents/inss`, trained on the `a100`
    /// profile by `sluice train inss`).
    fn shipped_inss_agents() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../agents/inss")
    }

    #[test]
    fn start_up_refuses_inss_agents_that_cannot_serve_the_cluster() {
        let mut config = crate::config::Config::default();
        config.cluster.gpus = vec!["a100".into(); 4];
        config.cluster.planner = crate::config::PlannerKind::Inss;
        let e = setup::planner(&config, &["resnet18"])
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains("set cluster.inss_agents"), "{e}");
        config.cluster.inss_agents = Some("/nonexistent/sluice-test/agents".into());
        let e = setup::planner(&config, &["resnet18"])
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent/sluice-test/agents/latency.json")
                && e.contains("sluice train inss --out DIR"),
            "{e}"
        );
        config.cluster.inss_agents = Some(shipped_inss_agents());
        setup::planner(&config, &["resnet18", "mobilenet"]).unwrap();
        let e = setup::planner(&config, &["resnet18", "bert_base"])
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"bert_base\"") && e.contains("alexnet, resnet50, vgg16"),
            "{e}"
        );
        config.cluster.gpus = vec!["mi50".into(); 4];
        let e = setup::planner(&config, &["resnet18"])
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("trained on the a100 profile") && e.contains("\"mi50\""),
            "{e}"
        );
    }

    /// Six GPUs with GPU scaling: InSS plans whole groups of four, so scaling
    /// grows from one GPU to four, never falls back, and leaves two idle.
    #[test]
    fn the_inss_planner_scales_to_a_whole_group_and_idles_the_rest() {
        let reg = registry();
        let planner = sluice_inss::planner::InssPlanner::load(&shipped_inss_agents()).unwrap();
        let mut s = setup(&reg, 6, 50);
        s.scaling = true;
        let mut b = ClusterBackend::new(s, Box::new(planner), Arc::clone(&reg), 0).unwrap();
        let (_, l) = serve_steady_watching_sizes(&mut b, &reg);
        assert!(l.switches >= 1 && l.plan_error.is_none(), "{l:?}");
        assert!(
            !l.recent_plans.is_empty() && l.recent_plans.iter().all(|p| !p.fallback),
            "{:?}",
            l.recent_plans
        );
        assert!(l.gpus_in_use <= 4, "{l:?}");
        assert!(l.gpus[4..].iter().all(|g| g.partitions.is_empty()), "{l:?}");
    }

    #[test]
    fn the_inss_planner_serves_every_request_on_the_grid() {
        let reg = registry();
        let planner = sluice_inss::planner::InssPlanner::load(&shipped_inss_agents()).unwrap();
        let mut b = ClusterBackend::new(setup(&reg, 4, 50), Box::new(planner), Arc::clone(&reg), 0)
            .unwrap();
        let (sizes, l) = serve_steady_watching_sizes(&mut b, &reg);
        assert_eq!(l.planner, "inss");
        assert!(l.switches >= 1 && l.plan_error.is_none(), "{l:?}");
        // The setup's grid is 25 % steps.
        assert!(
            sizes.iter().all(|s| s % 25 == 0),
            "a size off the grid: {sizes:?}"
        );
    }
}

#[cfg(not(feature = "inss"))]
#[test]
fn without_the_inss_feature_the_inss_planner_is_refused_naming_the_feature() {
    let mut config = crate::config::Config::default();
    config.cluster.gpus = vec!["a100".into(); 4];
    config.cluster.planner = crate::config::PlannerKind::Inss;
    config.cluster.inss_agents = Some("agents/inss".into());
    let e = setup::planner(&config, &["resnet18"])
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--features inss") && e.contains("another cluster.planner"),
        "{e}"
    );
}
