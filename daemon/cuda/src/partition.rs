//! Spatial partitions on CUDA: which green context a partition asked for by
//! CUs (SMs) becomes.
//!
//! The policies ask [`sluice_gpu::Gpu::set_partition`] for a set of CUs, as
//! the GPU model takes it. CUDA cannot confine a stream to chosen SMs; a
//! green context (CUDA ≥ 12.4) gets a number of SMs from a split of the
//! device's SM resource, and only groups of one split are guaranteed
//! disjoint. So [`CudaGpu`](crate::CudaGpu) splits the device once into
//! granules ([`SmGranules`]: 8 SMs each on compute capability 9.x, so 16
//! granules and 4 SMs left over on an H100 SXM's 132) and maps a CU set
//! onto granules:
//!
//! - CU `c` lies in granule `min(c / granule_sms, granules - 1)` (the SMs
//!   left over by the split count as part of the last granule);
//! - the partition is every granule holding a requested CU: it has at least
//!   the SMs asked for, rounded up to whole granules, and partitions of
//!   disjoint CU ranges at granule boundaries get disjoint SMs;
//! - a set touching every granule is the whole device (the primary
//!   context's stream, leftover SMs included), as is `None`.
//!
//! A count `n` ([`for_count`], `CudaGpu::prepare_partition`) means the lowest
//! `n` CUs, like `sluice profile`'s partitions on the GPU model.
//!
//! Green contexts are cached by granule set and never destroyed, and each
//! stream keeps its stream in every partition it has been in, so switching
//! back and forth creates nothing.

use crate::driver::{GranuleSet, SmGranules};

/// What a partition becomes on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionInfo {
    /// The granules of its green context (every granule when
    /// `whole_device`).
    pub granules: GranuleSet,
    /// SMs its kernels may use.
    pub sms: u32,
    /// It is the whole device: no green context, the primary context's
    /// stream.
    pub whole_device: bool,
}

fn whole(layout: &SmGranules) -> PartitionInfo {
    PartitionInfo {
        granules: layout.all(),
        sms: layout.sm_count,
        whole_device: true,
    }
}

fn of_set(layout: &SmGranules, set: GranuleSet) -> PartitionInfo {
    if set == layout.all() {
        whole(layout)
    } else {
        PartitionInfo {
            granules: set,
            sms: layout.sms(set),
            whole_device: false,
        }
    }
}

/// The rounding rule, for error messages.
fn rule(layout: &SmGranules) -> String {
    format!(
        "partitions are whole granules of {} SMs (compute capability {}.{}), {} of them, and \
         every granule is the whole device of {} SMs",
        layout.granule_sms,
        layout.compute_capability.0,
        layout.compute_capability.1,
        layout.granules,
        layout.sm_count
    )
}

/// The partition holding the CUs `cus`; `Err` says what is wrong with them
/// and what to give instead.
pub fn for_cus(layout: &SmGranules, cus: &[u32]) -> Result<PartitionInfo, String> {
    if cus.is_empty() {
        return Err("no CUs given; give at least one, or none for the whole device".to_owned());
    }
    if layout.granules == 0 {
        return Err(format!(
            "the device's {} SMs are fewer than one granule of {}; use the whole device (None)",
            layout.sm_count, layout.granule_sms
        ));
    }
    let mut set = GranuleSet::default();
    for &c in cus {
        if c >= layout.sm_count {
            return Err(format!(
                "CU {c} does not exist: the device has SMs 0..{}",
                layout.sm_count
            ));
        }
        set.0 |= 1 << (c / layout.granule_sms).min(layout.granules - 1);
    }
    Ok(of_set(layout, set))
}

/// The partition of the lowest `sm_count` SMs, rounded up to whole
/// granules; `Err` for 0 or more SMs than the device has.
pub fn for_count(layout: &SmGranules, sm_count: u32) -> Result<PartitionInfo, String> {
    if sm_count == 0 || sm_count > layout.sm_count {
        return Err(format!(
            "a partition of {sm_count} SMs: give 1..={} SMs ({}; a count is rounded up), or \
             use the whole device",
            layout.sm_count,
            rule(layout)
        ));
    }
    let all: Vec<u32> = (0..sm_count).collect();
    for_cus(layout, &all)
}

/// SMs of a partition of `pct` % of the device (⌈pct × SMs / 100⌉ CUs,
/// the GPU model's rule), rounded as [`for_count`] rounds.
pub fn for_percent(layout: &SmGranules, pct: u32) -> Result<PartitionInfo, String> {
    if pct == 0 || pct > 100 {
        return Err(format!(
            "partition size {pct}% is outside 1..=100; give percentages like 25,50,75,100"
        ));
    }
    let n = (u64::from(layout.sm_count) * u64::from(pct)).div_ceil(100) as u32;
    for_count(layout, n.max(1))
}
