//! The GPU model behind the device interface: [`Gpu`] and [`Clocked`] for
//! [`GpuSim`], so every policy and the workload driver run on it.

use sluice_gpu::{
    Clocked, DeviceProfile, Event, Gpu, GpuError, HostReset, KernelLaunch, KernelRef, Ns, StreamId,
};

use crate::GpuSim;

impl Gpu for GpuSim {
    fn profile(&self) -> &DeviceProfile {
        GpuSim::profile(self)
    }
    fn now(&self) -> Ns {
        GpuSim::now(self)
    }
    fn create_stream(&mut self, priority: i32) -> Result<StreamId, GpuError> {
        Ok(GpuSim::create_stream(self, priority))
    }
    fn set_dq_capacity(&mut self, stream: StreamId, capacity: u32) -> Result<(), GpuError> {
        Ok(self.timed(|g| GpuSim::set_dq_capacity(g, stream, capacity))?)
    }
    fn set_packed_placement(&mut self, stream: StreamId, packed: bool) -> Result<(), GpuError> {
        Ok(GpuSim::set_packed_placement(self, stream, packed)?)
    }
    fn launch(&mut self, stream: StreamId, k: KernelLaunch) -> Result<KernelRef, GpuError> {
        Ok(self.timed(|g| GpuSim::launch(g, stream, k))?)
    }
    fn launch_padded(
        &mut self,
        stream: StreamId,
        k: KernelLaunch,
        host: StreamId,
        with: KernelRef,
    ) -> Result<KernelRef, GpuError> {
        Ok(self.timed(|g| GpuSim::launch_padded(g, stream, k, host, with))?)
    }
    fn preempt_reset(&mut self, stream: StreamId) -> Result<HostReset, GpuError> {
        Ok(self.timed(|g| GpuSim::preempt_reset(g, stream))?)
    }
    fn wait_based_preempt(&mut self, stream: StreamId) -> Result<(), GpuError> {
        Ok(self.timed(|g| GpuSim::wait_based_preempt(g, stream))?)
    }
    fn resume(&mut self, stream: StreamId) -> Result<(), GpuError> {
        Ok(self.timed(|g| GpuSim::resume(g, stream))?)
    }
    fn set_block_notify(&mut self, stream: StreamId, every: u32) -> Result<(), GpuError> {
        Ok(GpuSim::set_block_notify(self, stream, every)?)
    }
    fn set_partition(&mut self, stream: StreamId, cus: Option<&[u32]>) -> Result<(), GpuError> {
        Ok(self.timed(|g| GpuSim::set_partition(g, stream, cus))?)
    }
    fn model_work_ns(&self) -> u64 {
        GpuSim::model_work_ns(self)
    }
}

impl Clocked for GpuSim {
    fn advance(&mut self, until: Option<Ns>, out: &mut Vec<Event>) -> Option<Ns> {
        let t = match (until, self.next_event_time()) {
            (None, None) => return None,
            (Some(a), Some(g)) => a.min(g),
            (Some(a), None) => a,
            (None, Some(g)) => g,
        };
        self.run_until(t);
        out.extend(self.drain_events());
        Some(t)
    }

    fn utilisation(&self) -> Option<f64> {
        Some(GpuSim::utilisation(self))
    }

    fn time_model_work(&mut self) {
        self.set_model_timing(true);
    }
}
