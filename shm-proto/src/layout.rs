//! `#[repr(C)]` records shared between the daemon and a client.
//!
//! Every record has compile-time `size_of` / `align_of` / `offset_of!`
//! asserts; [`LAYOUT_HASH`] is folded from those same numbers, so a peer
//! built with a different layout is refused at the handshake even if it
//! claims the same [`PROTOCOL_VERSION`].
//!
//! The region header is written once by the daemon when it creates the
//! region. A client could overwrite it, so the daemon never reads geometry
//! back from it: it keeps its own [`Geometry`] and only re-reads
//! [`RegionHeader::magic`] to notice a client that scribbled on its header.

use core::mem::{align_of, offset_of, size_of};

use crossbeam_utils::CachePadded;

#[cfg(loom)]
use crate::sync::UnsafeCell;
use crate::sync::{AtomicU32, AtomicU64};

/// `b"SLUICE\0\x01"` read as a little-endian `u64`.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SLUICE\0\x01");

/// Bumped on any incompatible change to the region or the control messages.
///
/// 2: ring slots carry their own ready stamp ([`Request::seq`],
/// [`Completion::seq`]; see [`crate::ring`]), so a record crosses in one
/// cache line; `Request::reserved` became `seq`.
///
/// 3: typed tensors. `Request::flags` shrank to 16 bits beside a 16-bit
/// [`Request::batch`]; [`crate::tensor::FLAG_TENSOR_TABLE`] makes
/// `input_off`/`input_len` locate a table of per-tensor spans; a refusal
/// carries its detail in [`Completion::detail`]; the control path's
/// `ModelInfo` lists every input and output (name, element type, batched
/// flag, dims) and the model's largest batch.
pub const PROTOCOL_VERSION: u32 = 3;

/// Page size the region's arena is aligned to.
pub const PAGE: u64 = 4096;

/// Smallest and largest ring capacity.
pub const MIN_ENTRIES: u32 = 2;
/// Largest ring capacity (entries).
pub const MAX_ENTRIES: u32 = 1 << 16;
/// Largest arena (1 GiB).
pub const MAX_ARENA: u64 = 1 << 30;

/// [`RegionHeader::daemon_state`]: the daemon is serving this client.
pub const STATE_SERVING: u32 = 1;
/// [`RegionHeader::daemon_state`]: the daemon has dropped this client or is
/// shutting down; no more completions will come.
pub const STATE_CLOSED: u32 = 2;

/// The first 256 bytes of every region.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct RegionHeader {
    /// [`MAGIC`].
    pub magic: AtomicU64,
    /// [`PROTOCOL_VERSION`].
    pub version: AtomicU32,
    /// `size_of::<RegionHeader>()`.
    pub header_size: AtomicU32,
    /// [`LAYOUT_HASH`].
    pub layout_hash: AtomicU64,
    /// Total bytes mapped.
    pub region_size: AtomicU64,
    /// Offset of the submission ring's [`RingHeader`].
    pub sq_offset: AtomicU64,
    /// Offset of the completion ring's [`RingHeader`].
    pub cq_offset: AtomicU64,
    /// Offset of the data arena (page aligned).
    pub arena_offset: AtomicU64,
    /// Bytes in the arena.
    pub arena_size: AtomicU64,
    /// Submission ring capacity (power of two).
    pub sq_entries: AtomicU32,
    /// Completion ring capacity (power of two).
    pub cq_entries: AtomicU32,
    /// Daemon-assigned client number.
    pub client_id: AtomicU32,
    /// [`STATE_SERVING`] or [`STATE_CLOSED`]; written by the daemon only.
    pub daemon_state: AtomicU32,
    /// Zero; room for later fields.
    pub reserved: [AtomicU64; 22],
}

/// One entry of the submission ring (client → daemon), 64 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Request {
    /// Chosen by the client; echoed in the completion.
    pub request_id: u64,
    /// Model id from the daemon's registry (look it up by name).
    pub model_id: u32,
    /// 0 = real-time, 1 = best-effort ([`crate::Priority`]).
    pub priority: u32,
    /// Absolute `CLOCK_MONOTONIC` deadline in ns; 0 = none.
    pub deadline_ns: u64,
    /// Untyped request: the input tensor's byte offset in the arena. With
    /// [`crate::tensor::FLAG_TENSOR_TABLE`]: the tensor table's offset.
    pub input_off: u64,
    /// Untyped request: the input's length in bytes. With
    /// [`crate::tensor::FLAG_TENSOR_TABLE`]: the table's length, 16 bytes
    /// per input and output of the model.
    pub input_len: u64,
    /// Untyped request: the output tensor's byte offset in the arena; 0
    /// with [`crate::tensor::FLAG_TENSOR_TABLE`].
    pub output_off: u64,
    /// Untyped request: room for the output in bytes; 0 with
    /// [`crate::tensor::FLAG_TENSOR_TABLE`].
    pub output_len: u64,
    /// [`crate::tensor::FLAG_TENSOR_TABLE`] or 0; any other bit is refused
    /// with `BAD_FLAGS`.
    pub flags: u16,
    /// Batch size: 1 up to the model's `max_batch` with
    /// [`crate::tensor::FLAG_TENSOR_TABLE`]; 0 or 1 (both batch 1) without.
    pub batch: u16,
    /// The ring's ready stamp ([`crate::ring`]): written by
    /// [`crate::ring::Producer::push`] whatever the record carries, and 0
    /// in a record [`crate::ring::Consumer::pop`] returns.
    pub seq: u32,
}

/// One entry of the completion ring (daemon → client), 64 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Completion {
    /// The request's id.
    pub request_id: u64,
    /// A [`crate::status`] code.
    pub status: u32,
    /// The ring's ready stamp, as [`Request::seq`].
    pub seq: u32,
    /// Output bytes written (0 on error).
    pub output_len: u64,
    /// When the daemon took the request off the ring (`CLOCK_MONOTONIC` ns).
    pub received_ns: u64,
    /// When the device started it.
    pub started_ns: u64,
    /// When the device finished it.
    pub finished_ns: u64,
    /// Zero, except in a refusal that names a tensor or a value: see
    /// [`crate::tensor::Detail`] (what each status puts there).
    pub detail: [u64; 2],
}

/// Control words of one single-producer/single-consumer ring; the slots
/// follow it directly. Each word has its own 128-byte line so the producer
/// and the consumer never false-share.
#[repr(C)]
#[derive(Debug, Default)]
pub struct RingHeader {
    /// Number of entries ever published (free-running, wraps at 2³²).
    /// Written by the producer only, before each record's ready stamp; the
    /// consumer does not poll it (it polls the slot's stamp) and reads it
    /// only to check the producer's sanity before it parks.
    pub tail: CachePadded<AtomicU32>,
    /// Number of entries ever consumed (free-running). Written by the
    /// consumer only, in batches (see [`crate::ring`]).
    pub head: CachePadded<AtomicU32>,
    /// The consumer's wake word: bit 0 set while it is parked (or about to
    /// park), bits 1–31 count producer notifications. See [`crate::wake`].
    pub parked: CachePadded<AtomicU32>,
}

/// Bytes of a ring record, and of a slot: one cache line.
pub const RECORD_BYTES: usize = 64;
/// 64-bit words in a record.
pub const RECORD_WORDS: usize = RECORD_BYTES / 8;

/// A ring record: [`Pod`](crate::Pod), 64 bytes, with a 32-bit `seq` field
/// that the ring owns (its ready stamp).
///
/// Sealed: implemented for [`Request`] and [`Completion`] only.
pub trait Record: crate::Pod + sealed::Sealed {
    /// Byte offset of the `seq` field; it lies in the 64-bit word
    /// `SEQ_OFFSET / 8`.
    const SEQ_OFFSET: usize;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Request {}
    impl Sealed for super::Completion {}
}

impl Record for Request {
    const SEQ_OFFSET: usize = offset_of!(Request, seq);
}
impl Record for Completion {
    const SEQ_OFFSET: usize = offset_of!(Completion, seq);
}

/// A ring slot: one 64-byte, 64-aligned cache line holding one record as
/// eight 64-bit words.
///
/// Every word is an atomic, accessed with relaxed loads and stores (plain
/// moves on x86_64 and aarch64) except the one holding the record's `seq`
/// stamp, which is stored with `Release` and loaded with `Acquire`: a peer
/// scribbling on a slot concurrently is therefore a race on values, never
/// undefined behaviour. Under loom the other words live in a cell instead,
/// so that loom's race detector checks that the protocol alone keeps the
/// two sides off them.
#[repr(C, align(64))]
pub struct Slot<T> {
    #[cfg(not(loom))]
    pub(crate) words: [AtomicU64; RECORD_WORDS],
    #[cfg(loom)]
    pub(crate) stamp_word: AtomicU64,
    #[cfg(loom)]
    pub(crate) body: UnsafeCell<[u64; RECORD_WORDS]>,
    _record: core::marker::PhantomData<fn() -> T>,
}

impl<T> core::fmt::Debug for Slot<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Slot")
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self {
            #[cfg(not(loom))]
            words: Default::default(),
            #[cfg(loom)]
            stamp_word: AtomicU64::new(0),
            #[cfg(loom)]
            body: UnsafeCell::new([0; RECORD_WORDS]),
            _record: core::marker::PhantomData,
        }
    }
}

#[cfg(not(loom))]
const _: () = {
    assert!(size_of::<RegionHeader>() == 256);
    assert!(align_of::<RegionHeader>() == 128);
    assert!(offset_of!(RegionHeader, magic) == 0);
    assert!(offset_of!(RegionHeader, version) == 8);
    assert!(offset_of!(RegionHeader, header_size) == 12);
    assert!(offset_of!(RegionHeader, layout_hash) == 16);
    assert!(offset_of!(RegionHeader, region_size) == 24);
    assert!(offset_of!(RegionHeader, sq_offset) == 32);
    assert!(offset_of!(RegionHeader, cq_offset) == 40);
    assert!(offset_of!(RegionHeader, arena_offset) == 48);
    assert!(offset_of!(RegionHeader, arena_size) == 56);
    assert!(offset_of!(RegionHeader, sq_entries) == 64);
    assert!(offset_of!(RegionHeader, cq_entries) == 68);
    assert!(offset_of!(RegionHeader, client_id) == 72);
    assert!(offset_of!(RegionHeader, daemon_state) == 76);
    assert!(offset_of!(RegionHeader, reserved) == 80);

    assert!(size_of::<Request>() == 64);
    assert!(align_of::<Request>() == 8);
    assert!(offset_of!(Request, request_id) == 0);
    assert!(offset_of!(Request, model_id) == 8);
    assert!(offset_of!(Request, priority) == 12);
    assert!(offset_of!(Request, deadline_ns) == 16);
    assert!(offset_of!(Request, input_off) == 24);
    assert!(offset_of!(Request, input_len) == 32);
    assert!(offset_of!(Request, output_off) == 40);
    assert!(offset_of!(Request, output_len) == 48);
    assert!(offset_of!(Request, flags) == 56);
    assert!(offset_of!(Request, batch) == 58);
    assert!(offset_of!(Request, seq) == 60);

    assert!(size_of::<Completion>() == 64);
    assert!(align_of::<Completion>() == 8);
    assert!(offset_of!(Completion, request_id) == 0);
    assert!(offset_of!(Completion, status) == 8);
    assert!(offset_of!(Completion, seq) == 12);
    assert!(offset_of!(Completion, output_len) == 16);
    assert!(offset_of!(Completion, received_ns) == 24);
    assert!(offset_of!(Completion, started_ns) == 32);
    assert!(offset_of!(Completion, finished_ns) == 40);
    assert!(offset_of!(Completion, detail) == 48);

    assert!(size_of::<RingHeader>() == 384);
    assert!(align_of::<RingHeader>() == 128);
    assert!(offset_of!(RingHeader, tail) == 0);
    assert!(offset_of!(RingHeader, head) == 128);
    assert!(offset_of!(RingHeader, parked) == 256);

    assert!(size_of::<Slot<Request>>() == RECORD_BYTES);
    assert!(align_of::<Slot<Request>>() == RECORD_BYTES);
    assert!(size_of::<Slot<Completion>>() == RECORD_BYTES);
    assert!(size_of::<Request>() == RECORD_BYTES);
    assert!(size_of::<Completion>() == RECORD_BYTES);
};

/// FNV-1a over the layout's numbers: every size, alignment and offset
/// asserted above, plus the version. Any layout change changes it.
pub const LAYOUT_HASH: u64 = {
    let parts: [u64; 39] = [
        PROTOCOL_VERSION as u64,
        MAGIC,
        size_of::<RegionHeader>() as u64,
        align_of::<RegionHeader>() as u64,
        offset_of!(RegionHeader, version) as u64,
        offset_of!(RegionHeader, layout_hash) as u64,
        offset_of!(RegionHeader, region_size) as u64,
        offset_of!(RegionHeader, sq_offset) as u64,
        offset_of!(RegionHeader, cq_offset) as u64,
        offset_of!(RegionHeader, arena_offset) as u64,
        offset_of!(RegionHeader, arena_size) as u64,
        offset_of!(RegionHeader, sq_entries) as u64,
        offset_of!(RegionHeader, cq_entries) as u64,
        offset_of!(RegionHeader, client_id) as u64,
        offset_of!(RegionHeader, daemon_state) as u64,
        size_of::<Request>() as u64,
        offset_of!(Request, model_id) as u64,
        offset_of!(Request, priority) as u64,
        offset_of!(Request, deadline_ns) as u64,
        offset_of!(Request, input_off) as u64,
        offset_of!(Request, input_len) as u64,
        offset_of!(Request, output_off) as u64,
        offset_of!(Request, output_len) as u64,
        offset_of!(Request, flags) as u64,
        offset_of!(Request, batch) as u64,
        offset_of!(Request, seq) as u64,
        size_of::<Completion>() as u64,
        offset_of!(Completion, seq) as u64,
        offset_of!(Completion, status) as u64,
        offset_of!(Completion, output_len) as u64,
        offset_of!(Completion, received_ns) as u64,
        offset_of!(Completion, started_ns) as u64,
        offset_of!(Completion, finished_ns) as u64,
        offset_of!(Completion, detail) as u64,
        crate::tensor::TABLE_ENTRY_BYTES as u64,
        size_of::<RingHeader>() as u64,
        offset_of!(RingHeader, head) as u64,
        offset_of!(RingHeader, parked) as u64,
        RECORD_BYTES as u64,
    ];
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < parts.len() {
        let bytes = parts[i].to_le_bytes();
        let mut j = 0;
        while j < 8 {
            h ^= bytes[j] as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
            j += 1;
        }
        i += 1;
    }
    h
};

/// Why a geometry was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// A ring capacity is not a power of two in `MIN_ENTRIES..=MAX_ENTRIES`.
    BadEntries {
        /// `"sq_entries"` or `"cq_entries"`.
        which: &'static str,
        /// The value given.
        value: u32,
    },
    /// The arena size is 0, not a multiple of [`PAGE`], or over [`MAX_ARENA`].
    BadArena {
        /// The value given.
        value: u64,
    },
}

impl core::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::BadEntries { which, value } => write!(
                f,
                "{which} = {value} must be a power of two between {MIN_ENTRIES} and {MAX_ENTRIES}"
            ),
            Self::BadArena { value } => write!(
                f,
                "arena size {value} must be a non-zero multiple of {PAGE} bytes, at most {MAX_ARENA}"
            ),
        }
    }
}

/// Raw pointers to a region's two rings, from [`Geometry::ring_ptrs`].
#[derive(Debug, Clone, Copy)]
pub struct RingPtrs {
    /// Submission ring header.
    pub sq_header: *const RingHeader,
    /// Submission ring slots.
    pub sq_slots: *const Slot<Request>,
    /// Completion ring header.
    pub cq_header: *const RingHeader,
    /// Completion ring slots.
    pub cq_slots: *const Slot<Completion>,
}

/// The sizes a region is built from, and the offsets that follow from them.
///
/// ```text
/// 0                  RegionHeader (256 B)
/// sq_offset()        RingHeader (384 B) + sq_entries × Request (64 B)
/// cq_offset()        RingHeader (384 B) + cq_entries × Completion (64 B)
/// arena_offset()     arena_size bytes, page aligned
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Submission ring capacity.
    pub sq_entries: u32,
    /// Completion ring capacity.
    pub cq_entries: u32,
    /// Arena bytes.
    pub arena_size: u64,
}

const fn align_up(x: u64, a: u64) -> u64 {
    (x + a - 1) & !(a - 1)
}

fn check_entries(which: &'static str, value: u32) -> Result<(), LayoutError> {
    if value.is_power_of_two() && (MIN_ENTRIES..=MAX_ENTRIES).contains(&value) {
        Ok(())
    } else {
        Err(LayoutError::BadEntries { which, value })
    }
}

impl Geometry {
    /// Checks the sizes; every offset method below assumes a valid geometry.
    pub fn validate(&self) -> Result<(), LayoutError> {
        check_entries("sq_entries", self.sq_entries)?;
        check_entries("cq_entries", self.cq_entries)?;
        if self.arena_size == 0 || self.arena_size % PAGE != 0 || self.arena_size > MAX_ARENA {
            return Err(LayoutError::BadArena {
                value: self.arena_size,
            });
        }
        Ok(())
    }
    /// Offset of the submission ring header.
    pub const fn sq_offset(&self) -> u64 {
        size_of::<RegionHeader>() as u64
    }
    /// Offset of the submission ring's first slot.
    pub const fn sq_slots_offset(&self) -> u64 {
        self.sq_offset() + size_of::<RingHeader>() as u64
    }
    /// Offset of the completion ring header.
    pub const fn cq_offset(&self) -> u64 {
        align_up(
            self.sq_slots_offset() + self.sq_entries as u64 * size_of::<Request>() as u64,
            128,
        )
    }
    /// Offset of the completion ring's first slot.
    pub const fn cq_slots_offset(&self) -> u64 {
        self.cq_offset() + size_of::<RingHeader>() as u64
    }
    /// Offset of the arena.
    pub const fn arena_offset(&self) -> u64 {
        align_up(
            self.cq_slots_offset() + self.cq_entries as u64 * size_of::<Completion>() as u64,
            PAGE,
        )
    }
    /// Bytes the whole region takes.
    pub const fn region_size(&self) -> u64 {
        self.arena_offset() + self.arena_size
    }
    /// Where both rings of a region mapped at `base` are. Computing the
    /// pointers is safe; using them needs `base` to be a live mapping of
    /// at least [`Geometry::region_size`] bytes of a valid geometry.
    pub fn ring_ptrs(&self, base: *mut u8) -> RingPtrs {
        let at = |off: u64| base.wrapping_add(off as usize);
        RingPtrs {
            sq_header: at(self.sq_offset()) as *const RingHeader,
            sq_slots: at(self.sq_slots_offset()) as *const Slot<Request>,
            cq_header: at(self.cq_offset()) as *const RingHeader,
            cq_slots: at(self.cq_slots_offset()) as *const Slot<Completion>,
        }
    }

    /// Whether `[off, off + len)` lies inside the arena. Overflow-safe.
    pub const fn span_in_arena(&self, off: u64, len: u64) -> bool {
        match off.checked_add(len) {
            Some(end) => end <= self.arena_size,
            None => false,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_aligned_and_ordered() {
        let g = Geometry {
            sq_entries: 8,
            cq_entries: 16,
            arena_size: 8192,
        };
        g.validate().unwrap();
        assert_eq!(g.sq_offset(), 256);
        assert_eq!(g.sq_slots_offset(), 640);
        assert_eq!(g.cq_offset() % 128, 0);
        assert!(g.cq_offset() >= g.sq_slots_offset() + 8 * 64);
        assert_eq!(g.arena_offset() % PAGE, 0);
        assert!(g.arena_offset() >= g.cq_slots_offset() + 16 * 64);
        assert_eq!(g.region_size(), g.arena_offset() + 8192);
    }

    #[test]
    fn bad_geometry_is_named() {
        let g = Geometry {
            sq_entries: 300,
            cq_entries: 16,
            arena_size: 8192,
        };
        let e = g.validate().unwrap_err();
        assert_eq!(
            e,
            LayoutError::BadEntries {
                which: "sq_entries",
                value: 300
            }
        );
        assert!(std::format!("{e}").contains("sq_entries = 300"));
        let g = Geometry {
            sq_entries: 8,
            cq_entries: 8,
            arena_size: 100,
        };
        assert_eq!(g.validate(), Err(LayoutError::BadArena { value: 100 }));
    }

    #[test]
    fn spans_do_not_overflow() {
        let g = Geometry {
            sq_entries: 8,
            cq_entries: 8,
            arena_size: 4096,
        };
        assert!(g.span_in_arena(0, 4096));
        assert!(g.span_in_arena(4096, 0));
        assert!(!g.span_in_arena(1, 4096));
        assert!(!g.span_in_arena(u64::MAX, 2));
        assert!(!g.span_in_arena(4097, 0));
    }

    #[test]
    fn layout_hash_is_stable_within_a_build() {
        assert_ne!(LAYOUT_HASH, 0);
        assert_eq!(MAGIC.to_le_bytes(), *b"SLUICE\0\x01");
    }
}
