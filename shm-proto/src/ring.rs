//! Single-producer/single-consumer lock-free rings in shared memory.
//!
//! The algorithm is the bounded SPSC ring buffer (Lamport 1983, in the form
//! io_uring and `rtrb` use) with the readiness of each entry carried *in its
//! slot*, as in Vyukov's bounded queue and the FastForward / B-Queue SPSC
//! rings (Giacomoni et al. 2008; Wang et al. 2013): the consumer polls the
//! slot it will read next, not a shared index, so a record crosses from one
//! core to the other in **one cache line** (the slot), where an index-polled
//! ring needs two dependent line transfers (the index, then the slot).
//!
//! Encoding:
//! - slot `i` (one 64-byte line, [`Slot`]) holds the entry at position `p`
//!   with `p & mask == i`; the record's 32-bit `seq` field (its *stamp*) is
//!   `stamp(p) = 2 * (p >> log2(entries)) + 1`: odd (so a zeroed slot is
//!   never ready) and different from the stamp the same slot had one lap
//!   earlier. The producer writes the record's other words, then stores the
//!   word holding the stamp with `Release`; the consumer loads that word
//!   with `Acquire` and takes the entry when the stamp is `stamp(head)`.
//! - [`RingHeader::tail`]: entries ever published (free-running, wraps at
//!   2³²). The producer stores it *before* each stamp; the consumer reads it
//!   only to check the producer's sanity when it parks (it is never on the
//!   consumer's fast path, so the line stays in the producer's cache).
//! - [`RingHeader::head`]: entries ever consumed, published in *batches*:
//!   when the consumer finds the ring empty (so after the caller has had a
//!   chance to send its next request) or after `entries / 8` (at least one)
//!   entries without publishing. The producer reads it (`Acquire`) only when
//!   its cached copy says the ring is full, and the daemon for completion
//!   credit ([`Producer::len`]), which may therefore over-count entries
//!   unread by up to one batch.
//! - [`RingHeader::parked`]: the consumer's wake word ([`crate::wake`]).
//!
//! Each side caches its own counter locally (the shared copy is only ever
//! written, never trusted back) and caches the peer's counter.
//!
//! The peer may be hostile. Both sides therefore:
//! - mask every index before touching a slot, so no index reaches outside
//!   the slot array whatever the peer wrote;
//! - check that the peer's counter is within `entries` of their own and
//!   report [`RingError::Corrupt`] otherwise (the producer on every reload
//!   of `head`; the consumer when it prepares to park);
//! - access slots only through atomics (relaxed 64-bit loads and stores,
//!   plain moves on x86_64), never through a reference to the record, so a
//!   peer writing a slot concurrently can only garble values;
//! - carry only [`Record`]s ([`Pod`]), so whatever bytes the peer leaves in
//!   a slot, the copy is a valid value (which the daemon then validates
//!   field by field). A stamp the consumer does not expect just means "not
//!   ready yet".
//!
//! ## Who keeps the memory alive
//!
//! A ring end holds raw pointers into the mapping; its second type
//! parameter `O` is what keeps that mapping alive:
//!
//! - `O = Arc<M>` for an `M:` [`Mapping`]: the end owns a share of the
//!   mapping, so no field order or drop order matters. Made safely by
//!   [`crate::region::ClientRings::new`] and
//!   [`crate::region::DaemonRings::new`]. **Use this.**
//! - `O = `[`Unowned`] (the default): made by the `unsafe`
//!   [`Producer::from_raw`] / [`Consumer::from_raw`], whose caller promises
//!   to keep the memory mapped for as long as the end lives. Only the heap
//!   rings of tests and loom models (`heap::HeapRing::split`) use it.
//!
//! [`Mapping`]: crate::region::Mapping
//! [`Pod`]: crate::Pod
//! [`RingHeader::tail`]: crate::RingHeader::tail
//! [`RingHeader::head`]: crate::RingHeader::head
//! [`RingHeader::parked`]: crate::RingHeader::parked

use core::marker::PhantomData;

use crate::layout::{RECORD_BYTES, RECORD_WORDS, Record, RingHeader, Slot};
use crate::sync::Ordering;

/// The owner type of a ring end made with `from_raw`: nothing. The caller
/// of `from_raw` keeps the memory mapped instead (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unowned;

/// The peer broke the ring's invariants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// The peer's counter is more than `entries` away from ours: it wrote
    /// garbage (or a wrapped value) into `head` or `tail`.
    Corrupt {
        /// Our head (consumer) or the peer's head (producer).
        head: u32,
        /// The peer's tail (consumer) or our tail (producer).
        tail: u32,
        /// Ring capacity.
        entries: u32,
    },
}

impl core::fmt::Display for RingError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Corrupt {
                head,
                tail,
                entries,
            } => write!(
                f,
                "ring indices corrupt: head {head}, tail {tail}, capacity {entries} \
                 (tail - head must be at most the capacity)"
            ),
        }
    }
}

/// Why a push did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// The ring is full: the consumer has not caught up. Nothing was written.
    Full,
    /// The consumer corrupted `head`.
    Corrupt(RingError),
}

/// The stamp of the entry at position `pos` of a ring of `1 << shift`
/// entries: odd, and different from the stamp of position `pos - entries`.
#[inline(always)]
pub const fn stamp(pos: u32, shift: u32) -> u32 {
    ((pos >> shift) << 1) | 1
}

/// Where a record's `seq` stamp sits: (word index, bit shift in the word).
#[inline(always)]
const fn seq_at<T: Record>() -> (usize, u32) {
    const { assert!(T::SEQ_OFFSET % 4 == 0 && T::SEQ_OFFSET + 4 <= RECORD_BYTES) };
    let byte = (T::SEQ_OFFSET % 8) as u32;
    let shift = if cfg!(target_endian = "little") {
        byte * 8
    } else {
        32 - byte * 8
    };
    (T::SEQ_OFFSET / 8, shift)
}

#[inline(always)]
fn to_words<T: Record>(value: T) -> [u64; RECORD_WORDS] {
    const { assert!(core::mem::size_of::<T>() == RECORD_BYTES) };
    // SAFETY: `T: Pod` has no padding (every byte is initialised) and is
    // exactly `RECORD_BYTES` long (asserted above), the size of the array;
    // `transmute_copy` reads unaligned, so alignment does not matter.
    unsafe { core::mem::transmute_copy(&value) }
}

#[inline(always)]
fn from_words<T: Record>(words: [u64; RECORD_WORDS]) -> T {
    const { assert!(core::mem::size_of::<T>() == RECORD_BYTES) };
    // SAFETY: same size (asserted above), and `T: Pod`: every bit pattern
    // is a valid `T`.
    unsafe { core::mem::transmute_copy(&words) }
}

impl<T> Slot<T> {
    /// Loads the word holding the stamp (`Acquire`).
    #[inline(always)]
    fn load_stamp_word(&self, k: usize) -> u64 {
        // SYNC: Acquire pairs with the Release store of the stamp word in
        // `Slot::store`: the record's other words happen-before our reads.
        #[cfg(not(loom))]
        return self.words[k].load(Ordering::Acquire);
        #[cfg(loom)]
        {
            let _ = k;
            self.stamp_word.load(Ordering::Acquire)
        }
    }

    /// Writes the record, the stamp word last (`Release`).
    #[inline(always)]
    fn store(&self, words: &[u64; RECORD_WORDS], k: usize) {
        #[cfg(not(loom))]
        {
            for (i, w) in words.iter().enumerate() {
                if i != k {
                    self.words[i].store(*w, Ordering::Relaxed);
                }
            }
            // SYNC: Release pairs with the Acquire load in
            // `Slot::load_stamp_word`: the words above happen-before the
            // consumer's reads of them.
            self.words[k].store(words[k], Ordering::Release);
        }
        #[cfg(loom)]
        {
            // SAFETY: loom's cell checks that no read of the consumer's
            // races with this write (the protocol gives us the slot).
            self.body.with_mut(|p| unsafe { *p = *words });
            // SYNC: as above.
            self.stamp_word.store(words[k], Ordering::Release);
        }
    }

    /// Reads the record's words, given the stamp word already loaded.
    #[inline(always)]
    fn load_rest(&self, k: usize, stamp_word: u64) -> [u64; RECORD_WORDS] {
        #[cfg(not(loom))]
        {
            let mut out = [0u64; RECORD_WORDS];
            for (i, w) in out.iter_mut().enumerate() {
                *w = if i == k {
                    stamp_word
                } else {
                    self.words[i].load(Ordering::Relaxed)
                };
            }
            out
        }
        #[cfg(loom)]
        {
            // SAFETY: loom's cell checks that no write of the producer's
            // races with this read.
            let mut out = self.body.with(|p| unsafe { *p });
            out[k] = stamp_word;
            out
        }
    }
}

/// The producing end of a ring of `T` records; `O` keeps the memory alive
/// (see the module docs).
#[derive(Debug)]
pub struct Producer<T: Record, O = Unowned> {
    hdr: *const RingHeader,
    slots: *const Slot<T>,
    mask: u32,
    shift: u32,
    entries: u32,
    tail: u32,
    head_cache: u32,
    owner: O,
    _marker: PhantomData<T>,
}

/// The consuming end of a ring of `T` records; `O` keeps the memory alive
/// (see the module docs).
#[derive(Debug)]
pub struct Consumer<T: Record, O = Unowned> {
    hdr: *const RingHeader,
    slots: *const Slot<T>,
    mask: u32,
    shift: u32,
    entries: u32,
    head: u32,
    /// The last head stored to the shared word.
    published: u32,
    /// Publish after this many entries at the latest.
    batch: u32,
    owner: O,
    _marker: PhantomData<T>,
}

// SAFETY: a Producer/Consumer is the unique handle to its end of the ring;
// the memory it points to is shared by design and accessed only through
// atomics (and, under loom, cells the protocol hands over), so moving the
// handle to another thread is sound when its owner may move too.
unsafe impl<T: Record, O: Send> Send for Producer<T, O> {}
// SAFETY: as for `Producer`.
unsafe impl<T: Record, O: Send> Send for Consumer<T, O> {}

impl<T: Record> Producer<T, Unowned> {
    /// Builds the producing end over a ring at `hdr` with `entries` slots at
    /// `slots`. The local tail starts from the shared one. Prefer the safe,
    /// owning [`crate::region::ClientRings::new`] /
    /// [`crate::region::DaemonRings::new`].
    ///
    /// # Safety
    /// - `hdr` and `slots` point to a `RingHeader` and `entries` slots that
    ///   stay mapped and valid for the life of the returned value;
    /// - `entries` is a power of two;
    /// - no other `Producer` exists for this ring anywhere (in any process).
    pub unsafe fn from_raw(hdr: *const RingHeader, slots: *const Slot<T>, entries: u32) -> Self {
        // SAFETY: forwarded under the same contract; `Unowned` keeps nothing.
        unsafe { Self::with_owner(Unowned, hdr, slots, entries) }
    }
}

impl<T: Record, O> Producer<T, O> {
    /// [`Producer::from_raw`] with an owner that keeps the memory alive.
    ///
    /// # Safety
    /// As for [`Producer::from_raw`], except that the memory need only stay
    /// mapped while `owner` lives (the end keeps `owner` until it drops).
    pub(crate) unsafe fn with_owner(
        owner: O,
        hdr: *const RingHeader,
        slots: *const Slot<T>,
        entries: u32,
    ) -> Self {
        debug_assert!(entries.is_power_of_two());
        // SAFETY: the caller guarantees `hdr` is valid.
        let h = unsafe { &*hdr };
        let tail = h.tail.load(Ordering::Relaxed);
        Self {
            hdr,
            slots,
            mask: entries - 1,
            shift: entries.trailing_zeros(),
            entries,
            tail,
            head_cache: tail,
            owner,
            _marker: PhantomData,
        }
    }

    /// What keeps the ring's memory alive ([`Unowned`] for `from_raw` ends).
    pub fn owner(&self) -> &O {
        &self.owner
    }

    #[inline(always)]
    pub(crate) fn header(&self) -> &RingHeader {
        // SAFETY: the constructor's contract keeps the header mapped while
        // `self` (and so its owner) lives.
        unsafe { &*self.hdr }
    }

    /// Capacity in entries.
    pub fn capacity(&self) -> u32 {
        self.entries
    }

    /// Entries published and not yet known to be consumed (refreshes the
    /// peer's head; the consumer publishes its head in batches, so this may
    /// over-count by up to one batch).
    pub fn len(&mut self) -> Result<u32, RingError> {
        self.refresh_head()?;
        Ok(self.tail.wrapping_sub(self.head_cache))
    }

    /// [`Producer::len`] from the consumer's head as last read (by `len` or
    /// by a push that found the ring full), reading no shared memory: at
    /// least the true count, never less, since the head only grows. Room
    /// computed from it is therefore never more than there is.
    #[inline]
    pub fn len_cached(&self) -> u32 {
        self.tail.wrapping_sub(self.head_cache)
    }

    /// Whether no published entry is waiting for the consumer.
    pub fn is_empty(&mut self) -> Result<bool, RingError> {
        Ok(self.len()? == 0)
    }

    fn refresh_head(&mut self) -> Result<(), RingError> {
        // SYNC: Acquire pairs with the consumer's Release store of `head` in
        // `Consumer::publish`: its copies of the slots happen-before we
        // overwrite them.
        let head = self.header().head.load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        if used > self.entries {
            return Err(RingError::Corrupt {
                head,
                tail: self.tail,
                entries: self.entries,
            });
        }
        self.head_cache = head;
        Ok(())
    }

    /// Publishes one record (its `seq` field is replaced by the stamp), or
    /// reports `Full` without writing anything.
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), PushError> {
        if self.tail.wrapping_sub(self.head_cache) >= self.entries {
            self.refresh_head().map_err(PushError::Corrupt)?;
            if self.tail.wrapping_sub(self.head_cache) >= self.entries {
                return Err(PushError::Full);
            }
        }
        let idx = (self.tail & self.mask) as usize;
        // SAFETY: `idx <= mask < entries`, and the constructor's contract
        // makes `entries` slots valid. A `Slot` is atomics only (a cell
        // under loom), so a shared reference to it is sound whatever the
        // peer does.
        let slot = unsafe { &*self.slots.add(idx) };
        let (k, bit) = seq_at::<T>();
        let mut words = to_words(value);
        words[k] = (words[k] & !(0xffff_ffffu64 << bit))
            | (u64::from(stamp(self.tail, self.shift)) << bit);
        self.tail = self.tail.wrapping_add(1);
        // Announce first (the consumer reads `tail` only to check us when
        // it parks). Relaxed: the stamp's Release store below orders it
        // before the stamp for a consumer that acquires the stamp.
        self.header().tail.store(self.tail, Ordering::Relaxed);
        slot.store(&words, k);
        Ok(())
    }
}

impl<T: Record> Consumer<T, Unowned> {
    /// Builds the consuming end; the local head starts from the shared one.
    /// Prefer the safe, owning [`crate::region::ClientRings::new`] /
    /// [`crate::region::DaemonRings::new`].
    ///
    /// # Safety
    /// As for [`Producer::from_raw`], with "no other `Consumer`".
    pub unsafe fn from_raw(hdr: *const RingHeader, slots: *const Slot<T>, entries: u32) -> Self {
        // SAFETY: forwarded under the same contract; `Unowned` keeps nothing.
        unsafe { Self::with_owner(Unowned, hdr, slots, entries) }
    }
}

impl<T: Record, O> Consumer<T, O> {
    /// [`Consumer::from_raw`] with an owner that keeps the memory alive.
    ///
    /// # Safety
    /// As for [`Producer::with_owner`], with "no other `Consumer`".
    pub(crate) unsafe fn with_owner(
        owner: O,
        hdr: *const RingHeader,
        slots: *const Slot<T>,
        entries: u32,
    ) -> Self {
        debug_assert!(entries.is_power_of_two());
        // SAFETY: the caller guarantees `hdr` is valid.
        let h = unsafe { &*hdr };
        let head = h.head.load(Ordering::Relaxed);
        Self {
            hdr,
            slots,
            mask: entries - 1,
            shift: entries.trailing_zeros(),
            entries,
            head,
            published: head,
            batch: (entries / 8).max(1),
            owner,
            _marker: PhantomData,
        }
    }

    /// What keeps the ring's memory alive ([`Unowned`] for `from_raw` ends).
    pub fn owner(&self) -> &O {
        &self.owner
    }

    #[inline(always)]
    pub(crate) fn header(&self) -> &RingHeader {
        // SAFETY: the constructor's contract keeps the header mapped while
        // `self` (and so its owner) lives.
        unsafe { &*self.hdr }
    }

    /// Capacity in entries.
    pub fn capacity(&self) -> u32 {
        self.entries
    }

    /// Sets how many entries may be consumed before the head is published
    /// (1 ..= capacity; default capacity / 8). The head is also published
    /// whenever [`Consumer::pop`] finds the ring empty.
    pub fn set_publish_batch(&mut self, batch: u32) {
        self.batch = batch.clamp(1, self.entries);
    }

    /// Reloads the producer's tail and checks it: returns how many entries
    /// the producer has announced beyond our head (their stamps may still
    /// be on their way), or [`RingError::Corrupt`] for a tail no honest
    /// producer writes.
    pub fn refresh(&mut self) -> Result<u32, RingError> {
        // SYNC: Acquire pairs with the stamp's Release store in
        // `Producer::push` (the tail is stored before it): after we took
        // entry `head - 1` the tail reads at least `head`.
        let tail = self.header().tail.load(Ordering::Acquire);
        let avail = tail.wrapping_sub(self.head);
        if avail > self.entries {
            return Err(RingError::Corrupt {
                head: self.head,
                tail,
                entries: self.entries,
            });
        }
        Ok(avail)
    }

    /// Whether the entry at our head is ready (its stamp is in place).
    #[inline]
    pub(crate) fn ready(&self) -> bool {
        let (k, bit) = seq_at::<T>();
        // SAFETY: masked index into `entries` valid slots (constructor).
        let slot = unsafe { &*self.slots.add((self.head & self.mask) as usize) };
        (slot.load_stamp_word(k) >> bit) as u32 == stamp(self.head, self.shift)
    }

    /// Stores our head to the shared word if it moved since the last time.
    #[inline]
    pub fn publish(&mut self) {
        if self.published != self.head {
            self.published = self.head;
            // SYNC: Release pairs with the producer's Acquire load of
            // `head` in `Producer::refresh_head`: our copies of the slots
            // happen-before it reuses them.
            self.header().head.store(self.head, Ordering::Release);
        }
    }

    /// Takes one record by value (its `seq` field reads 0), `Ok(None)` when
    /// the ring is empty; then the head is published if it moved. Never
    /// fails: a corrupt producer shows as garbage records, which the
    /// caller validates, or as an empty ring, and its `tail` is checked by
    /// [`Consumer::prepare_park`](crate::ring::Consumer::prepare_park).
    #[inline]
    pub fn pop(&mut self) -> Result<Option<T>, RingError> {
        let idx = (self.head & self.mask) as usize;
        // SAFETY: `idx <= mask < entries` slots, valid by the constructor's
        // contract. A `Slot` is atomics only (a cell under loom): no
        // reference to the record is formed.
        let slot = unsafe { &*self.slots.add(idx) };
        let (k, bit) = seq_at::<T>();
        let w = slot.load_stamp_word(k);
        if (w >> bit) as u32 != stamp(self.head, self.shift) {
            self.publish();
            return Ok(None);
        }
        // Accepted race: a hostile producer may rewrite the slot while we
        // copy it, so the copy may be torn; every word is read atomically
        // and `T: Pod`, so a torn copy is still a value, which the caller
        // validates field by field.
        let mut words = slot.load_rest(k, w);
        words[k] &= !(0xffff_ffffu64 << bit);
        self.head = self.head.wrapping_add(1);
        if self.head.wrapping_sub(self.published) >= self.batch {
            self.publish();
        }
        Ok(Some(from_words(words)))
    }

    /// Our head: entries consumed so far.
    pub(crate) fn head(&self) -> u32 {
        self.head
    }
}

/// A ring on the heap, for tests, Miri and loom models.
#[cfg(any(test, loom))]
pub mod heap {
    use super::*;
    use std::boxed::Box;
    use std::vec::Vec;

    /// Owns a ring header and its slots.
    #[derive(Debug)]
    pub struct HeapRing<T: Record> {
        hdr: Box<RingHeader>,
        slots: Box<[Slot<T>]>,
    }

    // SAFETY: all shared state is atomics or cells accessed through the
    // SPSC protocol.
    unsafe impl<T: Record> Sync for HeapRing<T> {}
    // SAFETY: as above.
    unsafe impl<T: Record> Send for HeapRing<T> {}

    impl<T: Record> HeapRing<T> {
        /// A ring of `entries` (a power of two) default-filled slots.
        pub fn new(entries: u32) -> Self {
            assert!(entries.is_power_of_two());
            let slots: Vec<Slot<T>> = (0..entries).map(|_| Slot::default()).collect();
            Self {
                hdr: Box::default(),
                slots: slots.into_boxed_slice(),
            }
        }
        /// The shared header (tests poke it to simulate a hostile peer).
        pub fn header(&self) -> &RingHeader {
            &self.hdr
        }
        /// Both ends. The ring must outlive them.
        ///
        /// # Safety
        /// Call once per ring, and keep `self` alive while the ends are used.
        pub unsafe fn split(&self) -> (Producer<T>, Consumer<T>) {
            let n = self.slots.len() as u32;
            // SAFETY: the header and slots are owned by `self`, which the
            // caller keeps alive; this is the only producer and consumer.
            unsafe {
                (
                    Producer::from_raw(&*self.hdr, self.slots.as_ptr(), n),
                    Consumer::from_raw(&*self.hdr, self.slots.as_ptr(), n),
                )
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::heap::HeapRing;
    use super::*;
    use crate::layout::Request;
    use crate::sync::Ordering;

    fn req(id: u64) -> Request {
        Request {
            request_id: id,
            ..Request::default()
        }
    }

    #[test]
    fn fifo_and_full() {
        let ring = HeapRing::<Request>::new(4);
        // SAFETY: `ring` outlives both ends.
        let (mut p, mut c) = unsafe { ring.split() };
        for i in 0..4 {
            p.push(req(i)).unwrap();
        }
        assert_eq!(p.push(req(99)), Err(PushError::Full));
        assert_eq!(c.pop().unwrap().unwrap().request_id, 0);
        p.push(req(4)).unwrap();
        for i in 1..5 {
            assert_eq!(c.pop().unwrap().unwrap().request_id, i);
        }
        assert_eq!(c.pop().unwrap(), None);
    }

    #[test]
    fn cached_len_never_undercounts() {
        let ring = HeapRing::<Request>::new(8);
        // SAFETY: `ring` outlives both ends.
        let (mut p, mut c) = unsafe { ring.split() };
        c.set_publish_batch(1);
        for i in 0..3 {
            p.push(req(i)).unwrap();
        }
        assert_eq!(p.len_cached(), 3);
        c.pop().unwrap().unwrap();
        c.pop().unwrap().unwrap();
        // The consumer published its head; the cached count has not seen it.
        assert_eq!(p.len_cached(), 3);
        assert_eq!(p.len().unwrap(), 1);
        assert_eq!(p.len_cached(), 1);
        // Fill the ring: the push that finds it full by the cached head
        // reloads the head, and the cached count follows.
        for i in 3..10 {
            p.push(req(i)).unwrap();
        }
        assert_eq!(p.len_cached(), 8);
        c.pop().unwrap().unwrap();
        p.push(req(10)).unwrap();
        assert_eq!(p.len_cached(), 8);
        assert_eq!(p.len().unwrap(), 8);
    }

    #[test]
    fn counters_wrap() {
        let ring = HeapRing::<Request>::new(8);
        ring.header().tail.store(u32::MAX - 3, Ordering::Relaxed);
        ring.header().head.store(u32::MAX - 3, Ordering::Relaxed);
        // SAFETY: `ring` outlives both ends.
        let (mut p, mut c) = unsafe { ring.split() };
        let n = if cfg!(miri) { 40 } else { 1000 };
        for i in 0..n {
            p.push(req(i)).unwrap();
            if i % 3 == 0 {
                p.push(req(i + 10_000)).unwrap();
                assert_eq!(c.pop().unwrap().unwrap().request_id, i);
                assert_eq!(c.pop().unwrap().unwrap().request_id, i + 10_000);
            } else {
                assert_eq!(c.pop().unwrap().unwrap().request_id, i);
            }
        }
    }

    #[test]
    fn hostile_tail_is_reported_not_followed() {
        let ring = HeapRing::<Request>::new(8);
        // SAFETY: `ring` outlives both ends.
        let (_p, mut c) = unsafe { ring.split() };
        ring.header().tail.store(1000, Ordering::Relaxed);
        // The consumer polls stamps, not the tail: nothing is followed...
        assert_eq!(c.pop(), Ok(None));
        // ...and the tail is checked where the consumer reads it.
        assert!(matches!(
            c.refresh(),
            Err(RingError::Corrupt { tail: 1000, .. })
        ));
        assert!(matches!(c.prepare_park(), Err(RingError::Corrupt { .. })));
        ring.header().tail.store(u32::MAX, Ordering::Relaxed);
        assert!(matches!(c.refresh(), Err(RingError::Corrupt { .. })));
        ring.header().tail.store(3, Ordering::Relaxed);
        assert_eq!(c.refresh(), Ok(3));
    }

    #[test]
    fn stamps_decide_readiness() {
        let ring = HeapRing::<Request>::new(4);
        // SAFETY: `ring` outlives both ends.
        let (mut p, mut c) = unsafe { ring.split() };
        // Zeroed slots are never ready (stamps are odd).
        assert_eq!(c.pop(), Ok(None));
        let mut r = req(7);
        r.seq = 0xdead_beef; // the ring owns the field
        p.push(r).unwrap();
        let got = c.pop().unwrap().unwrap();
        assert_eq!(got, req(7), "seq reads 0 after pop");
        // A stale stamp (one lap behind) is not ready: after a full lap of
        // the producer the consumer's next slot holds the old stamp.
        assert_eq!(c.pop(), Ok(None));
        assert_eq!(stamp(0, 2), 1);
        assert_eq!(stamp(4, 2), 3);
        assert_ne!(stamp(u32::MAX, 2), stamp(u32::MAX - 4, 2));
    }

    #[test]
    fn head_is_published_in_batches() {
        let ring = HeapRing::<Request>::new(16);
        // SAFETY: `ring` outlives both ends.
        let (mut p, mut c) = unsafe { ring.split() };
        c.set_publish_batch(4);
        for i in 0..8 {
            p.push(req(i)).unwrap();
        }
        for i in 0..3 {
            assert_eq!(c.pop().unwrap().unwrap().request_id, i);
        }
        assert_eq!(ring.header().head.load(Ordering::Relaxed), 0);
        assert_eq!(c.pop().unwrap().unwrap().request_id, 3);
        assert_eq!(ring.header().head.load(Ordering::Relaxed), 4);
        assert_eq!(c.pop().unwrap().unwrap().request_id, 4);
        assert_eq!(ring.header().head.load(Ordering::Relaxed), 4);
        assert_eq!(p.len(), Ok(4), "len over-counts by the unpublished entry");
        for i in 5..8 {
            assert_eq!(c.pop().unwrap().unwrap().request_id, i);
        }
        // Finding the ring empty publishes what is left.
        assert_eq!(c.pop(), Ok(None));
        assert_eq!(ring.header().head.load(Ordering::Relaxed), 8);
        assert_eq!(p.len(), Ok(0));
    }

    #[test]
    fn hostile_head_is_reported() {
        let ring = HeapRing::<Request>::new(4);
        // SAFETY: `ring` outlives both ends.
        let (mut p, _c) = unsafe { ring.split() };
        for i in 0..4 {
            p.push(req(i)).unwrap();
        }
        ring.header().head.store(77, Ordering::Relaxed);
        assert!(matches!(p.push(req(5)), Err(PushError::Corrupt(_))));
    }

    #[test]
    fn threads_transfer_everything_in_order() {
        let ring = std::sync::Arc::new(HeapRing::<Request>::new(16));
        // SAFETY: the Arc keeps `ring` alive in both threads.
        let (mut p, mut c) = unsafe { ring.split() };
        let n: u64 = if cfg!(miri) { 200 } else { 200_000 };
        let r2 = ring.clone();
        let t = std::thread::spawn(move || {
            let _keep = r2;
            let mut i = 0;
            while i < n {
                match p.push(req(i)) {
                    Ok(()) => i += 1,
                    Err(PushError::Full) => std::thread::yield_now(),
                    Err(e) => panic!("{e:?}"),
                }
            }
        });
        let mut next = 0;
        while next < n {
            match c.pop().unwrap() {
                Some(r) => {
                    assert_eq!(r.request_id, next);
                    next += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        t.join().unwrap();
    }
}
