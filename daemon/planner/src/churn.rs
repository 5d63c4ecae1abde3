//! A test double: [`Churn`], a planner that returns a different placement
//! on every call, so that whoever applies placements switches as often as
//! it re-plans. Behind the `test-util` feature; not a planner to serve with.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{
    Assignment, GpuPlan, GpuSpec, ModelSpec, PartitionPlan, Placement, PlanError, Planner,
};

/// Alternates between two placements of every model on every GPU: even
/// calls split GPU 0 50/50 between the first model and the rest and give
/// the other GPUs whole to every model; odd calls give GPU 0 whole to
/// every model and split the others 25/75 likewise. Every planned batch is
/// `batch`. Breaks the [`Planner`] contract (same inputs, same placement)
/// on purpose.
#[derive(Debug, Default)]
pub struct Churn {
    calls: AtomicUsize,
    /// The batch of every assignment (0 is read as 8).
    pub batch: u32,
}

impl Planner for Churn {
    fn name(&self) -> &'static str {
        "churn (test)"
    }

    fn plan(&self, models: &[ModelSpec], gpus: &GpuSpec) -> Result<Placement, PlanError> {
        let batch = if self.batch == 0 { 8 } else { self.batch };
        let names: Vec<&str> = models.iter().map(|m| m.name.as_str()).collect();
        let part = |size_pct: u32, names: &[&str]| PartitionPlan {
            size_pct,
            duty_cycle_ms: 0.0,
            models: names
                .iter()
                .map(|n| Assignment {
                    model: (*n).to_owned(),
                    batch,
                    share_rps: 0.0,
                })
                .collect(),
        };
        let rest = if names.len() > 1 {
            &names[1..]
        } else {
            &names[..]
        };
        let split = |first: u32| GpuPlan {
            partitions: vec![part(first, &names[..1]), part(100 - first, rest)],
        };
        let whole = || GpuPlan {
            partitions: vec![part(100, &names)],
        };
        let odd = self.calls.fetch_add(1, Ordering::Relaxed) % 2 == 1;
        let gpus = (0..gpus.count)
            .map(|g| match (g, odd) {
                (0, false) => split(50),
                (0, true) => whole(),
                (_, false) => whole(),
                (_, true) => split(25),
            })
            .collect();
        Ok(Placement { gpus })
    }
}
