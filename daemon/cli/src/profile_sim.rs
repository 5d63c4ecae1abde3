//! `sluice profile --device <profile> MODEL`: a model's latency at every
//! batch size and partition size on the GPU model, L(b, p), the input the
//! multi-GPU planners take (`sluice-planner`, gpulet §3–4).
//!
//! Each point runs one request of the model alone on a fresh simulated
//! device, its kernels in order on one stream (host pushes, fetches and
//! launches as the model charges them), at batch `b` (batch-scaled kernels
//! have `b` times the blocks: [`sluice_model::Model::batch_scaled`],
//! [`KernelLaunch::at_batch`]) and with the stream confined to the lowest
//! ⌈p % × CUs⌉ CUs ([`GpuSim::set_partition`]). It reports the time to the
//! last kernel's end and the mean memory-bandwidth demand over the run.

use serde::Serialize;
use sluice_gpu::{DeviceProfile, Event, KernelLaunch, Ns};
use sluice_gpusim::GpuSim;
use sluice_model::Model;

/// Default batch sizes (gpulet's profiles).
pub const DEFAULT_BATCHES: [u32; 6] = [1, 2, 4, 8, 16, 32];
/// Default partition sizes, percent of the CUs.
pub const DEFAULT_PARTITIONS: [u32; 10] = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100];

/// One (batch, partition) point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LbpRow {
    /// Batch size.
    pub batch: u32,
    /// Partition size asked for, percent of the device's CUs.
    pub partition_pct: u32,
    /// CUs that makes: ⌈pct × CUs / 100⌉.
    pub cus: u32,
    /// Time from the first launch to the last kernel's end, ms.
    pub latency_ms: f64,
    /// Mean memory-bandwidth demand over the run (share of the device's).
    pub mem_demand: f64,
    /// Blocks over all kernels at this batch.
    pub blocks: u64,
}

/// The whole profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LbpReport {
    /// Always true: these are the GPU model's figures.
    pub simulated: bool,
    /// Device profile name.
    pub device: String,
    /// Model name.
    pub model: String,
    /// Where the model's kernels come from (its manifest's provenance).
    pub provenance: String,
    /// Kernels, and how many of them grow with the batch.
    pub kernels: usize,
    /// Kernels whose grid grows with the batch.
    pub batch_scaled_kernels: usize,
    /// How batches and partitions are made.
    pub rule: String,
    /// Points, batch-major.
    pub rows: Vec<LbpRow>,
}

/// Why a profile could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LbpError {
    /// A batch size of 0 or above the limit.
    #[error("batch size {0} is outside 1..=4096; give batch sizes like 1,2,4,8")]
    BadBatch(u32),
    /// A partition size outside 1..=100.
    #[error("partition size {0}% is outside 1..=100; give percentages like 10,20,...,100")]
    BadPartition(u32),
    /// The model refused by the device.
    #[error("{model} at batch {batch} on {pct}% of `{device}`: {source}")]
    Device {
        /// Model.
        model: String,
        /// Batch.
        batch: u32,
        /// Partition, percent.
        pct: u32,
        /// Device profile.
        device: String,
        /// The device's reason.
        #[source]
        source: sluice_gpu::OpError,
    },
}

/// CUs of a `pct` % partition of `profile`.
pub fn partition_cus(profile: &DeviceProfile, pct: u32) -> u32 {
    (u64::from(profile.compute_units) * u64::from(pct))
        .div_ceil(100)
        .clamp(1, u64::from(profile.compute_units)) as u32
}

/// One request of `model` at `batch` on the lowest `cus` CUs: (latency ns,
/// mean bandwidth demand, blocks).
pub fn run_point(
    profile: &DeviceProfile,
    model: &Model,
    batch: u32,
    cus: u32,
) -> Result<(Ns, f64, u64), sluice_gpu::OpError> {
    let scaled = model.batch_scaled();
    let mut gpu = GpuSim::new(profile.clone());
    let s = gpu.create_stream(0);
    if cus < profile.compute_units {
        let part: Vec<u32> = (0..cus).collect();
        gpu.set_partition(s, Some(&part))?;
    }
    let mut blocks = 0u64;
    for (i, k) in model.manifest.kernels.iter().enumerate() {
        let l = KernelLaunch::from_model(k, i as u64).at_batch(batch, scaled[i]);
        blocks += u64::from(l.grid_blocks);
        gpu.launch(s, l)?;
    }
    let mut end = 0;
    while let Some(e) = gpu.step() {
        if let Event::KernelFinished { t, .. } = e {
            end = t;
        }
    }
    Ok((end, gpu.mean_bandwidth_demand(), blocks))
}

/// L(b, p) for every batch and partition, reporting progress to
/// `progress(done, total)`.
pub fn profile(
    profile: &DeviceProfile,
    model: &Model,
    batches: &[u32],
    partitions: &[u32],
    mut progress: impl FnMut(usize, usize),
) -> Result<LbpReport, LbpError> {
    if let Some(&b) = batches.iter().find(|&&b| b == 0 || b > 4096) {
        return Err(LbpError::BadBatch(b));
    }
    if let Some(&p) = partitions.iter().find(|&&p| p == 0 || p > 100) {
        return Err(LbpError::BadPartition(p));
    }
    let total = batches.len() * partitions.len();
    let mut rows = Vec::with_capacity(total);
    for &batch in batches {
        for &pct in partitions {
            let cus = partition_cus(profile, pct);
            let (ns, demand, blocks) =
                run_point(profile, model, batch, cus).map_err(|source| LbpError::Device {
                    model: model.name().to_owned(),
                    batch,
                    pct,
                    device: profile.name.clone(),
                    source,
                })?;
            rows.push(LbpRow {
                batch,
                partition_pct: pct,
                cus,
                latency_ms: ns as f64 / 1e6,
                mem_demand: (demand * 1e4).round() / 1e4,
                blocks,
            });
            progress(rows.len(), total);
        }
    }
    let scaled = model.batch_scaled();
    Ok(LbpReport {
        simulated: true,
        device: profile.name.clone(),
        model: model.name().to_owned(),
        provenance: model.manifest.provenance.clone(),
        kernels: scaled.len(),
        batch_scaled_kernels: scaled.iter().filter(|&&s| s).count(),
        rule: "one request alone on a fresh simulated device, kernels in order on one stream; \
               batch b: kernels that read batch-sized data (a data flow from the input over \
               the manifest's memory ranges) have b times the blocks, same footprint and wave \
               times; partition p%: the stream's blocks only on the lowest ceil(p x CUs / 100) \
               CUs; latency: first launch to the last kernel's end"
            .into(),
        rows,
    })
}

/// The report as a table: one row per batch, one column per partition.
pub fn table(r: &LbpReport) -> String {
    let mut parts: Vec<u32> = r.rows.iter().map(|x| x.partition_pct).collect();
    parts.dedup();
    parts.sort_unstable();
    parts.dedup();
    let mut out = format!(
        "L(b, p) of {} on `{}` (simulated), ms; {} of {} kernels grow with the batch\n\
         batch \\ CUs %",
        r.model, r.device, r.batch_scaled_kernels, r.kernels
    );
    for p in &parts {
        out += &format!(" {p:>8}");
    }
    out.push('\n');
    let mut batches: Vec<u32> = r.rows.iter().map(|x| x.batch).collect();
    batches.dedup();
    for b in batches {
        out += &format!("{b:>13}");
        for p in &parts {
            match r
                .rows
                .iter()
                .find(|x| x.batch == b && x.partition_pct == *p)
            {
                Some(x) => out += &format!(" {:>8.3}", x.latency_ms),
                None => out += "        -",
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use shm_proto::Priority;
    use sluice_model::ModelRegistry;
    use sluice_sched::seq::Seq;
    use sluice_sched::workload::{self, Arrival, ClientSpec, Workload};

    #[test]
    fn latency_falls_with_more_cus_and_grows_with_the_batch() {
        let reg = ModelRegistry::builtin();
        let (id, m) = reg.lookup("resnet18").unwrap();
        let p = DeviceProfile::mi50();
        let r = profile(&p, m, &[1, 8, 32], &[20, 50, 100], |_, _| {}).unwrap();
        assert_eq!(r.rows.len(), 9);
        let l = |b: u32, pct: u32| {
            r.rows
                .iter()
                .find(|x| x.batch == b && x.partition_pct == pct)
                .unwrap()
                .latency_ms
        };
        for b in [1, 8, 32] {
            assert!(
                l(b, 20) >= l(b, 50) && l(b, 50) >= l(b, 100),
                "batch {b}: {r:?}"
            );
        }
        for pct in [20, 50, 100] {
            assert!(l(1, pct) < l(8, pct) && l(8, pct) < l(32, pct), "{pct}%");
        }
        // gpulet Fig. 4's shape: a large batch gains more from 50 -> 100 %
        // than batch 1 does.
        let gain = |b: u32| l(b, 50) / l(b, 100);
        assert!(
            gain(32) > gain(1),
            "gain b32 {} vs b1 {}",
            gain(32),
            gain(1)
        );
        // Batch 1 on the whole device is the model's standalone time as
        // the workload driver measures it: one request under `seq`.
        let w = Workload {
            clients: vec![ClientSpec {
                priority: Priority::BestEffort,
                model: id,
                arrival: Arrival::Trace(vec![0]),
            }],
            duration_ns: 1,
        };
        let models = std::sync::Arc::new(reg.clone());
        let run = workload::run_on(&mut GpuSim::new(p.clone()), &models, &mut Seq::new(), &w);
        let alone = run.done[0].finished as f64 / 1e6;
        assert!((l(1, 100) - alone).abs() < 1e-9, "{} vs {alone}", l(1, 100));
        assert!(table(&r).contains("resnet18"));
    }

    #[test]
    fn bad_sizes_are_refused_with_the_value() {
        let reg = ModelRegistry::builtin();
        let (_, m) = reg.lookup("resnet18").unwrap();
        let p = DeviceProfile::mi50();
        let e = profile(&p, m, &[0], &[100], |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("batch size 0"), "{e}");
        let e = profile(&p, m, &[1], &[101], |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("101%"), "{e}");
        assert_eq!(partition_cus(&p, 1), 1);
        assert_eq!(partition_cus(&p, 50), 30);
        assert_eq!(partition_cus(&p, 100), 60);
    }
}
