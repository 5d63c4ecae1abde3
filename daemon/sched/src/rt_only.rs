//! `rt-only`: the reference for real-time latency.
//!
//! Real-time tasks run alone, in arrival order, on one stream; best-effort
//! tasks are dropped at arrival and never complete. REEF §6.2 normalises
//! real-time latency to a model's standalone time; this policy gives that
//! reference under the same arrival process, queueing included.
//!
//! The module also holds the small launch helpers the other policies share.

use std::collections::VecDeque;

use shm_proto::Priority;

use super::{Ctx, Policy, Task, TaskDone, tag, untag};
use sluice_gpu::{Event, Gpu, GpuError, KernelLaunch, Outcome, StreamId};
use sluice_model::ModelRegistry;

/// Kernels in `model` (0 for an unknown model id).
pub(super) fn kernel_count(models: &ModelRegistry, model: u32) -> usize {
    models.get(model).map_or(0, |m| m.manifest.kernels.len())
}

/// The stream in `slot`, created with `priority` on first use. A failed
/// creation leaves `slot` empty, so the next task tries again.
pub(super) fn stream_in(
    slot: &mut Option<StreamId>,
    gpu: &mut dyn Gpu,
    priority: i32,
) -> Result<StreamId, GpuError> {
    if let Some(s) = *slot {
        return Ok(s);
    }
    let s = gpu.create_stream(priority)?;
    *slot = Some(s);
    Ok(s)
}

/// Launches kernels `range` of `task` on `stream`, tagged with [`tag`].
/// Returns how many were launched (0 for an unknown model). The first
/// refused launch stops the rest and is the error: the task cannot
/// complete, and the caller fails it ([`Ctx::fail`]); kernels of it
/// already launched run on.
pub(super) fn launch_kernels(
    cx: &mut Ctx<'_>,
    stream: StreamId,
    task: &Task,
    range: std::ops::Range<usize>,
) -> Result<usize, GpuError> {
    let Some(model) = cx.models.get(task.model) else {
        tracing::error!(model = task.model, task = task.id, "unknown model id");
        return Ok(0);
    };
    let mut n = 0;
    for i in range {
        let Some(k) = model.manifest.kernels.get(i) else {
            break;
        };
        cx.gpu
            .launch(stream, KernelLaunch::from_model(k, tag(task.id, i)))?;
        n += 1;
    }
    Ok(n)
}

/// Launches every kernel of `task` on `stream`; returns whether the task is
/// now in flight. A task with no kernels (an empty or unknown model) is done
/// at once, and one whose launch is refused fails ([`Ctx::fail`]).
pub(super) fn launch_task(cx: &mut Ctx<'_>, stream: StreamId, task: Task) -> bool {
    let n = kernel_count(cx.models, task.model);
    if n == 0 {
        cx.done.push(TaskDone {
            task,
            finished: cx.gpu.now(),
        });
        return false;
    }
    match launch_kernels(cx, stream, &task, 0..n) {
        Ok(_) => true,
        Err(e) => {
            cx.fail(task, e);
            false
        }
    }
}

/// If `ev` is the completion of a task's last kernel on `stream`, the task
/// id and the completion time. Stream order makes the last kernel's
/// completion the task's.
/// A kernel that ran to completion, as [`completed`] reads it from an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Completed {
    /// When it finished.
    pub t: u64,
    /// Its stream.
    pub stream: StreamId,
    /// Its task ([`untag`] of its tag).
    pub id: crate::TaskId,
    /// Its index in the task's model.
    pub k: usize,
}

/// The kernel `ev` reports as run to completion, if it is such an event.
pub(super) fn completed(ev: &Event) -> Option<Completed> {
    let Event::KernelFinished {
        t,
        stream,
        kernel,
        outcome: Outcome::Completed,
        ..
    } = ev
    else {
        return None;
    };
    let (id, k) = untag(kernel.tag);
    Some(Completed {
        t: *t,
        stream: *stream,
        id,
        k,
    })
}

pub(super) fn last_kernel_done(
    models: &ModelRegistry,
    ev: &Event,
    stream: StreamId,
    front: Option<&Task>,
) -> Option<(Task, u64)> {
    let c = completed(ev)?;
    let task = front?;
    (c.stream == stream && c.id == task.id && c.k + 1 == kernel_count(models, task.model))
        .then_some((*task, c.t))
}

/// Real-time tasks alone, FIFO, on one stream.
#[derive(Debug, Default)]
pub struct RtOnly {
    stream: Option<StreamId>,
    inflight: VecDeque<Task>,
    /// Best-effort tasks dropped at arrival.
    dropped: u64,
}

impl RtOnly {
    /// A fresh policy.
    pub fn new() -> Self {
        Self::default()
    }

    /// Best-effort tasks dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

impl Policy for RtOnly {
    fn name(&self) -> &'static str {
        "rt-only"
    }

    fn on_arrival(&mut self, cx: &mut Ctx<'_>, task: Task) {
        if task.priority != Priority::RealTime {
            self.dropped += 1;
            return;
        }
        let stream = match stream_in(&mut self.stream, cx.gpu, 1) {
            Ok(s) => s,
            Err(e) => return cx.fail(task, e),
        };
        if launch_task(cx, stream, task) {
            self.inflight.push_back(task);
        }
    }

    fn on_event(&mut self, cx: &mut Ctx<'_>, ev: &Event) {
        let Some(stream) = self.stream else { return };
        if let Some((task, t)) = last_kernel_done(cx.models, ev, stream, self.inflight.front()) {
            self.inflight.pop_front();
            cx.done.push(TaskDone { task, finished: t });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::workload::{Arrival, ClientSpec, Workload, run};
    use sluice_gpu::DeviceProfile;

    #[test]
    fn rt_latency_is_the_standalone_time_and_be_tasks_are_dropped() {
        let models = Arc::new(ModelRegistry::builtin());
        let (yolo, m) = models.lookup("yolov3").unwrap();
        let (vgg, _) = models.lookup("vgg19").unwrap();
        let rt = |arrival| ClientSpec {
            priority: Priority::RealTime,
            model: yolo,
            arrival,
        };
        // The standalone time: one request alone on an idle device.
        let alone = Workload {
            clients: vec![rt(Arrival::Trace(vec![0]))],
            duration_ns: 200_000_000,
        };
        let r = run(&DeviceProfile::mi50(), &models, &mut RtOnly::new(), &alone);
        assert_eq!((r.done.len(), r.unfinished), (1, 0));
        let standalone = r.done[0].finished - r.done[0].task.arrival;
        // Periods twice the manifest total, so every request finds the
        // device idle.
        let period_ns = 2 * m.total_time_ns;
        let w = Workload {
            clients: vec![
                rt(Arrival::Uniform {
                    period_ns,
                    offset_ns: 1_000_000,
                }),
                ClientSpec {
                    priority: Priority::BestEffort,
                    model: vgg,
                    arrival: Arrival::ClosedLoop,
                },
            ],
            duration_ns: 3 * period_ns,
        };
        let mut p = RtOnly::new();
        let r = run(&DeviceProfile::mi50(), &models, &mut p, &w);
        assert_eq!(r.done.len(), 3);
        assert_eq!(p.dropped(), 1);
        assert_eq!(r.unfinished, 1);
        let lat: Vec<u64> = r.done.iter().map(|d| d.finished - d.task.arrival).collect();
        // Every RT request takes exactly its standalone time: the BE client
        // never runs beside it.
        assert!(lat.iter().all(|&l| l == standalone), "{lat:?} {standalone}");
        // No slower than the manifest total plus one fetch per kernel, and
        // not much faster: the model's occupancy curve runs a kernel's
        // partly filled last round faster than a full one
        // (docs/gpu-model.md), so an estimated model whose large kernels
        // end in such rounds (YOLOv3's strided convolutions) may finish
        // a little under the sum of its kernel times, but by far less
        // than 1 %.
        let fetch = DeviceProfile::mi50().queues.cp_fetch_ns;
        let bound = m.total_time_ns + fetch * m.manifest.kernels.len() as u64;
        assert!(
            lat[0] * 100 >= m.total_time_ns * 99 && lat[0] <= bound,
            "{lat:?}"
        );
    }
}
