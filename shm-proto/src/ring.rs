//! Single-producer/single-consumer lock-free rings in shared memory.
//!
//! The algorithm is the classic bounded SPSC ring buffer (Lamport 1983, in
//! the form io_uring and `rtrb` use): two free-running 32-bit counters,
//! `tail` written only by the producer and `head` written only by the
//! consumer; slot `i` lives at index `i & mask`; the ring holds
//! `tail - head` (wrapping) entries, at most `entries`.
//!
//! Encoding of the shared words ([`RingHeader`]):
//! - `tail`: entries ever published. The producer writes the slot, then
//!   stores `tail + 1` with `Release`; the consumer loads it with `Acquire`.
//! - `head`: entries ever consumed. The consumer copies the slot out, then
//!   stores `head + 1` with `Release`; the producer loads it with `Acquire`
//!   before reusing a slot.
//! - `parked`: the consumer's wake word ([`crate::wake`]).
//!
//! Each side caches its own counter locally (the shared copy is only ever
//! written, never trusted back) and caches the peer's counter, reloading it
//! only when the cached value says "empty" (consumer) or "full" (producer).
//!
//! The peer may be hostile. Both sides therefore:
//! - mask every index before touching a slot, so no index reaches outside
//!   the slot array whatever the peer wrote;
//! - check that the peer's counter is within `entries` of their own and
//!   report [`RingError::Corrupt`] otherwise;
//! - copy records in and out by value (`read_volatile`/`write_volatile`)
//!   and never keep a reference into a slot;
//! - carry only [`Pod`] records, so whatever bytes the peer leaves in a
//!   slot, the copy is a valid value (which the daemon then validates field
//!   by field).
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

use core::marker::PhantomData;
use core::ptr;

use crate::layout::{RingHeader, Slot};
use crate::pod::Pod;
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

/// The producing end of a ring of `T` records; `O` keeps the memory alive
/// (see the module docs).
#[derive(Debug)]
pub struct Producer<T: Pod, O = Unowned> {
    hdr: *const RingHeader,
    slots: *const Slot<T>,
    mask: u32,
    entries: u32,
    tail: u32,
    head_cache: u32,
    owner: O,
    _marker: PhantomData<T>,
}

/// The consuming end of a ring of `T` records; `O` keeps the memory alive
/// (see the module docs).
#[derive(Debug)]
pub struct Consumer<T: Pod, O = Unowned> {
    hdr: *const RingHeader,
    slots: *const Slot<T>,
    mask: u32,
    entries: u32,
    head: u32,
    tail_cache: u32,
    owner: O,
    _marker: PhantomData<T>,
}

// SAFETY: a Producer/Consumer is the unique handle to its end of the ring;
// the memory it points to is shared by design and accessed only through
// atomics and by-value slot copies of `Pod` records (which are `Send`), so
// moving the handle to another thread is sound when its owner may move too.
unsafe impl<T: Pod, O: Send> Send for Producer<T, O> {}
// SAFETY: as for `Producer`.
unsafe impl<T: Pod, O: Send> Send for Consumer<T, O> {}

impl<T: Pod> Producer<T, Unowned> {
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

impl<T: Pod, O> Producer<T, O> {
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
    /// peer's head).
    pub fn len(&mut self) -> Result<u32, RingError> {
        self.refresh_head()?;
        Ok(self.tail.wrapping_sub(self.head_cache))
    }

    /// Whether no published entry is waiting for the consumer.
    pub fn is_empty(&mut self) -> Result<bool, RingError> {
        Ok(self.len()? == 0)
    }

    fn refresh_head(&mut self) -> Result<(), RingError> {
        // SYNC: Acquire pairs with the consumer's Release store of `head` in
        // `Consumer::pop`: its copy of the slot happens-before we overwrite it.
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

    /// Publishes one record, or reports `Full` without writing anything.
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
        // makes `entries` slots valid. The reference is to the `UnsafeCell`
        // (`Slot`), never to the record inside it.
        let slot = unsafe { &*self.slots.add(idx) };
        // SAFETY: the pointer comes from a valid slot; we write the record by
        // value and keep no reference. Accepted race: the slot is free (the
        // consumer has moved past it), but a hostile consumer may write it
        // concurrently; that can only garble the record it is about to read,
        // its own problem. `T: Pod` has no padding, so no uninitialised byte
        // of ours reaches the peer.
        slot.with_mut(|p| unsafe { ptr::write_volatile(p, value) });
        self.tail = self.tail.wrapping_add(1);
        // SYNC: Release pairs with the consumer's Acquire load of `tail` in
        // `Consumer::pop`: the slot write above happens-before its read.
        self.header().tail.store(self.tail, Ordering::Release);
        Ok(())
    }
}

impl<T: Pod> Consumer<T, Unowned> {
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

impl<T: Pod, O> Consumer<T, O> {
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
            entries,
            head,
            tail_cache: head,
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

    /// Reloads the producer's tail; returns how many entries are ready.
    pub fn refresh(&mut self) -> Result<u32, RingError> {
        // SYNC: Acquire pairs with the producer's Release store of `tail` in
        // `Producer::push`: its slot write happens-before our read.
        let tail = self.header().tail.load(Ordering::Acquire);
        let avail = tail.wrapping_sub(self.head);
        if avail > self.entries {
            return Err(RingError::Corrupt {
                head: self.head,
                tail,
                entries: self.entries,
            });
        }
        self.tail_cache = tail;
        Ok(avail)
    }

    /// Takes one record by value, `Ok(None)` when the ring is empty.
    #[inline]
    pub fn pop(&mut self) -> Result<Option<T>, RingError> {
        if self.head == self.tail_cache && self.refresh()? == 0 {
            return Ok(None);
        }
        let idx = (self.head & self.mask) as usize;
        // SAFETY: `idx <= mask < entries` slots, valid by the constructor's
        // contract. The reference is to the `UnsafeCell`, never the record.
        let slot = unsafe { &*self.slots.add(idx) };
        // SAFETY: the pointer comes from a valid slot; we copy the record out
        // by value into private memory and keep no reference. Accepted race:
        // a hostile producer may write the slot while we copy, so the copy
        // may be torn; because `T: Pod`, every bit pattern is a valid `T`,
        // so a torn copy is still a value, which the caller validates field
        // by field. Garbage in the record is the producer's own problem.
        let value = slot.with(|p| unsafe { ptr::read_volatile(p) });
        self.head = self.head.wrapping_add(1);
        // SYNC: Release pairs with the producer's Acquire load of `head` in
        // `Producer::refresh_head`: our copy happens-before it reuses the slot.
        self.header().head.store(self.head, Ordering::Release);
        Ok(Some(value))
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
    pub struct HeapRing<T: Pod> {
        hdr: Box<RingHeader>,
        slots: Box<[Slot<T>]>,
    }

    // SAFETY: all shared state is atomics or cells accessed through the
    // SPSC protocol.
    unsafe impl<T: Pod> Sync for HeapRing<T> {}
    // SAFETY: as above.
    unsafe impl<T: Pod> Send for HeapRing<T> {}

    impl<T: Pod + Default> HeapRing<T> {
        /// A ring of `entries` (a power of two) default-filled slots.
        pub fn new(entries: u32) -> Self {
            assert!(entries.is_power_of_two());
            let slots: Vec<Slot<T>> = (0..entries).map(|_| Slot::new(T::default())).collect();
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
        assert!(matches!(
            c.pop(),
            Err(RingError::Corrupt { tail: 1000, .. })
        ));
        ring.header().tail.store(u32::MAX, Ordering::Relaxed);
        assert!(matches!(c.pop(), Err(RingError::Corrupt { .. })));
        // A tail within range is followed (the records are garbage, which
        // the daemon validates field by field).
        ring.header().tail.store(8, Ordering::Relaxed);
        for _ in 0..8 {
            assert!(c.pop().unwrap().is_some());
        }
        assert_eq!(c.pop().unwrap(), None);
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
