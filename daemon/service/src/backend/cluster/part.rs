//! One GPU of the cluster and the view of it a partition's policy gets.
//!
//! Every partition runs its own instance of the configured per-GPU policy
//! (`seq`, `reef`, ...), unchanged: the policy drives a [`PartGpu`], which
//! is the GPU model with every stream the policy creates confined to the
//! partition's CUs ([`GpuSim::set_partition`]). Events come back by stream,
//! and each GPU remembers which partition owns which stream.
//!
//! Streams of a partition that has drained go to a pool and are reused,
//! with their settings reset, by later partitions, so a daemon that
//! re-plans every few milliseconds does not grow the model's stream table
//! without bound.

use sluice_gpu::{DeviceProfile, Gpu, GpuError, HostReset, KernelLaunch, KernelRef, Ns, StreamId};
use sluice_gpusim::GpuSim;

/// No partition owns the stream.
pub(super) const NO_OWNER: u32 = u32::MAX;

/// One simulated GPU of the cluster.
pub(super) struct GpuState {
    pub(super) sim: GpuSim,
    /// `owner[stream]`: the partition slot that created it, or [`NO_OWNER`].
    pub(super) owner: Vec<u32>,
    /// Idle streams of drained partitions: (priority, stream).
    pub(super) pool: Vec<(i32, StreamId)>,
    /// Streams of drained partitions that still had work queued when the
    /// partition went away (cannot happen with the shipped policies: a
    /// partition drains only when its last task finished); looked at again
    /// at the next switch.
    pub(super) retired: Vec<(i32, StreamId)>,
}

impl GpuState {
    pub(super) fn new(profile: DeviceProfile) -> Self {
        Self {
            sim: GpuSim::new(profile),
            owner: Vec::new(),
            pool: Vec::new(),
            retired: Vec::new(),
        }
    }

    /// Gives `streams` back: idle ones to the pool, the rest to `retired`.
    pub(super) fn release(&mut self, streams: &[(i32, StreamId)]) {
        for &(prio, s) in streams {
            if let Some(o) = self.owner.get_mut(s.0 as usize) {
                *o = NO_OWNER;
            }
            self.retired.push((prio, s));
        }
        let sim = &self.sim;
        let (idle, busy): (Vec<_>, Vec<_>) = self.retired.drain(..).partition(|(_, s)| {
            sim.queue_lens(*s)
                .is_ok_and(|q| q.host == 0 && q.device == 0 && q.hardware == 0 && !q.active)
        });
        self.pool.extend(idle);
        self.retired = busy;
    }
}

/// The GPU as one partition's policy sees it.
pub(super) struct PartGpu<'a> {
    pub(super) gpu: &'a mut GpuState,
    /// The partition's CUs; empty: the whole device.
    pub(super) cus: &'a [u32],
    /// Streams the partition's policy created: (priority, stream).
    pub(super) streams: &'a mut Vec<(i32, StreamId)>,
    /// The partition's slot (what [`GpuState::owner`] records).
    pub(super) slot: u32,
}

impl PartGpu<'_> {
    fn confine(&mut self, s: StreamId) -> Result<(), GpuError> {
        let cus = (!self.cus.is_empty()).then_some(self.cus);
        Ok(self.gpu.sim.set_partition(s, cus)?)
    }

    fn own(&mut self, prio: i32, s: StreamId) {
        let i = s.0 as usize;
        if self.gpu.owner.len() <= i {
            self.gpu.owner.resize(i + 1, NO_OWNER);
        }
        self.gpu.owner[i] = self.slot;
        self.streams.push((prio, s));
    }
}

impl Gpu for PartGpu<'_> {
    fn profile(&self) -> &DeviceProfile {
        self.gpu.sim.profile()
    }
    fn now(&self) -> Ns {
        self.gpu.sim.now()
    }
    fn create_stream(&mut self, priority: i32) -> Result<StreamId, GpuError> {
        let reused = self
            .gpu
            .pool
            .iter()
            .position(|&(p, _)| p == priority)
            .map(|i| self.gpu.pool.swap_remove(i).1);
        let s = match reused {
            Some(s) => {
                // Back to how a new stream starts.
                let cap = self.gpu.sim.profile().queues.dq_capacity;
                self.gpu.sim.set_dq_capacity(s, cap)?;
                self.gpu.sim.set_packed_placement(s, false)?;
                self.gpu.sim.set_block_notify(s, 0)?;
                // Not paused and no preemption flag (idle streams have no
                // preemption in progress, so this cannot fail).
                self.gpu.sim.resume(s)?;
                s
            }
            None => self.gpu.sim.create_stream(priority),
        };
        self.confine(s)?;
        self.own(priority, s);
        Ok(s)
    }
    fn set_dq_capacity(&mut self, stream: StreamId, capacity: u32) -> Result<(), GpuError> {
        Gpu::set_dq_capacity(&mut self.gpu.sim, stream, capacity)
    }
    fn set_packed_placement(&mut self, stream: StreamId, packed: bool) -> Result<(), GpuError> {
        Gpu::set_packed_placement(&mut self.gpu.sim, stream, packed)
    }
    fn launch(&mut self, stream: StreamId, k: KernelLaunch) -> Result<KernelRef, GpuError> {
        Gpu::launch(&mut self.gpu.sim, stream, k)
    }
    fn launch_padded(
        &mut self,
        stream: StreamId,
        k: KernelLaunch,
        host: StreamId,
        with: KernelRef,
    ) -> Result<KernelRef, GpuError> {
        Gpu::launch_padded(&mut self.gpu.sim, stream, k, host, with)
    }
    fn preempt_reset(&mut self, stream: StreamId) -> Result<HostReset, GpuError> {
        Gpu::preempt_reset(&mut self.gpu.sim, stream)
    }
    fn wait_based_preempt(&mut self, stream: StreamId) -> Result<(), GpuError> {
        Gpu::wait_based_preempt(&mut self.gpu.sim, stream)
    }
    fn resume(&mut self, stream: StreamId) -> Result<(), GpuError> {
        Gpu::resume(&mut self.gpu.sim, stream)
    }
    fn set_block_notify(&mut self, stream: StreamId, every: u32) -> Result<(), GpuError> {
        Gpu::set_block_notify(&mut self.gpu.sim, stream, every)
    }
    /// A policy inside a partition cannot leave it: the partition's CUs
    /// are intersected with what it asks for.
    fn set_partition(&mut self, stream: StreamId, cus: Option<&[u32]>) -> Result<(), GpuError> {
        match cus {
            None => self.confine(stream),
            Some(asked) if self.cus.is_empty() => {
                Ok(self.gpu.sim.set_partition(stream, Some(asked))?)
            }
            Some(asked) => {
                let both: Vec<u32> = asked
                    .iter()
                    .copied()
                    .filter(|c| self.cus.contains(c))
                    .collect();
                Ok(self.gpu.sim.set_partition(stream, Some(&both))?)
            }
        }
    }
    fn model_work_ns(&self) -> u64 {
        self.gpu.sim.model_work_ns()
    }
}
