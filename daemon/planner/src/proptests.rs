//! Both planners on random feasible inputs: a placement that passes
//! [`check`], or "not schedulable: needs N GPUs, have M" with N > M and a
//! placement on N GPUs that passes [`check`].

use proptest::prelude::*;

use crate::{GpuSpec, GreedyBestFit, LatencyTable, ModelSpec, PlanError, Planner, Sbp, check};

const BATCHES: [u32; 6] = [1, 2, 4, 8, 16, 32];

/// `L(b, p) = (a + c·b) · (100 / min(p, knee))^e`: growing in `b`, falling
/// in `p` up to the knee and flat past it. The SLO is `slack × 2·L(1, 100)`,
/// `slack ≥ 1`, so the smallest batch always meets it on a whole GPU.
fn model_strategy() -> impl Strategy<Value = (f64, f64, u32, f64, f64, f64, u64)> {
    (
        0.2f64..5.0,
        0.05f64..3.0,
        2u32..=10,
        0.3f64..1.0,
        1.0f64..20.0,
        prop_oneof![Just(0.0), 0.0f64..5000.0],
        100u64..8000,
    )
}

fn build(
    i: usize,
    (a, c, knee, e, slack, rate, mem): (f64, f64, u32, f64, f64, f64, u64),
) -> ModelSpec {
    let knee = knee * 10;
    let f = move |b: u32, p: u32| (a + c * f64::from(b)) * (100.0 / f64::from(p.min(knee))).powf(e);
    let parts: Vec<u32> = (1..=10).map(|k| k * 10).collect();
    ModelSpec {
        name: format!("m{i}"),
        slo_ms: slack * 2.0 * f(1, 100),
        rate_rps: rate,
        mem_mb: mem,
        profile: LatencyTable::from_fn(BATCHES.to_vec(), parts, f).unwrap(),
    }
}

fn verify(
    planner: &dyn Planner,
    models: &[ModelSpec],
    gpus: &GpuSpec,
) -> Result<(), TestCaseError> {
    let first = planner.plan(models, gpus);
    prop_assert_eq!(
        &first,
        &planner.plan(models, gpus),
        "{} is not deterministic",
        planner.name()
    );
    match first {
        Ok(p) => {
            if let Err(v) = check(&p, models, gpus) {
                return Err(TestCaseError::fail(format!(
                    "{}: {v}; {p:?}",
                    planner.name()
                )));
            }
        }
        Err(PlanError::NotSchedulable {
            needed, available, ..
        }) => {
            prop_assert!(needed > u64::from(available));
            let more = GpuSpec {
                count: u32::try_from(needed).unwrap(),
                ..*gpus
            };
            let p = planner
                .plan(models, &more)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(p.gpus.len() as u64, needed);
            if let Err(v) = check(&p, models, &more) {
                return Err(TestCaseError::fail(format!(
                    "{}: {v}; {p:?}",
                    planner.name()
                )));
            }
        }
        Err(e) => return Err(TestCaseError::fail(format!("{}: {e}", planner.name()))),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

    #[test]
    fn plans_pass_check_or_say_how_many_gpus(
        specs in prop::collection::vec(model_strategy(), 1..7),
        count in 0u32..8,
        step in prop::sample::select(vec![10u32, 20, 25, 50]),
    ) {
        let models: Vec<ModelSpec> = specs.into_iter().enumerate().map(|(i, s)| build(i, s)).collect();
        let gpus = GpuSpec::new(count, 16_000, step);
        verify(&Sbp, &models, &gpus)?;
        verify(&GreedyBestFit, &models, &gpus)?;
    }
}
