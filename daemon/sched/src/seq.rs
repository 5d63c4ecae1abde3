//! `seq`: one task on the GPU at a time, real-time first, no preemption.
//!
//! This is the Clockwork-like baseline of REEF §6.2 ("SEQ"): the device runs
//! one inference at a time, so a real-time task never shares the GPU, but it
//! waits for whatever task is running, best-effort included, to finish.
//! Waiting tasks are kept in two queues, earliest deadline first within
//! each ([`EdfQueue`]; FIFO without deadlines); the real-time queue is
//! served first. A task whose deadline passed while it waited is dropped
//! instead of started. All kernels of the chosen task go to one stream at
//! once.

use shm_proto::Priority;

use super::queue::EdfQueue;

use super::rt_only::{last_kernel_done, launch_task, stream_in};
use super::{Ctx, Policy, Task, TaskDone};
use sluice_gpu::{Event, StreamId};

/// One task at a time, real-time first.
#[derive(Debug, Default)]
pub struct Seq {
    stream: Option<StreamId>,
    rt: EdfQueue<Task>,
    be: EdfQueue<Task>,
    running: Option<Task>,
}

impl Seq {
    /// A fresh policy.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts the next waiting task if the GPU is free.
    /// A task whose stream cannot be created or whose launch is refused
    /// fails, and the next one is tried.
    fn start_next(&mut self, cx: &mut Ctx<'_>) {
        while self.running.is_none() {
            let Some(task) = self
                .rt
                .pop_startable(cx)
                .or_else(|| self.be.pop_startable(cx))
            else {
                return;
            };
            let stream = match stream_in(&mut self.stream, cx.gpu, 0) {
                Ok(s) => s,
                Err(e) => {
                    cx.fail(task, e);
                    continue;
                }
            };
            if launch_task(cx, stream, task) {
                self.running = Some(task);
            }
        }
    }
}

impl Policy for Seq {
    fn name(&self) -> &'static str {
        "seq"
    }

    fn on_arrival(&mut self, cx: &mut Ctx<'_>, task: Task) {
        match task.priority {
            Priority::RealTime => self.rt.push_task(task),
            Priority::BestEffort => self.be.push_task(task),
        }
        self.start_next(cx);
    }

    fn on_event(&mut self, cx: &mut Ctx<'_>, ev: &Event) {
        let Some(stream) = self.stream else { return };
        if let Some((task, t)) = last_kernel_done(cx.models, ev, stream, self.running.as_ref()) {
            self.running = None;
            cx.done.push(TaskDone { task, finished: t });
            self.start_next(cx);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::workload::{Arrival, ClientSpec, Workload, run};
    use sluice_gpu::DeviceProfile;
    use sluice_model::ModelRegistry;

    #[test]
    fn one_task_at_a_time_and_real_time_goes_first() {
        let models = Arc::new(ModelRegistry::builtin());
        let (yolo, _) = models.lookup("yolov3").unwrap();
        let (bert, _) = models.lookup("bert_base").unwrap();
        let w = Workload {
            clients: vec![
                ClientSpec {
                    priority: Priority::BestEffort,
                    model: bert,
                    arrival: Arrival::Trace(vec![0, 100_000, 200_000]),
                },
                ClientSpec {
                    priority: Priority::RealTime,
                    model: yolo,
                    arrival: Arrival::Trace(vec![300_000]),
                },
            ],
            duration_ns: 1_000_000,
        };
        let r = run(&DeviceProfile::mi50(), &models, &mut Seq::new(), &w);
        assert_eq!(r.unfinished, 0);
        let order: Vec<(Priority, u64)> = r
            .done
            .iter()
            .map(|d| (d.task.priority, d.task.arrival))
            .collect();
        // The first BE task was running; the RT task overtakes the queued ones.
        assert_eq!(
            order,
            [
                (Priority::BestEffort, 0),
                (Priority::RealTime, 300_000),
                (Priority::BestEffort, 100_000),
                (Priority::BestEffort, 200_000),
            ]
        );
        // Never two at once: each task runs at least its standalone time
        // (one request alone on the same device model) after the previous
        // one finished.
        let standalone = |model| {
            let alone = Workload {
                clients: vec![ClientSpec {
                    priority: Priority::BestEffort,
                    model,
                    arrival: Arrival::Trace(vec![0]),
                }],
                duration_ns: 1_000_000_000,
            };
            let r = run(&DeviceProfile::mi50(), &models, &mut Seq::new(), &alone);
            assert_eq!((r.done.len(), r.unfinished), (1, 0));
            r.done[0].finished
        };
        for w in r.done.windows(2) {
            let alone = standalone(w[1].task.model);
            assert!(
                w[1].finished - w[0].finished >= alone,
                "{} after {}: {alone}",
                w[1].finished,
                w[0].finished
            );
        }
    }
}
