//! Registries of typed test models, for this crate's tests and (feature
//! `test-util`) the cross-process tests.

use sluice_model::{ElemType, ModelEntry, ModelIo, ModelRegistry, TensorSpec};

fn spec(name: &str, elem: ElemType, dims: &[u64], batched: bool) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        elem,
        dims: dims.to_vec(),
        batched,
    }
}

/// The built-in models plus `pair` (inputs `ids` i64[N,128] and `mask`
/// f32[16], outputs `logits` f32[N,10] and `pooled` f32[N,32], batch up to
/// 8) and `one` (input `x` f32[N,16], output `y` f32[N,4], batch up to 4),
/// both on `echo_small`'s manifest.
pub fn typed_registry() -> ModelRegistry {
    let builtin = ModelRegistry::builtin();
    let base = builtin
        .lookup("echo_small")
        .expect("echo_small is built in")
        .1
        .clone();
    let entry = |name: &str, io: ModelIo| {
        let mut manifest = base.manifest.clone();
        manifest.name = name.into();
        ModelEntry {
            file: format!("test:{name}"),
            manifest,
            memory: Vec::new(),
            io,
        }
    };
    let pair = ModelIo {
        inputs: vec![
            spec("ids", ElemType::I64, &[1, 128], true),
            spec("mask", ElemType::F32, &[16], false),
        ],
        outputs: vec![
            spec("logits", ElemType::F32, &[1, 10], true),
            spec("pooled", ElemType::F32, &[1, 32], true),
        ],
        max_batch: 8,
    };
    let one = ModelIo {
        inputs: vec![spec("x", ElemType::F32, &[1, 16], true)],
        outputs: vec![spec("y", ElemType::F32, &[1, 4], true)],
        max_batch: 4,
    };
    let all = builtin
        .iter()
        .map(|(_, m)| ModelEntry::from(m.clone()))
        .chain([entry("pair", pair), entry("one", one)]);
    ModelRegistry::from_entries(all).expect("the typed test registry is valid")
}
