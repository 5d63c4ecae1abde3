//! The operator graph SPLIT cuts, with the cost of a cut on sluice's path.
//!
//! # Operators
//!
//! The operators are the manifest's kernels in launch order. Operator `i`
//! takes `kernel_time_us + launch_ns`: on the GPU model (`docs/gpu-model.md`,
//! "Alone on a stream, back-to-back kernels are therefore `launch_ns`
//! apart") a kernel queued behind its predecessor starts `queues.launch_ns`
//! after that predecessor finishes, so the vanilla (unsplit) model time is
//! `T = Σ (kernel_time_us + launch_ns)`. The first kernel's host push and
//! fetch are paid once by the split and the unsplit model alike and are left
//! out of both.
//!
//! # A cut
//!
//! A cut `c` (in `1..M`, the [`sluice_model::ModelSplit`] convention) puts
//! kernels `c..` in the next block: it lies after kernel `c − 1`.
//!
//! **Crossing bytes.** The bytes of live tensors crossing cut `c`: bytes
//! written by a kernel `< c` and read by a kernel `≥ c` before any kernel
//! `≥ c` writes them again (a kernel that reads and writes a byte reads the
//! old value). Computed from the manifest's per-kernel `reads`/`writes`
//! ([`sluice_model::KernelMemory`]) over elementary byte segments. Bytes
//! nobody writes (weights, the input) never cross a cut. A suspended request
//! — one whose block ended at cut `c` and which waits while another model
//! runs — holds exactly these bytes, so they are also reported as the memory
//! a suspended request holds. A model without memory fields has 0 crossing
//! bytes everywhere and [`OperatorGraph::has_memory`] says so.
//!
//! **Cost on sluice's path.** This differs from the paper. SPLIT (ICPP'23
//! §3.1, §4) runs every block as its own ONNX Runtime session, so a cut copies
//! the crossing tensors out through the host and back, and its cost grows
//! with their size. sluice keeps every tensor in device memory; at a block
//! boundary the dispatcher waits for the block's last kernel to finish before
//! it launches the next block's first kernel, so the launch pipeline drains.
//! The next kernel then reaches an idle stream and starts
//! `host_launch_ns + cp_fetch_ns + launch_ns` after its launch call instead
//! of `launch_ns` after its predecessor (GPU model, `docs/gpu-model.md`). The
//! cost of a cut is the difference:
//!
//! ```text
//! drain = queues.host_launch_ns + queues.cp_fetch_ns       (mi50: 10 + 12.25 = 22.25 µs)
//! cost(c) = drain + crossing_bytes(c) / dram_bandwidth     (size term only with a bandwidth)
//! ```
//!
//! `launch_ns` is not part of the cost: the unsplit model pays it between
//! every two kernels too (it is in `T`). The dispatcher's own reaction time to
//! a completion is not modelled. The size term — the next block re-reading its
//! inputs from DRAM instead of finding them in the last-level cache — needs
//! the device's memory bandwidth; the device profiles (`daemon/gpu/profiles`)
//! have none, so [`OperatorGraph::new`] does **not** model the size term and
//! every cut costs the same `drain`. A caller with a measured bandwidth may
//! add it with [`OperatorGraph::with_dram_bandwidth`].
//!
//! **"Early cuts cost more" (SPLIT §2.4).** On this path it holds only
//! through the size term: early tensors are larger, so with a bandwidth early
//! cuts cost more. Without one (every shipped profile) the cost of a cut does
//! not depend on where it is; only the evenness of the blocks does.

use serde::Serialize;
use sluice_gpu::DeviceProfile;
use sluice_model::{KernelMemory, Manifest, Model};

/// One operator: a kernel of the model, in launch order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Operator {
    /// Kernel name from the manifest.
    pub name: String,
    /// The kernel's execution time from the manifest, µs.
    pub kernel_time_us: f64,
    /// Its time in the unsplit model: `kernel_time_us + launch_ns`, µs.
    pub time_us: f64,
}

/// A possible cut and what it costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Boundary {
    /// The cut: index of the first kernel of the next block (`1..M`).
    pub cut: u32,
    /// Bytes of live tensors crossing the cut; also what a request suspended
    /// at this cut holds in device memory.
    pub crossing_bytes: u64,
    /// Time the cut adds to the block that ends at it, µs.
    pub cost_us: f64,
}

/// How a cut is costed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostModel {
    /// The pipeline-drain term, µs (`host_launch_ns + cp_fetch_ns`).
    pub drain_us: f64,
    /// The profile terms `drain_us` is made of, in words.
    pub drain_terms: String,
    /// DRAM bandwidth for the size term, bytes per µs; `None`: the size
    /// term is not modelled.
    pub dram_bytes_per_us: Option<f64>,
}

impl CostModel {
    /// The cost model in one sentence, for reports and the manifest's
    /// `rule`.
    pub fn describe(&self) -> String {
        match self.dram_bytes_per_us {
            Some(bw) => format!(
                "cut cost = pipeline drain {} = {:.2} us + crossing bytes / {bw:.0} B/us",
                self.drain_terms, self.drain_us
            ),
            None => format!(
                "cut cost = pipeline drain {} = {:.2} us; size term not modelled \
                 (the profile has no memory bandwidth)",
                self.drain_terms, self.drain_us
            ),
        }
    }
}

/// Building the graph failed.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// The model has no kernels to split.
    #[error("model {model} has no kernels; a model needs at least one kernel to be split")]
    Empty {
        /// The model.
        model: String,
    },
    /// A bandwidth that is not a positive number.
    #[error("DRAM bandwidth {value} B/us is not a positive number; pass a measured bandwidth")]
    BadBandwidth {
        /// The value given.
        value: f64,
    },
}

/// A model's operators and the cost of every possible cut on one device.
#[derive(Debug, Clone, Serialize)]
pub struct OperatorGraph {
    /// Model name.
    pub model: String,
    /// Device profile name.
    pub device: String,
    /// The operators in launch order.
    pub ops: Vec<Operator>,
    /// `boundaries[c - 1]` is cut `c`, for `c` in `1..M`.
    pub boundaries: Vec<Boundary>,
    /// Whether the manifest gives memory ranges (else every crossing is 0).
    pub has_memory: bool,
    /// How a cut is costed.
    pub cost: CostModel,
    /// `prefix[i]` = time of operators `0..i`, µs.
    #[serde(skip)]
    prefix: Vec<f64>,
}

impl OperatorGraph {
    /// The graph of `model` on `profile`, without the size term (the
    /// profiles have no memory bandwidth; see the module docs).
    pub fn new(model: &Model, profile: &DeviceProfile) -> Result<Self, GraphError> {
        Self::from_parts(&model.manifest, &model.memory, profile)
    }

    /// [`OperatorGraph::new`] from a manifest and its per-kernel memory
    /// fields (empty when the model has none: every crossing is then 0).
    pub fn from_parts(
        manifest: &Manifest,
        memory: &[KernelMemory],
        profile: &DeviceProfile,
    ) -> Result<Self, GraphError> {
        let kernels = &manifest.kernels;
        if kernels.is_empty() {
            return Err(GraphError::Empty {
                model: manifest.name.clone(),
            });
        }
        let q = &profile.queues;
        let launch_us = q.launch_ns as f64 / 1e3;
        let ops: Vec<Operator> = kernels
            .iter()
            .map(|k| Operator {
                name: k.name.clone(),
                kernel_time_us: k.kernel_time_us,
                time_us: k.kernel_time_us + launch_us,
            })
            .collect();
        let has_memory = memory.len() == kernels.len();
        let crossing = if has_memory {
            crossing_bytes(memory)
        } else {
            vec![0; kernels.len()]
        };
        let cost = CostModel {
            drain_us: (q.host_launch_ns + q.cp_fetch_ns) as f64 / 1e3,
            drain_terms: format!(
                "queues.host_launch_ns + queues.cp_fetch_ns ({} + {} ns)",
                q.host_launch_ns, q.cp_fetch_ns
            ),
            dram_bytes_per_us: None,
        };
        let mut prefix = Vec::with_capacity(ops.len() + 1);
        prefix.push(0.0);
        for op in &ops {
            prefix.push(prefix[prefix.len() - 1] + op.time_us);
        }
        let mut g = Self {
            model: manifest.name.clone(),
            device: profile.name.clone(),
            ops,
            boundaries: (1..kernels.len())
                .map(|c| Boundary {
                    cut: c as u32,
                    crossing_bytes: crossing[c],
                    cost_us: 0.0,
                })
                .collect(),
            has_memory,
            cost,
            prefix,
        };
        g.recost();
        Ok(g)
    }

    /// The same graph with the size term: a cut also costs its crossing
    /// bytes re-read at `bytes_per_us`. Only for a measured bandwidth; the
    /// profiles have none.
    pub fn with_dram_bandwidth(mut self, bytes_per_us: f64) -> Result<Self, GraphError> {
        if !(bytes_per_us.is_finite() && bytes_per_us > 0.0) {
            return Err(GraphError::BadBandwidth {
                value: bytes_per_us,
            });
        }
        self.cost.dram_bytes_per_us = Some(bytes_per_us);
        self.recost();
        Ok(self)
    }

    /// A graph from operator times and one cut cost, for tests.
    #[cfg(test)]
    pub(crate) fn from_times(times: &[f64], cut_cost_us: f64) -> Self {
        let ops: Vec<Operator> = times
            .iter()
            .enumerate()
            .map(|(i, &t)| Operator {
                name: format!("k{i}"),
                kernel_time_us: t,
                time_us: t,
            })
            .collect();
        let mut prefix = vec![0.0];
        for op in &ops {
            prefix.push(prefix[prefix.len() - 1] + op.time_us);
        }
        Self {
            model: "toy".into(),
            device: "toy".into(),
            boundaries: (1..ops.len())
                .map(|c| Boundary {
                    cut: c as u32,
                    crossing_bytes: 0,
                    cost_us: cut_cost_us,
                })
                .collect(),
            ops,
            has_memory: false,
            cost: CostModel {
                drain_us: cut_cost_us,
                drain_terms: "test".into(),
                dram_bytes_per_us: None,
            },
            prefix,
        }
    }

    fn recost(&mut self) {
        let (drain, bw) = (self.cost.drain_us, self.cost.dram_bytes_per_us);
        for b in &mut self.boundaries {
            b.cost_us = drain + bw.map_or(0.0, |bw| b.crossing_bytes as f64 / bw);
        }
    }

    /// Number of operators `M`.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there are no operators (never true for a built graph).
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The vanilla model time `T`, µs.
    pub fn vanilla_time_us(&self) -> f64 {
        self.prefix[self.ops.len()]
    }

    /// Time of operators `start..end`, µs.
    pub fn span_us(&self, start: usize, end: usize) -> f64 {
        self.prefix[end] - self.prefix[start]
    }

    /// Cost of cut `c` (`1..M`), µs.
    pub fn cut_cost_us(&self, c: u32) -> f64 {
        self.boundaries[c as usize - 1].cost_us
    }
}

/// `out[c]` = bytes live across cut `c` (between kernels `c − 1` and `c`),
/// for `c` in `0..=M` (`out[0]` and `out[M]` are 0).
pub fn crossing_bytes(memory: &[KernelMemory]) -> Vec<u64> {
    let m = memory.len();
    // Elementary segments between all range endpoints.
    let mut points: Vec<u64> = memory
        .iter()
        .flat_map(|k| k.reads.iter().chain(&k.writes))
        .flat_map(|r| [r.start, r.end])
        .collect();
    points.sort_unstable();
    points.dedup();
    let segs = points.len().saturating_sub(1);
    // Per segment: (kernel, reads, writes) in kernel order.
    let mut events: Vec<Vec<(usize, bool, bool)>> = vec![Vec::new(); segs];
    let seg_of = |x: u64| points.partition_point(|&p| p < x);
    for (k, km) in memory.iter().enumerate() {
        for (ranges, is_write) in [(&km.reads, false), (&km.writes, true)] {
            for r in ranges.iter().filter(|r| r.end > r.start) {
                for ev in &mut events[seg_of(r.start)..seg_of(r.end)] {
                    match ev.last_mut() {
                        Some(e) if e.0 == k => {
                            if is_write {
                                e.2 = true;
                            } else {
                                e.1 = true;
                            }
                        }
                        _ => ev.push((k, !is_write, is_write)),
                    }
                }
            }
        }
    }
    // Difference array over cuts: a value written at w and last read at r
    // (before the next write) is live across cuts w+1..=r.
    let mut diff = vec![0i128; m + 2];
    for (s, ev) in events.iter().enumerate() {
        let len = i128::from(points[s + 1] - points[s]);
        let mut written: Option<usize> = None;
        let mut last_read: Option<usize> = None;
        let mut close = |w: Option<usize>, r: Option<usize>| {
            if let (Some(w), Some(r)) = (w, r) {
                if r > w {
                    diff[w + 1] += len;
                    diff[r + 1] -= len;
                }
            }
        };
        for &(k, reads, writes) in ev {
            if reads {
                last_read = Some(k);
            }
            if writes {
                close(written, last_read);
                written = Some(k);
                last_read = None;
            }
        }
        close(written, last_read);
    }
    let mut out = vec![0u64; m + 1];
    let mut acc = 0i128;
    for (c, o) in out.iter_mut().enumerate() {
        acc += diff[c];
        *o = u64::try_from(acc).unwrap_or(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_model::idempotent::ByteRange;

    fn km(reads: &[(u64, u64)], writes: &[(u64, u64)]) -> KernelMemory {
        KernelMemory {
            reads: reads.iter().map(|&(s, e)| ByteRange::new(s, e)).collect(),
            writes: writes.iter().map(|&(s, e)| ByteRange::new(s, e)).collect(),
            group_start: None,
        }
    }

    #[test]
    fn crossing_bytes_follow_liveness() {
        // k0: in[0,100) -> a[100,200); k1: a -> b[200,250); k2: a,b -> c[300,310).
        // Weights/input [0,100) are never written: never cross.
        let mem = [
            km(&[(0, 100)], &[(100, 200)]),
            km(&[(100, 200)], &[(200, 250)]),
            km(&[(100, 200), (200, 250)], &[(300, 310)]),
        ];
        let c = crossing_bytes(&mem);
        assert_eq!(c, vec![0, 100, 150, 0]);
    }

    #[test]
    fn a_rewrite_ends_liveness_and_in_place_reads_first() {
        // k0 writes a; k1 overwrites a without reading it; k2 reads a.
        let mem = [
            km(&[], &[(0, 10)]),
            km(&[], &[(0, 10)]),
            km(&[(0, 10)], &[(10, 20)]),
        ];
        assert_eq!(crossing_bytes(&mem), vec![0, 0, 10, 0]);
        // k1 updates a in place: k0's value is live across cut 1.
        let mem = [
            km(&[], &[(0, 10)]),
            km(&[(0, 10)], &[(0, 10)]),
            km(&[(0, 10)], &[]),
        ];
        assert_eq!(crossing_bytes(&mem), vec![0, 10, 10, 0]);
    }

    #[test]
    fn shipped_models_cut_costs() {
        let reg = sluice_model::ModelRegistry::builtin();
        let p = DeviceProfile::mi50();
        let (_, m) = reg.lookup("resnet50").expect("shipped");
        let g = OperatorGraph::new(m, &p).expect("graph");
        assert!(g.has_memory);
        assert_eq!(g.boundaries.len(), g.len() - 1);
        assert!((g.cost.drain_us - 22.25).abs() < 1e-9);
        assert!(g.boundaries.iter().all(|b| b.cost_us == g.cost.drain_us));
        assert!(g.boundaries.iter().all(|b| b.crossing_bytes > 0));
        // With a bandwidth, early cuts cost more (SPLIT §2.4), via size.
        let n = g.boundaries.len();
        let early: u64 = g.boundaries[..n / 4].iter().map(|b| b.crossing_bytes).sum();
        let late: u64 = g.boundaries[3 * n / 4..]
            .iter()
            .map(|b| b.crossing_bytes)
            .sum();
        assert!(early > late, "{early} vs {late}");
        let g = g.with_dram_bandwidth(1.0e6).expect("bw");
        assert!(g.boundaries[0].cost_us > g.cost.drain_us);
        assert!(g.clone().with_dram_bandwidth(0.0).is_err());
    }
}
