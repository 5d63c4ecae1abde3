//! gpulet's GPU scaling (§4.5, Algorithm 2): plan on the GPU count of the
//! previous period; while that fails for lack of GPUs and the count is
//! below the limit, add one GPU and plan again; report "unschedulable" when
//! the limit is reached.

use crate::placement::Placement;
use crate::spec::{GpuSpec, ModelSpec};
use crate::{PlanError, Planner};

/// Algorithm 2 around any planner. Plans on `prev_count` GPUs (at most
/// `limit`; `gpus.count` is ignored), then `prev_count + 1`, … up to
/// `limit`, and returns the first placement with the number of GPUs it
/// uses, which is the next period's `prev_count` (so the count also falls
/// when the rates do).
///
/// Only a lack of GPUs ([`PlanError::NotSchedulable`],
/// [`PlanError::NoViableLayout`]) moves on to the next count; any other
/// error (a bad input, an SLO no partition meets) is returned at once.
/// After `limit` GPUs fail: [`PlanError::Unschedulable`].
pub fn plan_with_scaling(
    planner: &dyn Planner,
    models: &[ModelSpec],
    gpus: &GpuSpec,
    prev_count: u32,
    limit: u32,
) -> Result<(Placement, u32), PlanError> {
    let from = prev_count.min(limit);
    for n in from..=limit {
        let spec = GpuSpec { count: n, ..*gpus };
        match planner.plan(models, &spec) {
            Ok(p) => {
                let used = u32::try_from(p.gpus.len()).expect("at most `limit` GPUs");
                return Ok((p, used));
            }
            Err(PlanError::NotSchedulable { .. } | PlanError::NoViableLayout { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Err(PlanError::Unschedulable {
        planner: planner.name(),
        from,
        limit,
    })
}
