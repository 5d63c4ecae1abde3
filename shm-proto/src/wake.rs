//! The hybrid notify/poll wake protocol.
//!
//! A consumer that finds its ring empty first *spins* for a while (the next
//! entry is usually near); only then does it *park*. Parking must not lose a
//! wake-up, and a producer must not pay for a syscall when nobody sleeps.
//! Each ring therefore carries a wake word, [`RingHeader::parked`](crate::RingHeader::parked), whose
//! encoding is:
//!
//! ```text
//! bit 0      PARKED: the consumer is asleep or about to sleep
//! bits 1-31  publish counter: +1 (i.e. +2) for every producer notification
//! ```
//!
//! The protocol is an *event count* (as in Linux's `eventcount`/folly's
//! `EventCount`) folded into one word, so that both sides meet in
//! read-modify-writes of the same location and no Dekker-style store/load
//! reordering argument (nor any `SeqCst` fence) is needed:
//!
//! ```text
//! consumer (to park)                          producer (after publishing)
//! ------------------                          ---------------------------
//! C0 head.store(head, Release) (publish)      P1 slot stamp store (Release)
//! C1 e = word.fetch_or(PARKED, Acquire)       P2 old = word.fetch_add(2, AcqRel)
//! C2 if stamp(slot[head]) ready (Acquire) {   P3 if old & PARKED {
//! C3 futex_wait(word, e | PARKED)                  word.fetch_and(!PARKED)
//!    (or epoll on an eventfd the producer         wake the consumer
//!    writes)                                       (futex_wake / eventfd) }
//! C4 word.fetch_and(!PARKED)
//! ```
//!
//! **No lost wake-up.** C1 and P2 are read-modify-writes of one word, so one
//! of them comes first in its modification order. If C1 is first, P2 reads
//! the PARKED bit and the producer wakes the consumer. If P2 is first, C1
//! reads P2's value (or a later one in its release sequence), so P1
//! happens-before C2 and the consumer sees the new stamp and does not sleep.
//! The sleep itself cannot miss a wake either: `futex_wait(word, e|PARKED)`
//! returns at once if any producer notified after C1 (the counter moved),
//! and an eventfd stays readable until read. C0 publishes the consumer's
//! batched head before it sleeps, so a producer waiting for room (or the
//! daemon for completion credit) is never left waiting on a sleeper. The
//! loom models below check this for the futex form, every interleaving, with
//! up to two entries, with a consumer that spins a bounded number of polls
//! before it parks (as the client's adaptive spin budget does) and with a
//! deferred head publication.
//!
//! C2 also reads the producer's `tail` (stored before each stamp) and
//! reports [`RingError::Corrupt`] for a value no honest producer writes:
//! the one place the consumer checks the producer's index.
//!
//! **Cost when nobody sleeps.** One uncontended `lock xadd` on a line only
//! the producer writes; no syscall. The consumer touches the line only when
//! it parks.
//!
//! **Hostile peers.** A consumer that lies in its wake word only delays its
//! own wake-ups. A producer that writes the word only causes spurious wakes.
//!
//! In sluice the completion ring's consumer (the client) sleeps with
//! `futex_wait` on the word itself; the daemon, which consumes many
//! submission rings, parks every ring before it sleeps in `epoll_wait` on one
//! eventfd per client, which the client writes at P3.

use crate::layout::Record;
use crate::ring::{Consumer, Producer, RingError};
use crate::sync::{AtomicU32, Ordering};

/// Bit 0 of the wake word: the consumer is parked.
pub const PARKED: u32 = 1;
/// What a producer notification adds to the wake word.
pub const NOTIFY: u32 = 2;

impl<T: Record, O> Consumer<T, O> {
    /// Steps C1–C2: announces that we are about to sleep and re-checks the
    /// ring. Returns `Ok(Some(expected))` when it is safe to sleep —
    /// `futex_wait(word, expected)` — and `Ok(None)` when an entry arrived
    /// (the park is cancelled). After a sleep call [`Consumer::unpark`].
    pub fn prepare_park(&mut self) -> Result<Option<u32>, RingError> {
        self.publish();
        // SYNC: Acquire pairs with the producer's AcqRel fetch_add in
        // `Producer::needs_wake`: if it came first, its stamp store is
        // visible to the `ready` check below.
        let e = self.header().parked.fetch_or(PARKED, Ordering::Acquire);
        if let Err(e) = self.refresh() {
            self.unpark();
            return Err(e);
        }
        if self.ready() {
            self.unpark();
            return Ok(None);
        }
        Ok(Some(e | PARKED))
    }

    /// Step C4: we are awake again (whether or not somebody woke us).
    pub fn unpark(&self) {
        self.header().parked.fetch_and(!PARKED, Ordering::Relaxed);
    }

    /// The wake word, for `futex_wait(word, expected)`.
    pub fn wake_word(&self) -> &AtomicU32 {
        &self.header().parked
    }

    /// Entries consumed so far (for diagnostics).
    pub fn consumed(&self) -> u32 {
        self.head()
    }
}

impl<T: Record, O> Producer<T, O> {
    /// Steps P2–P3, called after one or more pushes: returns `true` exactly
    /// when the consumer has parked and this caller must wake it.
    #[inline]
    pub fn needs_wake(&self) -> bool {
        let word = &self.header().parked;
        // SYNC: AcqRel pairs with the consumer's Acquire fetch_or in
        // `Consumer::prepare_park` (see the module docs).
        let old = word.fetch_add(NOTIFY, Ordering::AcqRel);
        if old & PARKED != 0 {
            word.fetch_and(!PARKED, Ordering::Relaxed);
            true
        } else {
            false
        }
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
    use crate::ring::PushError;
    use crate::ring::heap::HeapRing;
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

    /// Loom's explorer, bounded to three preemptions per execution unless
    /// `LOOM_MAX_PREEMPTIONS` says otherwise (loom's docs: bugs need few
    /// preemptions; unbounded, the three-entry models run for hours).
    fn bounded() -> loom::model::Builder {
        let mut b = loom::model::Builder::new();
        if b.preemption_bound.is_none() {
            b.preemption_bound = Some(3);
        }
        b
    }

    fn req(id: u64) -> Request {
        Request {
            request_id: id,
            ..Request::default()
        }
    }

    /// The consumer polls the ring up to `spins` times when it finds it
    /// empty (the client's spin budget, bounded), then parks; the producer
    /// pushes `n` entries and wakes only when told to. The consumer
    /// publishes its head every `batch` entries or when it finds the ring
    /// empty, so with `n > entries` the producer depends on that batched
    /// publication for room. If a wake-up could be lost, or a head never
    /// published, loom finds an interleaving where a thread waits forever
    /// and reports a deadlock.
    fn park_model(n: u64, entries: u32, spins: u32, batch: u32) {
        bounded().check(move || {
            let ring = Arc::new(HeapRing::<Request>::new(entries));
            let futex = Arc::new(ModelFutex::default());
            // SAFETY: the Arc keeps the ring alive in both threads.
            let (mut p, mut c) = unsafe { ring.split() };
            c.set_publish_batch(batch);
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
            let mut polls = 0;
            while next < n {
                match c.pop().unwrap() {
                    Some(r) => {
                        assert_eq!(r.request_id, next);
                        next += 1;
                        polls = 0;
                    }
                    None if polls < spins => {
                        polls += 1;
                        loom::thread::yield_now();
                    }
                    None => {
                        polls = 0;
                        if let Some(expected) = c.prepare_park().unwrap() {
                            futex.wait(c.wake_word(), expected);
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
        park_model(1, 2, 0, 1);
    }

    #[test]
    fn loom_wake_no_lost_wakeup_two() {
        park_model(2, 2, 0, 1);
    }

    /// A bounded spin before the park (the adaptive budget's shape).
    #[test]
    fn loom_wake_spin_then_park() {
        park_model(2, 2, 1, 1);
    }

    /// More entries than slots, head published only every two entries or
    /// on an empty poll: the producer waits for room on a consumer that
    /// may be about to sleep.
    #[test]
    fn loom_wake_batched_head_publication() {
        park_model(3, 2, 0, 2);
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
