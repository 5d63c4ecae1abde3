//! InSS §4.2, Eq. 3: the latency of a task from its arrival to its result,
//! queueing included, for a model served FIFO in batches of `b`.

/// Eq. 3 for one task of a model served on one GPU (the paper's sums over
/// GPUs `Σ_k y_{i,k}` pick the GPU the model is placed on):
///
/// - `queued`: `w_{i,j} = g_i(a_{i,j}) + d_{i,j}`, the model's queued
///   workload after this task arrived, this task included (tasks);
/// - `exec_ms`: `exec_{i,k}`, what is left of the batch now executing (0
///   when the GPU is idle for this model);
/// - `t_inf_ms`: `t^{inf}_{i,k}`, the GPU execution latency of one batch
///   ([`super::LatencyModel`]'s `exec_ms`);
/// - `batch`: `b_i` (at least 1; 0 is taken as 1);
/// - `arrival_per_ms`: `λ_i`, tasks per ms.
///
/// When `w ≥ b` the task waits for the earlier batches:
/// `T = exec + ⌈w/b⌉·t_inf`. Otherwise it waits for the batch to fill:
/// `T = max(exec, wait) + t_inf` with `wait = (b − w)/λ`; with `λ ≤ 0` the
/// batch never fills and `T` is infinite.
pub fn task_latency_ms(
    queued: f64,
    exec_ms: f64,
    t_inf_ms: f64,
    batch: u32,
    arrival_per_ms: f64,
) -> f64 {
    let b = f64::from(batch.max(1));
    if queued >= b {
        exec_ms + (queued / b).ceil() * t_inf_ms
    } else {
        let wait = if arrival_per_ms > 0.0 {
            (b - queued) / arrival_per_ms
        } else {
            f64::INFINITY
        };
        exec_ms.max(wait) + t_inf_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enough_work_waits_for_the_earlier_batches() {
        // w = 10, b = 4: ⌈10/4⌉ = 3 batches; 2 ms left + 3 × 5 ms = 17 ms.
        assert_eq!(task_latency_ms(10.0, 2.0, 5.0, 4, 1.0), 17.0);
        // w = b exactly is this branch: 2 + 1 × 5.
        assert_eq!(task_latency_ms(4.0, 2.0, 5.0, 4, 1.0), 7.0);
        // w = 8, b = 4: exactly 2 batches.
        assert_eq!(task_latency_ms(8.0, 0.0, 5.0, 4, 1.0), 10.0);
    }

    #[test]
    fn too_little_work_waits_for_the_batch_to_fill() {
        // w = 1, b = 4, λ = 0.5 /ms: wait (4 − 1)/0.5 = 6 ms > exec 2 ms;
        // T = 6 + 5 = 11.
        assert_eq!(task_latency_ms(1.0, 2.0, 5.0, 4, 0.5), 11.0);
        // λ = 3 /ms: wait 1 ms < exec 2 ms; T = 2 + 5 = 7.
        assert_eq!(task_latency_ms(1.0, 2.0, 5.0, 4, 3.0), 7.0);
        // No arrivals: the batch never fills.
        assert!(task_latency_ms(1.0, 2.0, 5.0, 4, 0.0).is_infinite());
        // Batch 0 is batch 1: one task is a full batch.
        assert_eq!(task_latency_ms(1.0, 0.0, 5.0, 0, 0.0), 5.0);
    }
}
