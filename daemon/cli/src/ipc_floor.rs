//! The floor of `sluice bench ipc`: a raw cross-process cache-line
//! ping-pong over a shared file, which the request path's spin round trip
//! is compared with in the same run. The server side is a thread of the
//! benchmark ([`crate::bench_ipc`]); the client side runs in a
//! `__bench-client --mode floor` process ([`crate::roles`]).

use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;
use sluice_client::now_ns;
use sluice_stats::histogram;

/// The floor's two cache lines in a shared file: `ping`, written by the
/// client, and `pong`, written by the server (each on its own 128-byte
/// pair of lines, as the rings' indices are).
#[repr(C)]
#[derive(Debug)]
pub struct FloorLines {
    pub(crate) ping: Line,
    pub(crate) pong: Line,
}

#[repr(C, align(128))]
#[derive(Debug)]
pub(crate) struct Line(pub(crate) AtomicU64);

/// The value of `ping` that tells the floor server to stop.
pub(crate) const FLOOR_STOP: u64 = u64::MAX;
/// Bytes of the floor's shared file.
const FLOOR_FILE: usize = 4096;

/// A `MAP_SHARED` mapping of the floor's file, unmapped on drop.
pub(crate) struct FloorMap {
    ptr: NonNull<u8>,
}

// SAFETY: the mapping is atomics only (`FloorLines`), shared by design.
unsafe impl Sync for FloorMap {}

impl FloorMap {
    /// Maps `path`, creating it (zeroed, [`FLOOR_FILE`] bytes) if `create`.
    pub(crate) fn map(path: &Path, create: bool) -> Result<Self, String> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(create)
            .open(path)
            .map_err(|e| format!("floor file {}: {e}", path.display()))?;
        if create {
            f.set_len(FLOOR_FILE as u64)
                .map_err(|e| format!("floor file {}: {e}", path.display()))?;
        } else if f.metadata().map(|m| m.len()).unwrap_or(0) < FLOOR_FILE as u64 {
            return Err(format!("floor file {} is too short", path.display()));
        }
        // SAFETY: a fresh shared mapping of a file of FLOOR_FILE bytes in
        // this benchmark's private temporary directory; only the benchmark
        // and its client open it, and neither shrinks it.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                FLOOR_FILE,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                &f,
                0,
            )
        }
        .map_err(|e| format!("mmap {}: {e}", path.display()))?;
        Ok(Self {
            ptr: NonNull::new(ptr.cast()).ok_or("mmap returned null")?,
        })
    }

    pub(crate) fn lines(&self) -> &FloorLines {
        const { assert!(size_of::<FloorLines>() <= FLOOR_FILE) };
        // SAFETY: the mapping is page aligned, FLOOR_FILE bytes long and
        // lives as long as `self`; `FloorLines` is atomics only, so the
        // other process writing it cannot make this reference unsound.
        unsafe { &*(self.ptr.as_ptr() as *const FloorLines) }
    }
}

impl Drop for FloorMap {
    fn drop(&mut self) {
        // SAFETY: exactly what mmap returned; no reference into it outlives
        // `self` (`lines` borrows `self`).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), FLOOR_FILE) };
    }
}

/// The client side of the floor (`sluice __bench-client --mode floor`):
/// `warmup + samples` round trips over the lines in the file at `path`,
/// timed as the `spin` client times a request; the histogram of the
/// `samples` timed ones, in ns.
pub fn round_trips(path: &Path, warmup: u64, samples: u64) -> Result<Histogram<u64>, String> {
    let m = FloorMap::map(path, false)?;
    let l = m.lines();
    let mut h = histogram();
    for i in 1..=warmup + samples {
        let t0 = now_ns();
        l.ping.0.store(i, Ordering::Release);
        let mut spins: u32 = 0;
        while l.pong.0.load(Ordering::Acquire) != i {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins % (1 << 20) == 0 && now_ns().saturating_sub(t0) > 10_000_000_000 {
                return Err("floor: no answer from the server thread in 10 s".into());
            }
        }
        let t1 = now_ns();
        if i > warmup {
            h.saturating_record(t1 - t0);
        }
    }
    l.ping.0.store(FLOOR_STOP, Ordering::Release);
    Ok(h)
}
