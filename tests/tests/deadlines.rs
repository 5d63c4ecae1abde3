//! Deadlines through the whole request path: a daemon process, a client in
//! this process. A request whose absolute deadline has already passed when
//! it is submitted is never started: it completes with `DEADLINE_MISSED`,
//! writes no output, and the daemon counts it by class and by model in
//! `sluice status`; a request with room to spare beside it runs normally.
//! Under `fifo`, `reef`, `paella`, `streams` on the GPU model and `reef` on
//! the CUDA backend's fake driver. (That no kernel of it is launched is
//! checked beside the code, where the launches are visible: the GPU model's
//! launch log in `sluice-service`, the fake driver's calls in `sluice-cuda`.)

use sluice_client::{Client, Priority, Span, Submit, now_ns, status};
use sluice_tests::{DaemonOpts, DaemonProc};

sluice_tests::role_entry!();

/// A request of `model` at arena offset `off`, output right after its
/// input (64-byte aligned), with `deadline_ns`.
fn request(c: &mut Client, model: &str, off: u64, deadline_ns: u64) -> Submit {
    let m = c.lookup_model(model).unwrap();
    c.write_arena(off, &vec![7u8; m.input_bytes as usize])
        .unwrap();
    Submit {
        model_id: m.id,
        priority: Priority::RealTime,
        deadline_ns,
        input: Span {
            off,
            len: m.input_bytes,
        },
        output: Span {
            off: (off + m.input_bytes).next_multiple_of(64),
            len: m.output_bytes,
        },
    }
}

fn late_request_is_not_started(scheduler: &'static str, device: &'static str, model: &str) {
    let mut daemon = DaemonProc::spawn(DaemonOpts {
        scheduler,
        device,
        ..DaemonOpts::default()
    });
    let mut c = Client::connect(daemon.socket(), "deadlines").unwrap();
    // Already late when submitted (the deadline is a past CLOCK_MONOTONIC
    // time), and a request with an hour to spare.
    let late = request(&mut c, model, 0, now_ns() - 1);
    let fine = request(&mut c, model, 1 << 20, now_ns() + 3_600_000_000_000);
    let tl = c.submit(&late).unwrap();
    let tf = c.submit(&fine).unwrap();
    let dl = c.wait(tl).unwrap();
    let df = c.wait(tf).unwrap();
    assert_eq!(
        dl.status,
        status::DEADLINE_MISSED,
        "{scheduler}/{device}: {dl:?}"
    );
    assert_eq!(dl.output_len, 0, "{scheduler}/{device}");
    let mut out = vec![1u8; late.output.len as usize];
    c.read_arena(late.output.off, &mut out).unwrap();
    assert!(
        out.iter().all(|&b| b == 0),
        "{scheduler}/{device}: output written"
    );
    assert_eq!(df.status, status::OK, "{scheduler}/{device}: {df:?}");
    assert_eq!(df.output_len, fine.output.len, "{scheduler}/{device}");
    let st = daemon.assert_healthy();
    let m = &st.deadline_missed;
    assert_eq!(
        (m.total, m.real_time, m.best_effort),
        (1, 1, 0),
        "{scheduler}/{device}: {m:?}"
    );
    assert_eq!(
        m.by_model.get(model),
        Some(&1),
        "{scheduler}/{device}: {m:?}"
    );
    assert_eq!(m.by_model.len(), 1, "{scheduler}/{device}: {m:?}");
    assert_eq!(st.completed, 1, "{scheduler}/{device}: {st:?}");
    assert_eq!(st.errors, 1, "{scheduler}/{device}: {st:?}");
}

#[test]
fn fifo_does_not_start_a_late_request() {
    let _w = sluice_tests::watchdog("fifo_does_not_start_a_late_request", 60);
    late_request_is_not_started("fifo", "sim", "resnet152");
}

#[test]
fn reef_does_not_start_a_late_request() {
    let _w = sluice_tests::watchdog("reef_does_not_start_a_late_request", 60);
    late_request_is_not_started("reef", "sim", "resnet152");
}

#[test]
fn paella_does_not_start_a_late_request() {
    let _w = sluice_tests::watchdog("paella_does_not_start_a_late_request", 60);
    late_request_is_not_started("paella", "sim", "resnet152");
}

#[test]
fn streams_does_not_start_a_late_request() {
    let _w = sluice_tests::watchdog("streams_does_not_start_a_late_request", 60);
    late_request_is_not_started("streams", "sim", "resnet152");
}

#[test]
fn the_cuda_backend_does_not_start_a_late_request() {
    let _w = sluice_tests::watchdog("the_cuda_backend_does_not_start_a_late_request", 240);
    late_request_is_not_started("reef", "cuda-fake", "vgg19_small");
}
