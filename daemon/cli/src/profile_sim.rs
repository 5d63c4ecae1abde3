//! `sluice profile --device <profile> MODEL`: a model's latency at every
//! batch size and partition size on the GPU model, L(b, p), the input the
//! multi-GPU planners take (`sluice-planner`, gpulet §3–4).
//!
//! The points are measured by [`sluice_gpusim::lbp`] (one request alone on
//! a fresh simulated device, batch-scaled grids, the stream confined to the
//! lowest ⌈p % × CUs⌉ CUs); this module reports them.

use serde::Serialize;
use sluice_gpu::DeviceProfile;
use sluice_gpusim::lbp;
pub use sluice_gpusim::lbp::{
    DEFAULT_BATCHES, DEFAULT_PARTITIONS, LbpError, partition_cus, run_point,
};
use sluice_model::Model;

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

/// L(b, p) for every batch and partition ([`lbp::measure`]), reporting
/// progress to `progress(done, total)`.
pub fn profile(
    profile: &DeviceProfile,
    model: &Model,
    batches: &[u32],
    partitions: &[u32],
    progress: impl FnMut(usize, usize),
) -> Result<LbpReport, LbpError> {
    let rows = lbp::measure(profile, model, batches, partitions, progress)?
        .into_iter()
        .map(|x| LbpRow {
            batch: x.batch,
            partition_pct: x.partition_pct,
            cus: x.cus,
            latency_ms: x.latency_ns as f64 / 1e6,
            mem_demand: (x.mem_demand * 1e4).round() / 1e4,
            blocks: x.blocks,
        })
        .collect();
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

/// Why an entry (a profile, a split) could not be written into a manifest.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The file is there but unreadable or not JSON.
    #[error("cannot read the manifest {path} to add its `{key}` entry to: {why}")]
    Read {
        /// The file.
        path: String,
        /// The list the entry goes into.
        key: &'static str,
        /// Why.
        why: String,
    },
    /// No such file and no built-in manifest to start from.
    #[error("{path} does not exist and there is no built-in manifest of {model} to start from")]
    NoBase {
        /// The file.
        path: String,
        /// The model.
        model: String,
    },
    /// The result would not load back.
    #[error("the manifest with the entry added does not validate: {0}")]
    Invalid(String),
    /// Writing failed.
    #[error("cannot write {path}: {why}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
}

/// The report as the manifest's `lbp` entry.
pub fn lbp_table(r: &LbpReport) -> sluice_model::LbpTable {
    let mut batches: Vec<u32> = r.rows.iter().map(|x| x.batch).collect();
    batches.dedup();
    let mut parts: Vec<u32> = r.rows.iter().map(|x| x.partition_pct).collect();
    parts.sort_unstable();
    parts.dedup();
    let cell = |b: u32, p: u32, f: fn(&LbpRow) -> f64| {
        r.rows
            .iter()
            .find(|x| x.batch == b && x.partition_pct == p)
            .map_or(f64::NAN, f)
    };
    sluice_model::LbpTable {
        device: r.device.clone(),
        simulated: r.simulated,
        rule: r.rule.clone(),
        latency_ms: batches
            .iter()
            .map(|&b| {
                parts
                    .iter()
                    .map(|&p| cell(b, p, |x| x.latency_ms))
                    .collect()
            })
            .collect(),
        mem_demand: batches
            .iter()
            .map(|&b| {
                parts
                    .iter()
                    .map(|&p| cell(b, p, |x| x.mem_demand))
                    .collect()
            })
            .collect(),
        batches,
        partitions_pct: parts,
    }
}

/// Writes the profile into the manifest at `path` as its `lbp` entry for
/// the report's device (replacing an older entry of that device): the file
/// as it is when it exists, else the built-in manifest of the model.
/// Everything else in the file is kept as it was.
pub fn write_into_manifest(r: &LbpReport, path: &std::path::Path) -> Result<(), WriteError> {
    let entry =
        serde_json::to_value(lbp_table(r)).map_err(|e| WriteError::Invalid(e.to_string()))?;
    write_device_entry(&r.model, path, "lbp", &r.device, entry)
}

/// Puts `entry` into the list `key` (`lbp`, `splits`) of the manifest of
/// `model` at `path`, replacing the list's entry for the same `device`:
/// the file as it is when it exists, else the built-in manifest of the
/// model. Everything else in the file is kept; the result is validated by
/// parsing it back before it is written.
pub fn write_device_entry(
    model: &str,
    path: &std::path::Path,
    key: &'static str,
    device: &str,
    entry: serde_json::Value,
) -> Result<(), WriteError> {
    let shown = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            sluice_model::ModelRegistry::builtin_json(model)
                .ok_or_else(|| WriteError::NoBase {
                    path: shown.clone(),
                    model: model.to_owned(),
                })?
                .to_owned()
        }
        Err(e) => {
            return Err(WriteError::Read {
                path: shown,
                key,
                why: e.to_string(),
            });
        }
    };
    let mut v: serde_json::Value = serde_json::from_str(&text).map_err(|e| WriteError::Read {
        path: shown.clone(),
        key,
        why: e.to_string(),
    })?;
    let Some(obj) = v.as_object_mut() else {
        return Err(WriteError::Read {
            path: shown,
            key,
            why: "not a JSON object".into(),
        });
    };
    let list = obj
        .entry(key)
        .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    let Some(list) = list.as_array_mut() else {
        return Err(WriteError::Read {
            path: shown,
            key,
            why: format!("its \"{key}\" is not a list"),
        });
    };
    list.retain(|t| t.get("device").and_then(|d| d.as_str()) != Some(device));
    list.push(entry);
    let out = serde_json::to_string_pretty(&v).map_err(|e| WriteError::Invalid(e.to_string()))?;
    sluice_model::Manifest::parse(&shown, &out).map_err(|e| WriteError::Invalid(e.to_string()))?;
    std::fs::write(path, out + "\n").map_err(|e| WriteError::Write {
        path: shown,
        why: e.to_string(),
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
    use sluice_gpusim::GpuSim;
    use sluice_model::ModelRegistry;
    use sluice_sched::seq::Seq;
    use sluice_sched::workload::{self, Arrival, ClientSpec, Workload};

    /// The shape of `L(b, p)` is tested in `sluice_gpusim::lbp`; here, the
    /// report's rows are those points, and batch 1 on the whole device is
    /// the model's standalone time as the workload driver measures it: one
    /// request under `seq`.
    #[test]
    fn batch_one_on_the_whole_device_is_the_standalone_time() {
        let reg = ModelRegistry::builtin();
        let (id, m) = reg.lookup("resnet18").unwrap();
        let p = DeviceProfile::mi50();
        let r = profile(&p, m, &[1, 8], &[50, 100], |_, _| {}).unwrap();
        assert_eq!(r.rows.len(), 4);
        let l = |b: u32, pct: u32| {
            r.rows
                .iter()
                .find(|x| x.batch == b && x.partition_pct == pct)
                .unwrap()
                .latency_ms
        };
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
        assert!(l(8, 50) > l(1, 100));
        assert!(table(&r).contains("resnet18"));
        assert!(profile(&p, m, &[0], &[100], |_, _| {}).is_err());
    }

    #[test]
    fn the_profile_goes_into_the_manifest_and_loads_back() {
        let reg = ModelRegistry::builtin();
        let (_, m) = reg.lookup("resnet18").unwrap();
        let p = DeviceProfile::mi50();
        let r = profile(&p, m, &[1, 2], &[50, 100], |_, _| {}).unwrap();
        let dir = std::env::temp_dir().join(format!("sluice-lbp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("resnet18.json");
        let _ = std::fs::remove_file(&path);
        write_into_manifest(&r, &path).unwrap();
        // Twice: the entry of the device is replaced, not repeated.
        write_into_manifest(&r, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let (man, memory) = sluice_model::Manifest::parse_with_memory("t", &text).unwrap();
        assert_eq!(man.lbp.len(), 1);
        assert_eq!(man.lbp[0].device, "mi50");
        assert_eq!(man.lbp[0].batches, vec![1, 2]);
        assert_eq!(man.lbp[0].latency_ms[1][0], r.rows[2].latency_ms);
        // Nothing else lost: the memory ranges are still there.
        assert_eq!(memory, m.memory);
        assert_eq!(man.kernels, m.manifest.kernels);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
