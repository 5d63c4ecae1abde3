//! The CUDA backend's job path end to end, without a GPU: a daemon
//! process whose device is the CUDA server on the fake driver (its kernels
//! run the CPU reference ops on fake device memory), a client in this
//! process talking through the real socket and shared memory. Outputs are
//! compared bit for bit with the CPU reference of the same plan and
//! weights; a real-time request arriving during a best-effort one
//! preempts it, and both outputs stay right.

use sluice_client::{Client, Priority, Span, Submit, status};
use sluice_cuda::serve::ServeOptions;
use sluice_nn::builders::{BuiltModel, build_small, run_cpu};
use sluice_tests::{DaemonOpts, DaemonProc};

sluice_tests::role_entry!();

fn small(name: &str) -> BuiltModel {
    build_small(name).unwrap()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// Writes `name`'s input from `seed` at `off` and returns the spans and
/// the CPU reference output.
fn prepare(c: &mut Client, name: &str, seed: u64, off: u64) -> (Submit, Vec<u8>) {
    let m = c.lookup_model(&format!("{name}_small")).unwrap();
    let b = small(name);
    let input = b.random_input(seed);
    c.write_arena(off, &bytes(&input)).unwrap();
    let weights = b.weights(ServeOptions::default().weights_seed);
    let want = bytes(&run_cpu(b.plan(), &weights, &input).unwrap());
    assert_eq!(want.len() as u64, m.output_bytes);
    let out = (off + m.input_bytes).next_multiple_of(64);
    (
        Submit {
            model_id: m.id,
            priority: Priority::BestEffort,
            deadline_ns: 0,
            input: Span {
                off,
                len: m.input_bytes,
            },
            output: Span {
                off: out,
                len: m.output_bytes,
            },
        },
        want,
    )
}

fn output(c: &Client, s: &Submit) -> Vec<u8> {
    let mut v = vec![0u8; s.output.len as usize];
    c.read_arena(s.output.off, &mut v).unwrap();
    v
}

#[test]
fn the_cuda_job_path_serves_real_outputs_and_preempts_for_real_time() {
    let _w = sluice_tests::watchdog(
        "the_cuda_job_path_serves_real_outputs_and_preempts_for_real_time",
        240,
    );
    let mut daemon = DaemonProc::spawn(DaemonOpts {
        scheduler: "reef",
        device: "cuda-fake",
        ..DaemonOpts::default()
    });
    let mut c = Client::connect(daemon.socket(), "cuda-e2e").unwrap();
    let (be, be_want) = prepare(&mut c, "resnet152", 1, 0);
    let (mut rt, rt_want) = prepare(&mut c, "vgg19", 2, 1 << 20);
    rt.priority = Priority::RealTime;
    let tb = c.submit(&be).unwrap();
    let tr = c.submit(&rt).unwrap();
    let dr = c.wait(tr).unwrap();
    let db = c.wait(tb).unwrap();
    assert_eq!(dr.status, status::OK, "{dr:?}");
    assert_eq!(db.status, status::OK, "{db:?}");
    assert_eq!(dr.output_len, rt.output.len);
    assert!(
        dr.finished_ns <= db.finished_ns,
        "the real-time request finished after the best-effort one: {dr:?} {db:?}"
    );
    assert_eq!(output(&c, &rt), rt_want, "vgg19_small output");
    assert_eq!(output(&c, &be), be_want, "resnet152_small output");

    // Garbage input (NaNs, infinities): computed, no harm done.
    let (mut junk, _) = prepare(&mut c, "bert_base", 3, 2 << 20);
    c.write_arena(junk.input.off, &vec![0xFF; junk.input.len as usize])
        .unwrap();
    junk.priority = Priority::RealTime;
    let t = c.submit(&junk).unwrap();
    assert_eq!(c.wait(t).unwrap().status, status::OK);
    let st = daemon.assert_healthy();
    assert_eq!(st.completed, 3, "{st:?}");
    assert!(st.device.contains("fake CUDA device"), "{}", st.device);
}
