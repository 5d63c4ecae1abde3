//! Shared (cross-process) futex wait and wake on a ring's wake word.
//!
//! These are the only syscalls in `shm-proto`. The words live in a
//! `MAP_SHARED` memfd mapping, so the futexes are *not* `FUTEX_PRIVATE`.

use core::sync::atomic::AtomicU32;
use core::time::Duration;

use rustix::thread::futex;

/// Sleeps while `*word == expected`, at most `timeout`. Returns early on a
/// wake, a changed word, a signal, or a spurious wake-up; callers re-check.
/// Returns `false` when it did not sleep at all because the word had
/// already changed (`EAGAIN`).
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    let ts = timeout.map(|t| futex::Timespec {
        tv_sec: t.as_secs() as _,
        tv_nsec: t.subsec_nanos() as _,
    });
    // EAGAIN (word changed), EINTR and ETIMEDOUT all mean "re-check".
    !matches!(
        futex::wait(word, futex::Flags::empty(), expected, ts.as_ref()),
        Err(rustix::io::Errno::AGAIN)
    )
}

/// Wakes every waiter on `word`. Returns how many were woken.
pub fn wake_all(word: &AtomicU32) -> usize {
    futex::wake(word, futex::Flags::empty(), i32::MAX as u32).unwrap_or(0)
}
