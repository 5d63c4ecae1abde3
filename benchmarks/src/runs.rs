//! What the benchmarks that run many independent simulations share: a work
//! queue over worker threads that returns results in point order, and their
//! progress lines.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Progress of a benchmark's runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Runs done.
    pub done: usize,
    /// Runs in all.
    pub total: usize,
}

/// A progress line on stderr, `"\r{label}: done/total runs (s)"`, ended
/// with a newline after the last run.
pub fn stderr_progress(label: &'static str) -> impl FnMut(Progress) + Send {
    let start = std::time::Instant::now();
    move |p: Progress| {
        eprint!(
            "\r{label}: {}/{} runs ({:.1} s)",
            p.done,
            p.total,
            start.elapsed().as_secs_f64()
        );
        if p.done == p.total {
            eprintln!();
        }
    }
}

/// Runs `work` on every point, `jobs` (at least 1) at a time, taking points
/// in order from a shared counter (so put the longest first); `progress`
/// sees each finished run. Returns the results in the order of `points`.
pub fn run_all<P: Sync, O: Send>(
    points: &[P],
    jobs: usize,
    work: impl Fn(&P) -> O + Sync,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Vec<O> {
    let total = points.len();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, O)>> = Mutex::new(Vec::with_capacity(total));
    let progress = Mutex::new(progress);
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, total.max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(pt) = points.get(i) else { return };
                    let o = work(pt);
                    let done = {
                        let mut r = results.lock().unwrap_or_else(|e| e.into_inner());
                        r.push((i, o));
                        r.len()
                    };
                    let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
                    (*p)(Progress { done, total });
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, o)| o).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_point_order_and_progress_counts_every_run() {
        let points: Vec<u64> = (0..50).rev().collect();
        let mut seen = Vec::new();
        let out = run_all(&points, 4, |&p| p * 2, &mut |p| seen.push(p));
        assert_eq!(out, points.iter().map(|p| p * 2).collect::<Vec<_>>());
        assert_eq!(seen.len(), 50);
        assert!(seen.iter().all(|p| p.total == 50));
        assert_eq!(seen.iter().map(|p| p.done).max(), Some(50));
    }
}
