//! Typed multi-tensor requests end to end: a daemon (in this process, on
//! the simulated GPU) serving `sluice_tests::typed_registry`, the Rust
//! client looking models up, submitting at batch 1 and 4, checking every
//! output against the typed reference, and each refusal named by tensor.

use std::sync::Arc;

use shm_proto::tensor::{self, Detail};
use sluice_client::{
    Client, Error, Fault, Infer, ModelInfo, Priority, Request, Span, Submit, TypedSubmit, status,
};
use sluice_tests::{RawReply, TestDir, connect, hello_frame, raw_exchange, test_input};

struct InProcess {
    daemon: sluice_service::Daemon,
    socket: std::path::PathBuf,
    _dir: TestDir,
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.daemon.shutdown();
    }
}

fn start() -> InProcess {
    let dir = TestDir::new("typed");
    let socket = dir.path().join("sluiced.sock");
    let mut config = sluice_service::config::Config::default();
    config.daemon.socket = socket.clone();
    config.daemon.realtime_priority = 0;
    config.daemon.lock_memory = false;
    config.daemon.dispatcher_core = None;
    config.clients.arena_bytes = 1 << 20;
    let models = Arc::new(sluice_tests::typed_registry());
    let device = sluice_service::startup::make_device(&config, models.clone())
        .expect("the simulated device starts");
    let daemon = sluice_service::Daemon::start(config, models, device).expect("daemon starts");
    InProcess {
        daemon,
        socket,
        _dir: dir,
    }
}

fn inputs_for(m: &ModelInfo, batch: u32, seed: u64) -> Vec<Vec<u8>> {
    (0u64..)
        .zip(&m.inputs)
        .map(|(i, t)| test_input(seed, i, t.bytes(batch).unwrap() as usize))
        .collect()
}

#[test]
fn typed_requests_round_trip_and_refusals_name_the_tensor() {
    let _w = sluice_tests::watchdog(
        "typed_requests_round_trip_and_refusals_name_the_tensor",
        120,
    );
    let d = start();
    let mut c = connect(&d.socket, "typed");

    // The look-up carries every tensor.
    let pair = c.lookup_model("pair").unwrap();
    assert_eq!(pair.max_batch, 8);
    let names: Vec<String> = pair
        .inputs
        .iter()
        .chain(&pair.outputs)
        .map(|t| format!("{} {}", t.name, t.describe()))
        .collect();
    assert_eq!(
        names,
        [
            "ids i64[N,128]",
            "mask f32[16]",
            "logits f32[N,10]",
            "pooled f32[N,32]"
        ]
    );
    assert_eq!(pair.inputs[0].bytes(4), Some(4096));
    assert_eq!(pair.inputs[1].bytes(4), Some(64));
    let echo = c.lookup_model("echo_small").unwrap();
    assert_eq!(echo.max_batch, 1);
    assert_eq!(echo.inputs.len(), 1);
    assert_eq!(echo.inputs[0].bytes(1), Some(echo.input_bytes));

    // By name, at batch 1 and 4: every output is the typed reference.
    for batch in [1u32, 4] {
        let data = inputs_for(&pair, batch, u64::from(batch));
        let named = [("mask", data[1].as_slice()), ("ids", data[0].as_slice())];
        let outs = c
            .infer(
                &pair,
                &Infer {
                    priority: Priority::RealTime,
                    deadline_ns: 0,
                    batch,
                    arena_off: 0,
                    inputs: &named,
                },
            )
            .unwrap_or_else(|e| panic!("batch {batch}: {e}"));
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let want = sluice_client::expected_typed_outputs(&pair, batch, &refs);
        assert_eq!(outs.len(), 2);
        assert_eq!(outs[0].0, "logits");
        assert_eq!(outs[0].1.len(), 40 * batch as usize);
        assert_eq!(outs[1].1.len(), 128 * batch as usize);
        assert_eq!(outs[0].1, want[0], "logits at batch {batch}");
        assert_eq!(outs[1].1, want[1], "pooled at batch {batch}");
        assert_ne!(want[0][..], want[1][..40 * batch as usize]);
    }

    // The spans API at batch 4, table and tensors placed by hand.
    let batch = 4;
    let data = inputs_for(&pair, batch, 99);
    let inputs = [
        Span {
            off: 4096,
            len: 4096,
        },
        Span { off: 8192, len: 64 },
    ];
    let outputs = [
        Span {
            off: 12288,
            len: 160,
        },
        Span {
            off: 12448,
            len: 512,
        },
    ];
    c.write_arena(4096, &data[0]).unwrap();
    c.write_arena(8192, &data[1]).unwrap();
    let typed = |inputs: &'static [Span], outputs: &'static [Span], batch| TypedSubmit {
        priority: Priority::BestEffort,
        deadline_ns: 0,
        batch,
        table_off: 0,
        inputs,
        outputs,
    };
    let s = TypedSubmit {
        inputs: &inputs,
        outputs: &outputs,
        ..typed(&[], &[], batch)
    };
    let t = c.submit_typed(&pair, &s).unwrap();
    let done = c.wait(t).unwrap();
    assert_eq!((done.status, done.output_len), (status::OK, 672));
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let want = sluice_client::expected_typed_outputs(&pair, batch, &refs);
    for (span, want) in outputs.iter().zip(&want) {
        let mut got = vec![0u8; span.len as usize];
        c.read_arena(span.off, &mut got).unwrap();
        assert_eq!(&got, want);
    }

    // Refused by the library before submitting, with the tensor named.
    let short = [
        Span {
            off: 4096,
            len: 512,
        },
        Span { off: 8192, len: 64 },
    ];
    let one_out = [
        Span {
            off: 12288,
            len: 40,
        },
        Span {
            off: 12448,
            len: 128,
        },
    ];
    let s = TypedSubmit {
        inputs: &short,
        outputs: &one_out,
        ..typed(&[], &[], 1)
    };
    assert_eq!(c.submit_typed(&pair, &s), Err(Error::BadTensor));
    assert_eq!(
        sluice_client::last_error_message(),
        "input \"ids\" (i64[N,128]) takes 1024 bytes at batch 1; the request gave 512"
    );
    let e = Error::BadTensor.to_string();
    assert!(e.contains("takes 1024 bytes"), "{e}");
    let s = TypedSubmit {
        inputs: &inputs,
        outputs: &outputs,
        ..typed(&[], &[], 9)
    };
    assert_eq!(c.submit_typed(&pair, &s), Err(Error::BadTensor));
    assert!(
        sluice_client::last_error_message().starts_with("batch 9 is outside 1..=8"),
        "{}",
        sluice_client::last_error_message()
    );
    let missing = [("ids", data[0].as_slice())];
    let r = c.infer(
        &pair,
        &Infer {
            priority: Priority::RealTime,
            deadline_ns: 0,
            batch: 4,
            arena_off: 0,
            inputs: &missing,
        },
    );
    assert_eq!(r, Err(Error::BadTensor));
    assert!(
        sluice_client::last_error_message().contains("input \"mask\" (f32[16])"),
        "{}",
        sluice_client::last_error_message()
    );

    // Refused by the daemon (raw records past the library's checks): each
    // completion carries its detail, and the client explains it.
    let arena = c.arena_len();
    let mut refuse = |table: &[(u64, u64)], batch: u16| {
        let mut bytes = Vec::new();
        for &(off, len) in table {
            let mut e = [0u8; tensor::TABLE_ENTRY_BYTES];
            tensor::write_entry(&mut e, off, len);
            bytes.extend_from_slice(&e);
        }
        c.write_arena(0, &bytes).unwrap();
        let t = c
            .submit_request(Request {
                model_id: pair.id,
                input_off: 0,
                input_len: bytes.len() as u64,
                flags: tensor::FLAG_TENSOR_TABLE,
                batch,
                ..Request::default()
            })
            .unwrap();
        let done = c.wait(t).unwrap();
        let text = c.explain(&done).expect("a refusal is explained");
        (done.status, done.detail.map(Detail::unpack), text)
    };
    let good = [(4096, 1024), (8192, 64), (12288, 40), (12448, 128)];
    let mut bad = good;
    bad[0].1 = 512;
    let (code, detail, text) = refuse(&bad, 1);
    assert_eq!(code, status::BAD_TENSOR_LEN);
    assert_eq!(detail[0], Detail::new(tensor::ROLE_INPUT, 0, 1024));
    assert_eq!(
        text,
        "input \"ids\" (i64[N,128]) takes 1024 bytes at batch 1; the request gave 512"
    );
    let (code, _, text) = refuse(&good, 9);
    assert_eq!(code, status::BAD_BATCH);
    assert!(
        text.starts_with("batch 9 is outside 1..=8 for model \"pair\""),
        "{text}"
    );
    let (code, _, text) = refuse(&good, 0);
    assert_eq!(code, status::BAD_BATCH);
    assert!(text.starts_with("batch 0 is outside"), "{text}");
    let (code, _, text) = refuse(&good[..3], 1);
    assert_eq!(code, status::BAD_TENSOR_TABLE);
    assert!(
        text.contains("tensor table of 64 bytes (2 inputs and 2 outputs")
            && text.contains("gave 48"),
        "{text}"
    );
    let mut bad = good;
    bad[3].0 = arena - 64;
    let (code, _, text) = refuse(&bad, 1);
    assert_eq!(code, status::BAD_OUTPUT_SPAN);
    assert!(
        text.starts_with("output \"pooled\" (f32[N,32]) ends at byte")
            && text.contains(&format!("outside the arena of {arena} bytes")),
        "{text}"
    );
    let mut bad = good;
    bad[3].0 = 12288 + 8;
    let (code, _, text) = refuse(&bad, 1);
    assert_eq!(code, status::BAD_TENSOR_TABLE);
    assert_eq!(
        text,
        "output \"logits\" (f32[N,10]) at offset 12288 overlaps output \"pooled\" (f32[N,32]) \
         at offset 12296; give every output bytes of its own"
    );
    let mut bad = good;
    bad[2].0 = 4096;
    let (code, _, text) = refuse(&bad, 1);
    assert_eq!(code, status::BAD_TENSOR_TABLE);
    assert!(text.contains("overlaps input \"ids\""), "{text}");

    // Untyped requests: to `pair`, refused naming why; to `one`, served at
    // batch 1 with exact sizes and the untyped reference.
    let t = c
        .submit(&Submit {
            model_id: pair.id,
            priority: Priority::RealTime,
            deadline_ns: 0,
            input: Span {
                off: 0,
                len: pair.input_bytes,
            },
            output: Span {
                off: 8192,
                len: pair.output_bytes,
            },
        })
        .unwrap();
    let done = c.wait(t).unwrap();
    assert_eq!(done.status, status::BAD_TENSOR_TABLE);
    let text = c.explain(&done).unwrap();
    assert!(
        text.contains("has 2 inputs and 2 outputs") && text.contains("submit a typed request"),
        "{text}"
    );
    let one = c.lookup_model("one").unwrap();
    assert_eq!((one.input_bytes, one.output_bytes), (64, 16));
    let x = test_input(5, 0, 64);
    c.write_arena(0, &x).unwrap();
    let untyped = |len: u64| Submit {
        model_id: one.id,
        priority: Priority::RealTime,
        deadline_ns: 0,
        input: Span { off: 0, len: 64 },
        output: Span { off: 128, len },
    };
    let t = c.submit(&untyped(16)).unwrap();
    let done = c.wait(t).unwrap();
    assert_eq!((done.status, done.output_len), (status::OK, 16));
    let mut want = [0u8; 16];
    shm_proto::sim::expected_output(one.id, &x, &mut want);
    let mut got = [0u8; 16];
    c.read_arena(128, &mut got).unwrap();
    assert_eq!(got, want);
    let t = c.submit(&untyped(32)).unwrap();
    let done = c.wait(t).unwrap();
    assert_eq!(done.status, status::BAD_TENSOR_LEN);
    assert_eq!(
        c.explain(&done).unwrap(),
        "output \"y\" (f32[N,4]) takes 16 bytes at batch 1; the request gave 32"
    );
    assert_eq!(
        one.explain(
            1,
            Fault {
                status: done.status,
                detail: done.detail
            }
        )
        .to_string(),
        c.explain(&done).unwrap()
    );

    // Models known by their manifest keep protocol 2's rules.
    sluice_tests::run_one(&mut c, &echo, 1, 0).expect("untyped echo_small");
    // And take a typed request of their one byte tensor each way.
    let data = test_input(7, 0, echo.input_bytes as usize);
    let named = [("input", data.as_slice())];
    let outs = c
        .infer(
            &echo,
            &Infer {
                priority: Priority::RealTime,
                deadline_ns: 0,
                batch: 1,
                arena_off: 0,
                inputs: &named,
            },
        )
        .unwrap();
    assert_eq!(
        outs[0].1,
        sluice_client::expected_typed_outputs(&echo, 1, &[&data])[0]
    );
}

#[test]
fn a_protocol_2_hello_is_refused_naming_both_versions() {
    let _w = sluice_tests::watchdog("a_protocol_2_hello_is_refused_naming_both_versions", 60);
    let d = start();
    // A v2 client's Hello: same magic, version 2, its own layout hash.
    let v2 = hello_frame(shm_proto::MAGIC, 2, 0x1234, "old-client");
    match raw_exchange(&d.socket, &v2, false) {
        RawReply::Refused { code, message } => {
            assert_eq!(code, sluice_client::refused::VERSION_MISMATCH, "{message}");
            assert_eq!(
                message,
                "client speaks sluice protocol v2, this daemon speaks v3; rebuild the client \
                 against the daemon's version of sluice-client"
            );
        }
        other => panic!("v2 Hello: expected Refused, got {other:?}"),
    }
    // A current client still connects.
    let mut c: Client = connect(&d.socket, "current");
    assert!(c.lookup_model("pair").is_ok());
}
