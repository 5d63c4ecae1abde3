//! `rt-a`: the runtime-aware baseline (Yu et al., ICCAD'21) as the SPLIT
//! paper describes it: "concurrently runs all requests on the same GPU
//! through multiple GPU streams, splitting and aligning models based on
//! resource requirement of operators" (SPLIT §5.3).
//!
//! Here every request gets its own stream when it arrives (not one per
//! client, so two requests of one client also run side by side), and all
//! its kernels go onto it at once; the device decides how they share the
//! CUs. A stream is returned to a pool when its request completes and is
//! reused by the next arrival, so the number of streams is the largest
//! number of requests in flight at once. All streams have priority 0:
//! RT-A has no priority classes and `rt-a` ignores
//! [`Task::priority`](super::Task::priority).
//!
//! **Simplification.** RT-A's model merging and operator alignment by
//! resource needs are not reproduced: kernels run as the manifests give
//! them. What SPLIT's comparison stresses, all requests running
//! concurrently on separate streams, is what this policy does.

use super::rt_only::{Completed, completed, launch_task};
use super::{Ctx, Policy, Task, TaskDone};
use crate::rt_only::kernel_count;
use sluice_gpu::{Event, StreamId};

/// All requests at once, one stream each.
#[derive(Debug, Default)]
pub struct RtA {
    /// Idle streams.
    free: Vec<StreamId>,
    /// Requests in flight and their streams.
    inflight: Vec<(Task, StreamId)>,
    /// Most requests in flight at once.
    max_inflight: usize,
}

impl RtA {
    /// A fresh policy.
    pub fn new() -> Self {
        Self::default()
    }

    /// Most requests that were in flight at once.
    pub fn max_inflight(&self) -> usize {
        self.max_inflight
    }
}

impl Policy for RtA {
    fn name(&self) -> &'static str {
        "rt-a"
    }

    fn on_arrival(&mut self, cx: &mut Ctx<'_>, task: Task) {
        let stream = match self.free.pop() {
            Some(s) => s,
            None => match cx.gpu.create_stream(0) {
                Ok(s) => s,
                Err(e) => return cx.fail(task, e),
            },
        };
        if launch_task(cx, stream, task) {
            self.inflight.push((task, stream));
            self.max_inflight = self.max_inflight.max(self.inflight.len());
        } else {
            self.free.push(stream);
        }
    }

    fn on_event(&mut self, cx: &mut Ctx<'_>, ev: &Event) {
        let Some(Completed { t, stream, id, k }) = completed(ev) else {
            return;
        };
        let Some(i) = self
            .inflight
            .iter()
            .position(|(task, s)| task.id == id && *s == stream)
        else {
            return;
        };
        let task = self.inflight[i].0;
        if k + 1 == kernel_count(cx.models, task.model) {
            let (task, s) = self.inflight.swap_remove(i);
            self.free.push(s);
            cx.done.push(TaskDone { task, finished: t });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use shm_proto::Priority;

    use super::*;
    use crate::streams::Streams;
    use crate::workload::{Arrival, ClientSpec, Workload, run};
    use crate::{Policy, untag};
    use sluice_gpu::{DeviceProfile, Ns};
    use sluice_model::ModelRegistry;

    /// Forwards to `P` and records when each task's first kernel started
    /// and its last kernel finished.
    struct Spans<P> {
        inner: P,
        first_start: Vec<(u64, Ns)>,
        last_finish: Vec<(u64, Ns)>,
    }

    impl<P: Policy> Policy for Spans<P> {
        fn name(&self) -> &'static str {
            self.inner.name()
        }
        fn on_arrival(&mut self, cx: &mut Ctx<'_>, task: Task) {
            self.inner.on_arrival(cx, task);
        }
        fn on_event(&mut self, cx: &mut Ctx<'_>, ev: &Event) {
            match ev {
                Event::KernelStarted { t, kernel, .. } => {
                    let (id, _) = untag(kernel.tag);
                    if !self.first_start.iter().any(|&(i, _)| i == id) {
                        self.first_start.push((id, *t));
                    }
                }
                Event::KernelFinished { t, kernel, .. } => {
                    let (id, _) = untag(kernel.tag);
                    match self.last_finish.iter_mut().find(|(i, _)| *i == id) {
                        Some(e) => e.1 = *t,
                        None => self.last_finish.push((id, *t)),
                    }
                }
                _ => {}
            }
            self.inner.on_event(cx, ev);
        }
    }

    /// Whether the two tasks' spans (first start to last finish) overlap.
    fn overlapped<P: Policy>(p: P) -> bool {
        let models = Arc::new(ModelRegistry::builtin());
        let (r50, _) = models.lookup("resnet50").unwrap();
        // One client, two requests at once.
        let w = Workload {
            clients: vec![ClientSpec {
                priority: Priority::BestEffort,
                model: r50,
                arrival: Arrival::Trace(vec![0, 0]),
            }],
            duration_ns: 1_000_000_000,
        };
        let mut s = Spans {
            inner: p,
            first_start: Vec::new(),
            last_finish: Vec::new(),
        };
        let r = run(&DeviceProfile::mi50(), &models, &mut s, &w);
        assert_eq!((r.done.len(), r.unfinished), (2, 0));
        let span = |id| {
            let a = s.first_start.iter().find(|e| e.0 == id).unwrap().1;
            let b = s.last_finish.iter().find(|e| e.0 == id).unwrap().1;
            (a, b)
        };
        let ids: Vec<u64> = r.done.iter().map(|d| d.task.id).collect();
        let ((a0, a1), (b0, b1)) = (span(ids[0]), span(ids[1]));
        a0 < b1 && b0 < a1
    }

    #[test]
    fn two_requests_run_concurrently() {
        assert!(overlapped(RtA::new()));
        // The same client's requests share a stream under `streams` and
        // run one after the other.
        assert!(!overlapped(Streams::new()));
    }

    #[test]
    fn streams_are_reused() {
        let models = Arc::new(ModelRegistry::builtin());
        let (r18, m) = models.lookup("resnet18").unwrap();
        let period_ns = 3 * m.total_time_ns;
        let w = Workload {
            clients: vec![ClientSpec {
                priority: Priority::RealTime,
                model: r18,
                arrival: Arrival::Uniform {
                    period_ns,
                    offset_ns: 0,
                },
            }],
            duration_ns: 5 * period_ns,
        };
        let mut p = RtA::new();
        let r = run(&DeviceProfile::mi50(), &models, &mut p, &w);
        assert_eq!(r.unfinished, 0);
        assert_eq!(r.done.len(), 5);
        assert_eq!(p.max_inflight(), 1);
        assert_eq!(p.free.len(), 1);
    }
}
