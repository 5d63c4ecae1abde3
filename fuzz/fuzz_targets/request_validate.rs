//! Request-record validation (`sluice_service::dispatch::validate`): the
//! dispatcher copies each record out of a client's submission ring and
//! validates it (copying a typed request's tensor table out of the arena
//! once). Any record must be refused with a status or accepted with spans
//! inside the arena: an untyped one of the model's exact input length and
//! at least its output length, a typed one of exactly each tensor's size at
//! its batch, no output overlapping another tensor.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use shm_proto::layout::{MAX_ARENA, PAGE};
use shm_proto::{Geometry, Request};
use sluice_model::ModelRegistry;

fn registry() -> &'static ModelRegistry {
    static R: OnceLock<ModelRegistry> = OnceLock::new();
    R.get_or_init(ModelRegistry::builtin)
}

/// A record as a client could write it: every field any value, but biased
/// towards the interesting ones (small offsets, real model ids, the
/// model's own lengths) so accepted records are common too.
fn record(u: &mut Unstructured<'_>, arena: u64) -> Result<Request> {
    let reg = registry();
    let n_models = reg.iter().count() as u32;
    let model_id = if u.arbitrary::<bool>()? {
        u.int_in_range(0..=n_models)?
    } else {
        u.arbitrary()?
    };
    let model = reg.get(model_id);
    let span = |u: &mut Unstructured<'_>, exact: Option<u64>| -> Result<(u64, u64)> {
        Ok(match u.int_in_range(0u8..=2)? {
            0 => (u.arbitrary()?, u.arbitrary()?),
            1 => (
                u.int_in_range(0..=arena + 64)?,
                exact.unwrap_or(u.int_in_range(0..=arena)?),
            ),
            _ => {
                let len = exact.unwrap_or(0);
                (arena.saturating_sub(len) + u.int_in_range(0..=1)?, len)
            }
        })
    };
    let (input_off, input_len) = span(u, model.map(|m| m.input_bytes))?;
    let (output_off, output_len) = span(u, model.map(|m| m.output_bytes))?;
    Ok(Request {
        request_id: u.arbitrary()?,
        model_id,
        priority: if u.arbitrary::<bool>()? {
            u.int_in_range(0..=2)?
        } else {
            u.arbitrary()?
        },
        deadline_ns: u.arbitrary()?,
        input_off,
        input_len,
        output_off,
        output_len,
        flags: match u.int_in_range(0u8..=2)? {
            0 => 0,
            1 => shm_proto::tensor::FLAG_TENSOR_TABLE,
            _ => u.arbitrary()?,
        },
        batch: if u.arbitrary::<bool>()? {
            u.int_in_range(0..=9)?
        } else {
            u.arbitrary()?
        },
        // The ring's ready stamp (protocol 2): the ring checks it, not
        // `validate`, so any value.
        seq: u.arbitrary()?,
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    // A geometry the config allows: the arena a multiple of the page size.
    let Ok(pages) = u.int_in_range(1..=MAX_ARENA / PAGE) else {
        return;
    };
    let g = Geometry {
        sq_entries: 256,
        cq_entries: 256,
        arena_size: pages * PAGE,
    };
    let Ok(req) = record(&mut u, g.arena_size) else {
        return;
    };
    // The arena: a prefix from the fuzzer (tables, garbage), zeros after.
    let take = u.len().min(1 << 16);
    let arena = Arena {
        prefix: u.bytes(take).unwrap_or_default().to_vec(),
        len: g.arena_size,
    };
    let reg = registry();
    match sluice_service::dispatch::validate(&req, reg, g, &arena) {
        Ok(ok) => {
            assert_eq!(ok.priority as u32, req.priority, "{req:?}");
            let m = reg.get(req.model_id).expect("accepted an unknown model");
            let end = |off: u64, len: u64| off.checked_add(len).filter(|&e| e <= g.arena_size);
            match &ok.tensors {
                None => {
                    assert_eq!(req.flags, 0, "{req:?}");
                    assert!(end(req.input_off, req.input_len).is_some(), "{req:?} {g:?}");
                    assert!(end(req.output_off, req.output_len).is_some(), "{req:?} {g:?}");
                    if m.io.is_untyped() {
                        assert_eq!(req.input_len, m.input_bytes, "{req:?}");
                        assert!(req.output_len >= m.output_bytes, "{req:?}");
                    }
                }
                Some(t) => {
                    assert!(t.batch >= 1 && t.batch <= m.io.max_batch, "{req:?}");
                    let specs = m.io.inputs.iter().chain(&m.io.outputs);
                    for (s, spec) in t.inputs.iter().chain(&t.outputs).zip(specs) {
                        assert!(end(s.off, s.len).is_some(), "{req:?} {s:?}");
                        assert_eq!(Some(s.len), spec.bytes(t.batch), "{req:?}");
                    }
                    for (i, a) in t.outputs.iter().enumerate() {
                        let others = t.outputs.iter().enumerate().filter(|&(j, _)| j != i);
                        for (_, b) in others.chain(t.inputs.iter().enumerate()) {
                            assert!(
                                a.len == 0 || b.len == 0 || a.off + a.len <= b.off
                                    || b.off + b.len <= a.off,
                                "{req:?}: {a:?} overlaps {b:?}"
                            );
                        }
                    }
                }
            }
        }
        Err(refusal) => {
            let code = refusal.status;
            assert_ne!(code, shm_proto::status::OK, "{req:?}");
            assert!(
                !shm_proto::status::describe(code).is_empty(),
                "status {code} has no description"
            );
        }
    }
});

/// An arena of `len` bytes: `prefix`, then zeros (so a 1 GiB arena costs
/// nothing).
struct Arena {
    prefix: Vec<u8>,
    len: u64,
}

impl sluice_backend::TensorMemory for Arena {
    fn len(&self) -> u64 {
        self.len
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> bool {
        if offset.checked_add(buf.len() as u64).is_none_or(|e| e > self.len) {
            return false;
        }
        for (k, b) in buf.iter_mut().enumerate() {
            *b = usize::try_from(offset + k as u64)
                .ok()
                .and_then(|i| self.prefix.get(i))
                .copied()
                .unwrap_or(0);
        }
        true
    }
    fn write(&self, _: u64, _: &[u8]) -> bool {
        false
    }
}
