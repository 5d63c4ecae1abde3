//! A mapped region, the ring ends made from it, and copies to and from it.
//!
//! [`Mapping`] is what a process's mapping of a region promises (the daemon's
//! `Region`, the client library's mapping). [`ClientRings::new`] and
//! [`DaemonRings::new`] take one **by value**, check it against the region's
//! geometry ([`crate::Geometry`]), and return the two ring ends that side
//! owns, each holding an `Arc` of the mapping: the mapping is unmapped when
//! the last end (or the last clone of [`ClientRings::mapping`]) drops, so no
//! struct field order and no drop order matters any more.
//!
//! Because the constructors consume the mapping, one mapping value makes one
//! set of ends (the `Arc` handed back can be cloned, but no ring end can be
//! made from it); [`Mapping`]'s contract rules out a second value making the
//! same ends, so there are no two producers of one ring in this process.
//!
//! ## The daemon
//!
//! `Region` implements [`Mapping`]; the region is turned into its ring ends
//! right after it is created, and the `Arc` the ends share is the region
//! everyone else (jobs reading the arena, the control thread sending the
//! memfd) clones:
//!
//! ```ignore
//! // daemon region.rs
//! // SAFETY: `ptr`/`len` are the region's own MAP_SHARED mapping of a memfd
//! // sealed against shrinking, made in `create` and unmapped only in `drop`;
//! // a `Region` is never duplicated, and its rings are made only through
//! // `DaemonRings::new`, which consumes it.
//! unsafe impl shm_proto::region::Mapping for Region {
//!     fn base(&self) -> *mut u8 { self.ptr.as_ptr() }
//!     fn len(&self) -> usize { self.len }
//! }
//!
//! // where the region is made (server.rs):
//! let rings = DaemonRings::new(Region::create(id, geometry)?, &geometry)?;
//! let region: Arc<Region> = rings.mapping().clone(); // fd(), close(), jobs
//!
//! // dispatch.rs: field order no longer matters.
//! struct Active {
//!     region: Arc<Region>,
//!     sq: Consumer<Request, Arc<Region>>,
//!     cq: Producer<Completion, Arc<Region>>,
//!     // ...
//! }
//! let DaemonRings { sq, cq } = rings;
//! ```
//!
//! ## The client
//!
//! The same with [`ClientRings::new`], which is what `sluice-client` does.
//!
//! ## Copies to and from the arena
//!
//! [`copy_from_shared`] and [`copy_to_shared`] move bytes between a
//! region and private memory. They state, once, the race sluice accepts:
//! the peer may write the same bytes while we copy them.

#[cfg(feature = "alloc")]
use alloc::sync::Arc;

use crate::layout::LayoutError;
#[cfg(feature = "alloc")]
use crate::layout::{Completion, Geometry, Request, RingHeader, Slot};
#[cfg(feature = "alloc")]
use crate::ring::{Consumer, Producer};

/// A live, process-private mapping of a region, which ring ends can own.
///
/// # Safety
///
/// An implementation promises, for every value:
/// - **stable**: [`Mapping::base`] and [`Mapping::len`] return the same
///   values on every call, for the value's whole life;
/// - **live**: `[base, base + len)` is mapped readable and writable from
///   the value's creation until its `Drop` runs, and no access to it
///   faults: for a file mapping, the file cannot shrink (a memfd sealed
///   with `F_SEAL_SHRINK`), so a peer cannot truncate it under us;
/// - **one value per role**: no other value in this process (another
///   `Mapping` of the same memory, or `from_raw` ring ends) is used to make
///   the *same* end of the same ring while ring ends made from this value
///   live. (A daemon and a client in one process, each with its own mapping
///   of one memfd, make opposite ends: that is fine.)
///
/// `Send + Sync`: ring ends holding an `Arc` of it move between threads.
/// The memory itself is shared with another process and only ever accessed
/// through atomics and by-value copies, never through a `&T` to plain data.
pub unsafe trait Mapping: Send + Sync {
    /// The first mapped byte (the region header).
    fn base(&self) -> *mut u8;
    /// Mapped bytes.
    fn len(&self) -> usize;
    /// Whether nothing is mapped (never, for a region).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why ring ends could not be made from a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapError {
    /// The geometry itself is invalid.
    Geometry(LayoutError),
    /// The mapping is shorter than the geometry's region.
    TooSmall {
        /// Bytes mapped.
        len: usize,
        /// [`crate::Geometry::region_size`].
        need: u64,
    },
    /// The mapping does not start on a 128-byte boundary (the alignment of
    /// [`crate::RegionHeader`] and [`crate::RingHeader`]).
    Misaligned {
        /// The mapping's address.
        base: usize,
    },
}

impl core::fmt::Display for MapError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Geometry(e) => write!(f, "invalid region geometry: {e}"),
            Self::TooSmall { len, need } => write!(
                f,
                "mapping has {len} bytes but the geometry needs {need}; map the whole region"
            ),
            Self::Misaligned { base } => write!(
                f,
                "mapping at {base:#x} is not 128-byte aligned; map the region at a page boundary"
            ),
        }
    }
}

/// The client's ends of a region's rings: it produces requests and
/// consumes completions. Each end owns a share of the mapping.
#[cfg(feature = "alloc")]
#[derive(Debug)]
pub struct ClientRings<M: Mapping> {
    /// Submission ring, producing end.
    pub sq: Producer<Request, Arc<M>>,
    /// Completion ring, consuming end.
    pub cq: Consumer<Completion, Arc<M>>,
}

/// The daemon's ends of a region's rings: it consumes requests and
/// produces completions. Each end owns a share of the mapping.
#[cfg(feature = "alloc")]
#[derive(Debug)]
pub struct DaemonRings<M: Mapping> {
    /// Submission ring, consuming end.
    pub sq: Consumer<Request, Arc<M>>,
    /// Completion ring, producing end.
    pub cq: Producer<Completion, Arc<M>>,
}

/// What [`ClientRings::new`] and [`DaemonRings::new`] share: checks `map`
/// against `geometry`, moves it into an `Arc` and makes one end of each ring
/// over it, with `sq` and `cq` each one of `Producer::with_owner` and
/// `Consumer::with_owner` (the only functions the two callers pass).
#[cfg(feature = "alloc")]
fn ends<M: Mapping, S, C>(
    map: M,
    geometry: &Geometry,
    sq: unsafe fn(Arc<M>, *const RingHeader, *const Slot<Request>, u32) -> S,
    cq: unsafe fn(Arc<M>, *const RingHeader, *const Slot<Completion>, u32) -> C,
) -> Result<(S, C), MapError> {
    geometry.validate().map_err(MapError::Geometry)?;
    let base = map.base() as usize;
    if base % core::mem::align_of::<crate::RegionHeader>() != 0 {
        return Err(MapError::Misaligned { base });
    }
    let need = geometry.region_size();
    if (map.len() as u64) < need {
        return Err(MapError::TooSmall {
            len: map.len(),
            need,
        });
    }
    let map = Arc::new(map);
    let r = geometry.ring_ptrs(map.base());
    // SAFETY: `sq` and `cq` are ring-end `with_owner`s. The geometry is
    // valid (so both capacities are powers of two) and its region fits the
    // 128-aligned mapping (checked above), so both ring headers and their
    // slots lie inside it, aligned; each end holds an `Arc` of the mapping,
    // which `Mapping`'s contract keeps mapped until it drops. `map` was
    // consumed, and `Mapping`'s contract rules out another value making the
    // same ends, so these are this process's only ends of their role.
    unsafe {
        Ok((
            sq(map.clone(), r.sq_header, r.sq_slots, geometry.sq_entries),
            cq(map, r.cq_header, r.cq_slots, geometry.cq_entries),
        ))
    }
}

#[cfg(feature = "alloc")]
impl<M: Mapping> ClientRings<M> {
    /// Takes the mapping of a region laid out by `geometry` and makes the
    /// client's two ring ends over it. The local counters start from the
    /// shared ones. Fails if the geometry is invalid or does not fit the
    /// mapping.
    pub fn new(map: M, geometry: &Geometry) -> Result<Self, MapError> {
        let (sq, cq) = ends(map, geometry, Producer::with_owner, Consumer::with_owner)?;
        Ok(Self { sq, cq })
    }

    /// The mapping both ends share; clone it to keep the region for other
    /// uses (arena copies, the header).
    pub fn mapping(&self) -> &Arc<M> {
        self.sq.owner()
    }
}

#[cfg(feature = "alloc")]
impl<M: Mapping> DaemonRings<M> {
    /// Takes the mapping of a region laid out by `geometry` and makes the
    /// daemon's two ring ends over it. As [`ClientRings::new`], for the
    /// other two ends.
    pub fn new(map: M, geometry: &Geometry) -> Result<Self, MapError> {
        let (sq, cq) = ends(map, geometry, Consumer::with_owner, Producer::with_owner)?;
        Ok(Self { sq, cq })
    }

    /// The mapping both ends share; clone it to keep the region for other
    /// uses (jobs reading the arena, closing the region).
    pub fn mapping(&self) -> &Arc<M> {
        self.sq.owner()
    }
}

/// Copies `dst.len()` bytes of shared memory starting at `src` into private
/// memory.
///
/// The accepted race: the peer process may write those bytes while we copy
/// them. We copy with one `memcpy` into memory only this process owns,
/// never form a `&[u8]` or `&T` into the shared bytes, and read nothing
/// twice from shared memory afterwards (every later check is on the private
/// copy), so a concurrent write can at worst leave `dst` with a torn mix of
/// old and new bytes. Every bit pattern is a valid `u8`, so that is still
/// well-defined data; what it means is the peer's own problem (a client
/// that rewrites its input while the request runs gets a garbled result for
/// that request only). This is the stance of io_uring's and iceoryx2's
/// shared buffers: shared memory is an I/O device, not Rust memory.
///
/// # Safety
/// `src .. src + dst.len()` lies inside a live mapping (e.g. inside a
/// [`Mapping`]'s `[base, base + len)`, with the mapping kept alive for the
/// call), and does not overlap `dst`.
#[inline]
pub unsafe fn copy_from_shared(src: *const u8, dst: &mut [u8]) {
    // SAFETY: `src` is readable for `dst.len()` bytes and disjoint from
    // `dst` (caller's contract). Accepted race, see above: the peer may
    // write the source concurrently; we copy bytes (every pattern valid)
    // into private memory and keep no reference into the shared span.
    unsafe { core::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) }
}

/// Copies `src` from private memory into shared memory starting at `dst`.
///
/// The accepted race: the peer may read or write those bytes while we copy.
/// A concurrent reader may see a torn mix; a concurrent writer may
/// overwrite what we wrote. Either way it only garbles data the peer itself
/// looks at; we never read the bytes back, form no reference into them, and
/// `src` is private, so nothing of ours is affected.
///
/// # Safety
/// `dst .. dst + src.len()` lies inside a live, writable mapping (e.g.
/// inside a [`Mapping`]'s range, kept alive for the call), and does not
/// overlap `src`.
#[inline]
pub unsafe fn copy_to_shared(src: &[u8], dst: *mut u8) {
    // SAFETY: `dst` is writable for `src.len()` bytes and disjoint from
    // `src` (caller's contract). Accepted race, see above.
    unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
}

#[cfg(all(test, not(loom), feature = "alloc"))]
mod tests {
    use super::*;
    use crate::ring::PushError;
    use std::alloc::{Layout, alloc_zeroed, dealloc};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A zeroed, page-aligned heap buffer standing in for a memfd mapping.
    #[derive(Debug)]
    struct HeapRegion {
        ptr: *mut u8,
        layout: Layout,
        drops: Option<Arc<AtomicUsize>>,
    }

    impl HeapRegion {
        fn new(len: usize) -> Self {
            let layout = Layout::from_size_align(len, 4096).unwrap();
            // SAFETY: `len` is non-zero in every test.
            let ptr = unsafe { alloc_zeroed(layout) };
            assert!(!ptr.is_null());
            Self {
                ptr,
                layout,
                drops: None,
            }
        }
    }

    impl Drop for HeapRegion {
        fn drop(&mut self) {
            if let Some(d) = &self.drops {
                d.fetch_add(1, Ordering::SeqCst);
            }
            // SAFETY: allocated in `new` with this layout.
            unsafe { dealloc(self.ptr, self.layout) }
        }
    }

    // SAFETY: the buffer is only accessed through ring ends and copies.
    unsafe impl Send for HeapRegion {}
    // SAFETY: as above.
    unsafe impl Sync for HeapRegion {}

    // SAFETY: stable pointer and length; the allocation lives until drop;
    // each test makes each end at most once (`Alias` below makes only the
    // opposite ends).
    unsafe impl Mapping for HeapRegion {
        fn base(&self) -> *mut u8 {
            self.ptr
        }
        fn len(&self) -> usize {
            self.layout.size()
        }
    }

    /// The "other process's" mapping of the same memory: it keeps the
    /// buffer alive and is used only for the opposite ring ends.
    #[derive(Debug)]
    struct Alias(Arc<HeapRegion>);

    // SAFETY: forwards a live `Mapping`; used only for the opposite ends.
    unsafe impl Mapping for Alias {
        fn base(&self) -> *mut u8 {
            self.0.base()
        }
        fn len(&self) -> usize {
            self.0.len()
        }
    }

    fn geometry() -> Geometry {
        Geometry {
            sq_entries: 4,
            cq_entries: 8,
            arena_size: 4096,
        }
    }

    #[test]
    fn client_and_daemon_ends_talk() {
        let g = geometry();
        let daemon = DaemonRings::new(HeapRegion::new(g.region_size() as usize), &g).unwrap();
        let mut client = ClientRings::new(Alias(daemon.mapping().clone()), &g).unwrap();
        let DaemonRings { mut sq, mut cq } = daemon;
        assert_eq!(client.sq.capacity(), 4);
        assert_eq!(client.cq.capacity(), 8);
        for id in 0..4 {
            client
                .sq
                .push(Request {
                    request_id: id,
                    ..Request::default()
                })
                .unwrap();
        }
        assert_eq!(
            client.sq.push(Request::default()),
            Err(PushError::Full),
            "the SQ holds sq_entries requests"
        );
        for id in 0..4 {
            let r = sq.pop().unwrap().unwrap();
            assert_eq!(r.request_id, id);
            cq.push(Completion {
                request_id: id,
                status: crate::status::OK,
                ..Completion::default()
            })
            .unwrap();
        }
        for id in 0..4 {
            assert_eq!(client.cq.pop().unwrap().unwrap().request_id, id);
        }
        assert_eq!(client.cq.pop().unwrap(), None);
    }

    #[test]
    fn ends_keep_the_mapping_alive_in_any_drop_order() {
        let g = geometry();
        let drops = Arc::new(AtomicUsize::new(0));
        let mut region = HeapRegion::new(g.region_size() as usize);
        region.drops = Some(drops.clone());
        let DaemonRings { mut sq, mut cq } = DaemonRings::new(region, &g).unwrap();
        let extra = sq.owner().clone();
        drop(extra);
        // The consumer end outlives everything else and still works.
        cq.push(Completion::default()).unwrap();
        drop(cq);
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        assert_eq!(sq.pop().unwrap(), None);
        drop(sq);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "unmapped with the last end"
        );
    }

    #[test]
    fn mapping_is_checked_against_the_geometry() {
        let g = geometry();
        let short = HeapRegion::new(g.region_size() as usize - 1);
        assert_eq!(
            ClientRings::new(short, &g).unwrap_err(),
            MapError::TooSmall {
                len: g.region_size() as usize - 1,
                need: g.region_size()
            }
        );
        let bad = Geometry { sq_entries: 3, ..g };
        let e = DaemonRings::new(HeapRegion::new(g.region_size() as usize), &bad).unwrap_err();
        assert!(matches!(
            e,
            MapError::Geometry(LayoutError::BadEntries { value: 3, .. })
        ));
        assert!(std::format!("{e}").contains("sq_entries = 3"));

        /// Points one byte into a buffer: not 128-aligned.
        #[derive(Debug)]
        struct Offset(HeapRegion);
        // SAFETY: stable, inside a live allocation (one byte shorter).
        unsafe impl Mapping for Offset {
            fn base(&self) -> *mut u8 {
                self.0.base().wrapping_add(1)
            }
            fn len(&self) -> usize {
                self.0.len() - 1
            }
        }
        let off = Offset(HeapRegion::new(g.region_size() as usize + 4096));
        let base = off.base() as usize;
        assert_eq!(
            ClientRings::new(off, &g).unwrap_err(),
            MapError::Misaligned { base }
        );
    }

    #[test]
    fn ring_ends_move_between_threads() {
        let g = geometry();
        let ClientRings { sq, cq: _cq } =
            ClientRings::new(HeapRegion::new(g.region_size() as usize), &g).unwrap();
        let t = std::thread::spawn(move || {
            let mut sq = sq;
            sq.push(Request::default()).unwrap();
            sq.len().unwrap()
        });
        assert_eq!(t.join().unwrap(), 1);
    }

    #[test]
    fn shared_copies_round_trip() {
        let r = HeapRegion::new(4096);
        // SAFETY: 5 bytes at offset 100 of a live 4096-byte buffer, disjoint
        // from the private slices.
        unsafe {
            copy_to_shared(b"hello", r.base().add(100));
            let mut out = [0u8; 5];
            copy_from_shared(r.base().add(100), &mut out);
            assert_eq!(&out, b"hello");
            // Zero-length copies at the very end are fine.
            copy_from_shared(r.base().add(4096), &mut []);
        }
    }
}
