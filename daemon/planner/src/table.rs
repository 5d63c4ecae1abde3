//! Profiled execution latency `L(b, p)`: one batch of `b` requests on a
//! partition holding `p` percent of a GPU, running alone.
//!
//! The table holds only measured points. There is no interpolation: a
//! planner chooses only listed batch sizes and only listed partition sizes,
//! and [`LatencyTable::latency_ms`] answers `None` for anything else. A
//! profile measured at batches 1, 2, 4, …, 32 and partitions 10 %, 20 %, …,
//! 100 therefore never yields a batch of 3 or a partition of 35 %.
//!
//! Validation at construction enforces what every planner relies on:
//!
//! - batch sizes are ≥ 1 and strictly ascending; partition sizes are in
//!   `1..=100` and strictly ascending;
//! - every entry is a positive, finite number of milliseconds;
//! - at a fixed partition, a larger batch never runs faster
//!   (`L(b₁, p) ≤ L(b₂, p)` for `b₁ < b₂`);
//! - at a fixed batch, a larger partition never runs slower
//!   (`L(b, p₁) ≥ L(b, p₂)` for `p₁ < p₂`).
//!
//! Equal neighbours are allowed (a small batch often gains nothing from more
//! of the GPU, the flat part past the knee in the gpulet paper's Figure 4).
//! A measured table that violates the last two rules by noise has to be
//! re-measured or smoothed by the operator; the error names the entry and
//! the bound it must respect.

/// `L(b, p)` in milliseconds over listed batch and partition sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyTable {
    batches: Vec<u32>,
    parts_pct: Vec<u32>,
    /// Row-major: `ms[bi * parts_pct.len() + pi]` is `L(batches[bi], parts_pct[pi])`.
    ms: Vec<f64>,
}

/// Why a latency table was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TableError {
    /// No batch sizes or no partition sizes.
    #[error(
        "the latency table lists no {what}; list at least one (for example batches 1, 2, 4, 8 and partitions 10, 20, …, 100)"
    )]
    Empty {
        /// `"batch sizes"` or `"partition sizes"`.
        what: &'static str,
    },
    /// A batch size of 0.
    #[error("the latency table lists batch size 0; batch sizes start at 1")]
    ZeroBatch,
    /// A partition size outside `1..=100`.
    #[error(
        "the latency table lists partition size {pct}%, outside 1..=100; give partition sizes in percent of one GPU"
    )]
    PartitionOutOfRange {
        /// The size given.
        pct: u32,
    },
    /// Sizes out of order or repeated.
    #[error(
        "{what} must be strictly ascending, but entry {index} is {value} after {prev}; sort them and drop repeats"
    )]
    NotAscending {
        /// `"batch sizes"` or `"partition sizes"`.
        what: &'static str,
        /// Index of the offending entry.
        index: usize,
        /// The entry before it.
        prev: u32,
        /// The offending entry.
        value: u32,
    },
    /// The number of rows is not the number of batch sizes.
    #[error(
        "the latency table has {rows} rows but {batches} batch sizes; give one row per batch size"
    )]
    Rows {
        /// Rows given.
        rows: usize,
        /// Batch sizes listed.
        batches: usize,
    },
    /// A row's length is not the number of partition sizes.
    #[error(
        "the latency row for batch {batch} has {len} entries but {parts} partition sizes are listed; give one entry per partition size"
    )]
    RowLength {
        /// The row's batch size.
        batch: u32,
        /// Entries given.
        len: usize,
        /// Partition sizes listed.
        parts: usize,
    },
    /// An entry that is not a positive finite latency.
    #[error("L({batch}, {pct}%) = {ms} ms is not a positive finite latency; measure it again")]
    BadEntry {
        /// Batch size.
        batch: u32,
        /// Partition size.
        pct: u32,
        /// The value given.
        ms: f64,
    },
    /// A larger batch measured faster than a smaller one.
    #[error(
        "L({batch_hi}, {pct}%) = {ms_hi} ms is below L({batch_lo}, {pct}%) = {ms_lo} ms, but a larger batch never runs faster; re-measure, or raise L({batch_hi}, {pct}%) to at least {ms_lo} ms"
    )]
    BatchNotMonotone {
        /// Partition size of both entries.
        pct: u32,
        /// The smaller batch.
        batch_lo: u32,
        /// Its latency.
        ms_lo: f64,
        /// The larger batch.
        batch_hi: u32,
        /// Its (smaller) latency.
        ms_hi: f64,
    },
    /// A larger partition measured slower than a smaller one.
    #[error(
        "L({batch}, {pct_hi}%) = {ms_hi} ms exceeds L({batch}, {pct_lo}%) = {ms_lo} ms, but a larger partition never runs slower; re-measure, or lower L({batch}, {pct_hi}%) to at most {ms_lo} ms"
    )]
    PartitionNotMonotone {
        /// Batch size of both entries.
        batch: u32,
        /// The smaller partition.
        pct_lo: u32,
        /// Its latency.
        ms_lo: f64,
        /// The larger partition.
        pct_hi: u32,
        /// Its (larger) latency.
        ms_hi: f64,
    },
}

fn ascending(what: &'static str, v: &[u32]) -> Result<(), TableError> {
    if v.is_empty() {
        return Err(TableError::Empty { what });
    }
    for (index, w) in v.windows(2).enumerate() {
        if w[1] <= w[0] {
            return Err(TableError::NotAscending {
                what,
                index: index + 1,
                prev: w[0],
                value: w[1],
            });
        }
    }
    Ok(())
}

impl LatencyTable {
    /// Builds a table from `rows[i][j] = L(batches[i], parts_pct[j])` in ms,
    /// checking every rule in the module docs.
    pub fn new(
        batches: Vec<u32>,
        parts_pct: Vec<u32>,
        rows: Vec<Vec<f64>>,
    ) -> Result<Self, TableError> {
        ascending("batch sizes", &batches)?;
        ascending("partition sizes", &parts_pct)?;
        if batches[0] == 0 {
            return Err(TableError::ZeroBatch);
        }
        if let Some(&pct) = parts_pct.iter().find(|&&p| p == 0 || p > 100) {
            return Err(TableError::PartitionOutOfRange { pct });
        }
        if rows.len() != batches.len() {
            return Err(TableError::Rows {
                rows: rows.len(),
                batches: batches.len(),
            });
        }
        for (row, &batch) in rows.iter().zip(&batches) {
            if row.len() != parts_pct.len() {
                return Err(TableError::RowLength {
                    batch,
                    len: row.len(),
                    parts: parts_pct.len(),
                });
            }
            for (&ms, &pct) in row.iter().zip(&parts_pct) {
                if !(ms.is_finite() && ms > 0.0) {
                    return Err(TableError::BadEntry { batch, pct, ms });
                }
            }
            for (j, w) in row.windows(2).enumerate() {
                if w[1] > w[0] {
                    return Err(TableError::PartitionNotMonotone {
                        batch,
                        pct_lo: parts_pct[j],
                        ms_lo: w[0],
                        pct_hi: parts_pct[j + 1],
                        ms_hi: w[1],
                    });
                }
            }
        }
        for (i, pair) in rows.windows(2).enumerate() {
            for (j, &pct) in parts_pct.iter().enumerate() {
                if pair[1][j] < pair[0][j] {
                    return Err(TableError::BatchNotMonotone {
                        pct,
                        batch_lo: batches[i],
                        ms_lo: pair[0][j],
                        batch_hi: batches[i + 1],
                        ms_hi: pair[1][j],
                    });
                }
            }
        }
        Ok(Self {
            batches,
            parts_pct,
            ms: rows.into_iter().flatten().collect(),
        })
    }

    /// Builds a table by evaluating `f(batch, pct)` at every listed point
    /// (a device model, or a test's closed form), with the same checks as
    /// [`LatencyTable::new`].
    pub fn from_fn(
        batches: Vec<u32>,
        parts_pct: Vec<u32>,
        f: impl Fn(u32, u32) -> f64,
    ) -> Result<Self, TableError> {
        let rows = batches
            .iter()
            .map(|&b| parts_pct.iter().map(|&p| f(b, p)).collect())
            .collect();
        Self::new(batches, parts_pct, rows)
    }

    /// The listed batch sizes, ascending.
    pub fn batches(&self) -> &[u32] {
        &self.batches
    }

    /// The listed partition sizes in percent, ascending.
    pub fn partitions_pct(&self) -> &[u32] {
        &self.parts_pct
    }

    /// `L(batch, pct)` in ms, or `None` unless both are listed.
    pub fn latency_ms(&self, batch: u32, pct: u32) -> Option<f64> {
        let bi = self.batches.binary_search(&batch).ok()?;
        let pi = self.parts_pct.binary_search(&pct).ok()?;
        Some(self.ms[bi * self.parts_pct.len() + pi])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_only_listed_points() {
        let t = LatencyTable::new(
            vec![1, 4],
            vec![50, 100],
            vec![vec![2.0, 1.5], vec![6.0, 3.0]],
        )
        .unwrap();
        assert_eq!(t.latency_ms(4, 50), Some(6.0));
        assert_eq!(t.latency_ms(1, 100), Some(1.5));
        assert_eq!(t.latency_ms(2, 100), None, "batch 2 is not listed");
        assert_eq!(t.latency_ms(1, 75), None, "75% is not listed");
    }

    #[test]
    fn refuses_shape_and_order_errors() {
        let e = LatencyTable::new(vec![1, 1], vec![100], vec![vec![1.0], vec![1.0]]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "batch sizes must be strictly ascending, but entry 1 is 1 after 1; sort them and drop repeats"
        );
        let e = LatencyTable::new(vec![1], vec![100, 50], vec![vec![1.0, 1.0]]).unwrap_err();
        assert!(matches!(
            e,
            TableError::NotAscending {
                what: "partition sizes",
                ..
            }
        ));
        let e = LatencyTable::new(vec![0], vec![100], vec![vec![1.0]]).unwrap_err();
        assert_eq!(e, TableError::ZeroBatch);
        let e = LatencyTable::new(vec![1], vec![120], vec![vec![1.0]]).unwrap_err();
        assert_eq!(e, TableError::PartitionOutOfRange { pct: 120 });
        let e = LatencyTable::new(vec![1, 2], vec![100], vec![vec![1.0]]).unwrap_err();
        assert_eq!(
            e,
            TableError::Rows {
                rows: 1,
                batches: 2
            }
        );
        let e = LatencyTable::new(vec![1], vec![50, 100], vec![vec![1.0]]).unwrap_err();
        assert!(
            e.to_string()
                .contains("batch 1 has 1 entries but 2 partition sizes")
        );
        let e = LatencyTable::new(vec![], vec![100], vec![]).unwrap_err();
        assert_eq!(
            e,
            TableError::Empty {
                what: "batch sizes"
            }
        );
        let e = LatencyTable::new(vec![1], vec![100], vec![vec![f64::NAN]]).unwrap_err();
        assert!(matches!(
            e,
            TableError::BadEntry {
                batch: 1,
                pct: 100,
                ..
            }
        ));
    }

    #[test]
    fn refuses_non_monotone_entries_naming_them() {
        // Batch 8 measured faster than batch 4 on 50 %.
        let e = LatencyTable::new(
            vec![4, 8],
            vec![50, 100],
            vec![vec![3.5, 2.0], vec![3.0, 2.5]],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "L(8, 50%) = 3 ms is below L(4, 50%) = 3.5 ms, but a larger batch never runs faster; re-measure, or raise L(8, 50%) to at least 3.5 ms"
        );
        // Batch 4 measured slower on 60 % than on 40 %.
        let e = LatencyTable::new(vec![4], vec![40, 60], vec![vec![4.0, 5.0]]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "L(4, 60%) = 5 ms exceeds L(4, 40%) = 4 ms, but a larger partition never runs slower; re-measure, or lower L(4, 60%) to at most 4 ms"
        );
        // Flat runs are fine.
        LatencyTable::new(
            vec![1, 2],
            vec![50, 100],
            vec![vec![1.0, 1.0], vec![1.0, 1.0]],
        )
        .unwrap();
    }
}
