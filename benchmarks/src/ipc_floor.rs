//! The floor of `sluice bench ipc`: a raw cross-process cache-line
//! ping-pong over a shared file, which the request path's spin round trip
//! is compared with in the same run. The server side is a thread of the
//! benchmark ([`crate::ipc`]); the client side runs in a
//! `__bench-client --mode floor` (or `floor-pair`) process
//! ([`crate::roles`]).
//!
//! Two floors, one line each way per round trip in both:
//! - [`FloorKind::Ring`], the one `spin` is judged against: round trip `i`
//!   uses line `i % 256` of each side, as the rings use their 256 slots;
//! - [`FloorKind::Pair`]: the same two lines every time.
//!
//! Why the ring: on a mesh CPU a line's cross-core cost depends on its
//! address (which cache slice is its home), so one fixed pair measures one
//! draw of that lottery. On the development VM the pair floor's median
//! ranged 240–353 ns between runs minutes apart while the ring floor and
//! `spin` each stayed within ±3 % (docs/performance.md). The ring averages
//! over as many lines as the request path itself touches.

use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hdrhistogram::Histogram;
use sluice_client::now_ns;
use sluice_stats::histogram;

/// How many lines each side of the ring floor rotates through: as many
/// as a ring has slots by default (`clients.sq_entries`, `cq_entries`).
pub const RING_LINES: u64 = 256;

/// The floor's lines in a shared file: `ping` lines, written by the
/// client, from offset 0; `pong` lines, written by the server, from
/// [`PONG_OFFSET`]; one 64-byte line each, like a ring slot. The pair floor
/// uses line 0 of each; the ring floor uses line `i % RING_LINES` of each
/// for round trip `i`, as a ring uses its slots.
const LINE: usize = 64;
/// Where the `pong` lines start (the `ping` lines take 16 KiB).
const PONG_OFFSET: usize = 32 * 1024;
/// Bytes of the floor's shared file.
const FLOOR_FILE: usize = 2 * PONG_OFFSET;
const _: () = assert!(RING_LINES as usize * LINE <= PONG_OFFSET);

/// The value of a `ping` line that tells the floor server to stop.
pub(crate) const FLOOR_STOP: u64 = u64::MAX;

/// Which floor: one fixed pair of lines, or lines rotating as a ring's
/// slots do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorKind {
    /// Round trip `i` uses line 0 of each side.
    Pair,
    /// Round trip `i` uses line `i % RING_LINES` of each side.
    Ring,
}

impl FloorKind {
    fn lines(self) -> u64 {
        match self {
            Self::Pair => 1,
            Self::Ring => RING_LINES,
        }
    }
}

/// A `MAP_SHARED` mapping of the floor's file, unmapped on drop.
pub(crate) struct FloorMap {
    ptr: NonNull<u8>,
    lines: u64,
}

// SAFETY: the mapping is read and written through atomics only
// (`FloorMap::line`), shared by design.
unsafe impl Sync for FloorMap {}

impl FloorMap {
    /// Maps `path`, creating it (zeroed, [`FLOOR_FILE`] bytes) if `create`.
    pub(crate) fn map(path: &Path, create: bool, kind: FloorKind) -> Result<Self, String> {
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
            lines: kind.lines(),
        })
    }

    /// The `ping` line (client to server) or the `pong` line (back) of
    /// round trip `i`.
    #[inline(always)]
    fn line(&self, pong: bool, i: u64) -> &AtomicU64 {
        let base = if pong { PONG_OFFSET } else { 0 };
        let off = base + (i % self.lines) as usize * LINE;
        // SAFETY: `off + 8 <= FLOOR_FILE` (the const assertion above), the
        // mapping is page aligned and lives as long as `self`, and `off` is
        // a multiple of 64; the other process writes these words only
        // through atomics, so the reference stays sound.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU64) }
    }

    /// The server side: answers round trips `1, 2, ...` until the client
    /// sends [`FLOOR_STOP`] or `stop` is set. Spins with the pause hint.
    pub(crate) fn serve(&self, stop: &AtomicBool) {
        let mut k = 1u64;
        loop {
            let v = self.line(false, k).load(Ordering::Acquire);
            if v == k {
                self.line(true, k).store(k, Ordering::Release);
                k += 1;
            } else if v == FLOOR_STOP || stop.load(Ordering::Relaxed) {
                break;
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

impl Drop for FloorMap {
    fn drop(&mut self) {
        // SAFETY: exactly what mmap returned; no reference into it outlives
        // `self` (`line` borrows `self`).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), FLOOR_FILE) };
    }
}

/// The client side of the floor (`sluice __bench-client --mode floor`):
/// `warmup + samples` round trips over the lines in the file at `path`,
/// timed as the `spin` client times a request; the histogram of the
/// `samples` timed ones, in ns.
pub fn round_trips(
    path: &Path,
    kind: FloorKind,
    warmup: u64,
    samples: u64,
) -> Result<Histogram<u64>, String> {
    let m = FloorMap::map(path, false, kind)?;
    let mut h = histogram();
    for i in 1..=warmup + samples {
        let t0 = now_ns();
        m.line(false, i).store(i, Ordering::Release);
        let pong = m.line(true, i);
        let mut spins: u32 = 0;
        while pong.load(Ordering::Acquire) != i {
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
    m.line(false, warmup + samples + 1)
        .store(FLOOR_STOP, Ordering::Release);
    Ok(h)
}
