//! What is served: model instances with SLOs and rates, and a decision of
//! where, on how much of a GPU and at which batch each runs.

use sluice_planner::{Assignment, GpuPlan, PartitionPlan, Placement};

use crate::types::{CoRunner, ExecModel, sms_of_pct};

/// One model instance the cluster serves (InSS §6.1 serves ten instances
/// of eight models: two models twice).
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// Unique name, for reports (`resnet50`, `resnet50#2`).
    pub name: String,
    /// Its model: an index into the [`ExecModel`].
    pub model: usize,
    /// Latency objective, ms.
    pub slo_ms: f64,
    /// Its rate at load factor 1, requests/s: training draws rates up to
    /// this, evaluations scale it.
    pub max_rate_rps: f64,
}

/// Where one instance runs: InSS gives each its own MPS partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// GPU index.
    pub gpu: usize,
    /// MPS share, percent of the GPU's SMs (rounded down to SMs).
    pub pct: u32,
    /// Batch size.
    pub batch: u32,
}

/// One decision for every instance, in instance order (`None`: not
/// served).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    /// Per instance.
    pub slots: Vec<Option<Slot>>,
}

impl Decision {
    /// The co-runners of instance `i`: every other served instance on its
    /// GPU.
    pub fn co_runners(&self, i: usize, instances: &[Instance], gpu_sms: u32) -> Vec<CoRunner> {
        let Some(me) = self.slots[i] else {
            return Vec::new();
        };
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(j, s)| {
                let s = (*s)?;
                (j != i && s.gpu == me.gpu && s.pct > 0).then(|| CoRunner {
                    model: instances[j].model,
                    batch: s.batch,
                    sms: sms_of_pct(s.pct, gpu_sms),
                })
            })
            .collect()
    }

    /// `t_inf` of every served instance with its co-runners (`None`: not
    /// served, or a share too small for one SM).
    pub fn exec_ms(&self, instances: &[Instance], exec: &dyn ExecModel) -> Vec<Option<f64>> {
        let c = exec.gpu_sms();
        (0..self.slots.len())
            .map(|i| {
                let s = self.slots[i]?;
                if s.pct == 0 || s.batch == 0 {
                    return None;
                }
                let others = self.co_runners(i, instances, c);
                Some(exec.exec_ms(instances[i].model, s.batch, sms_of_pct(s.pct, c), &others))
            })
            .collect()
    }

    /// Percent of each GPU its served instances hold.
    pub fn used_pct(&self, gpus: usize) -> Vec<u32> {
        let mut used = vec![0; gpus];
        for s in self.slots.iter().flatten() {
            if s.gpu < gpus {
                used[s.gpu] += s.pct;
            }
        }
        used
    }

    /// InSS §2.4's *fragment*: on GPUs that run at least one instance, the
    /// percent no instance holds, summed over GPUs (an idle GPU is not a
    /// fragment). In percent of one GPU (800 = eight GPUs' worth).
    pub fn fragment_pct(&self, gpus: usize) -> u32 {
        let used = self.used_pct(gpus);
        let mut busy = vec![false; gpus];
        for s in self.slots.iter().flatten() {
            if s.gpu < gpus && s.pct > 0 {
                busy[s.gpu] = true;
            }
        }
        used.iter()
            .zip(&busy)
            .filter(|(_, b)| **b)
            .map(|(u, _)| 100u32.saturating_sub(*u))
            .sum()
    }

    /// GPUs running at least one instance.
    pub fn gpus_used(&self) -> usize {
        let mut g: Vec<usize> = self
            .slots
            .iter()
            .flatten()
            .filter(|s| s.pct > 0)
            .map(|s| s.gpu)
            .collect();
        g.sort_unstable();
        g.dedup();
        g.len()
    }

    /// The same decision as a multi-GPU [`Placement`] (one partition per
    /// served instance, its whole rate `rates[i]` routed there), for the
    /// request-level serving simulation.
    pub fn to_placement(&self, instances: &[Instance], rates: &[f64], gpus: usize) -> Placement {
        let mut out = Placement {
            gpus: vec![GpuPlan::default(); gpus],
        };
        for (i, s) in self.slots.iter().enumerate() {
            let Some(s) = s else { continue };
            if s.pct == 0 || s.gpu >= gpus {
                continue;
            }
            out.gpus[s.gpu].partitions.push(PartitionPlan {
                size_pct: s.pct,
                duty_cycle_ms: 0.0,
                models: vec![Assignment {
                    model: instances[i].name.clone(),
                    batch: s.batch,
                    share_rps: rates[i],
                }],
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(n: usize) -> Vec<Instance> {
        (0..n)
            .map(|i| Instance {
                name: format!("m{i}"),
                model: i,
                slo_ms: 10.0,
                max_rate_rps: 100.0,
            })
            .collect()
    }

    #[test]
    fn fragments_count_only_busy_gpus() {
        let d = Decision {
            slots: vec![
                Some(Slot {
                    gpu: 0,
                    pct: 60,
                    batch: 4,
                }),
                Some(Slot {
                    gpu: 0,
                    pct: 30,
                    batch: 4,
                }),
                Some(Slot {
                    gpu: 2,
                    pct: 100,
                    batch: 4,
                }),
                None,
            ],
        };
        assert_eq!(d.used_pct(3), vec![90, 0, 100]);
        assert_eq!(d.fragment_pct(3), 10);
        assert_eq!(d.gpus_used(), 2);
        let i = inst(4);
        let co = d.co_runners(0, &i, 108);
        assert_eq!(
            co,
            vec![CoRunner {
                model: 1,
                batch: 4,
                sms: 32
            }]
        );
        let p = d.to_placement(&i, &[1.0, 2.0, 3.0, 4.0], 3);
        assert_eq!(p.gpus[0].partitions.len(), 2);
        assert_eq!(p.gpus[1].partitions.len(), 0);
        assert_eq!(p.gpus[2].partitions[0].models[0].share_rps, 3.0);
    }
}
