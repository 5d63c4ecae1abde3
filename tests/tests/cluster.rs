//! The daemon with `[cluster]`: two simulated GPUs serving clients of two
//! models through the socket, requests of different clients batched, and
//! placements switched under load. Real client processes; each
//! checks every output against the reference.

use sluice_tests::{
    ClientOpts, ClientProc, ClusterOpts, DaemonOpts, DaemonProc, PrioMix, TestDir, secs,
};

sluice_tests::role_entry!();

const MODELS: [&str; 2] = ["inception", "resnet50"];
const PER_CLIENT: u64 = 40;
const CLIENTS: u64 = 6;

fn serve(churn_ms: u32, tag: &str) -> sluice_service::server::Status {
    serve_with(churn_ms, None, tag)
}

fn serve_with(
    churn_ms: u32,
    gpulet_int: Option<(std::path::PathBuf, &'static str)>,
    tag: &str,
) -> sluice_service::server::Status {
    let mut daemon = DaemonProc::spawn(DaemonOpts {
        on_device_per_client: 4,
        arena_bytes: 8 << 20,
        cluster: Some(ClusterOpts {
            gpus: "mi50,mi50",
            models: "inception,resnet50",
            churn_ms,
            gpulet_int,
        }),
        ..DaemonOpts::default()
    });
    let dir = TestDir::new(tag);
    let procs: Vec<ClientProc> = (0..CLIENTS)
        .map(|k| {
            let mut o = ClientOpts::echo(&format!("{tag}-{k}"), 900 + k, PER_CLIENT);
            o.model = MODELS[k as usize % 2].to_owned();
            o.depth = 4;
            o.prio = if k == 0 {
                PrioMix::Mixed
            } else {
                PrioMix::BestEffort
            };
            ClientProc::spawn(daemon.socket(), &o, &dir)
        })
        .collect();
    for (k, p) in procs.into_iter().enumerate() {
        let r = p.finish(secs(120));
        assert_eq!(r.get("problem"), None, "client {k}: {r:?}");
        assert_eq!(r.u64("ok"), PER_CLIENT, "client {k}: {r:?}");
        assert_eq!(r.u64("bad"), 0, "client {k}: {r:?}");
    }
    let st = daemon.assert_healthy();
    assert_eq!(st.completed, CLIENTS * PER_CLIENT, "{st:?}");
    assert_eq!(st.errors, 0, "{st:?}");
    assert_eq!(st.device_queued, 0, "{st:?}");
    st
}

#[test]
fn two_simulated_gpus_batch_requests_of_several_clients() {
    let _w = sluice_tests::watchdog("two_simulated_gpus_batch_requests_of_several_clients", 180);
    let st = serve(0, "cluster-batch");
    let c = st.cluster.expect("the status shows the cluster");
    assert_eq!(c.gpus.len(), 2, "{c:?}");
    assert!(st.device.contains("cluster of 2"), "{}", st.device);
    for m in &c.models {
        assert_eq!(m.completed, CLIENTS / 2 * PER_CLIENT, "{m:?}");
        assert!(m.max_batch > 1, "{} was never batched: {c:?}", m.name);
    }
}

#[test]
fn a_plan_change_every_10_ms_under_load_loses_nothing() {
    let _w = sluice_tests::watchdog("a_plan_change_every_10_ms_under_load_loses_nothing", 180);
    let st = serve(10, "cluster-churn");
    let c = st.cluster.expect("the status shows the cluster");
    eprintln!(
        "{} placements applied; dispatcher time per switch: median {} ns, p99 {} ns, longest {} ns; \
         last planner run {} ns",
        c.switches, c.switch_p50_ns, c.switch_p99_ns, c.max_switch_ns, c.last_plan_ns
    );
    assert!(c.switches >= 20, "only {} switches: {c:?}", c.switches);
}

#[test]
fn gpulet_int_with_gpu_scaling_serves_and_shows_the_gpus_in_use() {
    let _w = sluice_tests::watchdog(
        "gpulet_int_with_gpu_scaling_serves_and_shows_the_gpus_in_use",
        180,
    );
    // gpulet's 2080 Ti coefficients (data/gpulet/2080ti, measured
    // by the gpulet authors); made-up utilisation rows in UTIL.CSV's format.
    let data = TestDir::new("cluster-gpulet-int-data");
    std::fs::write(
        data.path().join("INT_MODEL_CONSTANT.CSV"),
        "l2_util_m1,l2_util_m2,dram_util_m1,dram_util_m2,constant\n\
         0.11290838746224496,0.7159598718755424,0.35486591956022895,0.0882038259888065,0.8953693917277343\n",
    )
    .unwrap();
    std::fs::write(
        data.path().join("UTIL.CSV"),
        "bench,batch,avg_duration(ms),SM_util(%),l2_util(%),mem_util(%),a,t\n\
         googlenet,1,0.01,30,20,40,20,60,\ngooglenet,8,0.02,60,40,70,30,60,\n",
    )
    .unwrap();
    let st = serve_with(
        0,
        Some((data.path().to_owned(), "inception=googlenet")),
        "cluster-gpulet-int",
    );
    let c = st.cluster.expect("the status shows the cluster");
    assert_eq!(c.planner, "gpulet+int", "{c:?}");
    assert!(c.plan_error.is_none(), "{c:?}");
    let last = c.recent_plans.last().expect("a plan was made");
    assert_eq!(last.gpus_in_use, c.gpus_in_use, "{c:?}");
    // Under load some plan used a GPU; once the clients are gone the rates
    // fall and a plan may leave every GPU idle.
    assert!(c.recent_plans.iter().any(|p| p.gpus_in_use >= 1), "{c:?}");
    assert!(c.gpus_in_use <= 2, "{c:?}");
    let idle = c.gpus.iter().filter(|g| g.partitions.is_empty()).count();
    assert!(idle >= 2 - c.gpus_in_use as usize, "{c:?}");
}
