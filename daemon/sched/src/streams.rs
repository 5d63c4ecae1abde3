//! `streams`: one stream per client, the GPU decides.
//!
//! The Triton / CUDA-streams baseline of REEF §6.2 ("GPUStreams"): every
//! task's kernels go straight onto its client's stream when it arrives.
//! Real-time clients' streams get priority 1, best-effort ones 0; in the
//! model ([`sluice_gpu`]) priority only orders the hardware-queue heads when
//! blocks are placed. Nothing is preempted, so best-effort blocks already on
//! the CUs, and best-effort kernels ahead in a shared hardware queue, delay
//! real-time kernels.

use std::collections::VecDeque;

use shm_proto::Priority;

use super::rt_only::{last_kernel_done, launch_task};
use super::{Ctx, Policy, Task, TaskDone};
use sluice_gpu::{Event, StreamId};

#[derive(Debug)]
struct Lane {
    stream: StreamId,
    inflight: VecDeque<Task>,
}

/// One stream per client.
#[derive(Debug, Default)]
pub struct Streams {
    /// Indexed by client id.
    lanes: Vec<Option<Lane>>,
    /// Client of each stream, indexed by stream id.
    client_of_stream: Vec<u32>,
}

impl Streams {
    /// A fresh policy.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Policy for Streams {
    fn name(&self) -> &'static str {
        "streams"
    }

    fn on_arrival(&mut self, cx: &mut Ctx<'_>, task: Task) {
        let c = task.client as usize;
        if self.lanes.len() <= c {
            self.lanes.resize_with(c + 1, || None);
        }
        let slot = &mut self.lanes[c];
        let lane = match slot {
            Some(lane) => lane,
            None => {
                let prio = i32::from(task.priority == Priority::RealTime);
                let stream = match cx.gpu.create_stream(prio) {
                    Ok(s) => s,
                    Err(e) => return cx.fail(task, e),
                };
                let s = stream.0 as usize;
                if self.client_of_stream.len() <= s {
                    self.client_of_stream.resize(s + 1, u32::MAX);
                }
                self.client_of_stream[s] = task.client;
                slot.insert(Lane {
                    stream,
                    inflight: VecDeque::new(),
                })
            }
        };
        if launch_task(cx, lane.stream, task) {
            lane.inflight.push_back(task);
        }
    }

    fn on_event(&mut self, cx: &mut Ctx<'_>, ev: &Event) {
        let Event::KernelFinished { stream, .. } = ev else {
            return;
        };
        let Some(&c) = self.client_of_stream.get(stream.0 as usize) else {
            return;
        };
        let Some(Some(lane)) = self.lanes.get_mut(c as usize) else {
            return;
        };
        if let Some((task, t)) = last_kernel_done(cx.models, ev, lane.stream, lane.inflight.front())
        {
            lane.inflight.pop_front();
            cx.done.push(TaskDone { task, finished: t });
        }
    }
}
