//! A client's shared-memory region, daemon side.
//!
//! Created as a memfd, sized, then sealed against shrinking and growing
//! (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`) before the client ever
//! sees it, so no client can make the daemon's mapping fault. The daemon
//! keeps its own [`Geometry`]; it reads nothing back from the header but the
//! magic word (to notice a client that scribbled on it).

use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};
use shm_proto::Geometry;
use shm_proto::layout::{RegionHeader, STATE_CLOSED, STATE_SERVING};
use shm_proto::region::{Mapping, copy_from_shared, copy_to_shared};

use sluice_backend::TensorMemory;

/// Why a region could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// The geometry from the config is invalid (config validation missed it).
    #[error("invalid region geometry: {0}")]
    Geometry(shm_proto::LayoutError),
    /// A syscall failed.
    #[error("cannot create the shared region ({what}); check RLIMIT_NOFILE and free memory")]
    Os {
        /// The step that failed.
        what: &'static str,
        /// The OS error.
        #[source]
        source: rustix::io::Errno,
    },
}

fn os(what: &'static str) -> impl FnOnce(rustix::io::Errno) -> RegionError {
    move |source| RegionError::Os { what, source }
}

/// One client's sealed, mapped region.
#[derive(Debug)]
pub struct Region {
    fd: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
    geometry: Geometry,
}

// SAFETY: the mapping is shared memory that is only ever accessed through
// atomics and raw, bounds-checked byte copies; no `&T` to plain data in it
// is ever formed, so sharing the pointer across threads is sound.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// Creates, sizes, seals and maps a region, and writes its header.
    pub fn create(client_id: u32, geometry: Geometry) -> Result<Self, RegionError> {
        geometry.validate().map_err(RegionError::Geometry)?;
        let fd = rustix::fs::memfd_create(
            format!("sluice-client-{client_id}"),
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(os("memfd_create"))?;
        let len = geometry.region_size();
        rustix::fs::ftruncate(&fd, len).map_err(os("ftruncate"))?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
            .map_err(os("fcntl(F_ADD_SEALS)"))?;
        let len = len as usize;
        // SAFETY: a fresh shared mapping of a memfd we just sized and sealed
        // against shrinking, so every mapped byte stays backed.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &fd,
                0,
            )
        }
        .map_err(os("mmap"))?;
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or(RegionError::Os {
            what: "mmap",
            source: rustix::io::Errno::NOMEM,
        })?;
        let region = Self {
            fd,
            ptr,
            len,
            geometry,
        };
        let h = region.header();
        let g = geometry;
        h.version
            .store(shm_proto::PROTOCOL_VERSION, Ordering::Relaxed);
        h.header_size
            .store(size_of::<RegionHeader>() as u32, Ordering::Relaxed);
        h.layout_hash
            .store(shm_proto::LAYOUT_HASH, Ordering::Relaxed);
        h.region_size.store(g.region_size(), Ordering::Relaxed);
        h.sq_offset.store(g.sq_offset(), Ordering::Relaxed);
        h.cq_offset.store(g.cq_offset(), Ordering::Relaxed);
        h.arena_offset.store(g.arena_offset(), Ordering::Relaxed);
        h.arena_size.store(g.arena_size, Ordering::Relaxed);
        h.sq_entries.store(g.sq_entries, Ordering::Relaxed);
        h.cq_entries.store(g.cq_entries, Ordering::Relaxed);
        h.client_id.store(client_id, Ordering::Relaxed);
        h.daemon_state.store(STATE_SERVING, Ordering::Relaxed);
        // SYNC: Release pairs with the client's Acquire load of `magic` in
        // `Client::connect` (after it maps the region): all fields above
        // are visible once the magic is.
        h.magic.store(shm_proto::MAGIC, Ordering::Release);
        Ok(region)
    }

    /// The memfd, to pass to the client.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The region's geometry (the daemon's copy, never read back).
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never, for a valid geometry).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn header(&self) -> &RegionHeader {
        // SAFETY: offset 0 of a page-aligned mapping longer than the header;
        // the header is made of atomics only, so a client writing it
        // concurrently cannot make this reference unsound.
        unsafe { &*(self.ptr.as_ptr() as *const RegionHeader) }
    }

    /// Whether the client has overwritten the header's magic word.
    pub fn magic_intact(&self) -> bool {
        self.header().magic.load(Ordering::Relaxed) == shm_proto::MAGIC
    }

    /// Marks the region closed and wakes a client sleeping on its
    /// completion ring, so it sees `Disconnected` at once.
    pub fn close(&self) {
        self.header()
            .daemon_state
            .store(STATE_CLOSED, Ordering::Release);
        let r = self.geometry.ring_ptrs(self.ptr.as_ptr());
        // SAFETY: the CQ header is inside the mapping (validated geometry)
        // and 128-aligned; `RingHeader` is made of atomics only.
        let cq = unsafe { &*r.cq_header };
        shm_proto::futex::wake_all(&cq.parked);
    }

    fn arena(&self) -> *mut u8 {
        // SAFETY: arena_offset < len for a validated geometry.
        unsafe { self.ptr.as_ptr().add(self.geometry.arena_offset() as usize) }
    }
}

impl TensorMemory for Region {
    fn len(&self) -> u64 {
        self.geometry.arena_size
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> bool {
        if !self.geometry.span_in_arena(offset, buf.len() as u64) {
            return false;
        }
        // SAFETY: the span lies inside the arena (checked above), which is
        // inside our live mapping. The accepted race (see
        // `shm_proto::region::copy_from_shared`): the client may write these
        // bytes while we copy them; we copy them by value into private
        // memory and never form a reference into client memory, so a torn
        // copy only garbles that client's own input.
        unsafe { copy_from_shared(self.arena().add(offset as usize), buf) };
        true
    }

    fn write(&self, offset: u64, data: &[u8]) -> bool {
        if !self.geometry.span_in_arena(offset, data.len() as u64) {
            return false;
        }
        // SAFETY: the span lies inside the arena (checked above). The
        // accepted race (`shm_proto::region::copy_to_shared`): the client
        // may read or write these bytes while we write them; it sees its
        // own output torn, and nothing of the daemon's depends on them.
        unsafe { copy_to_shared(data, self.arena().add(offset as usize)) };
        true
    }
}

// SAFETY: `ptr`/`len` are the region's own MAP_SHARED mapping of a memfd
// sealed against shrinking and growing, made in `create` and unmapped only
// in `drop`, so they are stable and every byte stays mapped (no fault); a
// `Region` is never duplicated, and the daemon makes its ring ends only
// through `DaemonRings::new`, which consumes the region (one consumer of
// the SQ, one producer of the CQ).
unsafe impl Mapping for Region {
    fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `create`; ring ends and
        // arena users (jobs) hold an `Arc<Region>`, so none is left.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry() -> Geometry {
        Geometry {
            sq_entries: 8,
            cq_entries: 8,
            arena_size: 8192,
        }
    }

    #[test]
    fn region_is_sealed_against_resizing() {
        let r = Region::create(1, geometry()).unwrap();
        let len = r.len() as u64;
        assert_eq!(
            rustix::fs::ftruncate(r.fd(), len / 2),
            Err(rustix::io::Errno::PERM)
        );
        assert_eq!(
            rustix::fs::ftruncate(r.fd(), len * 2),
            Err(rustix::io::Errno::PERM)
        );
        let seals = rustix::fs::fcntl_get_seals(r.fd()).unwrap();
        assert!(seals.contains(SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL));
    }

    #[test]
    fn arena_io_is_bounds_checked() {
        let r = Region::create(1, geometry()).unwrap();
        assert!(r.write(8190, b"ab"));
        let mut b = [0u8; 2];
        assert!(r.read(8190, &mut b));
        assert_eq!(&b, b"ab");
        assert!(!r.write(8191, b"ab"));
        assert!(!r.read(u64::MAX, &mut b));
    }

    #[test]
    fn header_is_filled_and_magic_checked() {
        let r = Region::create(7, geometry()).unwrap();
        assert!(r.magic_intact());
        r.header().magic.store(0xdead, Ordering::Relaxed);
        assert!(!r.magic_intact());
        assert_eq!(r.header().client_id.load(Ordering::Relaxed), 7);
    }
}
