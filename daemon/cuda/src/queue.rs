//! Virtual host queues: REEF's reset-based preemption on a CUDA stream
//! (REEF, TOCS 2025, §4.1–§4.4 and §4.6), written against [`CuDriver`].
//!
//! One [`VirtualQueue`] wraps one CUDA stream and its control block
//! ([`SluiceCtl`](super::driver::SluiceCtl)). `docs/cuda-backend.md` has the
//! design; in short:
//!
//! - **Virtual host queue (vHQ).** [`VirtualQueue::submit`] appends a task's
//!   commands to a software `VecDeque`; nothing reaches CUDA until
//!   [`VirtualQueue::poll`] moves commands to the stream. CUDA launches go
//!   straight to the device queues, so this queue is the only place where
//!   unlaunched work can be held back (§4.6).
//! - **Outstanding-kernel cap.** A kernel moves from the vHQ to the stream
//!   only while fewer than [`QueueConfig::cap`] kernels of the queue are
//!   outstanding (issued, completion not yet observed): REEF's DQ capacity
//!   restriction (§4.2, default 4 from §6.4), which bounds how many kernels a
//!   preemption must evict lazily.
//! - **Special commands** (copies, memsets) carry no prologue and so cannot
//!   be evicted: one is held in the vHQ until the queue has no outstanding
//!   kernel (§4.6), and once issued it always runs to its end; a preemption
//!   waits for it.
//! - **Preemption** ([`VirtualQueue::begin_preempt`]): one store sets the
//!   flag; issuing stops, which resets the vHQ in O(1) whatever its length
//!   (see "Why the vHQ is not freed" below); kernels already on the stream
//!   return at entry (lazy eviction); a running kernel returns at its next
//!   poll point ([`KillMechanism::Cooperative`]), is killed by a GPU trap
//!   ([`KillMechanism::Trap`], supplied by the ioctl layer), or runs to its
//!   end ([`KillMechanism::None`]). [`VirtualQueue::poll`] then waits for
//!   the stream to drain, clears the flag and returns a [`PreemptReport`].
//! - **Restore point.** After the drain the queue reads the execution index
//!   (`started` = `kidx + 1` of the highest kernel that passed the
//!   prologue). A command is *known complete* when its completion was
//!   observed before the flag was set, when it is a special command, or when
//!   it is a kernel followed by a kernel that started (a stream runs its
//!   kernels one after another). The first command not known complete is
//!   the interrupted one. If it started, it may have been cut short, and the
//!   restore point is the start of its idempotent group ([`Program::new`]'s
//!   `group_start`, from the model manifest, §4.4); if it never started, it
//!   is the interrupted command itself. [`VirtualQueue::restore`] puts the
//!   commands from there back at the front of the vHQ, in order.
//!
//! # Why the vHQ is not freed
//!
//! REEF frees its host queue on preemption (handing the nodes to a GC thread)
//! and re-launches the task from the restore point by re-running its host
//! code. Here only the queue itself moves commands out of the vHQ, so
//! "resetting" it is just not issuing: the queued commands stay where they
//! are, which is what a restore would rebuild, and restore only puts the
//! (at most `cap` + group length) re-run commands in front. Both are O(1) in
//! the number of queued commands and make no per-command driver call.
//! Work that is *discarded* ([`VirtualQueue::discard`]) is swapped out in
//! O(1) onto a reclaim list that [`VirtualQueue::reclaim`] frees when the
//! dispatcher is idle.
//!
//! # Execution index
//!
//! Every issued kernel gets the next `kidx` of its queue. The kernels store
//! `kidx + 1` in 32 bits before widening, so `kidx` must stay below
//! `u32::MAX`: when the next `kidx` would pass [`QueueConfig::kidx_limit`],
//! the queue stops issuing kernels until none is outstanding, resets
//! `started` to 0 and starts again from 0.
//!
//! The rule "a kernel followed by one that started is complete" also needs
//! block (0,0,0) of a kernel to start no later than its other blocks, which
//! NVIDIA's block dispatcher does in practice but CUDA does not promise; see
//! `docs/cuda-backend.md`.

use std::collections::VecDeque;
use std::error::Error;
use std::fmt;
use std::sync::Arc;

use super::driver::{
    CtlId, CuDriver, DevicePtr, DriverError, EventId, HostBufId, KernelArgs, KernelHandle,
    LaunchDims, MAX_PARAM_BYTES, StreamId, StreamPriority, write_prologue,
};

/// REEF's default device-queue capacity (§4.2, chosen in §6.4).
pub const DEFAULT_CAP: usize = 4;

/// Largest `kidx` the kernels can record (`kidx + 1` must not wrap in 32
/// bits).
pub const KIDX_MAX: u32 = u32::MAX - 1;

/// Default [`QueueConfig::drain_timeout_ns`]: 100 ms.
pub const DEFAULT_DRAIN_TIMEOUT_NS: u64 = 100_000_000;

/// A task: one request's commands, numbered by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub u64);

/// One command of a task.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// A sluice kernel (its parameters start with the prologue).
    Kernel {
        /// The kernel.
        kernel: KernelHandle,
        /// Its launch configuration.
        dims: LaunchDims,
        /// Its parameters; the queue fills in the prologue.
        args: KernelArgs,
    },
    /// Host-to-device copy (special: not evictable).
    CopyToDevice {
        /// Destination.
        dst: DevicePtr,
        /// Source buffer.
        src: HostBufId,
        /// Offset in the source buffer.
        src_offset: usize,
        /// Bytes.
        len: usize,
    },
    /// Device-to-host copy (special: not evictable).
    CopyToHost {
        /// Destination buffer.
        dst: HostBufId,
        /// Offset in the destination buffer.
        dst_offset: usize,
        /// Source.
        src: DevicePtr,
        /// Bytes.
        len: usize,
    },
    /// Byte memset (special: not evictable).
    Memset {
        /// Destination.
        dst: DevicePtr,
        /// Byte value.
        value: u8,
        /// Bytes.
        len: usize,
    },
}

impl Command {
    /// Whether this is a kernel (evictable through the flag) rather than a
    /// special command.
    pub fn is_kernel(&self) -> bool {
        matches!(self, Command::Kernel { .. })
    }
}

/// A [`Program`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    /// No commands.
    #[error("task {0:?} has no commands; submit at least one")]
    Empty(TaskId),
    /// Too many commands to number in 32 bits.
    #[error(
        "task {task:?} has {commands} commands, over the limit of {}",
        u32::MAX
    )]
    TooLong {
        /// The task.
        task: TaskId,
        /// Its command count.
        commands: usize,
    },
    /// `group_start` does not have one entry per command.
    #[error(
        "task {task:?}: {group_starts} group starts for {commands} commands; give one per \
         command (the model manifest's group_start, or the command's own index)"
    )]
    GroupStartsLen {
        /// The task.
        task: TaskId,
        /// Commands.
        commands: usize,
        /// Group starts given.
        group_starts: usize,
    },
    /// A group start after its command.
    #[error(
        "task {task:?}: command {index} has group start {start}, after the command itself; a \
         group ends at its command, so its start must be <= {index}"
    )]
    GroupStartAfter {
        /// The task.
        task: TaskId,
        /// The command.
        index: usize,
        /// Its group start.
        start: u32,
    },
    /// A kernel's parameters exceed CUDA's limit.
    #[error(
        "task {task:?}: kernel command {index} has {bytes} bytes of parameters, over CUDA's \
         {MAX_PARAM_BYTES}-byte limit; pass large data through device memory"
    )]
    ParamsTooLarge {
        /// The task.
        task: TaskId,
        /// The command.
        index: usize,
        /// Its parameter bytes.
        bytes: usize,
    },
}

/// A task's commands and, per command, the first command of its minimal
/// idempotent group (REEF §4.4): where to restart when that command is
/// interrupted. Shared ([`Arc`]) between the vHQ entries of the task.
#[derive(Debug, PartialEq)]
pub struct Program {
    task: TaskId,
    commands: Vec<Command>,
    group_start: Vec<u32>,
}

impl Program {
    /// Checks and wraps a task. `group_start[i] <= i` for every command `i`;
    /// for a model, map its manifest's kernel group starts
    /// (`Model::group_start`) onto command indices.
    pub fn new(
        task: TaskId,
        commands: Vec<Command>,
        group_start: Vec<u32>,
    ) -> Result<Arc<Self>, ProgramError> {
        if commands.is_empty() {
            return Err(ProgramError::Empty(task));
        }
        if u32::try_from(commands.len()).is_err() {
            return Err(ProgramError::TooLong {
                task,
                commands: commands.len(),
            });
        }
        if group_start.len() != commands.len() {
            return Err(ProgramError::GroupStartsLen {
                task,
                commands: commands.len(),
                group_starts: group_start.len(),
            });
        }
        for (index, (&start, c)) in group_start.iter().zip(&commands).enumerate() {
            if start as usize > index {
                return Err(ProgramError::GroupStartAfter { task, index, start });
            }
            if let Command::Kernel { args, .. } = c
                && args.len() > MAX_PARAM_BYTES
            {
                return Err(ProgramError::ParamsTooLarge {
                    task,
                    index,
                    bytes: args.len(),
                });
            }
        }
        Ok(Arc::new(Self {
            task,
            commands,
            group_start,
        }))
    }

    /// A task whose every command is idempotent alone (sluice's own kernel
    /// library: no kernel writes what it reads), so each restarts itself.
    pub fn each_idempotent(
        task: TaskId,
        commands: Vec<Command>,
    ) -> Result<Arc<Self>, ProgramError> {
        let starts = (0..commands.len() as u32).collect();
        Self::new(task, commands, starts)
    }

    /// The task.
    pub fn task(&self) -> TaskId {
        self.task
    }

    /// The commands.
    pub fn commands(&self) -> &[Command] {
        &self.commands
    }

    /// Number of commands.
    pub fn len(&self) -> usize {
        self.commands.len()
    }

    /// Always false (a program has at least one command).
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// The group start of command `index`.
    pub fn group_start(&self, index: u32) -> u32 {
        self.group_start[index as usize]
    }
}

/// Kills kernels running on a stream through the GPU trap (REEF §4.6). The
/// ioctl layer implements it; the queue calls it right after setting the
/// flag, and the patched trap handler exits the threads of kernels whose
/// flag is set.
pub trait TrapKill: Send + fmt::Debug {
    /// Traps the kernels running on `stream`.
    fn kill(&mut self, stream: StreamId) -> Result<(), Box<dyn Error + Send + Sync>>;
}

/// How a preemption deals with the kernel already running.
#[derive(Debug, Default)]
pub enum KillMechanism {
    /// It runs to its end: for kernels without poll points. Such a kernel
    /// that started is then known complete after the drain, so restore does
    /// not re-run it. Do not choose this for kernels that poll the flag.
    None,
    /// It returns at its next poll point (sluice's kernel library polls
    /// every 8 iterations of its main loop). A kernel that started may have
    /// been cut short, so restore re-runs it.
    #[default]
    Cooperative,
    /// The trap kills it (and kernels without poll points). As for
    /// `Cooperative`, restore re-runs it.
    Trap(Box<dyn TrapKill>),
}

impl KillMechanism {
    /// `none`, `cooperative` or `trap`.
    pub fn name(&self) -> &'static str {
        match self {
            KillMechanism::None => "none",
            KillMechanism::Cooperative => "cooperative",
            KillMechanism::Trap(_) => "trap",
        }
    }
}

/// Tunables of a [`VirtualQueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// Most kernels outstanding on the stream, at least 1. Default
    /// [`DEFAULT_CAP`].
    pub cap: usize,
    /// Largest `kidx` before the execution index starts again from 0.
    /// Default [`KIDX_MAX`]; tests lower it.
    pub kidx_limit: u32,
    /// How long [`VirtualQueue::preempt`] waits for the drain before giving
    /// up, in driver ns. Default [`DEFAULT_DRAIN_TIMEOUT_NS`].
    pub drain_timeout_ns: u64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            cap: DEFAULT_CAP,
            kidx_limit: KIDX_MAX,
            drain_timeout_ns: DEFAULT_DRAIN_TIMEOUT_NS,
        }
    }
}

/// Where a preempted task restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestorePoint {
    /// The interrupted task.
    pub task: TaskId,
    /// Its first command not known complete.
    pub interrupted: u32,
    /// Where restore re-runs the task's commands from: the start of the
    /// interrupted command's idempotent group if it started (it may have
    /// been cut short), else the interrupted command itself.
    pub from: u32,
}

/// What a finished preemption found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreemptReport {
    /// From the flag store to the drain being observed, in driver ns.
    pub latency_ns: u64,
    /// The execution index word after the drain.
    pub started: u64,
    /// Commands on the stream at the flag store that are known complete.
    pub completed: usize,
    /// Commands on the stream at the flag store that are not (returned at
    /// entry, cut short, or possibly cut short); restore re-runs them.
    pub not_completed: usize,
    /// `None` when every command on the stream is known complete.
    pub restore: Option<RestorePoint>,
    /// Commands that will be re-run before the first command that never
    /// reached the stream.
    pub rerun: usize,
    /// Commands waiting in the vHQ that never reached the stream.
    pub queued: usize,
    /// The kill mechanism used (`none`, `cooperative`, `trap`).
    pub kill: &'static str,
    /// Why the trap failed, if it did (the preemption then waited for the
    /// running kernel, as with `cooperative`).
    pub kill_error: Option<String>,
}

/// Where a queue is in its preemption cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueState {
    /// Issuing from the vHQ.
    Running,
    /// Flag set, waiting for the stream to drain.
    Draining,
    /// Drained and flag cleared; waiting for [`VirtualQueue::restore`].
    Preempted,
}

/// A driver call of the queue failed. Its message ends with the driver's
/// (callers that keep only the message, e.g. a `GpuError::Driver`, keep
/// the cause too).
#[derive(Debug, thiserror::Error)]
#[error("{what} on {stream}: {source}")]
pub struct QueueError {
    /// What the queue was doing, e.g. `launching command 3 of task TaskId(7)`.
    pub what: String,
    /// The queue's stream.
    pub stream: StreamId,
    /// The driver's error.
    #[source]
    pub source: DriverError,
}

/// [`VirtualQueue::preempt`] failed.
#[derive(Debug, thiserror::Error)]
pub enum PreemptError {
    /// A driver call failed.
    #[error(transparent)]
    Driver(#[from] QueueError),
    /// The stream did not drain in time.
    #[error(
        "{stream} did not drain within {waited_ns} ns of the preemption flag ({outstanding} \
         commands still outstanding); a kernel without poll points is running under \
         KillMechanism::None or Cooperative: raise drain_timeout_ns or use the trap"
    )]
    Timeout {
        /// The stream.
        stream: StreamId,
        /// How long it waited.
        waited_ns: u64,
        /// Commands still on the stream.
        outstanding: usize,
    },
    /// The queue was not running.
    #[error("{stream} is {state:?}, not Running; restore it before preempting again")]
    NotRunning {
        /// The stream.
        stream: StreamId,
        /// Its state.
        state: QueueState,
    },
}

/// [`VirtualQueue::restore`] was called on a queue that is not preempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{stream} is {state:?}, not Preempted; only a drained preemption can be restored")]
pub struct RestoreError {
    /// The stream.
    pub stream: StreamId,
    /// Its state.
    pub state: QueueState,
}

/// Counters of one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Kernels launched (re-runs included).
    pub kernels_issued: u64,
    /// Special commands issued (re-runs included).
    pub specials_issued: u64,
    /// Tasks completed.
    pub tasks_done: u64,
    /// Preemptions finished.
    pub preemptions: u64,
    /// Commands re-enqueued by restores.
    pub rerun: u64,
    /// Times the execution index started again from 0.
    pub kidx_rollovers: u64,
    /// Most kernels outstanding at once.
    pub max_outstanding: usize,
    /// Moves to another stream ([`VirtualQueue::rebind`]).
    pub rebinds: u64,
}

#[derive(Debug, Clone)]
struct Queued {
    program: Arc<Program>,
    index: u32,
}

impl Queued {
    fn command(&self) -> &Command {
        &self.program.commands[self.index as usize]
    }

    fn is_last(&self) -> bool {
        self.index as usize + 1 == self.program.commands.len()
    }
}

#[derive(Debug)]
struct Issued {
    cmd: Queued,
    /// `Some` for kernels.
    kidx: Option<u32>,
    event: EventId,
}

#[derive(Debug)]
enum State {
    Running,
    Draining {
        since_ns: u64,
        /// Commands retired since the flag, in issue order.
        retired: Vec<Issued>,
        kill_error: Option<String>,
        /// [`VirtualQueue::discard`] was called while draining: what the
        /// restore would re-run is discarded too.
        discard: bool,
    },
    Preempted {
        /// Commands to put back in front of the vHQ, in order.
        resume: Vec<Queued>,
    },
}

/// One stream, its control block and its virtual host queue.
pub struct VirtualQueue {
    stream: StreamId,
    ctl: CtlId,
    ctl_ptr: DevicePtr,
    config: QueueConfig,
    kill: KillMechanism,
    vhq: VecDeque<Queued>,
    issued: VecDeque<Issued>,
    outstanding_kernels: usize,
    next_kidx: u32,
    state: State,
    reclaim: Vec<VecDeque<Queued>>,
    params: Vec<u8>,
    failed: bool,
    stats: QueueStats,
}

impl fmt::Debug for VirtualQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VirtualQueue")
            .field("stream", &self.stream)
            .field("state", &self.state())
            .field("queued", &self.vhq.len())
            .field("issued", &self.issued.len())
            .field("outstanding_kernels", &self.outstanding_kernels)
            .field("kill", &self.kill.name())
            .finish_non_exhaustive()
    }
}

impl VirtualQueue {
    /// Creates a stream with `priority` and its control block.
    pub fn new(
        drv: &mut dyn CuDriver,
        priority: StreamPriority,
        config: QueueConfig,
        kill: KillMechanism,
    ) -> Result<Self, DriverError> {
        let stream = drv.create_stream(priority)?;
        let ctl = drv.create_ctl()?;
        let ctl_ptr = drv.ctl_device_ptr(ctl)?;
        Ok(Self {
            stream,
            ctl,
            ctl_ptr,
            config: QueueConfig {
                cap: config.cap.max(1),
                ..config
            },
            kill,
            vhq: VecDeque::new(),
            issued: VecDeque::new(),
            outstanding_kernels: 0,
            next_kidx: 0,
            state: State::Running,
            reclaim: Vec::new(),
            params: Vec::with_capacity(256),
            failed: false,
            stats: QueueStats::default(),
        })
    }

    /// The stream.
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// The control block.
    pub fn ctl(&self) -> CtlId {
        self.ctl
    }

    /// Moves the queue onto `stream` (e.g. a stream of another green
    /// context): commands issued from now on go there; commands already on
    /// the old stream finish there. Nothing is dropped, re-issued or waited
    /// for on the host: when commands are outstanding, `stream` is first
    /// told to wait for the event recorded after the last of them
    /// (`cuStreamWaitEvent`, one driver call), so the queue's commands still
    /// run one after another across the move. The vHQ, the outstanding
    /// commands, the control block and the execution index are untouched,
    /// so preemption and restore work across a move. Returns the old
    /// stream.
    pub fn rebind(
        &mut self,
        drv: &mut dyn CuDriver,
        stream: StreamId,
    ) -> Result<StreamId, QueueError> {
        self.check_failed()?;
        if stream == self.stream {
            return Ok(stream);
        }
        if let Some(last) = self.issued.back() {
            let event = last.event;
            drv.stream_wait_event(stream, event)
                .map_err(|e| QueueError {
                    what: format!("making {stream} wait for {event} before moving the queue there"),
                    stream: self.stream,
                    source: e,
                })?;
        }
        self.stats.rebinds += 1;
        Ok(std::mem::replace(&mut self.stream, stream))
    }

    /// Where the queue is in its preemption cycle.
    pub fn state(&self) -> QueueState {
        match self.state {
            State::Running => QueueState::Running,
            State::Draining { .. } => QueueState::Draining,
            State::Preempted { .. } => QueueState::Preempted,
        }
    }

    /// Commands waiting in the vHQ (not counting a preempted queue's re-runs).
    pub fn queued(&self) -> usize {
        self.vhq.len()
    }

    /// Kernels issued whose completion has not been observed.
    pub fn outstanding_kernels(&self) -> usize {
        self.outstanding_kernels
    }

    /// Commands issued whose completion has not been observed.
    pub fn outstanding(&self) -> usize {
        self.issued.len()
    }

    /// Nothing queued, nothing on the stream, nothing to restore.
    pub fn is_idle(&self) -> bool {
        self.vhq.is_empty() && self.issued.is_empty() && matches!(self.state, State::Running)
    }

    /// The counters.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// Appends `program`'s commands to the vHQ. Nothing is issued until
    /// [`VirtualQueue::poll`]. Allowed in every state (while preempted the
    /// commands wait behind the restore).
    pub fn submit(&mut self, program: &Arc<Program>) {
        self.vhq
            .extend((0..program.len() as u32).map(|index| Queued {
                program: Arc::clone(program),
                index,
            }));
    }

    fn fail(&mut self, what: String, source: DriverError) -> QueueError {
        self.failed = true;
        QueueError {
            what,
            stream: self.stream,
            source,
        }
    }

    fn check_failed(&self) -> Result<(), QueueError> {
        if self.failed {
            return Err(QueueError {
                what: "using a queue after a driver error".into(),
                stream: self.stream,
                source: DriverError::Invalid(
                    "an earlier driver call failed and the queue's view of the stream may be \
                     wrong; drop the queue (CUDA launch errors are sticky: the context is lost)"
                        .into(),
                ),
            });
        }
        Ok(())
    }

    /// Observes completions, issues from the vHQ within the cap, and
    /// advances a preemption. Tasks whose last command completed are
    /// appended to `done`. Returns the report when a preemption finished in
    /// this call.
    pub fn poll(
        &mut self,
        drv: &mut dyn CuDriver,
        done: &mut Vec<TaskId>,
    ) -> Result<Option<PreemptReport>, QueueError> {
        self.check_failed()?;
        self.retire(drv, done)?;
        match self.state {
            State::Running => {
                self.issue(drv)?;
                Ok(None)
            }
            State::Draining { .. } if self.issued.is_empty() => {
                let idle = drv
                    .stream_idle(self.stream)
                    .map_err(|e| self.fail("querying the stream after the drain".into(), e))?;
                if !idle {
                    // Something not issued by this queue is on the stream.
                    return Ok(None);
                }
                self.finish_preempt(drv, done).map(Some)
            }
            State::Draining { .. } | State::Preempted { .. } => Ok(None),
        }
    }

    fn retire(&mut self, drv: &mut dyn CuDriver, done: &mut Vec<TaskId>) -> Result<(), QueueError> {
        while let Some(front) = self.issued.front() {
            let event = front.event;
            let finished = drv
                .event_done(event)
                .map_err(|e| self.fail(format!("querying {event}"), e))?;
            if !finished {
                break;
            }
            let Some(entry) = self.issued.pop_front() else {
                break; // the front was just seen
            };
            drv.release_event(event)
                .map_err(|e| self.fail(format!("releasing {event}"), e))?;
            if entry.kidx.is_some() {
                self.outstanding_kernels -= 1;
            }
            match &mut self.state {
                // Observed before the flag: complete.
                State::Running => {
                    if entry.cmd.is_last() {
                        done.push(entry.cmd.program.task);
                        self.stats.tasks_done += 1;
                    }
                }
                // Completion after the flag says nothing about a kernel:
                // decided in finish_preempt.
                State::Draining { retired, .. } => retired.push(entry),
                State::Preempted { .. } => unreachable!("nothing is issued while preempted"),
            }
        }
        Ok(())
    }

    fn issue(&mut self, drv: &mut dyn CuDriver) -> Result<(), QueueError> {
        while let Some(front) = self.vhq.front() {
            let cmd = front.clone();
            let what = |verb: &str| {
                format!(
                    "{verb} command {} of task {:?}",
                    cmd.index, cmd.program.task
                )
            };
            let kidx = match cmd.command() {
                Command::Kernel { kernel, dims, args } => {
                    if self.outstanding_kernels >= self.config.cap {
                        break;
                    }
                    if self.next_kidx > self.config.kidx_limit {
                        if self.outstanding_kernels > 0 {
                            break;
                        }
                        drv.reset_started(self.ctl)
                            .map_err(|e| self.fail("resetting the execution index".into(), e))?;
                        self.next_kidx = 0;
                        self.stats.kidx_rollovers += 1;
                    }
                    let kidx = self.next_kidx;
                    self.params.clear();
                    self.params.extend_from_slice(args.as_bytes());
                    write_prologue(&mut self.params, self.ctl_ptr, kidx);
                    // A failed launch leaves the command at the front.
                    drv.launch(self.stream, *kernel, dims, &self.params)
                        .map_err(|e| self.fail(what("launching"), e))?;
                    self.next_kidx += 1;
                    self.outstanding_kernels += 1;
                    self.stats.kernels_issued += 1;
                    self.stats.max_outstanding =
                        self.stats.max_outstanding.max(self.outstanding_kernels);
                    Some(kidx)
                }
                special => {
                    // Special commands cannot be evicted: hold them until no
                    // kernel is outstanding.
                    if self.outstanding_kernels > 0 {
                        break;
                    }
                    let r = match *special {
                        Command::CopyToDevice {
                            dst,
                            src,
                            src_offset,
                            len,
                        } => drv.copy_to_device(self.stream, dst, src, src_offset, len),
                        Command::CopyToHost {
                            dst,
                            dst_offset,
                            src,
                            len,
                        } => drv.copy_to_host(self.stream, dst, dst_offset, src, len),
                        Command::Memset { dst, value, len } => {
                            drv.memset_d8(self.stream, dst, value, len)
                        }
                        Command::Kernel { .. } => unreachable!("matched above"),
                    };
                    r.map_err(|e| self.fail(what("issuing"), e))?;
                    self.stats.specials_issued += 1;
                    None
                }
            };
            self.vhq.pop_front();
            let event = drv
                .record_event(self.stream)
                .map_err(|e| self.fail(what("recording the event after"), e))?;
            self.issued.push_back(Issued { cmd, kidx, event });
        }
        Ok(())
    }

    /// Starts a preemption: sets the flag (one store), stops issuing, and
    /// traps the running kernel when the kill mechanism is a trap. No
    /// per-command work: the vHQ stays as it is. [`VirtualQueue::poll`]
    /// finishes the preemption once the stream has drained.
    pub fn begin_preempt(&mut self, drv: &mut dyn CuDriver) -> Result<(), PreemptError> {
        self.check_failed()?;
        if !matches!(self.state, State::Running) {
            return Err(PreemptError::NotRunning {
                stream: self.stream,
                state: self.state(),
            });
        }
        drv.set_preempt(self.ctl, true)
            .map_err(|e| self.fail("setting the preemption flag".into(), e))?;
        let since_ns = drv.now_ns();
        let mut kill_error = None;
        if let KillMechanism::Trap(trap) = &mut self.kill
            && self.outstanding_kernels > 0
            && let Err(e) = trap.kill(self.stream)
        {
            tracing::warn!(
                stream = %self.stream,
                "GPU trap failed ({e}); waiting for the running kernel instead"
            );
            kill_error = Some(e.to_string());
        }
        self.state = State::Draining {
            since_ns,
            retired: Vec::new(),
            kill_error,
            discard: false,
        };
        Ok(())
    }

    /// Preempts and waits for the drain: [`VirtualQueue::begin_preempt`],
    /// then [`VirtualQueue::poll`] and [`CuDriver::wait_for_progress`] until
    /// the report, or [`PreemptError::Timeout`] after
    /// [`QueueConfig::drain_timeout_ns`].
    pub fn preempt(
        &mut self,
        drv: &mut dyn CuDriver,
        done: &mut Vec<TaskId>,
    ) -> Result<PreemptReport, PreemptError> {
        self.begin_preempt(drv)?;
        let start = drv.now_ns();
        loop {
            if let Some(report) = self.poll(drv, done)? {
                return Ok(report);
            }
            let waited_ns = drv.now_ns().saturating_sub(start);
            if waited_ns > self.config.drain_timeout_ns {
                return Err(PreemptError::Timeout {
                    stream: self.stream,
                    waited_ns,
                    outstanding: self.issued.len(),
                });
            }
            drv.wait_for_progress();
        }
    }

    fn finish_preempt(
        &mut self,
        drv: &mut dyn CuDriver,
        done: &mut Vec<TaskId>,
    ) -> Result<PreemptReport, QueueError> {
        let started = drv
            .read_started(self.ctl)
            .map_err(|e| self.fail("reading the execution index".into(), e))?;
        drv.set_preempt(self.ctl, false)
            .map_err(|e| self.fail("clearing the preemption flag".into(), e))?;
        let now = drv.now_ns();
        let State::Draining {
            since_ns,
            retired,
            kill_error,
            discard,
        } = std::mem::replace(&mut self.state, State::Running)
        else {
            unreachable!("finish_preempt only while draining")
        };
        let runs_to_end = matches!(self.kill, KillMechanism::None);
        // Known complete: special commands (they cannot be cut short), and
        // kernels followed by a kernel that started; under
        // KillMechanism::None also the kernel that started last.
        let known_complete = |i: &Issued| match i.kidx {
            None => true,
            Some(k) => {
                let k = u64::from(k) + 1;
                k < started || (runs_to_end && k == started)
            }
        };
        let first_unknown = retired
            .iter()
            .position(|i| !known_complete(i))
            .unwrap_or(retired.len());
        for i in &retired[..first_unknown] {
            if i.cmd.is_last() {
                done.push(i.cmd.program.task);
                self.stats.tasks_done += 1;
            }
        }
        let mut resume = Vec::new();
        let restore = retired.get(first_unknown).map(|i| {
            let p = &i.cmd.program;
            // A kernel that started may have been cut short after writing
            // part of its outputs: restart from its group. One that never
            // started (every earlier command complete) touched nothing:
            // restart from it.
            let started_it = i.kidx.is_some_and(|k| u64::from(k) + 1 == started);
            let from = if started_it {
                p.group_start(i.cmd.index)
            } else {
                i.cmd.index
            };
            resume.extend((from..i.cmd.index).map(|index| Queued {
                program: Arc::clone(p),
                index,
            }));
            RestorePoint {
                task: p.task,
                interrupted: i.cmd.index,
                from,
            }
        });
        let not_completed = retired.len() - first_unknown;
        debug_assert!(
            retired[first_unknown..].iter().all(|i| i.kidx.is_some()),
            "a special command is issued only when no kernel is outstanding"
        );
        resume.extend(retired.into_iter().skip(first_unknown).map(|i| i.cmd));
        let report = PreemptReport {
            latency_ns: now.saturating_sub(since_ns),
            started,
            completed: first_unknown,
            not_completed,
            restore,
            rerun: resume.len(),
            queued: self.vhq.len(),
            kill: self.kill.name(),
            kill_error,
        };
        self.stats.preemptions += 1;
        if discard {
            self.reclaim.push(resume.into());
            self.state = State::Preempted { resume: Vec::new() };
        } else {
            self.state = State::Preempted { resume };
        }
        Ok(report)
    }

    /// Restores a preempted queue: puts the commands from the restore point
    /// back at the front of the vHQ, in order, and resumes issuing at the
    /// next [`VirtualQueue::poll`]. Returns how many commands were put back.
    pub fn restore(&mut self) -> Result<usize, RestoreError> {
        let State::Preempted { resume } = &mut self.state else {
            return Err(RestoreError {
                stream: self.stream,
                state: self.state(),
            });
        };
        let resume = std::mem::take(resume);
        let n = resume.len();
        self.vhq.reserve(n);
        for q in resume.into_iter().rev() {
            self.vhq.push_front(q);
        }
        self.stats.rerun += n as u64;
        self.state = State::Running;
        Ok(n)
    }

    /// Discards every command that is not on the stream (the vHQ and, when
    /// preempted or draining, the commands a restore would re-run), e.g.
    /// because the client left. O(1): the queue is swapped onto the reclaim
    /// list. The discarded tasks never complete; commands on the stream run
    /// to their end (or return at entry, when draining). Returns how many
    /// queued commands were discarded (a draining queue's re-runs are not
    /// known yet and not counted).
    pub fn discard(&mut self) -> usize {
        let mut n = self.vhq.len();
        match &mut self.state {
            State::Preempted { resume } => {
                n += resume.len();
                self.reclaim.push(std::mem::take(resume).into());
            }
            State::Draining { discard, .. } => *discard = true,
            State::Running => {}
        }
        let old = std::mem::take(&mut self.vhq);
        if !old.is_empty() {
            self.reclaim.push(old);
        }
        n
    }

    /// Frees discarded commands (call when idle, off the hot path). Returns
    /// how many were freed.
    pub fn reclaim(&mut self) -> usize {
        self.reclaim.drain(..).map(|q| q.len()).sum()
    }

    /// Commands waiting on the reclaim list.
    pub fn reclaimable(&self) -> usize {
        self.reclaim.iter().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{
        Call, Executed, FakeDriver, FakeKernel, FakeTimings, KernelOutcome, LogEntry, Run,
    };
    use sluice_model::idempotent::{ByteRange, KernelAccess, minimal_groups};

    const US: u64 = 1_000;

    fn queue(d: &mut FakeDriver, cap: usize, kill: KillMechanism) -> VirtualQueue {
        VirtualQueue::new(
            d,
            StreamPriority::BestEffort,
            QueueConfig {
                cap,
                ..QueueConfig::default()
            },
            kill,
        )
        .unwrap()
    }

    fn kernel_cmd(k: KernelHandle, tag: u32) -> Command {
        let mut args = KernelArgs::new();
        args.u32(tag);
        Command::Kernel {
            kernel: k,
            dims: LaunchDims::linear(4, 128),
            args,
        }
    }

    /// Polls (and lets virtual time run) until the queue is idle.
    fn run_to_idle(d: &mut FakeDriver, q: &mut VirtualQueue, done: &mut Vec<TaskId>) {
        for _ in 0..1_000_000 {
            q.poll(d, done).unwrap();
            if q.is_idle() {
                return;
            }
            d.wait_for_progress();
        }
        panic!("queue never became idle: {q:?}");
    }

    fn kernel_log(d: &FakeDriver) -> Vec<(u32, u32, KernelOutcome)> {
        d.log()
            .into_iter()
            .filter_map(|l| match l.what {
                Executed::Kernel {
                    kidx,
                    user_args,
                    outcome,
                    ..
                } => Some((
                    u32::from_ne_bytes(user_args[0..4].try_into().unwrap()),
                    kidx,
                    outcome,
                )),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn issues_within_the_cap_and_completes_tasks_in_order() {
        let mut d = FakeDriver::default();
        let k = d.kernel_handle("k", FakeKernel::new(50 * US));
        let mut q = queue(&mut d, 4, KillMechanism::Cooperative);
        let a = Program::each_idempotent(TaskId(1), (0..6).map(|i| kernel_cmd(k, i)).collect())
            .unwrap();
        let b =
            Program::each_idempotent(TaskId(2), (0..3).map(|i| kernel_cmd(k, 10 + i)).collect())
                .unwrap();
        q.submit(&a);
        q.submit(&b);
        assert_eq!(q.queued(), 9);
        assert!(d.calls().iter().all(|c| !matches!(c, Call::Launch { .. })));
        let mut done = Vec::new();
        q.poll(&mut d, &mut done).unwrap();
        assert_eq!(q.outstanding_kernels(), 4);
        assert_eq!(d.kernels_in_stream(q.stream()), 4);
        run_to_idle(&mut d, &mut q, &mut done);
        assert_eq!(done, [TaskId(1), TaskId(2)]);
        assert_eq!(d.max_kernels_in_stream(q.stream()), 4);
        assert_eq!(q.stats().max_outstanding, 4);
        let log = kernel_log(&d);
        assert_eq!(
            log.iter()
                .map(|&(tag, kidx, _)| (tag, kidx))
                .collect::<Vec<_>>(),
            [0, 1, 2, 3, 4, 5, 10, 11, 12]
                .into_iter()
                .zip(0..)
                .collect::<Vec<_>>()
        );
        assert_eq!(d.ctl_state(q.ctl()), Some((false, 9)));
    }

    #[test]
    fn preempt_drops_the_queue_without_per_kernel_driver_calls() {
        // The same preemption with 8 and with 20 000 queued commands makes
        // the same driver calls: one flag store to begin, and the drain
        // touches only the (at most cap) commands on the stream.
        let mut per_len = Vec::new();
        for queued in [8u32, 20_000] {
            let mut d = FakeDriver::default();
            let k = d.kernel_handle("k", FakeKernel::new(100 * US));
            let mut q = queue(&mut d, 4, KillMechanism::Cooperative);
            let p = Program::each_idempotent(
                TaskId(1),
                (0..queued).map(|i| kernel_cmd(k, i)).collect(),
            )
            .unwrap();
            q.submit(&p);
            let mut done = Vec::new();
            q.poll(&mut d, &mut done).unwrap();
            d.advance(10 * US);
            let before = d.call_count();
            q.begin_preempt(&mut d).unwrap();
            let begin: Vec<Call> = d.calls()[before..].to_vec();
            assert_eq!(begin, [Call::SetPreempt(q.ctl(), true)]);
            let report = drain(&mut d, &mut q, &mut done);
            let all: Vec<Call> = d.calls()[before..].to_vec();
            assert_eq!(report.queued, queued as usize - 4);
            per_len.push(all);
        }
        assert_eq!(per_len[0], per_len[1]);
        assert!(per_len[0].len() < 40, "{:?}", per_len[0]);
    }

    /// Polls with virtual time running until a draining queue reports.
    fn drain(d: &mut FakeDriver, q: &mut VirtualQueue, done: &mut Vec<TaskId>) -> PreemptReport {
        for _ in 0..100_000 {
            if let Some(r) = q.poll(d, done).unwrap() {
                return r;
            }
            d.wait_for_progress();
        }
        panic!("never drained: {q:?}");
    }

    #[test]
    fn lazy_eviction_of_kernels_already_on_the_stream() {
        // Kernels without poll points and no kill: the running one finishes,
        // the three behind it return at entry.
        let mut d = FakeDriver::default();
        let k = d.kernel_handle("k", FakeKernel::new(100 * US));
        let mut q = queue(&mut d, 4, KillMechanism::None);
        let p = Program::each_idempotent(TaskId(7), (0..10).map(|i| kernel_cmd(k, i)).collect())
            .unwrap();
        q.submit(&p);
        let mut done = Vec::new();
        q.poll(&mut d, &mut done).unwrap();
        d.advance(50 * US);
        let report = q.preempt(&mut d, &mut done).unwrap();
        let log = kernel_log(&d);
        assert_eq!(
            log.iter().map(|&(tag, _, o)| (tag, o)).collect::<Vec<_>>(),
            [
                (0, KernelOutcome::Completed),
                (1, KernelOutcome::EvictedAtEntry),
                (2, KernelOutcome::EvictedAtEntry),
                (3, KernelOutcome::EvictedAtEntry),
            ]
        );
        assert_eq!(report.started, 1);
        assert_eq!(
            report.completed, 1,
            "KillMechanism::None: kernel 0 ran to its end"
        );
        assert_eq!(report.not_completed, 3);
        assert_eq!(
            report.restore,
            Some(RestorePoint {
                task: TaskId(7),
                interrupted: 1,
                from: 1
            })
        );
        assert_eq!(report.queued, 6);
        assert_eq!(report.rerun, 3);
        // Kernel 0 ran from 2 to 102 µs, then three evictions of 2 µs each;
        // the flag was set at 50 µs.
        assert_eq!(report.latency_ns, 108 * US - 50 * US);
        assert_eq!(d.ctl_state(q.ctl()), Some((false, 1)), "flag cleared");
        assert_eq!(q.state(), QueueState::Preempted);
        // Nothing is issued while preempted.
        let n = d.call_count();
        q.poll(&mut d, &mut done).unwrap();
        d.advance(1_000 * US);
        q.poll(&mut d, &mut done).unwrap();
        assert!(
            d.calls()[n..]
                .iter()
                .all(|c| !matches!(c, Call::Launch { .. }))
        );
        assert_eq!(q.restore().unwrap(), 3);
        run_to_idle(&mut d, &mut q, &mut done);
        assert_eq!(done, [TaskId(7)]);
        let completed: Vec<u32> = kernel_log(&d)
            .into_iter()
            .filter(|&(_, _, o)| o == KernelOutcome::Completed)
            .map(|(tag, _, _)| tag)
            .collect();
        assert_eq!(completed, (0..10).collect::<Vec<_>>(), "each kernel once");
    }

    #[test]
    fn cooperative_kill_stops_a_running_kernel_at_its_next_poll_point() {
        let mut d = FakeDriver::default();
        let long = d.kernel_handle("long", FakeKernel::new(10_000 * US).polling(40 * US));
        let mut q = queue(&mut d, 4, KillMechanism::Cooperative);
        let p = Program::each_idempotent(TaskId(1), (0..3).map(|i| kernel_cmd(long, i)).collect())
            .unwrap();
        q.submit(&p);
        let mut done = Vec::new();
        q.poll(&mut d, &mut done).unwrap();
        d.advance(1_000 * US);
        let report = q.preempt(&mut d, &mut done).unwrap();
        // Started at 2 µs; flag at 1000 µs; next poll point 1002 µs; the two
        // behind it return at entry 2 µs each.
        assert_eq!(report.latency_ns, 6 * US);
        let log = kernel_log(&d);
        assert_eq!(log[0].2, KernelOutcome::KilledAtPoll);
        assert_eq!(log[1].2, KernelOutcome::EvictedAtEntry);
        assert_eq!(
            report.restore,
            Some(RestorePoint {
                task: TaskId(1),
                interrupted: 0,
                from: 0
            })
        );
        assert_eq!((report.completed, report.not_completed), (0, 3));
        q.restore().unwrap();
        run_to_idle(&mut d, &mut q, &mut done);
        assert_eq!(done, [TaskId(1)]);
    }

    #[test]
    fn cooperative_kill_waits_for_a_kernel_without_poll_points_and_trap_does_not() {
        for trap in [false, true] {
            let mut d = FakeDriver::default();
            let k = d.kernel_handle("plain", FakeKernel::new(10_000 * US));
            let kill = if trap {
                KillMechanism::Trap(Box::new(d.trap()))
            } else {
                KillMechanism::Cooperative
            };
            let mut q = queue(&mut d, 4, kill);
            let p = Program::each_idempotent(TaskId(1), vec![kernel_cmd(k, 0), kernel_cmd(k, 1)])
                .unwrap();
            q.submit(&p);
            let mut done = Vec::new();
            q.poll(&mut d, &mut done).unwrap();
            d.advance(1_000 * US);
            let report = q.preempt(&mut d, &mut done).unwrap();
            let log = kernel_log(&d);
            if trap {
                // REEF's trap kill latency on a GV100 is about 15 µs.
                assert_eq!(report.latency_ns, 15 * US + 2 * US);
                assert_eq!(log[0].2, KernelOutcome::KilledByTrap);
                assert_eq!(report.kill, "trap");
                assert!(d.calls().contains(&Call::Trap(q.stream())));
            } else {
                assert_eq!(report.latency_ns, 9_002 * US + 2 * US);
                assert_eq!(log[0].2, KernelOutcome::Completed);
            }
            // Either way kernel 0 may have been cut short: it is re-run.
            assert_eq!(report.restore.unwrap().interrupted, 0);
            assert_eq!(q.restore().unwrap(), 2);
            run_to_idle(&mut d, &mut q, &mut done);
            assert_eq!(done, [TaskId(1)]);
        }
    }

    #[test]
    fn completions_seen_before_the_flag_and_the_execution_index_both_count() {
        let mut d = FakeDriver::default();
        let k = d.kernel_handle("k", FakeKernel::new(10 * US).polling(US));
        let mut q = queue(&mut d, 4, KillMechanism::Cooperative);
        let p = Program::each_idempotent(TaskId(3), (0..8).map(|i| kernel_cmd(k, i)).collect())
            .unwrap();
        q.submit(&p);
        let mut done = Vec::new();
        q.poll(&mut d, &mut done).unwrap(); // kernels 0..4 issued
        // 0 ends at 12, 1 at 22, 2 runs 22..32: at 25 µs, without polling
        // in between, kernels 0 and 1 are known complete through `started`.
        d.advance(25 * US);
        let report = q.preempt(&mut d, &mut done).unwrap();
        assert_eq!(report.started, 3);
        assert_eq!((report.completed, report.not_completed), (2, 2));
        assert_eq!(report.restore.unwrap().interrupted, 2);
        q.restore().unwrap();
        run_to_idle(&mut d, &mut q, &mut done);
        assert_eq!(done, [TaskId(3)]);
        let full: Vec<u32> = kernel_log(&d)
            .into_iter()
            .filter(|&(_, _, o)| o == KernelOutcome::Completed)
            .map(|(t, _, _)| t)
            .collect();
        assert_eq!(full, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn special_commands_wait_for_outstanding_kernels_and_are_never_dropped() {
        let mut d = FakeDriver::default();
        let k = d.kernel_handle("k", FakeKernel::new(20 * US).polling(5 * US));
        let host = d.alloc_host(4096).unwrap();
        let dev = d.alloc_device(4096).unwrap();
        d.write_host(host, 0, &[9; 4096]).unwrap();
        let mut q = queue(&mut d, 4, KillMechanism::Cooperative);
        let cmds = vec![
            kernel_cmd(k, 0),
            kernel_cmd(k, 1),
            Command::CopyToDevice {
                dst: dev,
                src: host,
                src_offset: 0,
                len: 4096,
            },
            kernel_cmd(k, 2),
            Command::Memset {
                dst: dev,
                value: 1,
                len: 16,
            },
        ];
        let p = Program::each_idempotent(TaskId(5), cmds).unwrap();
        q.submit(&p);
        let mut done = Vec::new();
        q.poll(&mut d, &mut done).unwrap();
        // Two kernels issued; the copy is held behind them.
        assert_eq!(q.outstanding(), 2);
        assert!(
            !d.calls()
                .iter()
                .any(|c| matches!(c, Call::Special(_, "copy_to_device")))
        );
        // Kernels end at 22 and 42 µs; poll just after: the copy goes out,
        // and kernel 2 right behind it.
        d.advance_to(43 * US);
        q.poll(&mut d, &mut done).unwrap();
        assert_eq!(q.outstanding(), 2);
        // Preempt while the copy (5 + 4·0.1 µs) is still on the stream.
        d.advance(US);
        let report = q.preempt(&mut d, &mut done).unwrap();
        let log = d.log();
        let copies: Vec<&LogEntry> = log
            .iter()
            .filter(|l| matches!(l.what, Executed::CopyToDevice { .. }))
            .collect();
        assert_eq!(copies.len(), 1, "the issued copy ran");
        assert!(copies[0].start_ns >= 42 * US, "after kernel 1 ended");
        assert_eq!(report.completed, 1, "the copy is known complete");
        assert_eq!(report.restore.unwrap().interrupted, 3);
        let mut b = [0; 4];
        d.read_device(dev, &mut b).unwrap();
        assert_eq!(b, [9; 4]);
        q.restore().unwrap();
        run_to_idle(&mut d, &mut q, &mut done);
        assert_eq!(done, [TaskId(5)]);
        let log = d.log();
        assert_eq!(
            log.iter()
                .filter(|l| matches!(l.what, Executed::CopyToDevice { .. }))
                .count(),
            1,
            "restore does not repeat a completed copy"
        );
        let memset = log
            .iter()
            .find(|l| matches!(l.what, Executed::Memset { .. }))
            .unwrap();
        let k2_end = log
            .iter()
            .filter(|l| {
                matches!(&l.what, Executed::Kernel { outcome: KernelOutcome::Completed, user_args, .. }
                    if user_args[0..4] == 2u32.to_ne_bytes())
            })
            .map(|l| l.end_ns)
            .max()
            .unwrap();
        assert!(
            memset.start_ns >= k2_end,
            "memset held until kernel 2 ended"
        );
        d.read_device(dev, &mut b).unwrap();
        assert_eq!(b, [1; 4]);
    }

    /// 0 upload x; 1 y = f(x); 2 y = g(y) in place (not idempotent alone,
    /// group {1, 2}); 3 z = h(y).
    fn in_place_ops() -> Vec<Op> {
        vec![
            Op::Upload(0, 5),
            Op::Kernel {
                a: 0,
                b: None,
                out: 1,
                dur: 20,
            },
            Op::Kernel {
                a: 1,
                b: None,
                out: 1,
                dur: 400,
            },
            Op::Kernel {
                a: 1,
                b: None,
                out: 2,
                dur: 20,
            },
        ]
    }

    #[test]
    fn restore_goes_back_to_the_group_start() {
        // Commands: 0 upload x; 1 y = f(x); 2 y = g(y) in place (not
        // idempotent alone, group {1, 2}); 3 z = h(y).
        let mut m = Machine::new(&[20, 400]);
        let ops = in_place_ops();
        let p = m.program(TaskId(1), &ops);
        assert_eq!(p.group_start, [0, 1, 1, 3]);
        let mut q = queue(&mut m.d, 4, KillMechanism::Cooperative);
        q.submit(&p);
        let mut done = Vec::new();
        // One poll issues everything: upload 2..7.1 µs, kernel 1 7.1..27.1,
        // kernel 2 27.1..427.1, then kernel 3.
        q.poll(&mut m.d, &mut done).unwrap();
        for _ in 0..3 {
            m.d.advance(10 * US);
            q.poll(&mut m.d, &mut done).unwrap();
        }
        assert_eq!(
            q.outstanding_kernels(),
            2,
            "kernel 1 seen done; 2 running, 3 waiting"
        );
        m.d.advance(100 * US);
        let report = q.preempt(&mut m.d, &mut done).unwrap();
        assert_eq!(
            report.restore,
            Some(RestorePoint {
                task: TaskId(1),
                interrupted: 2,
                from: 1
            })
        );
        assert_eq!(report.rerun, 3, "commands 1, 2, 3");
        assert!(
            kernel_outcomes(&m.d).contains(&KernelOutcome::KilledAtPoll),
            "kernel 2 was cut short and poisoned y"
        );
        q.restore().unwrap();
        run_to_idle(&mut m.d, &mut q, &mut done);
        assert_eq!(done, [TaskId(1)]);
        assert_eq!(m.memory(), Machine::reference(&[20, 400], &ops));
    }

    #[test]
    fn an_interrupted_kernel_that_never_started_restarts_at_itself() {
        // As above, but kernels without poll points under
        // KillMechanism::None: kernel 1 runs to its end, the in-place kernel
        // 2 returns at entry, so nothing was cut short and restore need not
        // go back to its group start.
        let ops = vec![
            Op::Upload(0, 5),
            Op::Kernel {
                a: 0,
                b: None,
                out: 1,
                dur: 20,
            },
            Op::Kernel {
                a: 1,
                b: None,
                out: 1,
                dur: 400,
            },
        ];
        let mut m = Machine::with_polling(&[20, 400], false);
        let p = m.program(TaskId(1), &ops);
        assert_eq!(p.group_start, [0, 1, 1]);
        let mut q = queue(&mut m.d, 4, KillMechanism::None);
        q.submit(&p);
        let mut done = Vec::new();
        q.poll(&mut m.d, &mut done).unwrap();
        m.d.advance(15 * US); // kernel 1 runs 7.1..27.1 µs
        let report = q.preempt(&mut m.d, &mut done).unwrap();
        assert_eq!(report.started, 1);
        assert_eq!(
            report.restore,
            Some(RestorePoint {
                task: TaskId(1),
                interrupted: 2,
                from: 2
            })
        );
        assert_eq!(report.rerun, 1);
        q.restore().unwrap();
        run_to_idle(&mut m.d, &mut q, &mut done);
        assert_eq!(done, [TaskId(1)]);
        assert_eq!(m.memory(), Machine::reference(&[20, 400], &ops));
    }

    #[test]
    fn restoring_only_the_interrupted_kernel_would_be_wrong() {
        // The same scenario with every command claimed idempotent alone:
        // the in-place kernel re-runs on its own poisoned output. The
        // memory check of `restore_goes_back_to_the_group_start` would
        // catch a queue that ignored group starts.
        let mut m = Machine::new(&[20, 400]);
        let ops = in_place_ops();
        let cmds = m.commands(&ops);
        let p = Program::each_idempotent(TaskId(1), cmds).unwrap();
        let mut q = queue(&mut m.d, 4, KillMechanism::Cooperative);
        q.submit(&p);
        let mut done = Vec::new();
        q.poll(&mut m.d, &mut done).unwrap();
        for _ in 0..3 {
            m.d.advance(10 * US);
            q.poll(&mut m.d, &mut done).unwrap();
        }
        m.d.advance(100 * US);
        q.preempt(&mut m.d, &mut done).unwrap();
        q.restore().unwrap();
        run_to_idle(&mut m.d, &mut q, &mut done);
        assert_ne!(m.memory(), Machine::reference(&[20, 400], &ops));
    }

    #[test]
    fn execution_index_starts_again_from_zero_at_the_limit() {
        let mut d = FakeDriver::default();
        let k = d.kernel_handle("k", FakeKernel::new(10 * US).polling(2 * US));
        let mut q = VirtualQueue::new(
            &mut d,
            StreamPriority::BestEffort,
            QueueConfig {
                cap: 3,
                kidx_limit: 4,
                ..QueueConfig::default()
            },
            KillMechanism::Cooperative,
        )
        .unwrap();
        let p = Program::each_idempotent(TaskId(1), (0..12).map(|i| kernel_cmd(k, i)).collect())
            .unwrap();
        q.submit(&p);
        let mut done = Vec::new();
        q.poll(&mut d, &mut done).unwrap();
        // Run into the second epoch, then preempt.
        for _ in 0..8 {
            d.advance(10 * US);
            q.poll(&mut d, &mut done).unwrap();
        }
        assert_eq!(q.stats().kidx_rollovers, 1);
        let report = q.preempt(&mut d, &mut done).unwrap();
        let interrupted = report.restore.unwrap().interrupted;
        assert!(report.started <= 5, "started = {}", report.started);
        q.restore().unwrap();
        run_to_idle(&mut d, &mut q, &mut done);
        assert_eq!(done, [TaskId(1)]);
        let log = kernel_log(&d);
        assert!(log.iter().all(|&(_, kidx, _)| kidx <= 4));
        // Everything before the restore point completed exactly once, and
        // every kernel completed at least once.
        for tag in 0..12 {
            let n = log
                .iter()
                .filter(|&&(t, _, o)| t == tag && o == KernelOutcome::Completed)
                .count();
            if tag < interrupted {
                assert_eq!(n, 1, "kernel {tag}");
            } else {
                assert!(n >= 1, "kernel {tag}");
            }
        }
        assert!(d.calls().contains(&Call::ResetStarted(q.ctl())));
    }

    #[test]
    fn discard_swaps_the_queue_out_and_reclaim_frees_it_later() {
        let mut d = FakeDriver::default();
        let k = d.kernel_handle("k", FakeKernel::new(10 * US));
        let mut q = queue(&mut d, 2, KillMechanism::Cooperative);
        let p = Program::each_idempotent(TaskId(1), (0..50).map(|i| kernel_cmd(k, i)).collect())
            .unwrap();
        q.submit(&p);
        let mut done = Vec::new();
        q.poll(&mut d, &mut done).unwrap();
        let n = d.call_count();
        assert_eq!(q.discard(), 48);
        assert_eq!(d.call_count(), n, "no driver call");
        assert_eq!(q.reclaimable(), 48);
        run_to_idle(&mut d, &mut q, &mut done);
        assert!(done.is_empty(), "a discarded task never completes");
        assert_eq!(q.reclaim(), 48);
        assert_eq!(q.reclaimable(), 0);
    }

    #[test]
    fn discard_while_draining_also_drops_the_re_runs() {
        let mut d = FakeDriver::default();
        let k = d.kernel_handle("k", FakeKernel::new(10 * US).polling(US));
        let mut q = queue(&mut d, 4, KillMechanism::Cooperative);
        let p = Program::each_idempotent(TaskId(1), (0..10).map(|i| kernel_cmd(k, i)).collect())
            .unwrap();
        q.submit(&p);
        let mut done = Vec::new();
        q.poll(&mut d, &mut done).unwrap();
        d.advance(5 * US);
        q.begin_preempt(&mut d).unwrap();
        assert_eq!(q.discard(), 6);
        let report = drain(&mut d, &mut q, &mut done);
        assert_eq!(report.rerun, 4, "reported, but not kept");
        assert_eq!(q.restore().unwrap(), 0);
        run_to_idle(&mut d, &mut q, &mut done);
        assert!(done.is_empty());
        assert_eq!(q.reclaim(), 10);
    }

    #[test]
    fn state_errors_name_the_state() {
        let mut d = FakeDriver::default();
        let mut q = queue(&mut d, 4, KillMechanism::Cooperative);
        let e = q.restore().unwrap_err();
        assert_eq!(e.state, QueueState::Running);
        assert!(e.to_string().contains("not Preempted"), "{e}");
        let mut done = Vec::new();
        q.preempt(&mut d, &mut done).unwrap();
        let e = q.begin_preempt(&mut d).unwrap_err();
        assert!(e.to_string().contains("is Preempted, not Running"), "{e}");
        assert_eq!(q.restore().unwrap(), 0);
    }

    #[test]
    fn program_checks_group_starts_and_parameter_size() {
        let k = KernelHandle(0);
        assert_eq!(
            Program::new(TaskId(1), vec![], vec![]).unwrap_err(),
            ProgramError::Empty(TaskId(1))
        );
        let e = Program::new(
            TaskId(1),
            vec![kernel_cmd(k, 0), kernel_cmd(k, 1)],
            vec![0, 2],
        )
        .unwrap_err();
        assert_eq!(
            e,
            ProgramError::GroupStartAfter {
                task: TaskId(1),
                index: 1,
                start: 2
            }
        );
        assert!(e.to_string().contains("must be <= 1"), "{e}");
        assert!(matches!(
            Program::new(TaskId(1), vec![kernel_cmd(k, 0)], vec![]),
            Err(ProgramError::GroupStartsLen { .. })
        ));
        let mut args = KernelArgs::new();
        for _ in 0..600 {
            args.u64(0);
        }
        let big = Command::Kernel {
            kernel: k,
            dims: LaunchDims::linear(1, 1),
            args,
        };
        assert!(matches!(
            Program::each_idempotent(TaskId(1), vec![big]),
            Err(ProgramError::ParamsTooLarge { index: 0, .. })
        ));
    }

    // ---- a tiny machine: buffers of one u64 each, kernels that mix them ----

    /// Value a killed kernel leaves in its output (a killed kernel may have
    /// written any part of its outputs).
    const POISON: u64 = 0xdead_dead_dead_dead;

    #[derive(Debug, Clone)]
    enum Op {
        /// Upload a constant into buffer `.0` (a special command).
        Upload(usize, u64),
        /// `out = mix(a, b)`; in place when `out` is `a` or `b`.
        Kernel {
            a: usize,
            b: Option<usize>,
            out: usize,
            dur: u64,
        },
    }

    fn mix(a: u64, b: u64, salt: u64) -> u64 {
        (a ^ b.rotate_left(17))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(salt)
    }

    fn kernel_outcomes(d: &FakeDriver) -> Vec<KernelOutcome> {
        d.log()
            .into_iter()
            .filter_map(|l| match l.what {
                Executed::Kernel { outcome, .. } => Some(outcome),
                _ => None,
            })
            .collect()
    }

    const BUFFERS: usize = 4;

    /// A fake device with `BUFFERS` one-word buffers and one `mix` kernel per
    /// duration (in µs), polling every 7 µs or not at all.
    struct Machine {
        d: FakeDriver,
        bufs: Vec<DevicePtr>,
        host: HostBufId,
        durations: Vec<u64>,
        kernels: Vec<KernelHandle>,
        polling: bool,
    }

    impl Machine {
        fn new(durations_us: &[u64]) -> Self {
            Self::with_polling(durations_us, true)
        }

        fn with_polling(durations_us: &[u64], polling: bool) -> Self {
            let mut d = FakeDriver::new(FakeTimings::default());
            let bufs = (0..BUFFERS).map(|_| d.alloc_device(8).unwrap()).collect();
            let host = d.alloc_host(8 * 256).unwrap();
            let mut kernels = Vec::new();
            for &dur in durations_us {
                let mut k = FakeKernel::new(dur * US).with_effect(|mem, args, run| {
                    // User args: [kidx pad..] a@4, b@12, out@20, salt@28
                    // (offsets relative to the end of the 12-byte prologue).
                    let word = |at: usize| u64::from_ne_bytes(args[at..at + 8].try_into().unwrap());
                    let (a, b, out, salt) = (word(4), word(12), word(20), word(28));
                    let v = match run {
                        Run::Full => {
                            let bv = if b == 0 {
                                0
                            } else {
                                mem.load_u64(DevicePtr(b))
                            };
                            mix(mem.load_u64(DevicePtr(a)), bv, salt)
                        }
                        Run::Partial => POISON ^ salt,
                    };
                    mem.store_u64(DevicePtr(out), v);
                });
                if polling {
                    k = k.polling(7 * US);
                }
                kernels.push(d.kernel_handle(&format!("mix{dur}"), k));
            }
            Self {
                d,
                bufs,
                host,
                durations: durations_us.to_vec(),
                kernels,
                polling,
            }
        }

        fn commands(&mut self, ops: &[Op]) -> Vec<Command> {
            ops.iter()
                .enumerate()
                .map(|(i, op)| match *op {
                    Op::Upload(buf, v) => {
                        self.d
                            .write_host(self.host, 8 * i, &v.to_ne_bytes())
                            .unwrap();
                        Command::CopyToDevice {
                            dst: self.bufs[buf],
                            src: self.host,
                            src_offset: 8 * i,
                            len: 8,
                        }
                    }
                    Op::Kernel { a, b, out, dur } => {
                        let mut args = KernelArgs::new();
                        args.ptr(self.bufs[a])
                            .ptr(b.map_or(DevicePtr::NULL, |b| self.bufs[b]))
                            .ptr(self.bufs[out])
                            .u64(i as u64);
                        let k = self.durations.iter().position(|&d| d == dur).unwrap();
                        Command::Kernel {
                            kernel: self.kernels[k],
                            dims: LaunchDims::linear(1, 32),
                            args,
                        }
                    }
                })
                .collect()
        }

        fn access(ops: &[Op]) -> Vec<KernelAccess> {
            let r = |b: usize| ByteRange::new(8 * b as u64, 8 * b as u64 + 8);
            ops.iter()
                .map(|op| match *op {
                    Op::Upload(buf, _) => KernelAccess {
                        reads: vec![],
                        writes: vec![r(buf)],
                    },
                    Op::Kernel { a, b, out, .. } => KernelAccess {
                        reads: std::iter::once(r(a)).chain(b.map(r)).collect(),
                        writes: vec![r(out)],
                    },
                })
                .collect()
        }

        /// The task with group starts from `idempotent::minimal_groups`.
        fn program(&mut self, task: TaskId, ops: &[Op]) -> Arc<Program> {
            let groups = minimal_groups(&Self::access(ops)).expect("uploads come first");
            let cmds = self.commands(ops);
            Program::new(task, cmds, groups.into_iter().map(|g| g as u32).collect()).unwrap()
        }

        fn memory(&self) -> Vec<u64> {
            self.bufs
                .iter()
                .map(|&b| {
                    let mut v = [0; 8];
                    self.d.read_device(b, &mut v).unwrap();
                    u64::from_ne_bytes(v)
                })
                .collect()
        }

        /// The memory after running `ops` once without preemption.
        fn reference(durations_us: &[u64], ops: &[Op]) -> Vec<u64> {
            let mut m = Machine::new(durations_us);
            let p = m.program(TaskId(0), ops);
            let mut q = queue(&mut m.d, 4, KillMechanism::Cooperative);
            q.submit(&p);
            let mut done = Vec::new();
            run_to_idle(&mut m.d, &mut q, &mut done);
            assert_eq!(done, [TaskId(0)]);
            assert!(
                kernel_outcomes(&m.d)
                    .iter()
                    .all(|&o| o == KernelOutcome::Completed)
            );
            m.memory()
        }
    }

    const DURS: [u64; 3] = [20, 60, 300];

    fn arb_ops() -> impl proptest::strategy::Strategy<Value = Vec<Op>> {
        use proptest::prelude::*;
        let kernel = (
            0..BUFFERS,
            proptest::option::of(0..BUFFERS),
            0..BUFFERS,
            0..DURS.len(),
        )
            .prop_map(|(a, b, out, d)| Op::Kernel {
                a,
                b,
                out,
                dur: DURS[d],
            });
        (
            proptest::collection::vec(any::<u64>(), BUFFERS),
            proptest::collection::vec(kernel, 1..24),
        )
            .prop_map(|(init, kernels)| {
                init.into_iter()
                    .enumerate()
                    .map(|(b, v)| Op::Upload(b, v))
                    .chain(kernels)
                    .collect()
            })
    }

    /// One step of a random queue workload.
    #[derive(Debug, Clone)]
    enum Step {
        /// Submit a task of `kernels` kernels with a copy before kernel
        /// `copy_at` (if in range).
        Submit { kernels: usize, copy_at: usize },
        /// Let virtual time run.
        Advance(u64),
        /// Poll the queue.
        Poll,
        /// Begin a preemption (if running).
        Preempt,
        /// Restore (if preempted).
        Restore,
        /// Discard everything not on the stream.
        Discard,
    }

    fn arb_steps() -> impl proptest::strategy::Strategy<Value = Vec<Step>> {
        use proptest::prelude::*;
        let step = prop_oneof![
            3 => (1usize..12, 0usize..16).prop_map(|(kernels, copy_at)| Step::Submit { kernels, copy_at }),
            6 => (0u64..120).prop_map(|us| Step::Advance(us * US)),
            6 => Just(Step::Poll),
            2 => Just(Step::Preempt),
            2 => Just(Step::Restore),
            1 => Just(Step::Discard),
        ];
        proptest::collection::vec(step, 1..80)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

        /// Whatever the sequence of submissions, completions, preemptions,
        /// restores and discards, the queue never has more than `cap`
        /// kernels outstanding, and the fake device never holds more than
        /// `cap` kernels of the stream; every task not discarded completes
        /// exactly once, in submission order.
        #[test]
        fn cap_is_never_exceeded(
            cap in 1usize..6,
            kill in 0u8..3,
            steps in arb_steps(),
        ) {
            let mut d = FakeDriver::default();
            // Kernels poll only under Cooperative (under None they must not;
            // under Trap the trap kills them).
            let polling = kill == 1;
            let mut kernel = |name: &str, dur: u64| {
                let k = FakeKernel::new(dur);
                d.kernel_handle(name, if polling { k.polling(5 * US) } else { k })
            };
            let short = kernel("short", 8 * US);
            let long = kernel("long", 90 * US);
            let host = d.alloc_host(64).unwrap();
            let dev = d.alloc_device(64).unwrap();
            let kill = match kill {
                0 => KillMechanism::None,
                1 => KillMechanism::Cooperative,
                _ => KillMechanism::Trap(Box::new(d.trap())),
            };
            let mut q = queue(&mut d, cap, kill);
            let mut done = Vec::new();
            let mut submitted = 0u64;
            let mut discarded = false;
            for step in steps {
                match step {
                    Step::Submit { kernels, copy_at } => {
                        let mut cmds = Vec::new();
                        for i in 0..kernels {
                            if i == copy_at {
                                cmds.push(Command::CopyToDevice { dst: dev, src: host, src_offset: 0, len: 64 });
                            }
                            cmds.push(kernel_cmd(if i % 3 == 2 { long } else { short }, i as u32));
                        }
                        let p = Program::each_idempotent(TaskId(submitted), cmds).unwrap();
                        submitted += 1;
                        q.submit(&p);
                    }
                    Step::Advance(ns) => d.advance(ns),
                    Step::Poll => {
                        q.poll(&mut d, &mut done).unwrap();
                    }
                    Step::Preempt => {
                        if q.state() == QueueState::Running {
                            q.begin_preempt(&mut d).unwrap();
                        }
                    }
                    Step::Restore => {
                        if q.state() == QueueState::Preempted {
                            q.restore().unwrap();
                        }
                    }
                    Step::Discard => {
                        q.discard();
                        discarded = true;
                    }
                }
                proptest::prop_assert!(q.outstanding_kernels() <= cap);
                proptest::prop_assert!(d.kernels_in_stream(q.stream()) <= cap);
            }
            if q.state() == QueueState::Draining {
                drain(&mut d, &mut q, &mut done);
            }
            if q.state() == QueueState::Preempted {
                q.restore().unwrap();
            }
            run_to_idle(&mut d, &mut q, &mut done);
            proptest::prop_assert!(d.max_kernels_in_stream(q.stream()) <= cap);
            proptest::prop_assert!(q.stats().max_outstanding <= cap);
            proptest::prop_assert!(done.windows(2).all(|w| w[0] < w[1]), "{done:?}");
            if !discarded {
                proptest::prop_assert_eq!(done, (0..submitted).map(TaskId).collect::<Vec<_>>());
            }
        }

        /// Preempting at random times (by flag and poll points, by trap, or
        /// by waiting for kernels without poll points) and restoring from the
        /// idempotent group start leaves device memory exactly as one
        /// uninterrupted run does, although killed kernels leave garbage in
        /// their outputs: every kernel completes exactly once in effect.
        #[test]
        fn resume_after_preemption_is_exactly_once_in_effect(
            ops in arb_ops(),
            kill in 0u8..3,
            cap in 1usize..6,
            preempt_after_us in proptest::collection::vec((0u64..400, 0u64..200), 0..4),
        ) {
            let expected = Machine::reference(&DURS, &ops);
            // Kernels poll only under Cooperative: under Trap the trap must
            // do the killing, under None nothing may.
            let mut m = Machine::with_polling(&DURS, kill == 1);
            let p = m.program(TaskId(1), &ops);
            let kill = match kill {
                0 => KillMechanism::None,
                1 => KillMechanism::Cooperative,
                _ => KillMechanism::Trap(Box::new(m.d.trap())),
            };
            let mut q = queue(&mut m.d, cap, kill);
            q.submit(&p);
            let mut done = Vec::new();
            for (run_us, pause_us) in preempt_after_us {
                let until = m.d.now_ns() + run_us * US;
                while m.d.now_ns() < until && !q.is_idle() {
                    q.poll(&mut m.d, &mut done).unwrap();
                    m.d.wait_for_progress();
                }
                if q.is_idle() {
                    break;
                }
                let report = q.preempt(&mut m.d, &mut done).unwrap();
                if let Some(r) = report.restore {
                    proptest::prop_assert!(
                        r.from == r.interrupted || r.from == p.group_start(r.interrupted),
                        "{r:?}"
                    );
                }
                m.d.advance(pause_us * US);
                q.restore().unwrap();
            }
            run_to_idle(&mut m.d, &mut q, &mut done);
            proptest::prop_assert_eq!(done, vec![TaskId(1)]);
            proptest::prop_assert_eq!(m.memory(), expected);
            if !m.polling {
                proptest::prop_assert!(
                    kernel_outcomes(&m.d).iter().all(|&o| o != KernelOutcome::KilledAtPoll)
                );
            }
        }
    }
}
