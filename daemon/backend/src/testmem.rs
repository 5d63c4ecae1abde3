//! Client arenas for backend tests (feature `test-util`): one on the heap,
//! one that always fails.

use std::sync::{Arc, Mutex};

use shm_proto::Priority;

use crate::{Job, TensorMemory};

/// A heap-backed arena.
#[derive(Debug)]
pub struct VecMemory(Mutex<Vec<u8>>);

impl VecMemory {
    /// `len` zero bytes.
    pub fn new(len: usize) -> Arc<Self> {
        Arc::new(Self(Mutex::new(vec![0; len])))
    }

    /// A copy of bytes `off..off + len`.
    pub fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        self.0.lock().unwrap()[off..off + len].to_vec()
    }
}

impl TensorMemory for VecMemory {
    fn len(&self) -> u64 {
        self.0.lock().unwrap().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> bool {
        let mem = self.0.lock().unwrap();
        let Some(src) = usize::try_from(offset)
            .ok()
            .and_then(|o| mem.get(o..o.checked_add(buf.len())?))
        else {
            return false;
        };
        buf.copy_from_slice(src);
        true
    }
    fn write(&self, offset: u64, data: &[u8]) -> bool {
        let mut mem = self.0.lock().unwrap();
        let Some(dst) = usize::try_from(offset)
            .ok()
            .and_then(|o| mem.get_mut(o..o.checked_add(data.len())?))
        else {
            return false;
        };
        dst.copy_from_slice(data);
        true
    }
}

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
    Job {
        client,
        request_id,
        model,
        priority,
        deadline_ns: 0,
        input_off: 0,
        input_len: input_bytes,
        output_off: input_bytes,
        output_len: output_bytes,
        memory: VecMemory::new((input_bytes + output_bytes) as usize),
        received_ns,
        tensors: None,
    }
}
