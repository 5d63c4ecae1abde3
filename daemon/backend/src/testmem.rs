//! Client arenas for backend tests (feature `test-util`): the heap one
//! ([`VecMemory`], also outside tests) and one that always fails.

use shm_proto::Priority;

use crate::{Job, TensorMemory};

pub use crate::VecMemory;

/// An arena whose every access fails.
#[derive(Debug)]
pub struct BrokenMemory;

impl TensorMemory for BrokenMemory {
    fn len(&self) -> u64 {
        1 << 20
    }
    fn read(&self, _: u64, _: &mut [u8]) -> bool {
        false
    }
    fn write(&self, _: u64, _: &[u8]) -> bool {
        false
    }
}

/// A job of model `model` with its own heap arena: `input_bytes` of input
/// at offset 0, `output_bytes` of output right after it, no deadline.
pub fn job(
    client: u32,
    request_id: u64,
    model: u32,
    priority: Priority,
    (input_bytes, output_bytes): (u64, u64),
    received_ns: u64,
) -> Job {
    let memory = VecMemory::new((input_bytes + output_bytes) as usize);
    Job::untyped(
        client,
        request_id,
        model,
        priority,
        (input_bytes, output_bytes),
        memory,
        received_ns,
    )
}
