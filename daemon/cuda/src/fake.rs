//! A deterministic fake [`CuDriver`] with virtual time, for testing the
//! queue logic without a GPU.
//!
//! What it models, and nothing more:
//!
//! - **Time** is virtual and moves only when a test says so
//!   ([`FakeDriver::advance`], [`FakeDriver::advance_to`],
//!   [`FakeDriver::run_until_idle`]) or when the queue calls
//!   [`CuDriver::wait_for_progress`], which jumps to the next thing that
//!   happens. Driver calls take no virtual time.
//! - **Streams** run their commands one after another; different streams run
//!   side by side without slowing each other. A command starts
//!   `launch_latency_ns` after it was issued at the earliest, and not before
//!   the previous command of its stream has ended.
//! - **Kernels** are defined by name ([`FakeDriver::define_kernel`]) with a
//!   duration, and optionally poll points and a memory effect. At entry a
//!   kernel reads its control block (found through the prologue pointer in
//!   its parameters): with the flag set it returns at once
//!   (`evict_ns` later); otherwise it records `started = max(started,
//!   kidx + 1)` and runs. A kernel with poll points (`poll_every_ns`) that
//!   sees the flag set at a poll point returns there; a trap
//!   ([`FakeTrap`]) kills the running kernel of a stream `trap_ns` later
//!   when the stream's flag is set. A kernel that ran to its end applies its
//!   effect with [`Run::Full`]; a killed one with [`Run::Partial`] (the test's
//!   effect writes garbage to its outputs: a killed kernel may have written
//!   any part of them).
//! - **Copies and memsets** move real bytes between fake host buffers and
//!   fake device memory when they end; they cannot be cut short.
//! - **Events** complete when everything before them on their stream has.
//!   A stream told to wait for an event ([`CuDriver::stream_wait_event`])
//!   starts nothing issued after the wait before the event's point on its
//!   own stream has passed (captured at the call, so re-recording the event
//!   later changes nothing).
//! - **Green contexts**: the device has [`FakeDriver::sms`] SMs (132 at
//!   compute capability 9.0, an H100 SXM, by default), split into granules
//!   as [`SmGranules::for_device`] says; a green context is a set of
//!   granules, and a green stream belongs to one
//!   ([`FakeDriver::green_ctx_of`]). Kernels take as long on a green
//!   stream as on any other: the fake models which stream runs where, not
//!   how partitions share SMs. [`FakeDriver::without_green_contexts`] makes
//!   a driver that lacks them.
//!
//! Every call is recorded ([`FakeDriver::calls`]) and every command the
//! device ran is logged with its outcome and times ([`FakeDriver::log`]).
//! Misuse that real CUDA would punish (a stale handle, an out-of-bounds
//! copy, a launch whose prologue names an unknown control block, releasing
//! an event that has not completed) is an error, so tests catch it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use super::driver::{
    CtlId, CuDriver, DevicePtr, DriverError, EventId, GranuleSet, GreenCtxId, HostBufId,
    KernelHandle, LaunchDims, ModuleId, PROLOGUE_BYTES, SmGranules, StreamId, StreamPriority,
    green_ctx_unsupported, read_prologue,
};
use super::queue::TrapKill;

/// Whether a kernel ran to its end or was cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// It ran to its end.
    Full,
    /// It was killed after starting (at a poll point or by a trap).
    Partial,
}

/// A kernel's effect on fake device memory: given the memory, the kernel's
/// own arguments (its parameter buffer after the prologue) and how far it
/// ran.
pub type Effect = Arc<dyn Fn(&mut FakeMemory, &[u8], Run) + Send + Sync>;

/// How a fake kernel behaves.
#[derive(Clone)]
pub struct FakeKernel {
    /// Run time from entry to end, in ns.
    pub duration_ns: u64,
    /// `Some(p)`: the kernel re-reads the flag every `p` ns of its run
    /// (cooperative kill, like sluice's GEMM/conv/synthetic kernels);
    /// `None`: it reads the flag only at entry.
    pub poll_every_ns: Option<u64>,
    /// What it does to device memory, if anything.
    pub effect: Option<Effect>,
    /// `Some(off)`: the run time is the `u64` at byte `off` of the kernel's
    /// own arguments (after the prologue) instead of `duration_ns`, as
    /// `sluice_synthetic`'s `block_ns` sets its blocks' time.
    pub duration_arg: Option<usize>,
}

impl std::fmt::Debug for FakeKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeKernel")
            .field("duration_ns", &self.duration_ns)
            .field("poll_every_ns", &self.poll_every_ns)
            .field("effect", &self.effect.is_some())
            .field("duration_arg", &self.duration_arg)
            .finish()
    }
}

impl FakeKernel {
    /// A kernel that runs `duration_ns` and checks the flag only at entry.
    pub fn new(duration_ns: u64) -> Self {
        Self {
            duration_ns,
            poll_every_ns: None,
            effect: None,
            duration_arg: None,
        }
    }

    /// The same kernel, timed by the `u64` argument at byte `offset` of its
    /// own arguments.
    pub fn timed_by_arg(mut self, offset: usize) -> Self {
        self.duration_arg = Some(offset);
        self
    }

    /// The same kernel, polling the flag every `poll_ns`.
    pub fn polling(mut self, poll_ns: u64) -> Self {
        self.poll_every_ns = Some(poll_ns.max(1));
        self
    }

    /// The same kernel with a memory effect.
    pub fn with_effect(
        mut self,
        effect: impl Fn(&mut FakeMemory, &[u8], Run) + Send + Sync + 'static,
    ) -> Self {
        self.effect = Some(Arc::new(effect));
        self
    }
}

/// Fixed costs of the fake device, in virtual ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FakeTimings {
    /// From issue to the earliest start of a command.
    pub launch_latency_ns: u64,
    /// Run time of a kernel that returns at entry (REEF measures about
    /// 20 µs per evicted kernel on a GV100 for fetch and dispatch).
    pub evict_ns: u64,
    /// From a trap to the killed kernel's end (REEF: about 15 µs).
    pub trap_ns: u64,
    /// Fixed cost of a copy or memset.
    pub copy_base_ns: u64,
    /// Cost of a copy or memset per KiB.
    pub copy_ns_per_kib: u64,
}

impl Default for FakeTimings {
    fn default() -> Self {
        Self {
            launch_latency_ns: 2_000,
            evict_ns: 2_000,
            trap_ns: 15_000,
            copy_base_ns: 5_000,
            copy_ns_per_kib: 100,
        }
    }
}

/// How a kernel on the fake device ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelOutcome {
    /// Ran to its end.
    Completed,
    /// Saw the flag at entry and returned (lazy eviction).
    EvictedAtEntry,
    /// Saw the flag at a poll point and returned.
    KilledAtPoll,
    /// Killed by a trap.
    KilledByTrap,
}

/// What one logged command was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Executed {
    /// A kernel.
    Kernel {
        /// Its name.
        name: String,
        /// The execution index from its prologue.
        kidx: u32,
        /// Its own arguments (the parameter buffer after the prologue).
        user_args: Vec<u8>,
        /// How it ended.
        outcome: KernelOutcome,
    },
    /// A host-to-device copy.
    CopyToDevice {
        /// Destination.
        dst: DevicePtr,
        /// Bytes.
        len: usize,
    },
    /// A device-to-host copy.
    CopyToHost {
        /// Source.
        src: DevicePtr,
        /// Bytes.
        len: usize,
    },
    /// A memset.
    Memset {
        /// Destination.
        dst: DevicePtr,
        /// Byte value.
        value: u8,
        /// Bytes.
        len: usize,
    },
}

/// One command the fake device ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Its stream.
    pub stream: StreamId,
    /// What it was and how it ended.
    pub what: Executed,
    /// When it started.
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
}

/// One call into the fake driver (reads of the clock and
/// `wait_for_progress` are not recorded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `create_stream`.
    CreateStream(StreamPriority),
    /// `stream_idle`.
    StreamIdle(StreamId),
    /// `create_ctl`.
    CreateCtl,
    /// `set_preempt`.
    SetPreempt(CtlId, bool),
    /// `read_started`.
    ReadStarted(CtlId),
    /// `reset_started`.
    ResetStarted(CtlId),
    /// `load_module`, `kernel`, memory allocation and host-buffer access.
    Setup(&'static str),
    /// `launch`, with the prologue's `kidx`.
    Launch {
        /// The stream.
        stream: StreamId,
        /// The kernel.
        kernel: KernelHandle,
        /// Its execution index.
        kidx: u32,
    },
    /// `copy_to_device`, `copy_to_host` or `memset_d8`.
    Special(StreamId, &'static str),
    /// `record_event`.
    RecordEvent(StreamId),
    /// `event_done`.
    EventDone(EventId),
    /// `release_event`.
    ReleaseEvent(EventId),
    /// A [`FakeTrap`] kill.
    Trap(StreamId),
    /// `stream_wait_event`.
    StreamWaitEvent(StreamId, EventId),
    /// `sm_granules`.
    SmGranules,
    /// `create_green_ctx`.
    CreateGreenCtx(GranuleSet),
    /// `create_green_stream`.
    CreateGreenStream(GreenCtxId, StreamPriority),
}

/// Fake device memory: allocations of real bytes at fake addresses.
#[derive(Debug, Default)]
pub struct FakeMemory {
    allocs: BTreeMap<u64, Vec<u8>>,
    next: u64,
}

/// First fake device address handed out.
const DEVICE_BASE: u64 = 0x7f00_0000_0000;
/// Fake device addresses of control blocks: `CTL_BASE + 64 * index`.
const CTL_BASE: u64 = 0x10_0000;

impl FakeMemory {
    fn alloc(&mut self, len: usize) -> DevicePtr {
        if self.next == 0 {
            self.next = DEVICE_BASE;
        }
        let at = self.next;
        self.next = (at + len.max(1) as u64).next_multiple_of(256);
        self.allocs.insert(at, vec![0; len]);
        DevicePtr(at)
    }

    fn find(&mut self, ptr: DevicePtr, len: usize, what: &str) -> Result<&mut [u8], DriverError> {
        let Some((&base, bytes)) = self.allocs.range_mut(..=ptr.0).next_back() else {
            return Err(DriverError::Invalid(format!(
                "{what}: device address {ptr} is not in any allocation"
            )));
        };
        let offset = (ptr.0 - base) as usize;
        let alloc_len = bytes.len();
        bytes
            .get_mut(offset..offset.saturating_add(len))
            .ok_or_else(|| DriverError::OutOfBounds {
                what: format!("{what} at {ptr} in the allocation at {:#x}", base),
                offset,
                count: len,
                len: alloc_len,
            })
    }

    /// Copies `out.len()` bytes at `ptr` into `out`.
    pub fn read(&mut self, ptr: DevicePtr, out: &mut [u8]) -> Result<(), DriverError> {
        let len = out.len();
        out.copy_from_slice(self.find(ptr, len, "fake read")?);
        Ok(())
    }

    /// Copies `data` to `ptr`.
    pub fn write(&mut self, ptr: DevicePtr, data: &[u8]) -> Result<(), DriverError> {
        self.find(ptr, data.len(), "fake write")?
            .copy_from_slice(data);
        Ok(())
    }

    /// The `u64` at `ptr` (native endian). Panics when out of bounds: for
    /// test effects only.
    pub fn load_u64(&mut self, ptr: DevicePtr) -> u64 {
        let mut b = [0; 8];
        self.read(ptr, &mut b)
            .expect("fake kernel read out of bounds");
        u64::from_ne_bytes(b)
    }

    /// Stores `v` at `ptr`. Panics when out of bounds: for test effects only.
    pub fn store_u64(&mut self, ptr: DevicePtr, v: u64) {
        self.write(ptr, &v.to_ne_bytes())
            .expect("fake kernel write out of bounds");
    }
}

#[derive(Debug, Clone)]
enum Op {
    Kernel {
        kernel: KernelHandle,
        ctl: usize,
        kidx: u32,
        params: Vec<u8>,
    },
    CopyToDevice {
        dst: DevicePtr,
        src: HostBufId,
        src_offset: usize,
        len: usize,
    },
    CopyToHost {
        dst: HostBufId,
        dst_offset: usize,
        src: DevicePtr,
        len: usize,
    },
    Memset {
        dst: DevicePtr,
        value: u8,
        len: usize,
    },
    Event(EventId),
    /// Waits until op number `seq` of stream `stream` has ended.
    Wait {
        stream: usize,
        seq: u64,
    },
}

impl Op {
    fn is_kernel(&self) -> bool {
        matches!(self, Op::Kernel { .. })
    }
}

#[derive(Debug)]
struct Active {
    op: Op,
    start: u64,
    end: u64,
    /// For kernels: how it will end if nothing else happens.
    outcome: KernelOutcome,
}

#[derive(Debug)]
struct FakeStream {
    pending: VecDeque<(Op, u64)>,
    active: Option<Active>,
    free_at: u64,
    max_kernels: usize,
    /// Ops enqueued so far (the next op's number).
    enqueued: u64,
    /// End time of every op that has ended, by number.
    ends: Vec<u64>,
    /// The green context it belongs to; `None`: the whole device.
    green: Option<GreenCtxId>,
}

impl FakeStream {
    fn new(green: Option<GreenCtxId>) -> Self {
        Self {
            pending: VecDeque::new(),
            active: None,
            free_at: 0,
            max_kernels: 0,
            enqueued: 0,
            ends: Vec::new(),
            green,
        }
    }
}

/// The fake device's green-context support.
#[derive(Debug, Clone, Copy)]
enum Green {
    Supported(SmGranules),
    /// A driver without them: its version and the first missing entry point.
    Missing(i32, &'static str),
}

impl FakeStream {
    fn kernels_not_finished(&self) -> usize {
        self.pending.iter().filter(|(op, _)| op.is_kernel()).count()
            + usize::from(self.active.as_ref().is_some_and(|a| a.op.is_kernel()))
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct FakeCtl {
    preempt: bool,
    started: u64,
}

#[derive(Debug)]
struct State {
    now: u64,
    timings: FakeTimings,
    defs: Vec<(String, FakeKernel)>,
    modules: usize,
    kernels: Vec<usize>,
    streams: Vec<FakeStream>,
    ctls: Vec<FakeCtl>,
    events: Vec<Option<bool>>,
    /// Where each event was last recorded: stream and op number.
    event_at: Vec<(usize, u64)>,
    free_events: Vec<u32>,
    host: Vec<Option<Vec<u8>>>,
    green: Green,
    green_ctxs: Vec<GranuleSet>,
    memory: FakeMemory,
    log: Vec<LogEntry>,
    calls: Vec<Call>,
    /// Set by [`FakeDriver::lose_context`]: event queries fail.
    lost: bool,
    /// Set by [`FakeDriver::fail_stream_creation`]: how many of the next
    /// `create_stream` calls fail.
    failing_streams: u32,
}

/// The fake driver. Cloning gives another handle on the same fake device.
#[derive(Debug, Clone)]
pub struct FakeDriver {
    state: Arc<Mutex<State>>,
}

impl Default for FakeDriver {
    fn default() -> Self {
        Self::new(FakeTimings::default())
    }
}

/// What a real driver answers once a kernel has faulted: the sticky
/// `CUDA_ERROR_LAUNCH_FAILED`.
fn lost_context(call: &'static str) -> DriverError {
    DriverError::Cuda {
        call,
        code: 719,
        name: "CUDA_ERROR_LAUNCH_FAILED".into(),
        description: "unspecified launch failure (fake)".into(),
    }
}

fn unknown(handle: impl std::fmt::Display) -> DriverError {
    DriverError::UnknownHandle {
        handle: handle.to_string(),
    }
}

impl State {
    fn stream(&mut self, s: StreamId) -> Result<&mut FakeStream, DriverError> {
        self.streams.get_mut(s.0 as usize).ok_or_else(|| unknown(s))
    }

    fn host(&mut self, b: HostBufId) -> Result<&mut Vec<u8>, DriverError> {
        self.host
            .get_mut(b.0 as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| unknown(b))
    }

    fn host_range(
        &mut self,
        b: HostBufId,
        offset: usize,
        len: usize,
        what: &str,
    ) -> Result<(), DriverError> {
        let buf_len = self.host(b)?.len();
        if offset.checked_add(len).is_none_or(|end| end > buf_len) {
            return Err(DriverError::OutOfBounds {
                what: format!("{what} {b}"),
                offset,
                count: len,
                len: buf_len,
            });
        }
        Ok(())
    }

    /// Enqueues `op` on `s`; returns its number on the stream.
    fn enqueue(&mut self, s: StreamId, op: Op) -> Result<u64, DriverError> {
        let now = self.now;
        let st = self.stream(s)?;
        st.pending.push_back((op, now));
        st.enqueued += 1;
        let k = st.kernels_not_finished();
        st.max_kernels = st.max_kernels.max(k);
        Ok(st.enqueued - 1)
    }

    /// Runs every stream up to time `t`, then sets the clock to `t`. A
    /// stream waiting for another runs again once the other has moved, until
    /// nothing moves.
    fn advance_to(&mut self, t: u64) {
        let t = t.max(self.now);
        loop {
            let mut moved = false;
            for s in 0..self.streams.len() {
                moved |= self.run_stream(s, t);
            }
            if !moved {
                break;
            }
        }
        self.now = t;
    }

    /// When the front op of stream `s` can start, if it can (a wait whose
    /// event has not passed cannot).
    fn front_start(&self, s: usize) -> Option<u64> {
        let st = &self.streams[s];
        let (op, issued) = st.pending.front()?;
        match op {
            Op::Wait { stream, seq } => {
                let end = *self.streams[*stream].ends.get(*seq as usize)?;
                Some(st.free_at.max(*issued).max(end))
            }
            _ => Some(st.free_at.max(issued + self.timings.launch_latency_ns)),
        }
    }

    /// Runs stream `s` up to `t`; whether anything started or ended.
    fn run_stream(&mut self, s: usize, t: u64) -> bool {
        let mut moved = false;
        loop {
            if let Some(a) = &self.streams[s].active {
                if a.end > t {
                    return moved;
                }
                let a = self.streams[s].active.take().expect("checked above");
                self.streams[s].free_at = a.end;
                self.streams[s].ends.push(a.end);
                self.finish(s, a);
                moved = true;
                continue;
            }
            let Some(start) = self.front_start(s) else {
                return moved;
            };
            if start > t {
                return moved;
            }
            moved = true;
            let (op, _) = self.streams[s].pending.pop_front().expect("checked above");
            let active = self.begin(op, start);
            self.streams[s].active = Some(active);
        }
    }

    fn begin(&mut self, op: Op, start: u64) -> Active {
        let tm = self.timings;
        let (end, outcome) = match &op {
            Op::Kernel {
                kernel,
                ctl,
                kidx,
                params,
            } => {
                let c = &mut self.ctls[*ctl];
                if c.preempt {
                    (start + tm.evict_ns, KernelOutcome::EvictedAtEntry)
                } else {
                    c.started = c.started.max(u64::from(*kidx) + 1);
                    let def = &self.defs[self.kernels[kernel.0 as usize]].1;
                    let duration = def
                        .duration_arg
                        .and_then(|off| {
                            let at = PROLOGUE_BYTES + off;
                            params.get(at..at + 8)
                        })
                        .and_then(|b| b.try_into().ok())
                        .map_or(def.duration_ns, u64::from_ne_bytes);
                    (start + duration, KernelOutcome::Completed)
                }
            }
            Op::CopyToDevice { len, .. } | Op::CopyToHost { len, .. } | Op::Memset { len, .. } => (
                start + tm.copy_base_ns + (*len as u64).div_ceil(1024) * tm.copy_ns_per_kib,
                KernelOutcome::Completed,
            ),
            Op::Event(_) | Op::Wait { .. } => (start, KernelOutcome::Completed),
        };
        Active {
            op,
            start,
            end,
            outcome,
        }
    }

    fn finish(&mut self, s: usize, a: Active) {
        let stream = StreamId(s as u32);
        let what = match a.op {
            Op::Kernel {
                kernel,
                kidx,
                params,
                ..
            } => {
                let (name, def) = &self.defs[self.kernels[kernel.0 as usize]];
                let user_args = params[PROLOGUE_BYTES.min(params.len())..].to_vec();
                let run = match a.outcome {
                    KernelOutcome::Completed => Some(Run::Full),
                    KernelOutcome::EvictedAtEntry => None,
                    KernelOutcome::KilledAtPoll | KernelOutcome::KilledByTrap => Some(Run::Partial),
                };
                if let (Some(run), Some(effect)) = (run, def.effect.clone()) {
                    effect(&mut self.memory, &user_args, run);
                }
                Executed::Kernel {
                    name: name.clone(),
                    kidx,
                    user_args,
                    outcome: a.outcome,
                }
            }
            Op::CopyToDevice {
                dst,
                src,
                src_offset,
                len,
            } => {
                let data = self.host[src.0 as usize]
                    .as_ref()
                    .map_or_else(Vec::new, |h| h[src_offset..src_offset + len].to_vec());
                // Checked at issue; a buffer freed meanwhile copies nothing.
                if data.len() == len {
                    let _ = self.memory.write(dst, &data);
                }
                Executed::CopyToDevice { dst, len }
            }
            Op::CopyToHost {
                dst,
                dst_offset,
                src,
                len,
            } => {
                let mut data = vec![0; len];
                if self.memory.read(src, &mut data).is_ok()
                    && let Some(h) = self.host[dst.0 as usize].as_mut()
                {
                    h[dst_offset..dst_offset + len].copy_from_slice(&data);
                }
                Executed::CopyToHost { src, len }
            }
            Op::Memset { dst, value, len } => {
                let _ = self.memory.write(dst, &vec![value; len]);
                Executed::Memset { dst, value, len }
            }
            Op::Event(e) => {
                self.events[e.0 as usize] = Some(true);
                return;
            }
            Op::Wait { .. } => return,
        };
        self.log.push(LogEntry {
            stream,
            what,
            start_ns: a.start,
            end_ns: a.end,
        });
    }

    /// The next time something starts or ends on any stream, if any.
    fn next_change(&self) -> Option<u64> {
        (0..self.streams.len())
            .filter_map(|s| match &self.streams[s].active {
                Some(a) => Some(a.end),
                None => self.front_start(s),
            })
            .min()
    }
}

impl FakeDriver {
    /// A fake device with the given costs and no streams.
    pub fn new(timings: FakeTimings) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                now: 0,
                timings,
                defs: Vec::new(),
                modules: 0,
                kernels: Vec::new(),
                streams: Vec::new(),
                ctls: Vec::new(),
                events: Vec::new(),
                event_at: Vec::new(),
                free_events: Vec::new(),
                host: Vec::new(),
                green: Green::Supported(SmGranules::for_device(132, (9, 0))),
                green_ctxs: Vec::new(),
                memory: FakeMemory::default(),
                log: Vec::new(),
                calls: Vec::new(),
                lost: false,
                failing_streams: 0,
            })),
        }
    }

    fn st(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock can only come from a test's effect;
        // the state is still consistent enough to inspect.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Defines kernel `name`, found by [`CuDriver::kernel`] in any module.
    /// Redefining a name replaces it for later lookups.
    pub fn define_kernel(&self, name: &str, kernel: FakeKernel) {
        self.st().defs.push((name.to_owned(), kernel));
    }

    /// Shorthand: defines `name` and looks it up, as a loaded kernel.
    pub fn kernel_handle(&mut self, name: &str, kernel: FakeKernel) -> KernelHandle {
        self.define_kernel(name, kernel);
        let m = self.load_module("fake").expect("fake module");
        self.kernel(m, name).expect("just defined")
    }

    /// Makes the context lost, as after a kernel fault on a real GPU:
    /// from now on event and stream queries fail with the sticky
    /// `CUDA_ERROR_LAUNCH_FAILED`.
    pub fn lose_context(&self) {
        self.st().lost = true;
    }

    /// Makes the next `n` `create_stream` calls fail with
    /// `CUDA_ERROR_OUT_OF_MEMORY`, as `cuStreamCreate` does on a device out
    /// of memory; the context stays usable.
    pub fn fail_stream_creation(&self, n: u32) {
        self.st().failing_streams = n;
    }

    /// Gives the fake device `sm_count` SMs at compute capability `cc`
    /// (for its green contexts; default 132 SMs at 9.0, an H100 SXM). Only
    /// before the first green context.
    pub fn set_sms(&self, sm_count: u32, cc: (u32, u32)) {
        self.st().green = Green::Supported(SmGranules::for_device(sm_count, cc));
    }

    /// Makes this a driver without green contexts, as one older than CUDA
    /// 12.4: `driver_version` as `cuDriverGetVersion` says (e.g. 12020),
    /// lacking `cuGreenCtxCreate`.
    pub fn without_green_contexts(&self, driver_version: i32) {
        self.st().green = Green::Missing(driver_version, "cuGreenCtxCreate");
    }

    /// SMs of the whole fake device.
    pub fn sms(&self) -> u32 {
        match self.st().green {
            Green::Supported(g) => g.sm_count,
            Green::Missing(..) => 132,
        }
    }

    /// The green context `stream` belongs to; `None` for a stream of the
    /// whole device (or an unknown one).
    pub fn green_ctx_of(&self, stream: StreamId) -> Option<GreenCtxId> {
        self.st()
            .streams
            .get(stream.0 as usize)
            .and_then(|s| s.green)
    }

    /// The granules of green context `ctx`.
    pub fn green_ctx_granules(&self, ctx: GreenCtxId) -> Option<GranuleSet> {
        self.st().green_ctxs.get(ctx.0 as usize).copied()
    }

    /// SMs `stream`'s kernels may use: its green context's, or the whole
    /// device's.
    pub fn stream_sms(&self, stream: StreamId) -> u32 {
        let st = self.st();
        let Green::Supported(g) = st.green else {
            return 132;
        };
        match st.streams.get(stream.0 as usize).and_then(|s| s.green) {
            Some(c) => g.sms(st.green_ctxs[c.0 as usize]),
            None => g.sm_count,
        }
    }

    /// Green contexts created so far.
    pub fn green_ctx_count(&self) -> usize {
        self.st().green_ctxs.len()
    }

    /// Moves virtual time forward by `ns`.
    pub fn advance(&self, ns: u64) {
        let mut st = self.st();
        let t = st.now + ns;
        st.advance_to(t);
    }

    /// Moves virtual time forward to `t` (no-op if `t` is past).
    pub fn advance_to(&self, t: u64) {
        self.st().advance_to(t);
    }

    /// Runs until every stream is empty; returns the time then.
    pub fn run_until_idle(&self) -> u64 {
        let mut st = self.st();
        while let Some(t) = st.next_change() {
            st.advance_to(t);
        }
        st.now
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.st().calls.clone()
    }

    /// Number of calls so far (to slice [`FakeDriver::calls`]).
    pub fn call_count(&self) -> usize {
        self.st().calls.len()
    }

    /// Every command the device has finished, in the order they ended
    /// (per stream: issue order).
    pub fn log(&self) -> Vec<LogEntry> {
        self.st().log.clone()
    }

    /// The most kernels `stream` ever held (issued and not yet ended).
    pub fn max_kernels_in_stream(&self, stream: StreamId) -> usize {
        self.st()
            .streams
            .get(stream.0 as usize)
            .map_or(0, |s| s.max_kernels)
    }

    /// Kernels `stream` holds now (issued and not yet ended).
    pub fn kernels_in_stream(&self, stream: StreamId) -> usize {
        self.st()
            .streams
            .get(stream.0 as usize)
            .map_or(0, FakeStream::kernels_not_finished)
    }

    /// The control block's flag and execution index.
    pub fn ctl_state(&self, ctl: CtlId) -> Option<(bool, u64)> {
        self.st()
            .ctls
            .get(ctl.0 as usize)
            .map(|c| (c.preempt, c.started))
    }

    /// Copies device bytes at `ptr` out of the fake memory.
    pub fn read_device(&self, ptr: DevicePtr, out: &mut [u8]) -> Result<(), DriverError> {
        self.st().memory.read(ptr, out)
    }

    /// Writes device bytes directly (test setup, no stream).
    pub fn write_device(&self, ptr: DevicePtr, data: &[u8]) -> Result<(), DriverError> {
        self.st().memory.write(ptr, data)
    }

    /// A [`TrapKill`] for this fake device.
    pub fn trap(&self) -> FakeTrap {
        FakeTrap {
            state: Arc::clone(&self.state),
        }
    }
}

impl CuDriver for FakeDriver {
    fn now_ns(&self) -> u64 {
        self.st().now
    }

    fn wait_for_progress(&mut self) {
        let mut st = self.st();
        let t = st.next_change().unwrap_or(st.now + 1_000).max(st.now + 1);
        st.advance_to(t);
    }

    fn create_stream(&mut self, priority: StreamPriority) -> Result<StreamId, DriverError> {
        let mut st = self.st();
        st.calls.push(Call::CreateStream(priority));
        if st.failing_streams > 0 {
            st.failing_streams -= 1;
            return Err(DriverError::Cuda {
                call: "cuStreamCreateWithPriority",
                code: 2,
                name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
                description: "out of memory (fake)".into(),
            });
        }
        st.streams.push(FakeStream::new(None));
        Ok(StreamId(st.streams.len() as u32 - 1))
    }

    fn stream_idle(&mut self, stream: StreamId) -> Result<bool, DriverError> {
        let mut st = self.st();
        st.calls.push(Call::StreamIdle(stream));
        if st.lost {
            return Err(lost_context("cuStreamQuery"));
        }
        let s = st.stream(stream)?;
        Ok(s.pending.is_empty() && s.active.is_none())
    }

    fn create_ctl(&mut self) -> Result<CtlId, DriverError> {
        let mut st = self.st();
        st.calls.push(Call::CreateCtl);
        st.ctls.push(FakeCtl::default());
        Ok(CtlId(st.ctls.len() as u32 - 1))
    }

    fn ctl_device_ptr(&self, ctl: CtlId) -> Result<DevicePtr, DriverError> {
        if (ctl.0 as usize) < self.st().ctls.len() {
            Ok(DevicePtr(CTL_BASE + 64 * u64::from(ctl.0)))
        } else {
            Err(unknown(ctl))
        }
    }

    fn set_preempt(&mut self, ctl: CtlId, preempt: bool) -> Result<(), DriverError> {
        let mut st = self.st();
        st.calls.push(Call::SetPreempt(ctl, preempt));
        let now = st.now;
        let c = st
            .ctls
            .get_mut(ctl.0 as usize)
            .ok_or_else(|| unknown(ctl))?;
        c.preempt = preempt;
        if !preempt {
            return Ok(());
        }
        // Running kernels of this queue with poll points return at their
        // next poll point after now.
        let State {
            streams,
            defs,
            kernels,
            ..
        } = &mut *st;
        for s in streams.iter_mut() {
            let Some(a) = s.active.as_mut() else { continue };
            let Op::Kernel { kernel, ctl: c, .. } = &a.op else {
                continue;
            };
            if *c != ctl.0 as usize || a.outcome != KernelOutcome::Completed {
                continue;
            }
            if let Some(p) = defs[kernels[kernel.0 as usize]].1.poll_every_ns {
                let next_poll = a.start + ((now - a.start) / p + 1) * p;
                if next_poll < a.end {
                    a.end = next_poll;
                    a.outcome = KernelOutcome::KilledAtPoll;
                }
            }
        }
        Ok(())
    }

    fn read_started(&mut self, ctl: CtlId) -> Result<u64, DriverError> {
        let mut st = self.st();
        st.calls.push(Call::ReadStarted(ctl));
        st.ctls
            .get(ctl.0 as usize)
            .map(|c| c.started)
            .ok_or_else(|| unknown(ctl))
    }

    fn reset_started(&mut self, ctl: CtlId) -> Result<(), DriverError> {
        let mut st = self.st();
        st.calls.push(Call::ResetStarted(ctl));
        let running = st.streams.iter().any(|s| {
            s.active
                .iter()
                .map(|a| &a.op)
                .chain(s.pending.iter().map(|(op, _)| op))
                .any(|op| matches!(op, Op::Kernel { ctl: c, .. } if *c == ctl.0 as usize))
        });
        if running {
            return Err(DriverError::Invalid(format!(
                "reset_started({ctl}) while a kernel using it is outstanding: the store could \
                 race with the kernel's atomicMax"
            )));
        }
        st.ctls
            .get_mut(ctl.0 as usize)
            .ok_or_else(|| unknown(ctl))?
            .started = 0;
        Ok(())
    }

    fn load_module(&mut self, _image: &str) -> Result<ModuleId, DriverError> {
        let mut st = self.st();
        st.calls.push(Call::Setup("load_module"));
        st.modules += 1;
        Ok(ModuleId(st.modules as u32 - 1))
    }

    fn kernel(&mut self, module: ModuleId, name: &str) -> Result<KernelHandle, DriverError> {
        let mut st = self.st();
        st.calls.push(Call::Setup("kernel"));
        if module.0 as usize >= st.modules {
            return Err(unknown(module));
        }
        let def = st
            .defs
            .iter()
            .rposition(|(n, _)| n == name)
            .ok_or_else(|| {
                DriverError::Invalid(format!(
                    "no fake kernel named {name:?}; define it with FakeDriver::define_kernel"
                ))
            })?;
        st.kernels.push(def);
        Ok(KernelHandle(st.kernels.len() as u32 - 1))
    }

    fn alloc_device(&mut self, len: usize) -> Result<DevicePtr, DriverError> {
        let mut st = self.st();
        st.calls.push(Call::Setup("alloc_device"));
        Ok(st.memory.alloc(len))
    }

    fn free_device(&mut self, ptr: DevicePtr) -> Result<(), DriverError> {
        let mut st = self.st();
        st.calls.push(Call::Setup("free_device"));
        st.memory
            .allocs
            .remove(&ptr.0)
            .map(drop)
            .ok_or_else(|| unknown(format!("device allocation {ptr}")))
    }

    fn alloc_host(&mut self, len: usize) -> Result<HostBufId, DriverError> {
        let mut st = self.st();
        st.calls.push(Call::Setup("alloc_host"));
        st.host.push(Some(vec![0; len]));
        Ok(HostBufId(st.host.len() as u32 - 1))
    }

    fn write_host(
        &mut self,
        buf: HostBufId,
        offset: usize,
        data: &[u8],
    ) -> Result<(), DriverError> {
        let mut st = self.st();
        st.calls.push(Call::Setup("write_host"));
        st.host_range(buf, offset, data.len(), "write_host")?;
        st.host(buf)?[offset..offset + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn read_host(
        &mut self,
        buf: HostBufId,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), DriverError> {
        let mut st = self.st();
        st.calls.push(Call::Setup("read_host"));
        st.host_range(buf, offset, out.len(), "read_host")?;
        out.copy_from_slice(&st.host(buf)?[offset..offset + out.len()]);
        Ok(())
    }

    fn free_host(&mut self, buf: HostBufId) -> Result<(), DriverError> {
        let mut st = self.st();
        st.calls.push(Call::Setup("free_host"));
        st.host(buf)?;
        st.host[buf.0 as usize] = None;
        Ok(())
    }

    fn launch(
        &mut self,
        stream: StreamId,
        kernel: KernelHandle,
        dims: &LaunchDims,
        params: &[u8],
    ) -> Result<(), DriverError> {
        let mut st = self.st();
        let (ctl_ptr, kidx) = read_prologue(params).ok_or_else(|| {
            DriverError::Invalid(format!(
                "launch: a {}-byte parameter buffer has no prologue",
                params.len()
            ))
        })?;
        st.calls.push(Call::Launch {
            stream,
            kernel,
            kidx,
        });
        if kernel.0 as usize >= st.kernels.len() {
            return Err(unknown(kernel));
        }
        if dims.grid.contains(&0) || dims.block.contains(&0) {
            return Err(DriverError::Invalid(format!(
                "launch: grid {:?} / block {:?} has a zero dimension",
                dims.grid, dims.block
            )));
        }
        // As the real driver: a block over the kernel's `__launch_bounds__`
        // is refused (CUDA_ERROR_INVALID_VALUE), for the library's kernels.
        let name = &st.defs[st.kernels[kernel.0 as usize]].0;
        if let Some(k) = crate::kernels::Kernel::from_name(name) {
            let threads: u64 = dims.block.iter().map(|&d| u64::from(d)).product();
            if threads > u64::from(k.max_block_threads()) {
                return Err(DriverError::Invalid(format!(
                    "launch: a block of {threads} threads ({:?}) is over {name}'s \
                     __launch_bounds__({}) (CUDA_ERROR_INVALID_VALUE on a real driver)",
                    dims.block,
                    k.max_block_threads()
                )));
            }
        }
        let ctl = ctl_ptr
            .0
            .checked_sub(CTL_BASE)
            .filter(|d| d % 64 == 0 && ((d / 64) as usize) < st.ctls.len())
            .map(|d| (d / 64) as usize)
            .ok_or_else(|| {
                DriverError::Invalid(format!(
                    "launch: the prologue's control block pointer {ctl_ptr} is not a control \
                     block of this driver"
                ))
            })?;
        st.enqueue(
            stream,
            Op::Kernel {
                kernel,
                ctl,
                kidx,
                params: params.to_vec(),
            },
        )
        .map(drop)
    }

    fn copy_to_device(
        &mut self,
        stream: StreamId,
        dst: DevicePtr,
        src: HostBufId,
        src_offset: usize,
        len: usize,
    ) -> Result<(), DriverError> {
        let mut st = self.st();
        st.calls.push(Call::Special(stream, "copy_to_device"));
        st.host_range(src, src_offset, len, "copy_to_device source")?;
        st.memory.find(dst, len, "copy_to_device destination")?;
        st.enqueue(
            stream,
            Op::CopyToDevice {
                dst,
                src,
                src_offset,
                len,
            },
        )
        .map(drop)
    }

    fn copy_to_host(
        &mut self,
        stream: StreamId,
        dst: HostBufId,
        dst_offset: usize,
        src: DevicePtr,
        len: usize,
    ) -> Result<(), DriverError> {
        let mut st = self.st();
        st.calls.push(Call::Special(stream, "copy_to_host"));
        st.host_range(dst, dst_offset, len, "copy_to_host destination")?;
        st.memory.find(src, len, "copy_to_host source")?;
        st.enqueue(
            stream,
            Op::CopyToHost {
                dst,
                dst_offset,
                src,
                len,
            },
        )
        .map(drop)
    }

    fn memset_d8(
        &mut self,
        stream: StreamId,
        dst: DevicePtr,
        value: u8,
        len: usize,
    ) -> Result<(), DriverError> {
        let mut st = self.st();
        st.calls.push(Call::Special(stream, "memset_d8"));
        st.memory.find(dst, len, "memset_d8 destination")?;
        st.enqueue(stream, Op::Memset { dst, value, len }).map(drop)
    }

    fn record_event(&mut self, stream: StreamId) -> Result<EventId, DriverError> {
        let mut st = self.st();
        st.calls.push(Call::RecordEvent(stream));
        st.stream(stream)?;
        let e = match st.free_events.pop() {
            Some(i) => {
                st.events[i as usize] = Some(false);
                EventId(i)
            }
            None => {
                st.events.push(Some(false));
                st.event_at.push((0, 0));
                EventId(st.events.len() as u32 - 1)
            }
        };
        let seq = st.enqueue(stream, Op::Event(e))?;
        st.event_at[e.0 as usize] = (stream.0 as usize, seq);
        Ok(e)
    }

    fn event_done(&mut self, event: EventId) -> Result<bool, DriverError> {
        let mut st = self.st();
        st.calls.push(Call::EventDone(event));
        if st.lost {
            return Err(lost_context("cuEventQuery"));
        }
        st.events
            .get(event.0 as usize)
            .copied()
            .flatten()
            .ok_or_else(|| unknown(event))
    }

    fn release_event(&mut self, event: EventId) -> Result<(), DriverError> {
        let mut st = self.st();
        st.calls.push(Call::ReleaseEvent(event));
        match st.events.get(event.0 as usize).copied().flatten() {
            Some(true) => {
                st.events[event.0 as usize] = None;
                st.free_events.push(event.0);
                Ok(())
            }
            Some(false) => Err(DriverError::Invalid(format!(
                "release_event({event}) before it completed"
            ))),
            None => Err(unknown(event)),
        }
    }

    fn stream_wait_event(&mut self, stream: StreamId, event: EventId) -> Result<(), DriverError> {
        let mut st = self.st();
        st.calls.push(Call::StreamWaitEvent(stream, event));
        st.stream(stream)?;
        match st.events.get(event.0 as usize).copied().flatten() {
            // Already complete: nothing to wait for.
            Some(true) => Ok(()),
            Some(false) => {
                let (on, seq) = st.event_at[event.0 as usize];
                st.enqueue(stream, Op::Wait { stream: on, seq }).map(drop)
            }
            None => Err(unknown(event)),
        }
    }

    fn sm_granules(&mut self) -> Result<SmGranules, DriverError> {
        let mut st = self.st();
        st.calls.push(Call::SmGranules);
        match st.green {
            Green::Supported(g) => Ok(g),
            Green::Missing(version, missing) => Err(green_ctx_unsupported(version, missing)),
        }
    }

    fn create_green_ctx(&mut self, set: GranuleSet) -> Result<GreenCtxId, DriverError> {
        let mut st = self.st();
        st.calls.push(Call::CreateGreenCtx(set));
        let g = match st.green {
            Green::Supported(g) => g,
            Green::Missing(version, missing) => {
                return Err(green_ctx_unsupported(version, missing));
            }
        };
        if set.is_empty() {
            return Err(DriverError::Invalid(
                "create_green_ctx: no granule given; a green context needs at least one".into(),
            ));
        }
        if let Some(bad) = set.iter().find(|&i| i >= g.granules) {
            return Err(DriverError::Invalid(format!(
                "create_green_ctx: granule {bad} does not exist: the split made granules \
                 0..{} of {} SMs",
                g.granules, g.granule_sms
            )));
        }
        st.green_ctxs.push(set);
        Ok(GreenCtxId(st.green_ctxs.len() as u32 - 1))
    }

    fn create_green_stream(
        &mut self,
        ctx: GreenCtxId,
        priority: StreamPriority,
    ) -> Result<StreamId, DriverError> {
        let mut st = self.st();
        st.calls.push(Call::CreateGreenStream(ctx, priority));
        if ctx.0 as usize >= st.green_ctxs.len() {
            return Err(unknown(ctx));
        }
        st.streams.push(FakeStream::new(Some(ctx)));
        Ok(StreamId(st.streams.len() as u32 - 1))
    }
}

/// A [`TrapKill`] on a [`FakeDriver`]: kills the kernel running on the
/// stream `trap_ns` later, if that kernel's flag is set (REEF's patched trap
/// handler checks the flag and returns when it is clear).
#[derive(Debug, Clone)]
pub struct FakeTrap {
    state: Arc<Mutex<State>>,
}

impl TrapKill for FakeTrap {
    fn kill(&mut self, stream: StreamId) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.calls.push(Call::Trap(stream));
        let now = st.now;
        let trap_ns = st.timings.trap_ns;
        let State { streams, ctls, .. } = &mut *st;
        let s = streams
            .get_mut(stream.0 as usize)
            .ok_or_else(|| unknown(stream))?;
        if let Some(a) = s.active.as_mut()
            && let Op::Kernel { ctl, .. } = &a.op
            && ctls[*ctl].preempt
            && a.outcome == KernelOutcome::Completed
            && now + trap_ns < a.end
        {
            a.end = now + trap_ns;
            a.outcome = KernelOutcome::KilledByTrap;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{KernelArgs, write_prologue};

    fn launch_one(d: &mut FakeDriver, s: StreamId, k: KernelHandle, ctl: CtlId, kidx: u32) {
        let mut p = KernelArgs::new().as_bytes().to_vec();
        write_prologue(&mut p, d.ctl_device_ptr(ctl).unwrap(), kidx);
        d.launch(s, k, &LaunchDims::linear(1, 32), &p).unwrap();
    }

    #[test]
    fn kernels_run_in_stream_order_after_the_launch_latency() {
        let mut d = FakeDriver::default();
        let s = d.create_stream(StreamPriority::BestEffort).unwrap();
        let ctl = d.create_ctl().unwrap();
        let k = d.kernel_handle("k", FakeKernel::new(10_000));
        launch_one(&mut d, s, k, ctl, 0);
        launch_one(&mut d, s, k, ctl, 1);
        let e = d.record_event(s).unwrap();
        assert!(!d.event_done(e).unwrap());
        assert_eq!(d.kernels_in_stream(s), 2);
        let end = d.run_until_idle();
        assert_eq!(end, 2_000 + 20_000);
        assert!(d.event_done(e).unwrap());
        let log = d.log();
        assert_eq!(
            log.iter()
                .map(|l| (l.start_ns, l.end_ns))
                .collect::<Vec<_>>(),
            [(2_000, 12_000), (12_000, 22_000)]
        );
        assert_eq!(d.ctl_state(ctl), Some((false, 2)));
        assert_eq!(d.max_kernels_in_stream(s), 2);
        d.release_event(e).unwrap();
        assert!(d.release_event(e).is_err(), "double release");
    }

    /// A library kernel's block over its `__launch_bounds__` is refused, as
    /// the real driver refuses it; a kernel defined only in the fake is not
    /// bounded.
    #[test]
    fn a_block_over_the_kernels_launch_bound_is_refused() {
        let mut d = FakeDriver::default();
        let s = d.create_stream(StreamPriority::BestEffort).unwrap();
        let ctl = d.create_ctl().unwrap();
        let mut p = KernelArgs::new().as_bytes().to_vec();
        write_prologue(&mut p, d.ctl_device_ptr(ctl).unwrap(), 0);
        for (name, ok, over) in [("sluice_synthetic", 1024, 1056), ("sluice_gemm", 256, 512)] {
            let k = d.kernel_handle(name, FakeKernel::new(1_000));
            d.launch(s, k, &LaunchDims::linear(1, ok), &p).unwrap();
            let e = d
                .launch(s, k, &LaunchDims::linear(1, over), &p)
                .unwrap_err();
            assert!(e.to_string().contains("__launch_bounds__"), "{e}");
        }
        let k = d.kernel_handle("k", FakeKernel::new(1_000));
        d.launch(s, k, &LaunchDims::linear(1, 4096), &p).unwrap();
    }

    /// A wait is on the event's point at the call: a second stream (here in
    /// a green context) starts after the first's kernels end, even when the
    /// event is released and recorded again elsewhere before that; a wait
    /// on a completed event waits for nothing.
    #[test]
    fn a_stream_waits_for_an_event_of_another_stream() {
        let mut d = FakeDriver::default();
        let a = d.create_stream(StreamPriority::BestEffort).unwrap();
        let layout = d.sm_granules().unwrap();
        assert_eq!((layout.sm_count, layout.granule_sms), (132, 8));
        let g = d.create_green_ctx(GranuleSet::range(0, 2)).unwrap();
        let b = d
            .create_green_stream(g, StreamPriority::BestEffort)
            .unwrap();
        assert_eq!((d.green_ctx_of(a), d.green_ctx_of(b)), (None, Some(g)));
        assert_eq!((d.stream_sms(a), d.stream_sms(b)), (132, 16));
        let ctl = d.create_ctl().unwrap();
        let k = d.kernel_handle("k", FakeKernel::new(10_000));
        launch_one(&mut d, a, k, ctl, 0);
        launch_one(&mut d, a, k, ctl, 1);
        let e = d.record_event(a).unwrap();
        d.stream_wait_event(b, e).unwrap();
        launch_one(&mut d, b, k, ctl, 2);
        // The event completes, is released and recorded on `b` behind the
        // wait: the wait still means "after a's two kernels".
        d.advance(22_000);
        assert!(d.event_done(e).unwrap());
        d.release_event(e).unwrap();
        let again = d.record_event(b).unwrap();
        assert_eq!(again, e, "the event was reused");
        d.run_until_idle();
        let log = d.log();
        let spans: Vec<_> = log
            .iter()
            .map(|l| (l.stream, l.start_ns, l.end_ns))
            .collect();
        assert_eq!(
            spans,
            [(a, 2_000, 12_000), (a, 12_000, 22_000), (b, 22_000, 32_000)]
        );
        // Waiting on a completed event adds nothing.
        d.stream_wait_event(a, again).unwrap();
        launch_one(&mut d, a, k, ctl, 3);
        let t = d.now_ns();
        d.run_until_idle();
        assert_eq!(d.log().last().unwrap().start_ns, t + 2_000);
    }

    #[test]
    fn flag_evicts_at_entry_and_at_poll_points_only_for_polling_kernels() {
        let mut d = FakeDriver::default();
        let s = d.create_stream(StreamPriority::BestEffort).unwrap();
        let ctl = d.create_ctl().unwrap();
        let polling = d.kernel_handle("p", FakeKernel::new(100_000).polling(8_000));
        let plain = d.kernel_handle("n", FakeKernel::new(100_000));
        launch_one(&mut d, s, polling, ctl, 0);
        launch_one(&mut d, s, plain, ctl, 1);
        d.advance(30_000); // polling kernel started at 2 µs
        d.set_preempt(ctl, true).unwrap();
        d.run_until_idle();
        let log = d.log();
        let outcomes: Vec<_> = log
            .iter()
            .map(|l| match &l.what {
                Executed::Kernel { outcome, .. } => (*outcome, l.end_ns),
                other => panic!("{other:?}"),
            })
            .collect();
        // Next poll point after 30 µs: 2 + 4·8 = 34 µs; the second kernel
        // returns at entry 2 µs later.
        assert_eq!(
            outcomes,
            [
                (KernelOutcome::KilledAtPoll, 34_000),
                (KernelOutcome::EvictedAtEntry, 36_000)
            ]
        );
        assert_eq!(d.ctl_state(ctl), Some((true, 1)), "only kernel 0 started");
    }

    #[test]
    fn trap_kills_only_when_the_flag_is_set() {
        let mut d = FakeDriver::default();
        let s = d.create_stream(StreamPriority::BestEffort).unwrap();
        let ctl = d.create_ctl().unwrap();
        let k = d.kernel_handle("k", FakeKernel::new(1_000_000));
        let mut trap = d.trap();
        launch_one(&mut d, s, k, ctl, 0);
        d.advance(10_000);
        trap.kill(s).unwrap();
        d.advance(100_000);
        assert!(d.log().is_empty(), "flag clear: the trap handler returns");
        d.set_preempt(ctl, true).unwrap();
        trap.kill(s).unwrap();
        d.run_until_idle();
        let log = d.log();
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].end_ns, 110_000 + 15_000);
        assert!(matches!(
            log[0].what,
            Executed::Kernel {
                outcome: KernelOutcome::KilledByTrap,
                ..
            }
        ));
    }

    #[test]
    fn copies_move_bytes_and_misuse_is_an_error() {
        let mut d = FakeDriver::default();
        let s = d.create_stream(StreamPriority::RealTime).unwrap();
        let h = d.alloc_host(16).unwrap();
        let out = d.alloc_host(16).unwrap();
        let dev = d.alloc_device(16).unwrap();
        d.write_host(h, 0, &[7; 16]).unwrap();
        d.copy_to_device(s, dev, h, 0, 16).unwrap();
        d.memset_d8(s, dev.add(4), 1, 4).unwrap();
        d.copy_to_host(s, out, 0, dev, 16).unwrap();
        d.run_until_idle();
        let mut got = [0; 16];
        d.read_host(out, 0, &mut got).unwrap();
        assert_eq!(got, [7, 7, 7, 7, 1, 1, 1, 1, 7, 7, 7, 7, 7, 7, 7, 7]);
        assert!(matches!(
            d.copy_to_device(s, dev, h, 8, 16),
            Err(DriverError::OutOfBounds { .. })
        ));
        assert!(d.memset_d8(s, dev.add(8), 0, 9).is_err());
        assert!(matches!(
            d.stream_idle(StreamId(9)),
            Err(DriverError::UnknownHandle { .. })
        ));
        let k = d.kernel_handle("k", FakeKernel::new(1));
        let mut p = KernelArgs::new().as_bytes().to_vec();
        write_prologue(&mut p, DevicePtr(0x1234), 0);
        let e = d.launch(s, k, &LaunchDims::linear(1, 1), &p).unwrap_err();
        assert!(e.to_string().contains("not a control block"), "{e}");
    }
}
