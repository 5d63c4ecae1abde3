//! The one clock of sluice: `CLOCK_MONOTONIC` in nanoseconds.
//!
//! Every timestamp and deadline that crosses the boundary
//! ([`crate::Request::deadline_ns`], [`crate::Completion::received_ns`] and
//! the other `*_ns` fields) is read from this clock, on both sides. It lives
//! here, next to the records that carry it, so the daemon and the client
//! library cannot drift apart.
//!
//! Behind the `clock` feature (on by default), like [`crate::futex`]: it is
//! one of the crate's two uses of the OS, through `rustix` (no `std`).

/// `CLOCK_MONOTONIC` in nanoseconds since an unspecified start (boot, on
/// Linux), through the vDSO: no syscall on the usual architectures.
///
/// The value wraps only after 584 years of uptime.
#[inline]
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // `tv_sec >= 0` and `0 <= tv_nsec < 10^9` for CLOCK_MONOTONIC.
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::now_ns;

    #[test]
    fn monotonic_and_nonzero() {
        let a = now_ns();
        let b = now_ns();
        assert!(a > 0);
        assert!(b >= a, "CLOCK_MONOTONIC went back: {a} then {b}");
    }

    #[test]
    fn agrees_with_std_instant_scale() {
        // Same clock as std's Instant on Linux: elapsed time measured both
        // ways differs by far less than a second (no wall-clock bound on
        // how long the sleep takes; only the two measurements are compared).
        let (a, i) = (now_ns(), std::time::Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(2));
        let (b, j) = (now_ns(), std::time::Instant::now());
        let ours = b - a;
        let std_ns = j.duration_since(i).as_nanos() as u64;
        assert!(ours.abs_diff(std_ns) < 1_000_000_000, "{ours} vs {std_ns}");
    }
}
