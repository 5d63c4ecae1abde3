//! The GPU model's manifest of an imported graph ([`sluice_graph::Static`]):
//! one kernel per node the graph runs, so that a user's ONNX file runs on
//! the simulated GPU like the shipped models.
//!
//! Everything in it is an **estimate**, labelled so in its provenance: each
//! node is one kernel of the kind sluice's CUDA library would launch for it
//! (GEMM-like nodes as 64×64 output tiles of 256 threads, with the GEMM
//! kernels' 8 KiB of shared memory and 64 registers; the others one thread
//! per output element, 256 a block), its time the same roofline as
//! [`super::builders::estimate`] (H100 SXM5 datasheet peaks, the `h100`
//! profile's SMs and occupancy). Buffers are laid out as the builders lay
//! theirs (every tensor its own 256-byte-aligned range, no reuse), so every
//! kernel reads only what an earlier one wrote and is idempotent alone; the
//! groups are computed from those ranges by REEF's checker
//! ([`sluice_model::idempotent::minimal_groups`]) all the same.

use std::fmt::Write as _;

use sluice_gpu::occupancy::{Footprint, blocks_per_cu};
use sluice_gpu::profile::DeviceProfile;
use sluice_graph::{Op, Static, ValueId};
use sluice_model::idempotent::{self, ByteRange, KernelAccess};
use sluice_model::{KernelMemory, Manifest, Model, ModelRegistry};

use super::builders::{
    BUFFER_ALIGN, ExportError, H100_FP32_FLOPS, H100_FP32_LANES_PER_SM, H100_HBM_BYTES_PER_S,
    MIN_KERNEL_US, NoFit,
};

/// One kernel's estimated launch and time.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelEstimate {
    /// `<operator>:<node>`.
    pub name: String,
    /// Grid in blocks.
    pub grid: [u32; 3],
    /// Threads per block.
    pub block: u32,
    /// Registers per thread (estimate).
    pub regs: u32,
    /// Shared memory per block in bytes (estimate).
    pub smem: u32,
    /// Floating-point operations.
    pub flops: f64,
    /// Bytes read and written.
    pub bytes: f64,
    /// Roofline time in µs.
    pub kernel_time_us: f64,
    /// `kernel_time_us` over the rounds of blocks.
    pub block_time_us: f64,
}

fn bytes_of(s: &Static, v: ValueId) -> u64 {
    s.info(v).map_or(0, |(dt, sh)| {
        (sh.iter().product::<usize>() * dt.size()) as u64
    })
}

fn elems(shape: &[usize]) -> u64 {
    shape.iter().product::<usize>() as u64
}

/// The estimates of every kernel of `s` on `profile`.
pub fn estimates(s: &Static, profile: &DeviceProfile) -> Result<Vec<KernelEstimate>, NoFit> {
    let mut out = Vec::with_capacity(s.nodes().len());
    for (i, n) in s.nodes().iter().enumerate() {
        let out_elems = elems(s.shape_of(n.outputs.first().copied().flatten()));
        let gemm = s.gemm_dims(n);
        let flops = s.node_flops(n) as f64;
        let (grid, regs, smem) = match gemm {
            Some((m, c, _)) => {
                let tiles = m.div_ceil(64).max(1) * c.div_ceil(64).max(1);
                (
                    [tiles.min(u64::from(u32::MAX)) as u32, 1, 1],
                    64,
                    2 * 64 * 16 * 4,
                )
            }
            None => {
                let blocks = out_elems.div_ceil(256).max(1);
                let reduces = matches!(
                    n.op,
                    Op::Softmax { .. }
                        | Op::LayerNorm { .. }
                        | Op::ReduceMean { .. }
                        | Op::GlobalAveragePool
                );
                (
                    [blocks.min(u64::from(u32::MAX)) as u32, 1, 1],
                    if reduces { 32 } else { 16 },
                    if reduces { 128 } else { 0 },
                )
            }
        };
        let bytes: u64 = n
            .inputs
            .iter()
            .flatten()
            .map(|&v| bytes_of(s, v))
            .sum::<u64>()
            + n.outputs
                .iter()
                .flatten()
                .map(|&v| bytes_of(s, v))
                .sum::<u64>();
        let threads = 256u32;
        let fp = Footprint::new(profile, threads, regs, smem);
        let (per_sm, _) = blocks_per_cu(profile, &fp);
        let name = format!("{}:{}", n.op.name(), n.name);
        if per_sm == 0 {
            return Err(NoFit {
                step: i,
                label: name,
                threads: u64::from(threads),
                regs,
                smem,
                profile: profile.name.clone(),
            });
        }
        let sms = u64::from(profile.compute_units);
        let blocks = u64::from(grid[0]);
        let share =
            ((blocks * u64::from(threads)) as f64 / (sms * H100_FP32_LANES_PER_SM) as f64).min(1.0);
        let seconds =
            (flops / (H100_FP32_FLOPS * share)).max(bytes as f64 / (H100_HBM_BYTES_PER_S * share));
        let kernel_time_us = (seconds * 1e6).max(MIN_KERNEL_US);
        let rounds = blocks.div_ceil(sms * u64::from(per_sm)).max(1);
        out.push(KernelEstimate {
            name,
            grid,
            block: threads,
            regs,
            smem,
            flops,
            bytes: bytes as f64,
            kernel_time_us,
            block_time_us: kernel_time_us / rounds as f64,
        });
    }
    Ok(out)
}

fn round_ns(us: f64) -> f64 {
    (us * 1000.0).round() / 1000.0
}

/// The manifest of `s` as JSON (the format of `docs/models.md`), named
/// `name`, estimated on the `h100` profile; `source` says where the graph
/// came from (the ONNX file).
pub fn manifest_json(s: &Static, name: &str, source: &str) -> Result<String, ExportError> {
    let profile = DeviceProfile::h100();
    let est = estimates(s, &profile)?;
    // Arena: every tensor the kernels touch, in first-use order, aligned.
    let mut ranges: std::collections::HashMap<ValueId, ByteRange> =
        std::collections::HashMap::new();
    let mut next = 0u64;
    let mut place =
        |v: ValueId, ranges: &mut std::collections::HashMap<ValueId, ByteRange>| -> ByteRange {
            *ranges.entry(v).or_insert_with(|| {
                let len = bytes_of(s, v).max(1);
                let r = ByteRange {
                    start: next,
                    end: next + len,
                };
                next = (next + len).div_ceil(BUFFER_ALIGN) * BUFFER_ALIGN;
                r
            })
        };
    for i in s.inputs() {
        place(i.id, &mut ranges);
    }
    let accesses: Vec<KernelAccess> = s
        .nodes()
        .iter()
        .map(|n| KernelAccess {
            reads: n
                .inputs
                .iter()
                .flatten()
                .map(|&v| place(v, &mut ranges))
                .collect(),
            writes: n
                .outputs
                .iter()
                .flatten()
                .map(|&v| place(v, &mut ranges))
                .collect(),
        })
        .collect();
    let groups = idempotent::minimal_groups(&accesses).map_err(ExportError::Groups)?;
    let fmt_ranges = |rs: &[ByteRange]| {
        rs.iter()
            .map(|r| format!("[{}, {}]", r.start, r.end))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut lines = Vec::with_capacity(est.len());
    let mut total_ns = 0u64;
    for (i, e) in est.iter().enumerate() {
        let k = round_ns(e.kernel_time_us);
        total_ns += (k * 1000.0).round() as u64;
        let mut line = String::new();
        let _ = write!(
            line,
            "  {{\"name\": {}, \"grid\": {:?}, \"block\": [{}, 1, 1], \"regs_per_thread\": {}, \"shared_mem_bytes\": {}, \
             \"kernel_time_us\": {}, \"block_time_us\": {}, \"idempotent\": {}, \"reads\": [{}], \"writes\": [{}], \"group_start\": {}}}",
            serde_json::Value::from(e.name.as_str()),
            e.grid,
            e.block,
            e.regs,
            e.smem,
            k,
            round_ns(e.block_time_us).min(k),
            groups[i] == i,
            fmt_ranges(&accesses[i].reads),
            fmt_ranges(&accesses[i].writes),
            groups[i],
        );
        lines.push(line);
    }
    let input_bytes: u64 = s.inputs().iter().map(|i| bytes_of(s, i.id)).sum();
    let output_bytes: u64 = s.outputs().iter().map(|o| bytes_of(s, o.id)).sum();
    let provenance = format!(
        "generated by sluice from the ONNX graph {source} at batch {}: one kernel per node after folding and fusion. \
         ESTIMATES, NOT MEASURED: launch configurations are those a sluice CUDA kernel of the node's kind would use \
         (GEMM-like nodes 64x64 output tiles, others one thread per output element, 256-thread blocks); registers and \
         shared memory per kind; kernel_time_us is a roofline max(FLOPs / ({} TFLOP/s FP32 x share), bytes / ({} TB/s \
         x share), {} us) with H100 SXM5 datasheet peaks; block_time_us = kernel_time_us / rounds on the h100 profile's \
         occupancy; reads/writes from a layout of every tensor in its own 256-byte-aligned range.",
        s.batch(),
        H100_FP32_FLOPS / 1e12,
        H100_HBM_BYTES_PER_S / 1e12,
        MIN_KERNEL_US,
    );
    let j = |v: &str| serde_json::Value::from(v).to_string();
    Ok(format!(
        "{{\n \"name\": {},\n \"display_name\": {},\n \"provenance\": {},\n \"input_bytes\": {},\n \"output_bytes\": {},\n \
         \"total_time_us\": {},\n \"kernels\": [\n{}\n ]\n}}\n",
        j(name),
        j(&format!("{name} (ONNX, batch {})", s.batch())),
        j(&provenance),
        input_bytes.max(1),
        output_bytes.max(1),
        total_ns as f64 / 1000.0,
        lines.join(",\n"),
    ))
}

/// The manifest through the daemon's own loader, so it has passed every
/// manifest and idempotent-group check (id 0, a registry of one).
pub fn manifest(s: &Static, name: &str, source: &str) -> Result<Model, ExportError> {
    let json = manifest_json(s, name, source)?;
    let file = format!("onnx:{name}");
    let (m, memory): (Manifest, Vec<KernelMemory>) =
        Manifest::parse_with_memory(&file, &json).map_err(ExportError::Load)?;
    let reg = ModelRegistry::from_parts([(file.clone(), m, memory)]).map_err(ExportError::Load)?;
    reg.get(0).cloned().ok_or_else(|| {
        ExportError::Load(sluice_model::ModelError::Empty {
            dir: std::path::PathBuf::from(&file),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_graph::{DType, Dim, GraphBuilder, Limits, Tensor, Unary, Window};

    /// x[N,3,8,8] -> Conv 3x3 (4 channels) + Relu -> GlobalAveragePool -> Flatten -> Gemm(4 -> 2).
    fn small_cnn() -> sluice_graph::Graph {
        let mut b = GraphBuilder::new(Limits::default());
        let x = b
            .input(
                "x",
                DType::F32,
                vec![Dim::Batch, Dim::Fixed(3), Dim::Fixed(8), Dim::Fixed(8)],
            )
            .unwrap();
        let w = b
            .constant_value("w", Tensor::f32(vec![4, 3, 3, 3], vec![0.1; 108]).unwrap())
            .unwrap();
        let fw = b
            .constant_value("fw", Tensor::f32(vec![4, 2], vec![0.5; 8]).unwrap())
            .unwrap();
        let win = Window {
            kernel: None,
            strides: vec![],
            pads: vec![1, 1, 1, 1],
            dilations: vec![],
            auto_pad: sluice_graph::AutoPad::NotSet,
            ceil_mode: false,
        };
        let c = b
            .op(
                "conv",
                Op::Conv {
                    window: win,
                    group: 1,
                    act: None,
                },
                vec![Some(x), Some(w)],
                "c",
            )
            .unwrap();
        let r = b
            .op("relu", Op::Unary(Unary::Relu), vec![Some(c)], "r")
            .unwrap();
        let g = b
            .op("gap", Op::GlobalAveragePool, vec![Some(r)], "g")
            .unwrap();
        let f = b
            .op("flat", Op::Flatten { axis: 1 }, vec![Some(g)], "f")
            .unwrap();
        b.node(
            "fc",
            Op::Gemm {
                trans_a: false,
                trans_b: false,
                alpha: 1.0,
                beta: 1.0,
                act: None,
            },
            vec![Some(f), Some(fw)],
            &["y"],
        )
        .unwrap();
        b.output("y");
        b.build().unwrap()
    }

    #[test]
    fn the_manifest_loads_and_scales_with_the_batch() {
        let g = small_cnn();
        let m1 = manifest(&g.specialize(1).unwrap(), "cnn", "test").unwrap();
        let m8 = manifest(&g.specialize(8).unwrap(), "cnn", "test").unwrap();
        // conv+relu fused, gap, flatten, gemm.
        let (k1, k8) = (&m1.manifest.kernels, &m8.manifest.kernels);
        assert_eq!(k1.len(), 4);
        assert_eq!(m1.input_bytes, 3 * 8 * 8 * 4);
        assert_eq!(m8.input_bytes, 8 * 3 * 8 * 8 * 4);
        assert!(
            k1.iter().all(|k| k.idempotent),
            "no buffer is reused, so every kernel is idempotent"
        );
        assert!(
            k8[0].grid[0] > k1[0].grid[0],
            "more output columns, more tiles"
        );
        assert!(k1[0].name.starts_with("Conv:conv"));
    }
}
