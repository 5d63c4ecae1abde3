//! [`CudaGpu`]: the scheduler's [`Gpu`] interface over CUDA streams, so the
//! policies of [`sluice_sched`] (`reef`, `wait-preempt`, `seq`, …) drive a
//! real device with the same code that drives the GPU model.
//!
//! Each policy stream is a [`VirtualQueue`] on a CUDA stream, and in front
//! of it a host queue of launches, fed to the virtual queue while fewer
//! than the stream's device-queue capacity are in it or on the device
//! (REEF §4.2's capacity restriction, `Gpu::set_dq_capacity`).
//!
//! **Kernels are synthetic.** A [`KernelLaunch`] carries a grid, a block
//! shape and a block time, not code, so each launch runs the kernel
//! library's `sluice_synthetic` with that grid and block size (rounded up
//! to whole warps, at most 1024 threads: [`synthetic_block`]) and each
//! block spinning for the launch's block time (dynamic shared memory as the
//! launch asks, up to 48 KiB, so occupancy follows the manifest's footprint
//! except for registers). The GPU then does the real scheduling work
//! (block dispatch, streams, priorities, the preemption flag) on the
//! manifests' timings: what `sluice bench preempt` and `sluice bench disb`
//! measure. Running the models' real layers is the job of the
//! [`sluice_nn`] plans, not of this adapter.
//!
//! **Preemption.** `preempt_reset` drops the host queue (an O(1) swap),
//! sets the queue's flag (lazy eviction of what is on the stream) and, with
//! [`KillMechanism::Cooperative`], stops the running synthetic kernel at
//! its next flag poll; the [`Event::Preempted`] report names the first
//! launch that did not complete, and the policy relaunches from there (its
//! restore point, §4.4), after `resume`. `wait_based_preempt` stops feeding
//! the queue and reports when it is empty.
//!
//! **Partitions.** `set_partition` moves a stream's virtual queue onto a
//! stream of a green context (CUDA ≥ 12.4) made of the SM granules holding
//! the asked CUs ([`super::partition`]); kernels already on the device
//! finish where they are and the new stream waits for them.
//! [`CudaGpu::prepare_partition`] makes a partition ahead, so the switch is
//! one `cuStreamWaitEvent` at most.
//!
//! **Events.** `KernelFinished` comes from the queue's completion events.
//! CUDA reports no block placement, so `KernelStarted` is reported when a
//! launch becomes the first unfinished one of a stream that has a kernel
//! on the device: an approximation (it may still wait for free SMs).
//! There is no fused launch: `launch_padded` and `set_packed_placement`
//! answer [`GpuError::Unsupported`] and [`Gpu::supports_fused_launch`] is
//! false, so `reef` runs without dynamic kernel padding here.

use std::collections::VecDeque;
use std::sync::Arc;

use super::driver::{
    CuDriver, DevicePtr, DriverError, GranuleSet, GreenCtxId, KernelArgs, KernelHandle, LaunchDims,
    SmGranules, StreamPriority,
};
use super::partition::{self, PartitionInfo};
use super::queue::{
    Command, KillMechanism, PreemptError, Program, QueueConfig, QueueError, TaskId, VirtualQueue,
};
use sluice_gpu::{
    DeviceProfile, Event, Gpu, GpuError, HostReset, KernelLaunch, KernelRef, Ns, Outcome,
    PreemptReport, StreamId,
};

const BACKEND: &str = "cuda";

/// The synthetic kernel's name in the kernel library.
pub const SYNTHETIC_KERNEL: &str = "sluice_synthetic";

/// Largest grid the sink buffer covers (one `float` per block).
pub const MAX_GRID: u32 = 1 << 20;

/// The block the synthetic kernel runs for a manifest kernel of `threads`
/// threads per block: rounded up to whole warps (its spin loop shuffles
/// across a full warp) and kept within its launch bound.
pub fn synthetic_block(threads: u32) -> u32 {
    threads
        .div_ceil(32)
        .saturating_mul(32)
        .clamp(32, crate::kernels::Kernel::Synthetic.max_block_threads())
}

/// Largest dynamic shared memory a launch asks for without opting in.
const MAX_DYNAMIC_SMEM: u32 = 48 * 1024;

/// How a [`CudaGpu`] stops a running kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kill {
    /// The kernel sees the flag at its next poll and returns.
    Cooperative,
    /// Running kernels run to their end.
    None,
}

#[derive(Debug)]
struct Launch {
    task: TaskId,
    kref: KernelRef,
    program: Arc<Program>,
    work_ns: Ns,
    started: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Running,
    /// Reset-based preemption under way, requested at this time.
    Resetting(Ns),
    /// Wait-based preemption under way.
    Waiting(Ns),
    /// Preempted; launches wait for `resume`.
    Stopped,
}

#[derive(Debug)]
struct Lane {
    q: VirtualQueue,
    /// Launches not yet in the virtual queue.
    hq: VecDeque<Launch>,
    /// Launches in the virtual queue or on the device, in order.
    inflight: VecDeque<Launch>,
    cap: usize,
    next_exec: u64,
    mode: Mode,
    dropped: u32,
    priority: StreamPriority,
    /// Its stream on the whole device (the primary context).
    home: crate::driver::StreamId,
    /// Its stream in each prepared partition (by index in
    /// `CudaGpu::partitions`), made when prepared or first used.
    part_streams: Vec<Option<crate::driver::StreamId>>,
    /// The partition it runs in now; `None`: the whole device.
    part: Option<usize>,
}

/// A green context made for partitions.
#[derive(Debug)]
struct Prepared {
    info: PartitionInfo,
    ctx: GreenCtxId,
}

/// The scheduler's device interface over CUDA (see the module docs).
#[derive(Debug)]
pub struct CudaGpu {
    drv: Box<dyn CuDriver>,
    profile: DeviceProfile,
    kernel: KernelHandle,
    sink: DevicePtr,
    kill: Kill,
    lanes: Vec<Lane>,
    epoch_ns: u64,
    next_task: u64,
    out: Vec<Event>,
    done: Vec<TaskId>,
    /// Dropped host queues, freed by [`CudaGpu::reclaim`].
    reclaim: Vec<VecDeque<Launch>>,
    /// The driver's SM split, asked once ([`CudaGpu::sm_granules`]).
    granules: Option<Result<SmGranules, DriverError>>,
    /// Green contexts made so far, never destroyed (a switch back reuses
    /// them).
    partitions: Vec<Prepared>,
    /// The driver error that stopped [`sluice_gpu::Clocked::advance`], if
    /// one did ([`sluice_gpu::Clocked::failure`]).
    failure: Option<String>,
}

/// Building a [`CudaGpu`] failed.
#[derive(Debug, thiserror::Error)]
#[error("setting up the CUDA device for the scheduler: {what}")]
pub struct SetupError {
    what: &'static str,
    #[source]
    source: DriverError,
}

impl CudaGpu {
    /// A device over `drv`, whose `kernel` is the library's
    /// [`SYNTHETIC_KERNEL`] (loaded by the caller), with `profile`'s figures
    /// for the policies' occupancy decisions.
    pub fn new(
        mut drv: Box<dyn CuDriver>,
        kernel: KernelHandle,
        profile: DeviceProfile,
        kill: Kill,
    ) -> Result<Self, SetupError> {
        let sink = drv
            .alloc_device(MAX_GRID as usize * 4)
            .map_err(|source| SetupError {
                what: "allocating the synthetic kernels' sink buffer",
                source,
            })?;
        let epoch_ns = drv.now_ns();
        Ok(Self {
            drv,
            profile,
            kernel,
            sink,
            kill,
            lanes: Vec::new(),
            epoch_ns,
            next_task: 0,
            out: Vec::new(),
            done: Vec::new(),
            reclaim: Vec::new(),
            granules: None,
            partitions: Vec::new(),
            failure: None,
        })
    }

    /// How streams created from now on stop a running kernel.
    pub fn set_kill(&mut self, kill: Kill) {
        self.kill = kill;
    }

    /// The driver, e.g. to advance a fake one.
    pub fn driver(&mut self) -> &mut dyn CuDriver {
        &mut *self.drv
    }

    fn lane(&mut self, stream: StreamId) -> Result<&mut Lane, GpuError> {
        self.lanes
            .get_mut(stream.0 as usize)
            .ok_or(GpuError::Driver {
                backend: BACKEND,
                op: "use a stream",
                message: format!("stream {} was not created by this device", stream.0),
            })
    }

    fn driver_err(op: &'static str, e: impl std::fmt::Display) -> GpuError {
        GpuError::Driver {
            backend: BACKEND,
            op,
            message: e.to_string(),
        }
    }

    /// Moves launches from lane `l`'s host queue into its virtual queue
    /// while fewer than its capacity are there or on the device.
    fn feed(&mut self, l: usize) {
        let lane = &mut self.lanes[l];
        if lane.mode != Mode::Running {
            return;
        }
        while lane.q.queued() + lane.q.outstanding() < lane.cap {
            let Some(launch) = lane.hq.pop_front() else {
                break;
            };
            lane.q.submit(&launch.program);
            lane.inflight.push_back(launch);
        }
    }

    /// Launches `commands` (one idempotent group each: a relaunch reruns
    /// them all) as the kernel `k` of the policy's view on `stream`,
    /// behind what the stream has queued. [`Gpu::launch`] runs the
    /// synthetic kernel with `k`'s timing; a caller with real work (the
    /// model server of [`super::serve`]) passes that work here, and `k`
    /// only names it (tag) and sizes it for the events (`work_ns`).
    pub fn launch_commands(
        &mut self,
        stream: StreamId,
        k: KernelLaunch,
        commands: Vec<Command>,
    ) -> Result<KernelRef, GpuError> {
        let task = TaskId(self.next_task);
        self.next_task += 1;
        let program =
            Program::each_idempotent(task, commands).map_err(|e| Self::driver_err("launch", e))?;
        let l = stream.0 as usize;
        let lane = self.lane(stream)?;
        let kref = KernelRef {
            exec_index: lane.next_exec,
            tag: k.tag,
        };
        lane.next_exec += 1;
        lane.hq.push_back(Launch {
            task,
            kref,
            program,
            work_ns: Ns::from(k.grid_blocks) * k.block_time_ns,
            started: false,
        });
        self.feed(l);
        Ok(kref)
    }

    /// Observes the device: completions, preemptions, starts; feeds the
    /// virtual queues. Events go to [`CudaGpu::drain_events`].
    pub fn poll(&mut self) -> Result<(), QueueError> {
        let now = self.now();
        for l in 0..self.lanes.len() {
            self.done.clear();
            let lane = &mut self.lanes[l];
            let stream = StreamId(l as u32);
            let report = lane.q.poll(&mut *self.drv, &mut self.done)?;
            for task in self.done.drain(..) {
                let Some(pos) = lane.inflight.iter().position(|x| x.task == task) else {
                    continue;
                };
                for x in lane.inflight.drain(..=pos) {
                    // In stream order, a later completion means the earlier
                    // ones completed too (the queue reports each; this keeps
                    // the order if two arrive in one poll).
                    if !x.started {
                        self.out.push(Event::KernelStarted {
                            t: now,
                            stream,
                            kernel: x.kref,
                        });
                    }
                    self.out.push(Event::KernelFinished {
                        t: now,
                        stream,
                        kernel: x.kref,
                        outcome: Outcome::Completed,
                        work_ns: x.work_ns,
                    });
                }
            }
            if let Some(r) = report {
                let requested_at = match lane.mode {
                    Mode::Resetting(t) | Mode::Waiting(t) => t,
                    _ => now,
                };
                let mut first = None;
                let mut evicted = 0;
                let mut killed = 0;
                for x in lane.inflight.drain(..) {
                    first.get_or_insert(x.kref);
                    let outcome = if x.started {
                        killed += 1;
                        Outcome::Killed
                    } else {
                        evicted += 1;
                        Outcome::Evicted
                    };
                    self.out.push(Event::KernelFinished {
                        t: now,
                        stream,
                        kernel: x.kref,
                        outcome,
                        work_ns: 0,
                    });
                }
                // The queue would re-run them; the policy relaunches
                // from its own restore point instead.
                lane.q.discard();
                self.out.push(Event::Preempted(PreemptReport {
                    stream,
                    requested_at,
                    idle_at: requested_at.max(now.min(requested_at + r.latency_ns)),
                    dropped_host: std::mem::take(&mut lane.dropped),
                    evicted,
                    killed,
                    held_host: 0,
                    first_incomplete: first,
                }));
                lane.mode = Mode::Stopped;
            }
            if let Mode::Waiting(requested_at) = lane.mode
                && lane.inflight.is_empty()
                && lane.q.is_idle()
            {
                self.out.push(Event::Preempted(PreemptReport {
                    stream,
                    requested_at,
                    idle_at: now,
                    dropped_host: 0,
                    evicted: 0,
                    killed: 0,
                    held_host: lane.hq.len() as u32,
                    first_incomplete: lane.hq.front().map(|x| x.kref),
                }));
                lane.mode = Mode::Stopped;
            }
            if let Some(head) = lane.inflight.front_mut()
                && !head.started
                && lane.q.outstanding_kernels() > 0
            {
                head.started = true;
                self.out.push(Event::KernelStarted {
                    t: now,
                    stream,
                    kernel: head.kref,
                });
            }
            self.feed(l);
        }
        Ok(())
    }

    /// How the device's SMs split into green contexts (asked of the driver
    /// once). An error when the driver has no green contexts, naming its
    /// version and the CUDA 12.4 requirement.
    pub fn sm_granules(&mut self) -> Result<SmGranules, GpuError> {
        let r = self
            .granules
            .get_or_insert_with(|| self.drv.sm_granules())
            .clone();
        r.map_err(|e| Self::driver_err("partition the device", e))
    }

    /// What a partition of the CUs `cus` becomes on this device: the
    /// granules holding them, their SMs, or the whole device when they hold
    /// every granule (see [`partition`]). Creates nothing.
    pub fn partition_for(&mut self, cus: &[u32]) -> Result<PartitionInfo, GpuError> {
        let layout = self.sm_granules()?;
        partition::for_cus(&layout, cus).map_err(|why| GpuError::Driver {
            backend: BACKEND,
            op: "partition the device",
            message: why,
        })
    }

    /// Prepares a partition of `sm_count` SMs, the lowest ones (CUs
    /// `0..sm_count`, rounded up to whole granules: 8 SMs on compute
    /// capability 9.x), so that moving a stream into it later is cheap: the
    /// green context, and a stream in it for every stream created so far.
    /// Streams created later get theirs at their first move. Returns what
    /// the partition is.
    pub fn prepare_partition(&mut self, sm_count: u32) -> Result<PartitionInfo, GpuError> {
        let layout = self.sm_granules()?;
        let info = partition::for_count(&layout, sm_count).map_err(|why| GpuError::Driver {
            backend: BACKEND,
            op: "prepare a partition",
            message: why,
        })?;
        self.prepare(info)?;
        Ok(info)
    }

    /// [`CudaGpu::prepare_partition`] for the partition holding the CUs
    /// `cus` (as [`Gpu::set_partition`] would make it).
    pub fn prepare_partition_cus(&mut self, cus: &[u32]) -> Result<PartitionInfo, GpuError> {
        let info = self.partition_for(cus)?;
        self.prepare(info)?;
        Ok(info)
    }

    /// The partition `stream` runs in; `None`: the whole device.
    pub fn partition_of(&self, stream: StreamId) -> Option<PartitionInfo> {
        let lane = self.lanes.get(stream.0 as usize)?;
        lane.part.map(|p| self.partitions[p].info)
    }

    /// Green contexts made so far.
    pub fn prepared_partitions(&self) -> usize {
        self.partitions.len()
    }

    /// The index of `info`'s green context, made if need be; with every
    /// lane's stream in it. `None` for the whole device.
    fn prepare(&mut self, info: PartitionInfo) -> Result<Option<usize>, GpuError> {
        if info.whole_device {
            return Ok(None);
        }
        let p = self.green_ctx(info.granules, info)?;
        for l in 0..self.lanes.len() {
            self.lane_stream(l, p)?;
        }
        Ok(Some(p))
    }

    /// The index of the green context of `set`, made if need be.
    fn green_ctx(&mut self, set: GranuleSet, info: PartitionInfo) -> Result<usize, GpuError> {
        if let Some(p) = self.partitions.iter().position(|p| p.info.granules == set) {
            return Ok(p);
        }
        let ctx = self.drv.create_green_ctx(set).map_err(|e| {
            Self::driver_err(
                "partition the device",
                format!(
                    "creating the green context of {} SMs (granules {set}): {e}",
                    info.sms
                ),
            )
        })?;
        self.partitions.push(Prepared { info, ctx });
        Ok(self.partitions.len() - 1)
    }

    /// Lane `l`'s stream in partition `p`, made if need be.
    fn lane_stream(&mut self, l: usize, p: usize) -> Result<crate::driver::StreamId, GpuError> {
        let lane = &mut self.lanes[l];
        if let Some(Some(s)) = lane.part_streams.get(p) {
            return Ok(*s);
        }
        let Prepared { info, ctx } = &self.partitions[p];
        let s = self
            .drv
            .create_green_stream(*ctx, lane.priority)
            .map_err(|e| {
                Self::driver_err(
                    "partition the device",
                    format!(
                        "creating stream {l}'s stream in the green context of {} SMs: {e}",
                        info.sms
                    ),
                )
            })?;
        if lane.part_streams.len() <= p {
            lane.part_streams.resize(p + 1, None);
        }
        lane.part_streams[p] = Some(s);
        Ok(s)
    }

    /// Events since the last call, in the order they were observed.
    pub fn drain_events(&mut self) -> std::vec::Drain<'_, Event> {
        self.out.drain(..)
    }

    /// Whether any launch is queued or on the device.
    pub fn busy(&self) -> bool {
        self.lanes
            .iter()
            .any(|l| !l.hq.is_empty() || !l.inflight.is_empty() || !l.q.is_idle())
    }

    /// Frees dropped host queues and discarded queue entries (call when
    /// idle, off the hot path). Returns how many launches were freed.
    pub fn reclaim(&mut self) -> usize {
        let mut n: usize = self.reclaim.drain(..).map(|q| q.len()).sum();
        for l in &mut self.lanes {
            n += l.q.reclaim();
        }
        n
    }
}

impl Gpu for CudaGpu {
    fn profile(&self) -> &DeviceProfile {
        &self.profile
    }

    fn now(&self) -> Ns {
        self.drv.now_ns().saturating_sub(self.epoch_ns)
    }

    fn create_stream(&mut self, priority: i32) -> Result<StreamId, GpuError> {
        let prio = if priority > 0 {
            StreamPriority::RealTime
        } else {
            StreamPriority::BestEffort
        };
        let kill = match self.kill {
            Kill::Cooperative => KillMechanism::Cooperative,
            Kill::None => KillMechanism::None,
        };
        let config = QueueConfig {
            cap: usize::MAX,
            ..QueueConfig::default()
        };
        let q = VirtualQueue::new(&mut *self.drv, prio, config, kill).map_err(|e| {
            Self::driver_err("create stream", format!("stream {}: {e}", self.lanes.len()))
        })?;
        let home = q.stream();
        self.lanes.push(Lane {
            q,
            hq: VecDeque::new(),
            inflight: VecDeque::new(),
            cap: self.profile.queues.dq_capacity.max(1) as usize,
            next_exec: 0,
            mode: Mode::Running,
            dropped: 0,
            priority: prio,
            home,
            part_streams: Vec::new(),
            part: None,
        });
        Ok(StreamId((self.lanes.len() - 1) as u32))
    }

    /// Moves `stream` into the green context of the granules holding
    /// `cus` (`None`: back to the whole device): kernels queued from now on
    /// run there; kernels already on the device finish where they are, and
    /// the new stream waits for them, so nothing is dropped, repeated or
    /// reordered and the dispatcher never blocks. A partition prepared
    /// ahead ([`CudaGpu::prepare_partition`]) costs one driver call
    /// (`cuStreamWaitEvent`, only with kernels outstanding); an unprepared
    /// one also creates the green context and the stream in it.
    fn set_partition(&mut self, stream: StreamId, cus: Option<&[u32]>) -> Result<(), GpuError> {
        let l = stream.0 as usize;
        self.lane(stream)?;
        let target = match cus {
            None => None,
            Some(list) => {
                let layout = self.sm_granules()?;
                let info = partition::for_cus(&layout, list).map_err(|why| {
                    GpuError::Refused(sluice_gpu::OpError::BadPartition {
                        stream: stream.0,
                        why,
                    })
                })?;
                if info.whole_device {
                    None
                } else {
                    Some(self.green_ctx(info.granules, info)?)
                }
            }
        };
        if self.lanes[l].part == target {
            return Ok(());
        }
        let to = match target {
            None => self.lanes[l].home,
            Some(p) => self.lane_stream(l, p)?,
        };
        let lane = &mut self.lanes[l];
        lane.q
            .rebind(&mut *self.drv, to)
            .map_err(|e| Self::driver_err("partition the device", e))?;
        lane.part = target;
        Ok(())
    }

    fn set_dq_capacity(&mut self, stream: StreamId, capacity: u32) -> Result<(), GpuError> {
        self.lane(stream)?.cap = capacity.max(1) as usize;
        Ok(())
    }

    fn set_packed_placement(&mut self, _: StreamId, _: bool) -> Result<(), GpuError> {
        Err(GpuError::Unsupported {
            backend: BACKEND,
            op: "pack a stream's blocks onto chosen SMs",
            why: "the CUDA block dispatcher places blocks; sluice has no dkp kernel yet",
        })
    }

    fn launch(&mut self, stream: StreamId, k: KernelLaunch) -> Result<KernelRef, GpuError> {
        if k.grid_blocks == 0 || k.grid_blocks > MAX_GRID {
            return Err(Self::driver_err(
                "launch",
                format!(
                    "grid of {} blocks (tag {:#x}) is outside 1..={MAX_GRID}",
                    k.grid_blocks, k.tag
                ),
            ));
        }
        let mut args = KernelArgs::new();
        args.ptr(self.sink).u64(k.block_time_ns);
        let mut dims = LaunchDims::linear(k.grid_blocks, synthetic_block(k.threads_per_block));
        dims.shared_mem = k.shared_mem.min(MAX_DYNAMIC_SMEM);
        self.launch_commands(
            stream,
            k,
            vec![Command::Kernel {
                kernel: self.kernel,
                dims,
                args,
            }],
        )
    }

    fn launch_padded(
        &mut self,
        _: StreamId,
        _: KernelLaunch,
        _: StreamId,
        _: KernelRef,
    ) -> Result<KernelRef, GpuError> {
        Err(GpuError::Unsupported {
            backend: BACKEND,
            op: "fuse a kernel into another's launch",
            why: "no dkp kernel on CUDA yet; reef runs without padding",
        })
    }

    fn supports_fused_launch(&self) -> bool {
        false
    }

    fn preempt_reset(&mut self, stream: StreamId) -> Result<HostReset, GpuError> {
        let now = self.now();
        let l = stream.0 as usize;
        self.lane(stream)?;
        let lane = &mut self.lanes[l];
        if lane.mode != Mode::Running {
            return Err(Self::driver_err(
                "preempt",
                format!(
                    "stream {} is already preempted or being preempted",
                    stream.0
                ),
            ));
        }
        let dropped = std::mem::take(&mut lane.hq);
        let reset = HostReset {
            dropped: dropped.len() as u32,
            first: dropped.front().map(|x| x.kref),
        };
        lane.dropped = reset.dropped;
        lane.mode = Mode::Resetting(now);
        let r = lane.q.begin_preempt(&mut *self.drv);
        if !dropped.is_empty() {
            self.reclaim.push(dropped);
        }
        match r {
            Ok(()) => Ok(reset),
            Err(PreemptError::Driver(e)) => Err(Self::driver_err("preempt", e)),
            Err(e) => {
                self.lanes[l].mode = Mode::Running;
                Err(Self::driver_err("preempt", e))
            }
        }
    }

    fn wait_based_preempt(&mut self, stream: StreamId) -> Result<(), GpuError> {
        let now = self.now();
        let lane = self.lane(stream)?;
        if lane.mode != Mode::Running {
            return Err(Self::driver_err(
                "preempt",
                format!(
                    "stream {} is already preempted or being preempted",
                    stream.0
                ),
            ));
        }
        lane.mode = Mode::Waiting(now);
        Ok(())
    }

    fn resume(&mut self, stream: StreamId) -> Result<(), GpuError> {
        let l = stream.0 as usize;
        let lane = self.lane(stream)?;
        match lane.mode {
            Mode::Running => return Ok(()),
            Mode::Resetting(_) | Mode::Waiting(_) => {
                return Err(Self::driver_err(
                    "resume",
                    format!(
                        "stream {} is still being preempted; resume after its Preempted event",
                        stream.0
                    ),
                ));
            }
            Mode::Stopped => {}
        }
        if lane.q.state() == super::queue::QueueState::Preempted {
            lane.q.discard();
            lane.q
                .restore()
                .map_err(|e| Self::driver_err("resume", e))?;
        }
        lane.mode = Mode::Running;
        self.feed(l);
        Ok(())
    }
}

impl sluice_gpu::Clocked for CudaGpu {
    /// Polls until an event, the deadline, or (no deadline) idleness,
    /// waiting on the driver between polls (the real driver spins: this is
    /// the dispatcher's busy-poll loop).
    fn advance(&mut self, until: Option<Ns>, out: &mut Vec<Event>) -> Option<Ns> {
        loop {
            if let Err(e) = self.poll() {
                tracing::error!("CUDA device: {e}; stopping the run");
                self.failure = Some(e.to_string());
                return None;
            }
            out.append(&mut self.out);
            let now = self.now();
            if !out.is_empty() {
                return Some(now);
            }
            match until {
                Some(u) if now >= u => return Some(now),
                None if !self.busy() => return None,
                _ => {}
            }
            self.drv.wait_for_progress();
        }
    }

    fn utilisation(&self) -> Option<f64> {
        None
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fake::{FakeDriver, FakeKernel};
    use shm_proto::Priority;
    use sluice_model::ModelRegistry;
    use sluice_sched::{Ctx, Policy, PolicyKind, PolicyStats, Task, TaskDone, make_policy};

    /// `sluice_synthetic(ctl, kidx, float* sink, u64 block_ns)`: the
    /// `block_ns` argument sits at byte 12 of the kernel's own arguments.
    const BLOCK_NS_ARG: usize = 12;

    /// A `CudaGpu` on the fake driver whose synthetic kernel runs each
    /// block for its `block_ns` argument, and a probe of the driver.
    pub(crate) fn gpu(kill: Kill) -> (CudaGpu, FakeDriver) {
        let mut d = FakeDriver::default();
        let k = d.kernel_handle(
            SYNTHETIC_KERNEL,
            FakeKernel::new(0).timed_by_arg(BLOCK_NS_ARG).polling(1_000),
        );
        let probe = d.clone();
        let g = CudaGpu::new(Box::new(d), k, DeviceProfile::h100(), kill).unwrap();
        (g, probe)
    }

    /// A synthetic kernel of 132 blocks of `block_ns` each, tagged `t`.
    pub(crate) fn launch(block_ns: Ns, t: u64) -> KernelLaunch {
        KernelLaunch {
            grid_blocks: 132,
            threads_per_block: 128,
            regs_per_thread: 32,
            shared_mem: 0,
            block_time_ns: block_ns,
            wave_ns: Vec::new(),
            idempotent: true,
            mem_intensity: None,
            tag: t,
        }
    }

    /// Polls until `stop` says so or nothing is left; returns every event.
    pub(crate) fn run(g: &mut CudaGpu, mut stop: impl FnMut(&Event) -> bool) -> Vec<Event> {
        let mut all = Vec::new();
        for _ in 0..100_000 {
            g.poll().unwrap();
            let evs: Vec<Event> = g.drain_events().collect();
            let hit = evs.iter().any(&mut stop);
            all.extend(evs);
            if hit || !g.busy() {
                return all;
            }
            g.driver().wait_for_progress();
        }
        panic!("the fake device never went idle");
    }

    /// (tag, outcome) of every finished kernel in `evs`.
    pub(crate) fn finished(evs: &[Event]) -> Vec<(u64, Outcome)> {
        evs.iter()
            .filter_map(|e| match e {
                Event::KernelFinished {
                    kernel, outcome, ..
                } => Some((kernel.tag, *outcome)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn launches_complete_in_stream_order_with_their_work() {
        let (mut g, _) = gpu(Kill::Cooperative);
        let s = g.create_stream(0).unwrap();
        for t in 0..6 {
            g.launch(s, launch(10_000, t)).unwrap();
        }
        let evs = run(&mut g, |_| false);
        let f = finished(&evs);
        assert_eq!(
            f,
            (0..6).map(|t| (t, Outcome::Completed)).collect::<Vec<_>>()
        );
        // Each finish is preceded by its start.
        for t in 0..6 {
            let started = evs
                .iter()
                .position(|e| matches!(e, Event::KernelStarted { kernel, .. } if kernel.tag == t));
            let done = evs
                .iter()
                .position(|e| matches!(e, Event::KernelFinished { kernel, .. } if kernel.tag == t));
            assert!(started.unwrap() < done.unwrap(), "{evs:?}");
        }
        let work: Ns = evs
            .iter()
            .map(|e| match e {
                Event::KernelFinished { work_ns, .. } => *work_ns,
                _ => 0,
            })
            .sum();
        assert_eq!(work, 6 * 132 * 10_000);
    }

    #[test]
    fn a_manifest_kernels_block_runs_in_whole_warps_within_the_launch_bound() {
        assert_eq!(
            [1, 32, 100, 256, 1000, 1024, 2000, u32::MAX].map(synthetic_block),
            [32, 32, 128, 256, 1024, 1024, 1024, 1024]
        );
        // The fake refuses a block over a kernel's launch bound, as the real
        // driver does; every manifest block size still launches.
        let (mut g, _) = gpu(Kill::Cooperative);
        let s = g.create_stream(0).unwrap();
        for (t, threads) in [64, 256, 512, 1024, 4096].into_iter().enumerate() {
            let k = KernelLaunch {
                threads_per_block: threads,
                ..launch(5_000, t as u64)
            };
            g.launch(s, k).unwrap();
        }
        let evs = run(&mut g, |_| false);
        assert_eq!(finished(&evs).len(), 5, "{evs:?}");
    }

    #[test]
    fn the_capacity_bounds_what_reaches_the_virtual_queue() {
        let (mut g, _) = gpu(Kill::Cooperative);
        let s = g.create_stream(0).unwrap();
        g.set_dq_capacity(s, 2).unwrap();
        for t in 0..10 {
            g.launch(s, launch(10_000, t)).unwrap();
        }
        for _ in 0..200 {
            let lane = &g.lanes[0];
            assert!(lane.q.queued() + lane.q.outstanding() <= 2);
            assert!(lane.inflight.len() <= 2);
            g.poll().unwrap();
            g.driver().wait_for_progress();
        }
    }

    #[test]
    fn reset_preemption_reports_the_first_incomplete_launch_and_relaunching_finishes() {
        let (mut g, _) = gpu(Kill::Cooperative);
        let s = g.create_stream(0).unwrap();
        g.set_dq_capacity(s, 4).unwrap();
        for t in 0..20 {
            g.launch(s, launch(50_000, t)).unwrap();
        }
        // Let a few complete.
        let evs = run(
            &mut g,
            |e| matches!(e, Event::KernelFinished { kernel, .. } if kernel.tag == 2),
        );
        assert_eq!(finished(&evs).len(), 3);
        let reset = g.preempt_reset(s).unwrap();
        assert!(reset.dropped > 0, "{reset:?}");
        assert_eq!(reset.first.unwrap().tag, 3 + 4, "4 were in the queue");
        let evs = run(&mut g, |e| matches!(e, Event::Preempted(_)));
        let Some(Event::Preempted(r)) = evs.iter().find(|e| matches!(e, Event::Preempted(_)))
        else {
            panic!("no report: {evs:?}");
        };
        let first = r.first_incomplete.unwrap().tag;
        assert_eq!(first, 3, "{r:?}");
        assert_eq!(r.dropped_host, reset.dropped);
        assert_eq!(r.evicted + r.killed, 4, "{r:?}");
        assert!(r.killed <= 1);
        // Nothing completes while stopped; launches wait for resume.
        g.launch(s, launch(50_000, 100)).unwrap();
        g.poll().unwrap();
        assert!(g.lanes[0].inflight.is_empty());
        g.resume(s).unwrap();
        for t in first..20 {
            g.launch(s, launch(50_000, t)).unwrap();
        }
        let evs = run(&mut g, |_| false);
        let done: Vec<u64> = finished(&evs).into_iter().map(|(t, _)| t).collect();
        let mut want = vec![100];
        want.extend(first..20);
        assert_eq!(done, want);
        assert!(g.reclaim() > 0);
    }

    #[test]
    fn wait_based_preemption_lets_issued_kernels_finish_and_holds_the_rest() {
        let (mut g, _) = gpu(Kill::None);
        let s = g.create_stream(0).unwrap();
        g.set_dq_capacity(s, 3).unwrap();
        for t in 0..10 {
            g.launch(s, launch(20_000, t)).unwrap();
        }
        g.poll().unwrap();
        g.wait_based_preempt(s).unwrap();
        let evs = run(&mut g, |e| matches!(e, Event::Preempted(_)));
        let f = finished(&evs);
        assert_eq!(
            f,
            (0..3).map(|t| (t, Outcome::Completed)).collect::<Vec<_>>()
        );
        let Some(Event::Preempted(r)) = evs.last() else {
            panic!("{evs:?}")
        };
        assert_eq!(r.held_host, 7);
        assert_eq!(r.first_incomplete.unwrap().tag, 3);
        g.resume(s).unwrap();
        let evs = run(&mut g, |_| false);
        assert_eq!(finished(&evs).len(), 7);
    }

    #[test]
    fn padding_is_refused_and_reported_unsupported() {
        let (mut g, _) = gpu(Kill::Cooperative);
        let s = g.create_stream(0).unwrap();
        assert!(!g.supports_fused_launch());
        let e = g
            .launch_padded(
                s,
                launch(1, 0),
                s,
                KernelRef {
                    exec_index: 0,
                    tag: 0,
                },
            )
            .unwrap_err();
        assert!(matches!(e, GpuError::Unsupported { .. }), "{e}");
    }

    /// DISB's workload A for 40 ms: a real-time VGG-19 every 8 ms beside a
    /// closed-loop best-effort ResNet-152.
    pub(crate) fn disb_a_brief(models: &ModelRegistry) -> sluice_sched::workload::Workload {
        use sluice_sched::workload::{Arrival, ClientSpec, Workload};
        Workload {
            clients: vec![
                ClientSpec {
                    priority: Priority::RealTime,
                    model: models.lookup("vgg19").unwrap().0,
                    arrival: Arrival::Uniform {
                        period_ns: 8_000_000,
                        offset_ns: 1_000_000,
                    },
                },
                ClientSpec {
                    priority: Priority::BestEffort,
                    model: models.lookup("resnet152").unwrap().0,
                    arrival: Arrival::ClosedLoop,
                },
            ],
            duration_ns: 40_000_000,
        }
    }

    /// DISB's workload A, briefly, through the benchmark driver on the
    /// adapter: every RT request finishes, BE work runs, and `reef`'s
    /// preemptions are faster than `wait-preempt`'s. (The fake device runs
    /// streams side by side without sharing SMs, so RT latency itself does
    /// not show the difference here; a GPU does.)
    #[test]
    fn the_benchmark_driver_runs_on_the_adapter() {
        use sluice_sched::workload;
        let models = Arc::new(ModelRegistry::builtin());
        let w = disb_a_brief(&models);
        let mut mean_rt = Vec::new();
        let mut preempt_p50 = Vec::new();
        for kind in [
            PolicyKind::RtOnly,
            PolicyKind::Reef,
            PolicyKind::WaitPreempt,
        ] {
            let (mut g, _) = gpu(Kill::Cooperative);
            let mut p = make_policy(kind, &models);
            let r = workload::run_on(&mut g, &models, p.as_mut(), &w);
            let rt: Vec<u64> = r
                .done
                .iter()
                .filter(|d| d.task.priority == Priority::RealTime)
                .map(|d| d.finished - d.task.arrival)
                .collect();
            assert_eq!(rt.len(), 5, "{kind:?}");
            if kind != PolicyKind::RtOnly {
                assert!(
                    r.done
                        .iter()
                        .any(|d| d.task.priority == Priority::BestEffort)
                );
                let mut p = r.stats.preempt_latency_ns.clone();
                assert!(!p.is_empty(), "{kind:?}");
                p.sort_unstable();
                preempt_p50.push(p[p.len() / 2]);
            }
            mean_rt.push(rt.iter().sum::<u64>() / rt.len() as u64);
        }
        let (alone, reef) = (mean_rt[0], mean_rt[1]);
        assert!(
            reef < alone + alone / 10,
            "reef {reef} ns, alone {alone} ns"
        );
        // Reset: a few evicted kernels and a cooperative stop; wait: the BE
        // kernels on the device run to their end.
        assert!(
            preempt_p50[0] * 3 < preempt_p50[1],
            "reef {} ns, wait-preempt {} ns",
            preempt_p50[0],
            preempt_p50[1]
        );
    }

    /// The `reef` and `wait-preempt` policies, unchanged, on the CUDA
    /// adapter over the fake driver: every task finishes, the RT task
    /// preempts the BE lane, and under `reef` the RT task finishes sooner
    /// than under `wait-preempt`.
    #[test]
    fn the_same_policies_drive_the_cuda_adapter() {
        let models = Arc::new(ModelRegistry::builtin());
        let rt_model = models.lookup("vgg19").unwrap().0;
        let be_model = models.lookup("resnet152").unwrap().0;
        let mut rt_latency = Vec::new();
        for kind in [PolicyKind::Reef, PolicyKind::WaitPreempt] {
            let (mut g, _) = gpu(Kill::Cooperative);
            let mut policy: Box<dyn Policy> = make_policy(kind, &models);
            let mut stats = PolicyStats::default();
            let mut done: Vec<TaskDone> = Vec::new();
            let mut failed = Vec::new();
            let mut missed = Vec::new();
            let be = Task {
                id: 0,
                client: 1,
                priority: Priority::BestEffort,
                model: be_model,
                arrival: 0,
                deadline: None,
            };
            let mut cx = Ctx {
                gpu: &mut g,
                models: &models,
                done: &mut done,
                failed: &mut failed,
                missed: &mut missed,
                stats: &mut stats,
            };
            policy.on_arrival(&mut cx, be);
            let mut rt_sent = false;
            let mut rt_arrival = 0;
            for _ in 0..2_000_000 {
                g.poll().unwrap();
                let evs: Vec<Event> = g.drain_events().collect();
                let mut cx = Ctx {
                    gpu: &mut g,
                    models: &models,
                    done: &mut done,
                    failed: &mut failed,
                    missed: &mut missed,
                    stats: &mut stats,
                };
                for e in &evs {
                    policy.on_event(&mut cx, e);
                }
                if !rt_sent && cx.gpu.now() > 2_000_000 {
                    rt_sent = true;
                    rt_arrival = cx.gpu.now();
                    let rt = Task {
                        id: 1,
                        client: 0,
                        priority: Priority::RealTime,
                        model: rt_model,
                        arrival: rt_arrival,
                        deadline: None,
                    };
                    policy.on_arrival(&mut cx, rt);
                }
                if done.len() == 2 {
                    break;
                }
                g.driver().wait_for_progress();
            }
            assert_eq!(done.len(), 2, "{kind:?}: {done:?}");
            assert_eq!(stats.preempt_latency_ns.len(), 1, "{kind:?}");
            let rt = done.iter().find(|d| d.task.id == 1).unwrap();
            rt_latency.push(rt.finished - rt_arrival);
        }
        assert!(
            rt_latency[0] < rt_latency[1],
            "reef {} ns, wait-preempt {} ns",
            rt_latency[0],
            rt_latency[1]
        );
    }
}
