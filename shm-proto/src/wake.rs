//! The hybrid notify/poll wake protocol.
//!
//! A consumer that finds its ring empty first *spins* for a while (the next
//! entry is usually near); only then does it *park*. Parking must not lose a
//! wake-up, and a producer must not pay for a syscall when nobody sleeps.
//! Each ring therefore carries a wake word, [`RingHeader::parked`], owned by
//! the ring's consumer:
//!
//! ```text
//! consumer (to park)                         producer (after each publish)
//! ------------------                         ----------------------------
//! C1 parked.store(1)                         P1 tail.store(t + 1, Release)
//! C2 fence(SeqCst)                           P2 fence(SeqCst)
//! C3 if tail.load() != head { abort park }   P3 if parked.load() == 1
//! C4 sleep while parked == 1                 P4     && parked.swap(0) == 1
//!    (futex_wait(parked, 1), or epoll on        { wake the consumer
//!    an eventfd the producer writes)              (futex_wake / eventfd) }
//! C5 parked.store(0)
//! ```
//!
//! **No lost wake-up.** The two `SeqCst` fences are totally ordered. If the
//! consumer's fence (C2) comes first, the producer's load P3 sees
//! `parked == 1` and wakes it. If the producer's fence (P2) comes first, the
//! consumer's load C3 sees the new tail and does not sleep. Either way a
//! published entry is never left behind a sleeping consumer. The sleep in C4
//! is itself race-free: `futex_wait(parked, 1)` returns at once when P4 has
//! already set the word to 0, and an eventfd stays readable until read.
//! The loom models in this module check exactly this, for the futex form.
//!
//! **No syscall when nobody sleeps.** P3 is one load of a line the producer
//! already owns in the common case; the producer only swaps and wakes when
//! it sees 1, and the swap makes one publish pay for at most one wake.
//!
//! **Hostile peers.** A consumer that lies in its wake word only delays its
//! own wake-ups. A producer that writes the word only causes spurious wakes.
//!
//! In sluice the completion ring's consumer (the client) sleeps with
//! `futex_wait` on the word itself; the daemon, which consumes many
//! submission rings, sets the word in every ring before it sleeps in
//! `epoll_wait` on one eventfd per client, which the client writes at P4.

use crate::ring::{Consumer, Producer, RingError};
use crate::sync::{fence, AtomicU32, Ordering};

/// Value of the wake word while the consumer is parked.
pub const PARKED: u32 = 1;
/// Value of the wake word otherwise.
pub const AWAKE: u32 = 0;

impl<T: Copy> Consumer<T> {
    /// Steps C1–C3: announces that we are about to sleep and re-checks the
    /// ring. Returns `Ok(true)` when it is safe to sleep (the ring is still
    /// empty), `Ok(false)` when an entry arrived (the park is cancelled and
    /// the word reset). After a sleep call [`Consumer::unpark`].
    pub fn prepare_park(&mut self) -> Result<bool, RingError> {
        let hdr = self.header();
        hdr.parked.store(PARKED, Ordering::Relaxed);
        // SYNC: SeqCst fence C2 pairs with the producer's fence P2 in
        // `Producer::needs_wake`: either it sees PARKED or we see its tail.
        fence(Ordering::SeqCst);
        if self.refresh()? != 0 {
            self.unpark();
            return Ok(false);
        }
        Ok(true)
    }

    /// Step C5: we are awake again (whether or not somebody woke us).
    pub fn unpark(&self) {
        self.header().parked.store(AWAKE, Ordering::Relaxed);
    }

    /// The wake word, for `futex_wait(word, PARKED)`.
    pub fn wake_word(&self) -> &AtomicU32 {
        &self.header().parked
    }

    /// Entries consumed so far (for diagnostics).
    pub fn consumed(&self) -> u32 {
        self.head()
    }
}

impl<T: Copy> Producer<T> {
    /// Steps P2–P4, called after one or more pushes: returns `true` exactly
    /// when the consumer is parked and this caller must wake it.
    #[inline]
    pub fn needs_wake(&self) -> bool {
        let hdr = self.header();
        // SYNC: SeqCst fence P2 pairs with the consumer's fence C2 in
        // `Consumer::prepare_park`.
        fence(Ordering::SeqCst);
        hdr.parked.load(Ordering::Relaxed) == PARKED
            && hdr.parked.swap(AWAKE, Ordering::Relaxed) == PARKED
    }

    /// The consumer's wake word, for `futex_wake(word)`.
    pub fn wake_word(&self) -> &AtomicU32 {
        &self.header().parked
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    //! Run with: `RUSTFLAGS="--cfg loom" cargo test -p shm-proto --release --lib loom`
    use crate::layout::Request;
    use crate::ring::heap::HeapRing;
    use crate::ring::PushError;
    use crate::sync::{AtomicU32, Ordering};
    use loom::sync::{Arc, Condvar, Mutex};

    /// A futex modelled with a mutex and condvar: `wait` sleeps only if the
    /// word still holds `expected` under the lock; `wake` takes the lock.
    #[derive(Default)]
    struct ModelFutex {
        lock: Mutex<()>,
        cv: Condvar,
    }

    impl ModelFutex {
        fn wait(&self, word: &AtomicU32, expected: u32) {
            let g = self.lock.lock().unwrap();
            if word.load(Ordering::SeqCst) == expected {
                drop(self.cv.wait(g).unwrap());
            }
        }
        fn wake(&self) {
            let _g = self.lock.lock().unwrap();
            self.cv.notify_all();
        }
    }

    fn req(id: u64) -> Request {
        Request {
            request_id: id,
            ..Request::default()
        }
    }

    /// The consumer parks whenever it finds the ring empty; the producer
    /// pushes `n` entries and wakes only when told to. If a wake-up could be
    /// lost, loom finds an interleaving where the consumer sleeps forever
    /// and reports a deadlock.
    fn park_model(n: u64, entries: u32) {
        loom::model(move || {
            let ring = Arc::new(HeapRing::<Request>::new(entries));
            let futex = Arc::new(ModelFutex::default());
            // SAFETY: the Arc keeps the ring alive in both threads.
            let (mut p, mut c) = unsafe { ring.split() };
            let (r2, f2) = (ring.clone(), futex.clone());
            let producer = loom::thread::spawn(move || {
                let _keep = r2;
                let mut i = 0;
                while i < n {
                    match p.push(req(i)) {
                        Ok(()) => {
                            i += 1;
                            if p.needs_wake() {
                                f2.wake();
                            }
                        }
                        Err(PushError::Full) => loom::thread::yield_now(),
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
                    None => {
                        if c.prepare_park().unwrap() {
                            futex.wait(c.wake_word(), super::PARKED);
                            c.unpark();
                        }
                    }
                }
            }
            producer.join().unwrap();
        });
    }

    #[test]
    fn loom_wake_no_lost_wakeup_one() {
        park_model(1, 2);
    }

    #[test]
    fn loom_wake_no_lost_wakeup_two() {
        park_model(2, 2);
    }

    /// Ring alone: every entry arrives once, in order, with a full ring in
    /// the way (capacity 2, three entries).
    #[test]
    fn loom_ring_spsc_order_and_full() {
        loom::model(|| {
            let ring = Arc::new(HeapRing::<Request>::new(2));
            // SAFETY: the Arc keeps the ring alive in both threads.
            let (mut p, mut c) = unsafe { ring.split() };
            let r2 = ring.clone();
            let producer = loom::thread::spawn(move || {
                let _keep = r2;
                let mut i = 0;
                while i < 3 {
                    match p.push(req(i)) {
                        Ok(()) => i += 1,
                        Err(PushError::Full) => loom::thread::yield_now(),
                        Err(e) => panic!("{e:?}"),
                    }
                }
            });
            let mut next = 0;
            while next < 3 {
                match c.pop().unwrap() {
                    Some(r) => {
                        assert_eq!(r.request_id, next);
                        next += 1;
                    }
                    None => loom::thread::yield_now(),
                }
            }
            producer.join().unwrap();
        });
    }
}
