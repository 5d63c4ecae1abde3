//! `sluice demo --backend cuda --models DIR` on the fake CUDA driver: the
//! embedded daemon serves the ONNX files of DIR (lowered to the kernel
//! library with their own weights, every kernel run by its CPU twin in
//! fake device memory) to the demo's client processes, under each
//! scheduler. It checks the path, not the figures (the fake device's
//! clock moves as it is polled).
//!
//! ```text
//! python3 scripts/onnx/make-disb-models.py --out target/onnx-disb-small --small
//! cargo build --release --bin sluice
//! cargo run --release -p sluice-bench --features test-util --example demo_fake_driver -- \
//!     target/release/sluice target/onnx-disb-small/models
//! ```
//!
//! Exit status 0 when every client of every phase completed requests and
//! saw no error.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use sluice_bench::demo::{self, DemoOptions, DeviceFactory};
use sluice_bench::error_chain;
use sluice_cuda::serve::{ServeOptions, fake_server_with_graphs};
use sluice_nn::builders::Scale;
use sluice_sched::PolicyKind;
use sluice_service::config::{BackendKind, Scheduler};

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [exe, dir] = args.as_slice() else {
        eprintln!("usage: demo_fake_driver SLUICE_BINARY ONNX_DIR");
        return ExitCode::from(2);
    };
    let device = DeviceFactory(Arc::new(|config, models| {
        let Scheduler::Policy(kind) = config.device.scheduler else {
            return Err("the fake CUDA server runs a policy, not fifo".into());
        };
        let (_, graphs) =
            sluice_service::startup::cuda_models(config).map_err(|e| error_chain(&e))?;
        let opts = ServeOptions {
            scale: config.device.model_scale,
            ..ServeOptions::default()
        };
        let server =
            fake_server_with_graphs(kind, models, &opts, &graphs).map_err(|e| error_chain(&e))?;
        Ok(Box::new(server) as Box<dyn sluice_backend::Backend>)
    }));
    let opts = DemoOptions {
        schedulers: vec![
            Scheduler::Policy(PolicyKind::Reef),
            Scheduler::Policy(PolicyKind::Streams),
        ],
        seconds: 3,
        rt_model: "vgg19_small".into(),
        // The fake device runs every kernel on this machine's CPU: a
        // period it can keep up with, not workload C's.
        rt_period_us: Some(50_000),
        be_models: vec!["resnet152_small".into(), "yolov3_small".into()],
        backend: BackendKind::Cuda,
        model_scale: Scale::Small,
        models_dir: Some(dir.clone()),
        device: Some(device),
    };
    let d = match demo::run(exe, &opts) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("demo_fake_driver: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", demo::report(&d));
    let mut ok = true;
    for p in d.references.iter().chain(&d.runs) {
        for c in &p.clients {
            let good = c.ok > 0 && c.errors == 0;
            ok &= good;
            println!(
                "{} {} {}: {} ok, {} errors",
                if good { "PASS" } else { "FAIL" },
                p.scheduler,
                c.name,
                c.ok,
                c.errors
            );
        }
    }
    println!("{}", if ok { "all passed" } else { "FAILED" });
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
