//! Multi-kernel idempotence: where to restart a task whose kernel was killed.
//!
//! Reset-based preemption (REEF, TOCS 2025, §4.4 "Restoring Preempted Tasks")
//! kills a best-effort kernel mid-flight and later restores the task by
//! re-executing kernels. Re-running only the killed kernel is correct when the
//! kernel is idempotent; an in-place kernel (residual add, in-place ReLU, …)
//! may already have overwritten its own input, so re-running it alone can give
//! a different result. REEF's answer is the *idempotent group*: consecutive
//! kernels `K_i..=K_k` that are idempotent as a whole. Re-executing from `K_i`
//! then reproduces an uninterrupted run. This module finds, for every kernel
//! `k`, the smallest such group ending at `k`; the guide is
//! `docs/idempotent-groups.md`.
//!
//! # Model
//!
//! A model's trace is a sequence of GPU operations in launch order: kernels,
//! and also memory copies and memsets (REEF traces all three; a memset is an
//! operation with writes and no reads). Each operation `K_m` has a read set
//! `R_m` and a write set `W_m` of device-memory bytes ([`KernelAccess`], as
//! half-open [`ByteRange`]s). The trace must say:
//!
//! - **reads**: every byte the operation may read. Extra bytes are safe; they
//!   only make groups larger.
//! - **writes**: exactly the bytes the operation writes on every complete run.
//!   A byte written only on some runs (data-dependent scatter) must be
//!   declared as both read and written: it then counts as an input, which is
//!   the conservative answer. A write that is declared but not performed can
//!   make a non-idempotent group look idempotent.
//!
//! Operations are deterministic: what an operation writes is a function of the
//! bytes it reads (REEF §7 lists this among the limits of reset-based
//! preemption).
//!
//! # Semantics
//!
//! For a group `G = K_i..=K_j`:
//!
//! - `outputs(G) = W_i ∪ … ∪ W_j`, every byte some operation of `G` writes;
//! - `inputs(G) = ⋃_{m=i..=j} (R_m − (W_i ∪ … ∪ W_{m-1}))`, every byte some
//!   operation of `G` reads before any *earlier* operation of `G` writes it.
//!   An operation's own writes are not subtracted from its reads: an operation
//!   that reads and writes the same byte may read it before writing it (that
//!   is what an in-place op does), so the byte is an input;
//! - `G` is **idempotent** iff `inputs(G) ∩ outputs(G) = ∅`.
//!
//! A single kernel is therefore idempotent iff `R ∩ W = ∅`. The definition is
//! the paper's "free from clobber anti-dependencies" condition stated per byte:
//! every byte the group accesses is either only read, or first accessed by a
//! write (from an operation that does not also read it). The empty group is
//! idempotent.
//!
//! ## Why restarting from the group start is correct
//!
//! Let `G = K_i..=K_k` be idempotent, `K_0..K_{k-1}` complete and `K_k` killed
//! after writing any subset of `W_k` with any values (or not started, or
//! already finished). Every byte changed since `K_i` started lies in
//! `outputs(G)`, which is disjoint from `inputs(G)`, so every input byte still
//! holds its value from `K_i`'s start. Re-run `K_i, …, K_k`: by induction each
//! `K_m` reads either input bytes (unchanged) or bytes last written by an
//! earlier operation of the re-run (same values), so it reads what it read in
//! the uninterrupted run and writes the same values. After `K_k`, each byte of
//! `outputs(G)` has been rewritten by its last writer in `G` (writes are
//! exact), and no byte outside `outputs(G)` was touched since `K_i` started, so
//! memory equals the uninterrupted run's memory after `K_k`; `K_{k+1}..` then
//! proceed identically. The machine-model property test in this module checks
//! exactly this on random traces and random kill points.
//!
//! Groups are *prefix-closed*: for `i ≤ m ≤ k`, `inputs(K_i..=K_m) ⊆
//! inputs(K_i..=K_k)` and likewise for outputs, so a prefix of an idempotent
//! group is idempotent. This is the paper's wording ("no matter at which kernel
//! the execution is interrupted, it can be restarted from the first kernel of
//! the group"). Groups are **not** suffix-closed, and idempotence is **not**
//! monotone when a group grows backwards: `K1` reading X and writing Y is
//! idempotent, but `(K0, K1)` with `K0` reading Y and writing X is not.
//!
//! # Algorithm
//!
//! [`minimal_groups`] follows the paper: for kernel `k`, start with `G = K_k`
//! and add predecessors one at a time until `G` is idempotent. The first
//! idempotent group found is the minimal one ending at `k` (it has the largest
//! start), whether or not larger groups would also be idempotent. In the
//! worst case the search reaches kernel 0; if even `K_0..=K_k` is not
//! idempotent, no restart point exists and [`minimal_groups`] reports
//! [`NoIdempotentGroup`].
//!
//! Extending `G' = K_i..=K_j` to `G = K_{i-1}..=K_j` updates the sets
//! incrementally instead of recomputing them:
//!
//! ```text
//! inputs(G)  = R_{i-1} ∪ (inputs(G') − W_{i-1})
//! outputs(G) = W_{i-1} ∪ outputs(G')
//! ```
//!
//! The output rule is immediate. For inputs, a byte `b` is in `inputs(G)` iff
//! some `K_m` of `G` reads `b` and no operation of `G` before `K_m` writes it.
//! If `m = i-1`, nothing precedes `K_m` in `G`, so every byte of `R_{i-1}` is
//! an input. If `m ≥ i`, the operations of `G` before `K_m` are `K_{i-1}` and
//! those of `G'` before `K_m`, so the condition is "`b` ∈ `inputs(G')` and
//! `b ∉ W_{i-1}`". The union of the two cases is the rule above.
//!
//! All sets are [`RangeSet`]s (sorted, disjoint, non-adjacent ranges), so
//! union, difference and intersection are linear merges over ranges and a
//! tensor buffer costs one range whatever its size. With `r` ranges in a
//! group's sets, one backward step costs `O(r)`; the search for kernel `k` with
//! a group of `g` kernels costs `O(g · r)`. Over `n` kernels this is
//! `O(n · g² · r̄)` for typical small groups (REEF reports at most 9 kernels)
//! and `O(n² · R)` in the worst case, where every search reaches kernel 0 and
//! `R` is the total range count of the trace.
//!
//! # Figure 9
//!
//! The text of REEF's Figure 9 walk-through gives only K3 and the group
//! results; the tests reconstruct K0–K2 consistently with it (bytes A–F are
//! offsets 0–5): K0 reads A, B and writes C, D; K1 reads C and writes E; K2
//! reads D and writes F; K3 reads C, E and writes E. K3 alone and `(K2, K3)`
//! are not idempotent (E is input and output), `(K1, K2, K3)` is, with inputs
//! {C, D} and outputs {E, F}, as in the paper. The paper goes on to say that
//! both `(K0..K3)` and `(K1..K3)` are idempotent "but the former is smaller";
//! that is a typo: `(K1, K2, K3)` is the smaller group and the one chosen.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A half-open range of device-memory bytes, `start..end`.
///
/// As with [`std::ops::Range`], a range with `end <= start` is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ByteRange {
    /// First byte in the range.
    pub start: u64,
    /// One past the last byte in the range.
    pub end: u64,
}

impl ByteRange {
    /// The range `start..end`.
    pub const fn new(start: u64, end: u64) -> Self {
        Self { start, end }
    }

    /// Whether the range holds no byte (`end <= start`).
    pub const fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// Number of bytes in the range (0 when empty).
    pub const fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
}

impl fmt::Display for ByteRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}..{:#x}", self.start, self.end)
    }
}

/// The device-memory bytes one operation (kernel, memcpy, memset) of a trace
/// reads and writes. See the module docs for what the trace must declare.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelAccess {
    /// Bytes the operation may read; ranges may overlap and come in any order.
    #[serde(default)]
    pub reads: Vec<ByteRange>,
    /// Bytes the operation writes on every complete run; ranges may overlap and
    /// come in any order.
    #[serde(default)]
    pub writes: Vec<ByteRange>,
}

/// A set of bytes as sorted, disjoint, non-adjacent, non-empty ranges.
///
/// The representation is canonical: two sets hold the same bytes iff their
/// range lists are equal. Every operation is a linear merge over ranges and
/// never expands a range into bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// Invariant: every range is non-empty and `ranges[i].end <
    /// ranges[i + 1].start`.
    ranges: Vec<ByteRange>,
}

impl RangeSet {
    /// The empty set.
    pub const fn new() -> Self {
        Self { ranges: Vec::new() }
    }

    /// The canonical ranges, in increasing order.
    pub fn ranges(&self) -> &[ByteRange] {
        &self.ranges
    }

    /// Whether the set holds no byte.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Number of bytes in the set.
    pub fn byte_len(&self) -> u64 {
        self.ranges.iter().map(ByteRange::len).sum()
    }

    /// Whether `byte` is in the set (binary search).
    pub fn contains(&self, byte: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.end <= byte);
        self.ranges.get(i).is_some_and(|r| r.start <= byte)
    }

    /// Appends `r`, which must not start before the last range's start,
    /// merging it with the last range when they overlap or touch.
    fn push_merge(&mut self, r: ByteRange) {
        if r.is_empty() {
            return;
        }
        match self.ranges.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => self.ranges.push(r),
        }
    }

    /// Bytes in `self` or `other`.
    pub fn union(&self, other: &Self) -> Self {
        let (a, b) = (&self.ranges, &other.ranges);
        let mut out = Self {
            ranges: Vec::with_capacity(a.len() + b.len()),
        };
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            let take_a = j == b.len() || (i < a.len() && a[i].start <= b[j].start);
            if take_a {
                out.push_merge(a[i]);
                i += 1;
            } else {
                out.push_merge(b[j]);
                j += 1;
            }
        }
        out
    }

    /// Bytes in `self` and not in `other`.
    pub fn difference(&self, other: &Self) -> Self {
        let b = &other.ranges;
        let mut out = Vec::with_capacity(self.ranges.len());
        // `j` skips ranges of `b` that end before the current range of `self`
        // starts; they end before every later range of `self` too.
        let mut j = 0;
        for &a in &self.ranges {
            let mut cur = a.start;
            while j < b.len() && b[j].end <= cur {
                j += 1;
            }
            let mut k = j;
            while k < b.len() && b[k].start < a.end {
                if b[k].start > cur {
                    out.push(ByteRange::new(cur, b[k].start));
                }
                cur = cur.max(b[k].end);
                if cur >= a.end {
                    break;
                }
                k += 1;
            }
            if cur < a.end {
                out.push(ByteRange::new(cur, a.end));
            }
        }
        // Pieces of one range of `self` are separated by ranges of `other`,
        // pieces of different ranges by gaps of `self`: still canonical.
        Self { ranges: out }
    }

    /// Bytes in both `self` and `other`.
    pub fn intersection(&self, other: &Self) -> Self {
        let (a, b) = (&self.ranges, &other.ranges);
        let mut out = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            let lo = a[i].start.max(b[j].start);
            let hi = a[i].end.min(b[j].end);
            if lo < hi {
                out.push(ByteRange::new(lo, hi));
            }
            if a[i].end <= b[j].end {
                i += 1;
            } else {
                j += 1;
            }
        }
        // Two pieces that touched would put both sides of the seam in one
        // range of `self` and one range of `other`, hence in one piece.
        Self { ranges: out }
    }

    /// Whether `self` and `other` share a byte.
    pub fn intersects(&self, other: &Self) -> bool {
        let (a, b) = (&self.ranges, &other.ranges);
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            if a[i].start.max(b[j].start) < a[i].end.min(b[j].end) {
                return true;
            }
            if a[i].end <= b[j].end {
                i += 1;
            } else {
                j += 1;
            }
        }
        false
    }
}

impl FromIterator<ByteRange> for RangeSet {
    /// Builds the canonical set from ranges in any order, overlapping or not;
    /// empty ranges are dropped.
    fn from_iter<I: IntoIterator<Item = ByteRange>>(iter: I) -> Self {
        let mut v: Vec<ByteRange> = iter.into_iter().filter(|r| !r.is_empty()).collect();
        v.sort_unstable_by_key(|r| r.start);
        let mut out = Self {
            ranges: Vec::with_capacity(v.len()),
        };
        for r in v {
            out.push_merge(r);
        }
        out
    }
}

impl<'a> FromIterator<&'a ByteRange> for RangeSet {
    fn from_iter<I: IntoIterator<Item = &'a ByteRange>>(iter: I) -> Self {
        iter.into_iter().copied().collect()
    }
}

/// An operation's canonical read and write sets.
fn access_sets(k: &KernelAccess) -> (RangeSet, RangeSet) {
    (k.reads.iter().collect(), k.writes.iter().collect())
}

/// Whether the operations `kernels`, run in order, form an idempotent group:
/// the bytes they read before an earlier operation of the group writes them
/// are disjoint from the bytes they write (module docs, "Semantics").
///
/// The empty group is idempotent. This computes the definition forwards; it
/// is independent of the backward search in [`minimal_groups`].
pub fn is_idempotent(kernels: &[KernelAccess]) -> bool {
    let mut inputs = RangeSet::new();
    let mut outputs = RangeSet::new();
    for k in kernels {
        let (reads, writes) = access_sets(k);
        // Subtract only earlier operations' writes: `outputs` does not hold
        // this operation's writes yet.
        inputs = inputs.union(&reads.difference(&outputs));
        outputs = outputs.union(&writes);
    }
    !inputs.intersects(&outputs)
}

/// Some kernel has no idempotent group: not even the whole prefix ending at
/// it is idempotent, so no restart point reproduces an uninterrupted run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "kernel {kernel} has no idempotent group: kernels 0..={kernel} read bytes {clobbered} \
     before overwriting them, so no restart point reproduces an uninterrupted run; start the \
     trace with the operation that writes those bytes (e.g. the input upload), or preempt \
     this model by waiting for kernels instead of killing them"
)]
pub struct NoIdempotentGroup {
    /// The first kernel (lowest index) without a group.
    pub kernel: usize,
    /// The lowest range of bytes that `K_0..=K_kernel` both reads as input
    /// and writes.
    pub clobbered: ByteRange,
}

/// For every kernel `k`, the start of the minimal idempotent group ending at
/// `k` (`k` itself when `K_k` alone is idempotent).
///
/// Searches backwards from each kernel as REEF does, updating the group's
/// inputs and outputs incrementally (module docs, "Algorithm"). The result
/// satisfies `groups[k] <= k`, `is_idempotent(&kernels[groups[k]..=k])`, and no
/// later start ending at `k` is idempotent.
///
/// # Errors
///
/// [`NoIdempotentGroup`] names the first kernel for which even
/// `K_0..=K_k` is not idempotent.
pub fn minimal_groups(kernels: &[KernelAccess]) -> Result<Vec<usize>, NoIdempotentGroup> {
    let sets: Vec<(RangeSet, RangeSet)> = kernels.iter().map(access_sets).collect();
    let mut starts = Vec::with_capacity(kernels.len());
    for (k, (reads, writes)) in sets.iter().enumerate() {
        // Fast path: most kernels are idempotent alone.
        if !reads.intersects(writes) {
            starts.push(k);
            continue;
        }
        let mut inputs = reads.clone();
        let mut outputs = writes.clone();
        let mut i = k;
        while inputs.intersects(&outputs) {
            if i == 0 {
                let clobbered = inputs.intersection(&outputs).ranges()[0];
                return Err(NoIdempotentGroup {
                    kernel: k,
                    clobbered,
                });
            }
            i -= 1;
            let (r, w) = &sets[i];
            inputs = r.union(&inputs.difference(w));
            outputs = outputs.union(w);
        }
        starts.push(i);
    }
    Ok(starts)
}

/// Where to restart a task whose kernel `first_unfinished` was interrupted:
/// the start of that kernel's minimal idempotent group.
///
/// `groups` is the output of [`minimal_groups`] for the task's model.
/// `first_unfinished` is the lowest kernel index that had not completed when
/// the task was killed: every earlier kernel completed, and this one may have
/// run partly, completely, or not at all (in REEF, the global execution index
/// that each kernel stores when it starts). The task re-launches kernels
/// `restore_point(..)..` in order. `first_unfinished == groups.len()` means
/// the whole task completed; the answer is then `groups.len()`, nothing to
/// re-launch.
///
/// # Panics
///
/// If `first_unfinished > groups.len()`, or if `groups[first_unfinished] >
/// first_unfinished` (not a [`minimal_groups`] result): restarting past the
/// interrupted kernel would silently skip it.
pub fn restore_point(groups: &[usize], first_unfinished: usize) -> usize {
    assert!(
        first_unfinished <= groups.len(),
        "restore_point: interrupted kernel {first_unfinished} is past the end of a \
         {}-kernel model; the execution index does not belong to this model",
        groups.len()
    );
    let Some(&start) = groups.get(first_unfinished) else {
        return first_unfinished;
    };
    assert!(
        start <= first_unfinished,
        "restore_point: group of kernel {first_unfinished} starts at {start}, after it; \
         recompute the groups with minimal_groups"
    );
    start
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn r(start: u64, end: u64) -> ByteRange {
        ByteRange::new(start, end)
    }

    /// One operation reading and writing single bytes.
    fn k(reads: &[u64], writes: &[u64]) -> KernelAccess {
        KernelAccess {
            reads: reads.iter().map(|&b| r(b, b + 1)).collect(),
            writes: writes.iter().map(|&b| r(b, b + 1)).collect(),
        }
    }

    // Figure 9's bytes.
    const A: u64 = 0;
    const B: u64 = 1;
    const C: u64 = 2;
    const D: u64 = 3;
    const E: u64 = 4;
    const F: u64 = 5;

    /// REEF Figure 9, with K0–K2 reconstructed from the walk-through (module
    /// docs, "Figure 9").
    fn figure9() -> Vec<KernelAccess> {
        vec![
            k(&[A, B], &[C, D]), // K0
            k(&[C], &[E]),       // K1
            k(&[D], &[F]),       // K2
            k(&[C, E], &[E]),    // K3
        ]
    }

    #[test]
    fn figure9_walkthrough() {
        let ks = figure9();
        // K3 reads C, E and writes E: not idempotent.
        assert!(!is_idempotent(&ks[3..=3]));
        // (K2, K3): E is still input and output.
        assert!(!is_idempotent(&ks[2..=3]));
        // (K1, K2, K3): inputs {C, D}, outputs {E, F}.
        assert!(is_idempotent(&ks[1..=3]));
        // The whole trace is idempotent too, but larger.
        assert!(is_idempotent(&ks[0..=3]));
        // K0..K2 are idempotent alone.
        for i in 0..3 {
            assert!(is_idempotent(&ks[i..=i]), "K{i}");
        }
        assert_eq!(minimal_groups(&ks), Ok(vec![0, 1, 2, 1]));
    }

    #[test]
    fn figure9_group_sets() {
        // The sets the paper names for (K1, K2, K3), built the way the
        // backward search builds them.
        let ks = figure9();
        let (mut inputs, mut outputs) = access_sets(&ks[3]);
        for kernel in ks[1..3].iter().rev() {
            let (rd, wr) = access_sets(kernel);
            inputs = rd.union(&inputs.difference(&wr));
            outputs = outputs.union(&wr);
        }
        assert_eq!(inputs.ranges(), &[r(C, D + 1)]);
        assert_eq!(outputs.ranges(), &[r(E, F + 1)]);
    }

    #[test]
    fn single_idempotent_kernels_are_their_own_groups() {
        let ks = vec![
            k(&[0, 1], &[2]),
            k(&[2], &[3]),
            KernelAccess {
                reads: vec![],
                writes: vec![r(10, 20)],
            }, // memset
            k(&[], &[]),
            k(&[3, 10], &[4, 5]),
        ];
        for i in 0..ks.len() {
            assert!(is_idempotent(&ks[i..=i]));
        }
        assert_eq!(minimal_groups(&ks), Ok(vec![0, 1, 2, 3, 4]));
        assert!(is_idempotent(&[]));
        assert_eq!(minimal_groups(&[]), Ok(vec![]));
    }

    #[test]
    fn in_place_relu_groups_with_its_producer() {
        // Buffers: W 0..4096 (weights), X 4096..8192, Y 8192..12288.
        let w = r(0, 4096);
        let x = r(4096, 8192);
        let y = r(8192, 12288);
        let ks = vec![
            KernelAccess {
                reads: vec![w],
                writes: vec![x],
            }, // K0: X = f(W)
            KernelAccess {
                reads: vec![x, w],
                writes: vec![y],
            }, // K1: Y = conv(X, W)
            KernelAccess {
                reads: vec![y],
                writes: vec![y],
            }, // K2: Y = relu(Y), in place
        ];
        assert!(!is_idempotent(&ks[2..=2]));
        assert!(is_idempotent(&ks[1..=2]));
        assert_eq!(minimal_groups(&ks), Ok(vec![0, 1, 1]));
        assert_eq!(restore_point(&[0, 1, 1], 2), 1);
    }

    /// `n` operations: K0 writes the accumulator from the input, every later
    /// one updates it in place. The accumulator is `ranges` separate ranges.
    fn accumulation_chain(n: usize, ranges: u64) -> Vec<KernelAccess> {
        let input = r(0, 1 << 20);
        let acc: Vec<ByteRange> = (0..ranges)
            .map(|i| r((2 + 2 * i) << 20, (3 + 2 * i) << 20))
            .collect();
        let mut ks = vec![KernelAccess {
            reads: vec![input],
            writes: acc.clone(),
        }];
        ks.extend((1..n).map(|_| KernelAccess {
            reads: acc.clone(),
            writes: acc.clone(),
        }));
        ks
    }

    #[test]
    fn in_place_chain_reaches_kernel_zero() {
        let ks = accumulation_chain(6, 3);
        assert_eq!(minimal_groups(&ks), Ok(vec![0; 6]));
        for i in 1..6 {
            assert!(!is_idempotent(&ks[i..]), "group from {i}");
        }
        assert!(is_idempotent(&ks));
    }

    #[test]
    fn model_sized_worst_case() {
        // 440 kernels (REEF Table 1's largest TVM model has about this many),
        // every group reaching kernel 0, 64 ranges per buffer: the O(n² R)
        // worst case. Checks the result, not the time.
        let ks = accumulation_chain(440, 64);
        assert_eq!(minimal_groups(&ks), Ok(vec![0; 440]));
    }

    #[test]
    fn no_group_is_reported_with_the_clobbered_bytes() {
        // K0 updates the model input in place; nothing earlier writes it.
        let ks = vec![k(&[0], &[1]), k(&[1, 5, 6], &[5, 6])];
        let err = minimal_groups(&ks).unwrap_err();
        assert_eq!(
            err,
            NoIdempotentGroup {
                kernel: 1,
                clobbered: r(5, 7)
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("kernel 1") && msg.contains("0x5..0x7"),
            "{msg}"
        );
    }

    #[test]
    fn growing_backwards_can_break_idempotence() {
        // K1 alone is idempotent; (K0, K1) is not. The search never looks
        // past K1's own group.
        let ks = vec![k(&[1], &[0]), k(&[0], &[1])];
        assert!(is_idempotent(&ks[1..]));
        assert!(!is_idempotent(&ks));
        assert_eq!(minimal_groups(&ks), Ok(vec![0, 1]));
    }

    #[test]
    fn write_then_read_in_one_kernel_counts_as_input() {
        // Scratch read and written by the same kernel: the order inside a
        // kernel is unknown, so it is an input.
        assert!(!is_idempotent(&[k(&[3], &[3])]));
        // Written by an earlier kernel of the group first: not an input.
        assert!(is_idempotent(&[k(&[], &[3]), k(&[3], &[3])]));
    }

    #[test]
    fn restore_point_edges() {
        let groups = [0, 1, 1, 3];
        assert_eq!(restore_point(&groups, 0), 0);
        assert_eq!(restore_point(&groups, 2), 1);
        assert_eq!(restore_point(&groups, 3), 3);
        assert_eq!(restore_point(&groups, 4), 4);
    }

    #[test]
    #[should_panic(expected = "past the end")]
    fn restore_point_rejects_index_past_end() {
        restore_point(&[0, 1], 3);
    }

    #[test]
    #[should_panic(expected = "starts at 2, after it")]
    fn restore_point_rejects_group_after_kernel() {
        restore_point(&[0, 2], 1);
    }

    #[test]
    fn range_set_basics() {
        let s: RangeSet = [r(5, 8), r(0, 2), r(2, 3), r(7, 10), r(4, 4), r(9, 1)]
            .into_iter()
            .collect();
        assert_eq!(s.ranges(), &[r(0, 3), r(5, 10)]);
        assert_eq!(s.byte_len(), 8);
        assert!(s.contains(0) && s.contains(2) && !s.contains(3) && s.contains(9));
        assert!(!s.contains(10));
        // Ranges near the top of the address space.
        let top: RangeSet = [r(u64::MAX - 4, u64::MAX)].into_iter().collect();
        assert_eq!(top.byte_len(), 4);
        assert!(top.contains(u64::MAX - 1) && !top.contains(u64::MAX));
    }

    #[test]
    fn access_round_trips_through_json() {
        let json = r#"{"reads":[{"start":0,"end":4096}],"writes":[{"start":4096,"end":8192}]}"#;
        let a: KernelAccess = serde_json::from_str(json).unwrap();
        assert_eq!(a.reads, vec![r(0, 4096)]);
        assert_eq!(serde_json::to_string(&a).unwrap(), json);
        // A memset has no reads.
        let m: KernelAccess = serde_json::from_str(r#"{"writes":[{"start":0,"end":1}]}"#).unwrap();
        assert!(m.reads.is_empty());
        assert!(serde_json::from_str::<KernelAccess>(r#"{"reads":[],"writes":[],"x":1}"#).is_err());
    }

    // ---- Brute-force references on small byte-level traces ----

    /// Bytes 0..MEM.
    const MEM: u64 = 12;

    fn bytes(ranges: &[ByteRange]) -> BTreeSet<u64> {
        ranges.iter().flat_map(|r| r.start..r.end).collect()
    }

    /// The paper's per-byte condition: every byte the group accesses is
    /// either never written, or its first access is a write. Within one
    /// operation a read comes before a write.
    fn brute_is_idempotent(ks: &[KernelAccess]) -> bool {
        let all: BTreeSet<u64> = ks
            .iter()
            .flat_map(|k| bytes(&k.reads).into_iter().chain(bytes(&k.writes)))
            .collect();
        all.into_iter().all(|b| {
            let events = ks.iter().flat_map(|k| {
                let rd = bytes(&k.reads).contains(&b).then_some('r');
                let wr = bytes(&k.writes).contains(&b).then_some('w');
                rd.into_iter().chain(wr)
            });
            let events: Vec<char> = events.collect();
            !events.contains(&'w') || events[0] == 'w'
        })
    }

    /// Bytes read by an operation before any earlier operation writes them.
    fn brute_inputs(ks: &[KernelAccess]) -> BTreeSet<u64> {
        let mut written = BTreeSet::new();
        let mut inputs = BTreeSet::new();
        for ka in ks {
            inputs.extend(bytes(&ka.reads).difference(&written));
            written.extend(bytes(&ka.writes));
        }
        inputs
    }

    fn brute_minimal_groups(ks: &[KernelAccess]) -> Vec<Option<usize>> {
        (0..ks.len())
            .map(|k| (0..=k).rev().find(|&i| brute_is_idempotent(&ks[i..=k])))
            .collect()
    }

    fn range_strategy() -> impl Strategy<Value = ByteRange> {
        (0..MEM, 0..=4u64).prop_map(|(s, len)| r(s, (s + len).min(MEM)))
    }

    fn kernel_strategy() -> impl Strategy<Value = KernelAccess> {
        (
            prop::collection::vec(range_strategy(), 0..=3),
            prop::collection::vec(range_strategy(), 0..=2),
        )
            .prop_map(|(reads, writes)| KernelAccess { reads, writes })
    }

    fn trace_strategy() -> impl Strategy<Value = Vec<KernelAccess>> {
        prop::collection::vec(kernel_strategy(), 0..=8)
    }

    // ---- A tiny deterministic machine ----

    fn mix(mut h: u64, v: u64) -> u64 {
        h ^= v;
        h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^ (h >> 29)
    }

    /// What operation `idx` writes to each byte of its write set, given
    /// memory before it runs: a hash of its identity, the byte, and every
    /// byte it reads.
    fn kernel_output(mem: &[u64], idx: usize, ka: &KernelAccess) -> Vec<(u64, u64)> {
        let seed = bytes(&ka.reads)
            .into_iter()
            .fold(mix(0, idx as u64), |h, b| mix(mix(h, b), mem[b as usize]));
        bytes(&ka.writes)
            .into_iter()
            .map(|b| (b, mix(seed, b)))
            .collect()
    }

    fn run_kernel(mem: &mut [u64], idx: usize, ka: &KernelAccess) {
        for (b, v) in kernel_output(mem, idx, ka) {
            mem[b as usize] = v;
        }
    }

    fn run(mem: &mut [u64], ks: &[KernelAccess], from: usize) {
        for (i, ka) in ks.iter().enumerate().skip(from) {
            run_kernel(mem, i, ka);
        }
    }

    /// Runs `ks` from scratch, kills kernel `cut` after it wrote bytes as
    /// `fate` says (0: untouched, 1: its correct value, 2: garbage), restarts
    /// from `restart`, and returns the final memory.
    fn interrupted_run(
        init: &[u64],
        ks: &[KernelAccess],
        cut: usize,
        fate: &[u8],
        garbage: &[u64],
        restart: usize,
    ) -> Vec<u64> {
        let mut mem = init.to_vec();
        for (i, ka) in ks.iter().enumerate().take(cut) {
            run_kernel(&mut mem, i, ka);
        }
        if let Some(ka) = ks.get(cut) {
            for (b, v) in kernel_output(&mem, cut, ka) {
                match fate[b as usize] {
                    0 => {}
                    1 => mem[b as usize] = v,
                    _ => mem[b as usize] = garbage[b as usize],
                }
            }
        }
        run(&mut mem, ks, restart);
        mem
    }

    #[test]
    fn machine_detects_restart_from_non_idempotent_kernel() {
        // Sanity check of the machine: K3 of Figure 9 updates E in place, so
        // restarting from K3 after it wrote E gives a different E, while
        // restarting from its group start does not.
        let ks = figure9();
        let init: Vec<u64> = (0..MEM).map(|b| b * 7 + 1).collect();
        let mut want = init.clone();
        run(&mut want, &ks, 0);
        let fate = [1u8; MEM as usize];
        let garbage = [0u64; MEM as usize];
        let wrong = interrupted_run(&init, &ks, 3, &fate, &garbage, 3);
        assert_ne!(wrong, want);
        let groups = minimal_groups(&ks).unwrap();
        let right = interrupted_run(&init, &ks, 3, &fate, &garbage, restore_point(&groups, 3));
        assert_eq!(right, want);
    }

    proptest! {
        // The cases are cheap; more of them reach the rarer in-place patterns.
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn range_set_ops_match_byte_sets(
            a in prop::collection::vec(range_strategy(), 0..=5),
            b in prop::collection::vec(range_strategy(), 0..=5),
        ) {
            let (sa, sb): (RangeSet, RangeSet) = (a.iter().collect(), b.iter().collect());
            let (ba, bb) = (bytes(&a), bytes(&b));
            for s in [&sa, &sb] {
                for w in s.ranges().windows(2) {
                    prop_assert!(w[0].end < w[1].start, "not canonical: {:?}", s);
                }
                prop_assert!(s.ranges().iter().all(|r| !r.is_empty()));
            }
            prop_assert_eq!(bytes(sa.ranges()), ba.clone());
            let u = sa.union(&sb);
            prop_assert_eq!(&u, &ba.union(&bb).map(|&x| r(x, x + 1)).collect());
            let d = sa.difference(&sb);
            prop_assert_eq!(&d, &ba.difference(&bb).map(|&x| r(x, x + 1)).collect());
            let i = sa.intersection(&sb);
            prop_assert_eq!(&i, &ba.intersection(&bb).map(|&x| r(x, x + 1)).collect());
            prop_assert_eq!(sa.intersects(&sb), !ba.is_disjoint(&bb));
            for x in 0..MEM {
                prop_assert_eq!(sa.contains(x), ba.contains(&x));
            }
        }

        #[test]
        fn is_idempotent_matches_brute_force(ks in trace_strategy()) {
            prop_assert_eq!(is_idempotent(&ks), brute_is_idempotent(&ks));
        }

        #[test]
        fn minimal_groups_match_brute_force(ks in trace_strategy()) {
            let want = brute_minimal_groups(&ks);
            match minimal_groups(&ks) {
                Ok(groups) => {
                    let want: Vec<usize> = want.into_iter().map(Option::unwrap).collect();
                    prop_assert_eq!(&groups, &want);
                    // Prefix closure: restarting from the group start is
                    // right wherever in the group the kill lands.
                    for (kk, &g) in groups.iter().enumerate() {
                        for m in g..=kk {
                            prop_assert!(is_idempotent(&ks[g..=m]));
                        }
                    }
                }
                Err(e) => {
                    let first = want.iter().position(Option::is_none);
                    prop_assert_eq!(Some(e.kernel), first);
                    let ck = bytes(&[e.clobbered]);
                    prop_assert!(!ck.is_empty());
                    let prefix = &ks[..=e.kernel];
                    let writes: BTreeSet<u64> =
                        prefix.iter().flat_map(|x| bytes(&x.writes)).collect();
                    let inputs = brute_inputs(prefix);
                    for b in ck {
                        prop_assert!(inputs.contains(&b) && writes.contains(&b), "byte {}", b);
                    }
                }
            }
        }

        /// REEF's claim, on a model machine: a task killed at any kernel and
        /// restored from that kernel's idempotent group ends with the same
        /// memory as an uninterrupted run.
        #[test]
        fn restore_reproduces_uninterrupted_run(
            trace in trace_strategy(),
            upload in any::<bool>(),
            init in prop::collection::vec(any::<u64>(), MEM as usize),
            cut in any::<prop::sample::Index>(),
            fate in prop::collection::vec(0u8..3, MEM as usize),
            garbage in prop::collection::vec(any::<u64>(), MEM as usize),
        ) {
            // Half the traces start by uploading the whole memory, which
            // guarantees every kernel a group.
            let mut ks = Vec::new();
            if upload {
                ks.push(KernelAccess { reads: vec![], writes: vec![r(0, MEM)] });
            }
            ks.extend(trace);
            let Ok(groups) = minimal_groups(&ks) else {
                prop_assert!(!upload);
                return Ok(());
            };
            let mut want = init.clone();
            run(&mut want, &ks, 0);
            let cut = cut.index(ks.len() + 1);
            let restart = restore_point(&groups, cut);
            prop_assert!(restart <= cut);
            let got = interrupted_run(&init, &ks, cut, &fate, &garbage, restart);
            prop_assert_eq!(got, want);
        }
    }
}
