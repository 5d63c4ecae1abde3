//! Runs a model builder's [`Plan`] on any [`CuDriver`]: the real GPU
//! (`real::CudaDriver`, feature `cuda`) or the fake device
//! ([`FakeDriver`](super::fake::FakeDriver), with [`fake_abi`]'s kernels).
//!
//! [`DeviceModel::load`]:
//!
//! 1. validates the plan and checks the weights against it;
//! 2. allocates one device arena of [`Plan::arena_bytes`] (every buffer at
//!    its plan offset) and pinned host buffers for the input and output;
//! 3. fills the arena with `0xFF` bytes (every f32 a NaN, as
//!    [`CpuExec`](sluice_nn::builders::CpuExec) starts its activations, so a
//!    step that reads what no step wrote poisons the output), then uploads
//!    the weights through a pinned staging buffer of at most
//!    [`LoadOptions::staging_bytes`], refilled once the copies from it have
//!    completed;
//! 4. turns every step into a [`Command::Kernel`]: the kernel of the
//!    [`KernelLibrary`], the launch configuration of the step, and a
//!    [`KernelArgs`] built by [`kernel_args`] from the step's typed
//!    arguments in ABI order (a tensor is `arena + buffer offset + element
//!    offset · 4`, an absent optional tensor a null pointer).
//!
//! One inference is one [`Program`]: copy the input in, every kernel, copy
//! the output out. It runs through a [`VirtualQueue`], which fills each
//! launch's prologue (`write_prologue`: the queue's control block and the
//! kernel's execution index) and so can preempt the model between or inside
//! kernels and restore it ([`DeviceModel::submit`]); every kernel of the
//! library is idempotent alone (no kernel writes what it reads), so each
//! command is its own restore group.
//!
//! The kernels come from PTX images ([`KernelLibrary::from_ptx`]: each
//! image is loaded and searched for the kernels' `.entry` names) or from one
//! module that has them all ([`KernelLibrary::from_module`], which is how
//! the fake driver's defined kernels are found).
//!
//! [`fake_abi`] defines the ABI kernels on a
//! [`FakeDriver`](super::fake::FakeDriver): each one reads its arguments at
//! the offsets the compiled kernel would (from the kernel's C signature in
//! `daemon/cuda/kernels/*.cu`) and runs the matching [`sluice_nn::reference`]
//! function on fake device memory, so a fake run equals
//! [`run_cpu`](sluice_nn::builders::run_cpu) bit for bit when the
//! marshalling, offsets and order are right.

use super::driver::{
    CuDriver, DevicePtr, DriverError, HostBufId, KernelArgs, KernelHandle, LaunchDims, ModuleId,
};
use super::gpu::SYNTHETIC_KERNEL;
use super::kernels::ptx_has_entry;
use super::queue::{Command, Program, ProgramError, QueueError, TaskId, VirtualQueue};
use sluice_nn::builders::{Arg, ArgError, BufId, Kernel, Plan, PlanError, Role, Weights};

/// Default [`LoadOptions::staging_bytes`]: 64 MiB of pinned memory.
pub const DEFAULT_STAGING_BYTES: usize = 64 << 20;

/// Default [`LoadOptions::timeout_ns`]: 120 s of driver time.
pub const DEFAULT_TIMEOUT_NS: u64 = 120_000_000_000;

/// Byte the arena is filled with before the weights are uploaded: every
/// f32 of an unwritten activation reads as a NaN (`0xFFFF_FFFF`).
pub const POISON_BYTE: u8 = 0xFF;

/// The ABI kernels a plan can launch, in the kernel table's order.
pub const PLAN_KERNELS: [Kernel; 16] = [
    Kernel::Gemm,
    Kernel::Conv2d,
    Kernel::Pool2d,
    Kernel::GlobalAvgPool,
    Kernel::Eltwise,
    Kernel::Softmax,
    Kernel::Layernorm,
    Kernel::Attention,
    Kernel::Elementwise,
    Kernel::Gather,
    Kernel::Bmm,
    Kernel::Embedding,
    Kernel::Conv2dEx,
    Kernel::Pool2dEx,
    Kernel::Lrn,
    Kernel::Interp,
];

fn kernel_index(k: Kernel) -> usize {
    PLAN_KERNELS
        .iter()
        .position(|&p| p == k)
        .expect("PLAN_KERNELS lists every Kernel")
}

// ---- the kernel library ----

/// Loading the kernel library failed.
#[derive(Debug, thiserror::Error)]
pub enum LibraryError {
    /// `cuModuleLoadData` refused an image.
    #[error("loading PTX image {index} of {count}")]
    Load {
        /// Which image (0-based).
        index: usize,
        /// Images given.
        count: usize,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// Looking a kernel up in its module failed.
    #[error("looking up kernel `{kernel}` in {module}")]
    Lookup {
        /// The kernel's `extern "C"` name.
        kernel: &'static str,
        /// The module.
        module: ModuleId,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
}

/// The ABI kernels, loaded: a [`KernelHandle`] per [`Kernel`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelLibrary {
    handles: [Option<KernelHandle>; PLAN_KERNELS.len()],
    /// The synthetic kernel (`gpu::SYNTHETIC_KERNEL`), if an image has it.
    synthetic: Option<KernelHandle>,
}

impl KernelLibrary {
    /// Loads every image (PTX text, e.g. `kernels::compile_ptx`'s modules)
    /// and looks up each ABI kernel in the first image that declares its
    /// `.entry`. Kernels no image declares stay absent;
    /// [`DeviceModel::load`] names any its plan needs.
    pub fn from_ptx(drv: &mut dyn CuDriver, images: &[&str]) -> Result<Self, LibraryError> {
        let mut lib = Self::default();
        for (index, image) in images.iter().enumerate() {
            let module = drv
                .load_module(image)
                .map_err(|source| LibraryError::Load {
                    index,
                    count: images.len(),
                    source,
                })?;
            if lib.synthetic.is_none() && ptx_has_entry(image, SYNTHETIC_KERNEL) {
                lib.synthetic = Some(drv.kernel(module, SYNTHETIC_KERNEL).map_err(|source| {
                    LibraryError::Lookup {
                        kernel: SYNTHETIC_KERNEL,
                        module,
                        source,
                    }
                })?);
            }
            for k in PLAN_KERNELS {
                let slot = &mut lib.handles[kernel_index(k)];
                if slot.is_none() && ptx_has_entry(image, k.abi_name()) {
                    *slot = Some(drv.kernel(module, k.abi_name()).map_err(|source| {
                        LibraryError::Lookup {
                            kernel: k.abi_name(),
                            module,
                            source,
                        }
                    })?);
                }
            }
        }
        Ok(lib)
    }

    /// Looks up every ABI kernel in `module`, which must define them all
    /// (the fake driver finds every kernel defined on it in any module).
    pub fn from_module(drv: &mut dyn CuDriver, module: ModuleId) -> Result<Self, LibraryError> {
        let mut lib = Self::default();
        for k in PLAN_KERNELS {
            let h = drv
                .kernel(module, k.abi_name())
                .map_err(|source| LibraryError::Lookup {
                    kernel: k.abi_name(),
                    module,
                    source,
                })?;
            lib.handles[kernel_index(k)] = Some(h);
        }
        Ok(lib)
    }

    /// The handle of `kernel`, if loaded.
    pub fn get(&self, kernel: Kernel) -> Option<KernelHandle> {
        self.handles[kernel_index(kernel)]
    }

    /// The synthetic kernel's handle ([`SYNTHETIC_KERNEL`], which
    /// [`CudaGpu`](super::gpu::CudaGpu) runs for policy launches without
    /// real work), if an image of [`KernelLibrary::from_ptx`] had it.
    pub fn synthetic(&self) -> Option<KernelHandle> {
        self.synthetic
    }
}

// ---- argument marshalling ----

/// A step's arguments cannot be marshalled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarshalError {
    /// No such step.
    #[error("step {step} does not exist; the plan has {steps} steps")]
    NoStep {
        /// The step asked for.
        step: usize,
        /// Steps in the plan.
        steps: usize,
    },
    /// An integer argument does not fit a C `int`.
    #[error("step {step} (`{kernel}`)")]
    Arg {
        /// The step.
        step: usize,
        /// Its kernel name, `<abi name>:<label>`.
        kernel: String,
        /// Which argument.
        #[source]
        source: ArgError,
    },
}

/// The parameter buffer of step `step` of `plan` with the arena at `arena`:
/// the zeroed prologue (filled at launch), then the step's arguments in ABI
/// order ([`Op::args`](sluice_nn::builders::Op::args)), each at its natural
/// alignment. A tensor is `arena + buffer offset + element offset · 4`; an
/// absent optional tensor is a null pointer.
pub fn kernel_args(plan: &Plan, step: usize, arena: DevicePtr) -> Result<KernelArgs, MarshalError> {
    let s = plan.steps().get(step).ok_or(MarshalError::NoStep {
        step,
        steps: plan.steps().len(),
    })?;
    let args = s.op.args().map_err(|source| MarshalError::Arg {
        step,
        kernel: s.kernel_name(),
        source,
    })?;
    let mut k = KernelArgs::new();
    for a in args {
        match a {
            Arg::Tensor(r) => k.ptr(arena.add(plan.byte_range(&r).start)),
            Arg::Null => k.ptr(DevicePtr::NULL),
            Arg::Int(v) => k.i32(v),
            Arg::Float(v) => k.f32(v),
        };
    }
    Ok(k)
}

/// Step `step`'s launch configuration as the driver takes it.
fn launch_dims(plan: &Plan, step: usize) -> LaunchDims {
    let l = &plan.steps()[step].launch;
    LaunchDims {
        grid: l.grid,
        block: l.block,
        shared_mem: l.dynamic_smem_bytes,
    }
}

// ---- waiting ----

/// [`run_to_idle`] failed.
#[derive(Debug, thiserror::Error)]
pub enum IdleError {
    /// A driver call of the queue failed.
    #[error(
        "the virtual queue failed (command 0 of a model's program copies the input in, command \
         k runs step k-1, the last copies the output out)"
    )]
    Queue(#[source] QueueError),
    /// The queue did not empty in time.
    #[error(
        "the queue was not idle after {waited_ns} ns of driver time ({queued} commands queued, \
         {outstanding} on the stream); a kernel hangs or the timeout is too short for this \
         model: raise it"
    )]
    Timeout {
        /// How long it waited.
        waited_ns: u64,
        /// Commands still in the vHQ.
        queued: usize,
        /// Commands on the stream.
        outstanding: usize,
    },
}

/// Polls `q` (letting the device progress between polls) until it is idle;
/// returns the tasks completed meanwhile. Gives up after `timeout_ns` of
/// driver time.
pub fn run_to_idle(
    drv: &mut dyn CuDriver,
    q: &mut VirtualQueue,
    timeout_ns: u64,
) -> Result<Vec<TaskId>, IdleError> {
    let start = drv.now_ns();
    let mut done = Vec::new();
    loop {
        q.poll(drv, &mut done).map_err(IdleError::Queue)?;
        if q.is_idle() {
            return Ok(done);
        }
        let waited_ns = drv.now_ns().saturating_sub(start);
        if waited_ns > timeout_ns {
            return Err(IdleError::Timeout {
                waited_ns,
                queued: q.queued(),
                outstanding: q.outstanding(),
            });
        }
        drv.wait_for_progress();
    }
}

// ---- loading and running a model ----

/// Tunables of [`DeviceModel::load`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// Pinned staging memory for the weight upload, in bytes (at least 4).
    pub staging_bytes: usize,
    /// How long any wait for the queue may take, in driver ns.
    pub timeout_ns: u64,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            staging_bytes: DEFAULT_STAGING_BYTES,
            timeout_ns: DEFAULT_TIMEOUT_NS,
        }
    }
}

/// [`DeviceModel::load`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The plan is invalid.
    #[error("model `{model}`: the plan is invalid")]
    Plan {
        /// The model.
        model: String,
        /// What is wrong.
        #[source]
        source: Box<PlanError>,
    },
    /// A weight buffer has the wrong length.
    #[error(
        "model `{model}`: weight `{buffer}` has {got} elements but the plan needs {expected}; \
         generate the weights from this plan (Weights::generate)"
    )]
    Weights {
        /// The model.
        model: String,
        /// The buffer.
        buffer: String,
        /// Elements the plan declares.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// The library lacks a kernel the plan launches.
    #[error(
        "model `{model}`: step {step} (`{label}`) launches `{kernel}`, which the kernel library \
         does not have; load the module that defines it"
    )]
    MissingKernel {
        /// The model.
        model: String,
        /// The first step that needs it.
        step: usize,
        /// Its label.
        label: String,
        /// The kernel's `extern "C"` name.
        kernel: &'static str,
    },
    /// A step's arguments cannot be marshalled.
    #[error("model `{model}`: marshalling the kernel arguments")]
    Marshal {
        /// The model.
        model: String,
        /// Which step and argument.
        #[source]
        source: MarshalError,
    },
    /// A driver call failed.
    #[error("model `{model}`: {what}")]
    Driver {
        /// The model.
        model: String,
        /// What was being done, with sizes.
        what: String,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// An upload program could not be built.
    #[error("model `{model}`: building the upload program")]
    Program {
        /// The model.
        model: String,
        /// Why.
        #[source]
        source: ProgramError,
    },
    /// Waiting for the upload failed.
    #[error("model `{model}`: uploading the weights")]
    Upload {
        /// The model.
        model: String,
        /// Why.
        #[source]
        source: Box<IdleError>,
    },
}

/// Submitting or running an inference failed.
#[derive(Debug, thiserror::Error)]
pub enum InferError {
    /// The input has the wrong length.
    #[error(
        "model `{model}`: input has {got} elements but the model takes {expected}; pass a tensor \
         of that size"
    )]
    Input {
        /// The model.
        model: String,
        /// Elements the input buffer holds.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// A driver call failed.
    #[error("model `{model}`: {what}")]
    Driver {
        /// The model.
        model: String,
        /// What was being done.
        what: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// The program could not be built.
    #[error("model `{model}`: building the inference program")]
    Program {
        /// The model.
        model: String,
        /// Why.
        #[source]
        source: ProgramError,
    },
    /// Waiting for the inference failed.
    #[error("model `{model}`: running the inference")]
    Run {
        /// The model.
        model: String,
        /// Why.
        #[source]
        source: Box<IdleError>,
    },
    /// The queue finished without completing the inference's task.
    #[error(
        "model `{model}`: the queue went idle without completing task {task:?}; it was \
         preempted and not restored, or discarded"
    )]
    NotCompleted {
        /// The model.
        model: String,
        /// The task.
        task: TaskId,
    },
}

/// A plan loaded on a device: its arena with the weights in place, pinned
/// input and output buffers, and one kernel command per step.
#[derive(Debug)]
pub struct DeviceModel {
    name: String,
    arena: DevicePtr,
    arena_bytes: usize,
    input_ptr: DevicePtr,
    input_len: usize,
    output_ptr: DevicePtr,
    output_len: usize,
    in_host: HostBufId,
    out_host: HostBufId,
    kernels: Vec<Command>,
    labels: Vec<String>,
    timeout_ns: u64,
    next_task: u64,
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

impl DeviceModel {
    /// Loads `plan` with `weights` through `q` (which must be idle): see the
    /// module docs. `lib` must have every kernel the plan launches. On an
    /// error the memory allocated so far is freed, except while `q` still
    /// has commands on the device (a timed-out upload), whose copies may
    /// still write it.
    pub fn load(
        drv: &mut dyn CuDriver,
        q: &mut VirtualQueue,
        plan: &Plan,
        weights: &Weights,
        lib: &KernelLibrary,
        opts: &LoadOptions,
    ) -> Result<Self, LoadError> {
        let model = plan.name().to_owned();
        plan.validate().map_err(|source| LoadError::Plan {
            model: model.clone(),
            source: Box::new(source),
        })?;
        for id in weight_buffers(plan) {
            let b = plan.buffer(id);
            let got = weights.get(id).len();
            if got != b.len {
                return Err(LoadError::Weights {
                    model,
                    buffer: b.name.clone(),
                    expected: b.len,
                    got,
                });
            }
        }
        let mut handles = Vec::with_capacity(plan.steps().len());
        for (step, s) in plan.steps().iter().enumerate() {
            let k = s.op.kernel();
            handles.push(lib.get(k).ok_or_else(|| LoadError::MissingKernel {
                model: model.clone(),
                step,
                label: s.label.clone(),
                kernel: k.abi_name(),
            })?);
        }
        let driver = |what: String| {
            let model = model.clone();
            move |source| LoadError::Driver {
                model,
                what,
                source,
            }
        };
        let arena_bytes = usize::try_from(plan.arena_bytes()).unwrap_or(usize::MAX);
        let arena = drv
            .alloc_device(arena_bytes.max(1))
            .map_err(driver(format!(
                "allocating the {arena_bytes}-byte device arena"
            )))?;
        let at = |id| {
            let b = plan.buffer(id);
            (arena.add(b.offset), b.len)
        };
        let (input_ptr, input_len) = at(plan.input());
        let (output_ptr, output_len) = at(plan.output());
        let rest = (|| {
            let mut kernels = Vec::with_capacity(handles.len());
            for (step, kernel) in handles.into_iter().enumerate() {
                let args = kernel_args(plan, step, arena).map_err(|source| LoadError::Marshal {
                    model: model.clone(),
                    source,
                })?;
                kernels.push(Command::Kernel {
                    kernel,
                    dims: launch_dims(plan, step),
                    args,
                });
            }
            let in_host = drv.alloc_host(input_len * 4).map_err(driver(format!(
                "allocating the {}-byte pinned input buffer",
                input_len * 4
            )))?;
            match drv.alloc_host(output_len * 4) {
                Ok(out_host) => Ok((kernels, in_host, out_host)),
                Err(source) => {
                    let _ = drv.free_host(in_host);
                    Err(driver(format!(
                        "allocating the {}-byte pinned output buffer",
                        output_len * 4
                    ))(source))
                }
            }
        })();
        let (kernels, in_host, out_host) = match rest {
            Ok(v) => v,
            Err(e) => {
                let _ = drv.free_device(arena);
                return Err(e);
            }
        };
        let mut m = Self {
            name: model.clone(),
            arena,
            arena_bytes,
            input_ptr,
            input_len,
            output_ptr,
            output_len,
            in_host,
            out_host,
            kernels,
            labels: plan.steps().iter().map(|s| s.kernel_name()).collect(),
            timeout_ns: opts.timeout_ns,
            next_task: 0,
        };
        if let Err(e) = m.upload_weights(drv, q, plan, weights, opts) {
            // Memory a pending copy may still write must not be freed.
            if q.is_idle() {
                let _ = m.free(drv);
            }
            return Err(e);
        }
        Ok(m)
    }

    fn task(&mut self) -> TaskId {
        self.next_task += 1;
        TaskId(self.next_task)
    }

    /// Poisons the arena, then copies every weight buffer in through a
    /// staging buffer, waiting for the copies whenever it is full.
    fn upload_weights(
        &mut self,
        drv: &mut dyn CuDriver,
        q: &mut VirtualQueue,
        plan: &Plan,
        weights: &Weights,
        opts: &LoadOptions,
    ) -> Result<(), LoadError> {
        let ids = weight_buffers(plan);
        let total: usize = ids.iter().map(|&id| plan.buffer(id).len * 4).sum();
        let staging_len = opts.staging_bytes.clamp(4, total.max(4)) / 4 * 4;
        let staging = drv
            .alloc_host(staging_len)
            .map_err(|source| LoadError::Driver {
                model: self.name.clone(),
                what: format!("allocating the {staging_len}-byte pinned staging buffer"),
                source,
            })?;
        let result = self.upload_through(drv, q, plan, weights, &ids, staging, staging_len, opts);
        let freed = drv.free_host(staging);
        result?;
        freed.map_err(|source| LoadError::Driver {
            model: self.name.clone(),
            what: "freeing the staging buffer".into(),
            source,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn upload_through(
        &mut self,
        drv: &mut dyn CuDriver,
        q: &mut VirtualQueue,
        plan: &Plan,
        weights: &Weights,
        ids: &[BufId],
        staging: HostBufId,
        staging_len: usize,
        opts: &LoadOptions,
    ) -> Result<(), LoadError> {
        let mut cmds = vec![Command::Memset {
            dst: self.arena,
            value: POISON_BYTE,
            len: self.arena_bytes,
        }];
        let mut used = 0usize;
        for &id in ids {
            let b = plan.buffer(id);
            let w = weights.get(id);
            let mut done = 0;
            while done < w.len() {
                let room = (staging_len - used) / 4;
                if room == 0 {
                    self.flush(drv, q, std::mem::take(&mut cmds), opts)?;
                    used = 0;
                    continue;
                }
                let n = room.min(w.len() - done);
                drv.write_host(staging, used, &f32_bytes(&w[done..done + n]))
                    .map_err(|source| LoadError::Driver {
                        model: self.name.clone(),
                        what: format!("staging weight `{}`", b.name),
                        source,
                    })?;
                cmds.push(Command::CopyToDevice {
                    dst: self.arena.add(b.offset + done as u64 * 4),
                    src: staging,
                    src_offset: used,
                    len: n * 4,
                });
                used += n * 4;
                done += n;
            }
        }
        self.flush(drv, q, cmds, opts)
    }

    /// Runs `cmds` (if any) through the queue and waits for them.
    fn flush(
        &mut self,
        drv: &mut dyn CuDriver,
        q: &mut VirtualQueue,
        cmds: Vec<Command>,
        opts: &LoadOptions,
    ) -> Result<(), LoadError> {
        if cmds.is_empty() {
            return Ok(());
        }
        let task = self.task();
        let p = Program::each_idempotent(task, cmds).map_err(|source| LoadError::Program {
            model: self.name.clone(),
            source,
        })?;
        q.submit(&p);
        run_to_idle(drv, q, opts.timeout_ns).map_err(|source| LoadError::Upload {
            model: self.name.clone(),
            source: Box::new(source),
        })?;
        Ok(())
    }

    /// The model's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device arena's base address.
    pub fn arena(&self) -> DevicePtr {
        self.arena
    }

    /// One [`Command::Kernel`] per step, in launch order.
    pub fn kernel_commands(&self) -> &[Command] {
        &self.kernels
    }

    /// Step `step`'s kernel name, `<abi name>:<label>`.
    pub fn step_name(&self, step: usize) -> &str {
        self.labels.get(step).map_or("", String::as_str)
    }

    /// Bytes of the model's input (f32).
    pub fn input_bytes(&self) -> usize {
        self.input_len * 4
    }

    /// Bytes of the model's output (f32).
    pub fn output_bytes(&self) -> usize {
        self.output_len * 4
    }

    /// Copies `bytes` (exactly [`DeviceModel::input_bytes`], f32 in native
    /// byte order) into the pinned input buffer, for the commands of
    /// [`DeviceModel::step_commands`].
    pub fn write_input_bytes(
        &self,
        drv: &mut dyn CuDriver,
        bytes: &[u8],
    ) -> Result<(), InferError> {
        if bytes.len() != self.input_bytes() {
            return Err(InferError::Input {
                model: self.name.clone(),
                expected: self.input_len,
                got: bytes.len() / 4,
            });
        }
        drv.write_host(self.in_host, 0, bytes)
            .map_err(|source| InferError::Driver {
                model: self.name.clone(),
                what: "writing the input to pinned memory",
                source,
            })
    }

    /// Copies the pinned output buffer (the last completed inference's
    /// output) into `out`, which holds [`DeviceModel::output_bytes`].
    pub fn read_output_bytes(
        &self,
        drv: &mut dyn CuDriver,
        out: &mut [u8],
    ) -> Result<(), InferError> {
        let n = self.output_bytes().min(out.len());
        drv.read_host(self.out_host, 0, &mut out[..n])
            .map_err(|source| InferError::Driver {
                model: self.name.clone(),
                what: "reading the output from pinned memory",
                source,
            })
    }

    /// The commands that run step `step` as its own launch: its kernel,
    /// preceded for the first step by the copy of the pinned input to the
    /// device and followed for the last one by the copy of the output
    /// back. Running every step's commands in order is one inference
    /// ([`DeviceModel::submit`] as separate launches); rerunning a step's
    /// commands after a kill is safe, since no kernel writes what it reads
    /// and the copies read what no step writes. `None` past the last step.
    pub fn step_commands(&self, step: usize) -> Option<Vec<Command>> {
        let kernel = self.kernels.get(step)?.clone();
        let mut cmds = Vec::with_capacity(3);
        if step == 0 {
            cmds.push(Command::CopyToDevice {
                dst: self.input_ptr,
                src: self.in_host,
                src_offset: 0,
                len: self.input_len * 4,
            });
        }
        cmds.push(kernel);
        if step + 1 == self.kernels.len() {
            cmds.push(Command::CopyToHost {
                dst: self.out_host,
                dst_offset: 0,
                src: self.output_ptr,
                len: self.output_len * 4,
            });
        }
        Some(cmds)
    }

    /// Writes `input` to the pinned input buffer and submits one inference
    /// to `q`: copy in, every step's kernel, copy out. Nothing runs until
    /// `q` is polled; read the result with [`DeviceModel::read_output`]
    /// once the returned task has completed.
    pub fn submit(
        &mut self,
        drv: &mut dyn CuDriver,
        q: &mut VirtualQueue,
        input: &[f32],
    ) -> Result<TaskId, InferError> {
        if input.len() != self.input_len {
            return Err(InferError::Input {
                model: self.name.clone(),
                expected: self.input_len,
                got: input.len(),
            });
        }
        drv.write_host(self.in_host, 0, &f32_bytes(input))
            .map_err(|source| InferError::Driver {
                model: self.name.clone(),
                what: "writing the input to pinned memory",
                source,
            })?;
        let mut cmds = Vec::with_capacity(self.kernels.len() + 2);
        cmds.push(Command::CopyToDevice {
            dst: self.input_ptr,
            src: self.in_host,
            src_offset: 0,
            len: self.input_len * 4,
        });
        cmds.extend(self.kernels.iter().cloned());
        cmds.push(Command::CopyToHost {
            dst: self.out_host,
            dst_offset: 0,
            src: self.output_ptr,
            len: self.output_len * 4,
        });
        let task = self.task();
        let p = Program::each_idempotent(task, cmds).map_err(|source| InferError::Program {
            model: self.name.clone(),
            source,
        })?;
        q.submit(&p);
        Ok(task)
    }

    /// The pinned output buffer's contents (the last completed inference's
    /// output).
    pub fn read_output(&self, drv: &mut dyn CuDriver) -> Result<Vec<f32>, InferError> {
        let mut bytes = vec![0u8; self.output_len * 4];
        drv.read_host(self.out_host, 0, &mut bytes)
            .map_err(|source| InferError::Driver {
                model: self.name.clone(),
                what: "reading the output from pinned memory",
                source,
            })?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// One whole inference: [`DeviceModel::submit`], run `q` until idle,
    /// [`DeviceModel::read_output`].
    pub fn infer(
        &mut self,
        drv: &mut dyn CuDriver,
        q: &mut VirtualQueue,
        input: &[f32],
    ) -> Result<Vec<f32>, InferError> {
        let task = self.submit(drv, q, input)?;
        let done = run_to_idle(drv, q, self.timeout_ns).map_err(|source| InferError::Run {
            model: self.name.clone(),
            source: Box::new(source),
        })?;
        if !done.contains(&task) {
            return Err(InferError::NotCompleted {
                model: self.name.clone(),
                task,
            });
        }
        self.read_output(drv)
    }

    /// Frees the arena and the pinned buffers; only once nothing issued
    /// uses them.
    pub fn free(self, drv: &mut dyn CuDriver) -> Result<(), DriverError> {
        let a = drv.free_device(self.arena);
        let i = drv.free_host(self.in_host);
        let o = drv.free_host(self.out_host);
        a.and(i).and(o)
    }
}

/// The weight buffers the plan's steps read, in buffer order.
fn weight_buffers(plan: &Plan) -> Vec<BufId> {
    let mut ids: Vec<BufId> = plan
        .steps()
        .iter()
        .flat_map(|s| s.op.reads())
        .map(|r| r.buf)
        .filter(|&id| plan.buffer(id).role == Role::Weight)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

// ---- the ABI kernels on the fake device ----

#[cfg(any(test, feature = "test-util"))]
pub mod fake_abi {
    //! The sluice kernel library's ABI kernels on a
    //! [`FakeDriver`](crate::fake::FakeDriver).
    //!
    //! Each fake kernel's parameter layout is parsed from its C signature in
    //! the library's sources (`daemon/cuda/kernels/*.cu`, embedded in
    //! [`kernels::SOURCES`](crate::kernels::SOURCES)) and laid
    //! out as CUDA does (every parameter at its natural alignment, in
    //! declaration order), independently of [`KernelArgs`]. At the end of a
    //! full run the kernel reads its pointer and integer arguments at those
    //! offsets, loads its input tensors from fake device memory, runs the
    //! matching [`sluice_nn::reference`] function, and stores the result at its
    //! output pointer. A kernel cut short ([`Run::Partial`]) stores
    //! [`GARBAGE`] over its whole output instead, as a real kernel killed
    //! part way may have written any part of it. A kernel evicted at entry
    //! writes nothing.
    //!
    //! For tests and demonstrations without a GPU. The effects panic on
    //! arguments a real kernel would fault on (a pointer outside every
    //! allocation, a negative size).

    use crate::driver::{DevicePtr, PROLOGUE_BYTES};
    use crate::fake::{FakeDriver, FakeKernel, FakeMemory, Run};
    use crate::kernels::{self, SOURCES};
    use sluice_nn::builders::Kernel;
    use sluice_nn::reference::{
        self, Act, AttentionShape, BmmShape, Conv2dShape, ConvExShape, ELEM_DESC_LEN, ElemOp,
        ElemShape, EltwiseOp, EmbeddingShape, GatherShape, GemmShape, GlobalPoolShape, InterpShape,
        LrnShape, Pool2dShape, PoolExShape, PoolMode, RowsShape,
    };

    /// What a kernel cut short leaves in every element of its output.
    pub const GARBAGE: f32 = -1.0e30;

    /// A fake driver with these kernels defined (timed by `times`), their
    /// library loaded, and a best-effort queue with cooperative kill: what
    /// a test or an example runs a model on without a GPU.
    pub fn rig(times: FakeTimes) -> (FakeDriver, crate::queue::VirtualQueue, super::KernelLibrary) {
        use crate::driver::{CuDriver, StreamPriority};
        use crate::queue::{KillMechanism, QueueConfig, VirtualQueue};
        let mut d = FakeDriver::new(crate::fake::FakeTimings::default());
        define(&d, times);
        let m = d
            .load_module("fake library")
            .expect("the fake driver loads any module");
        let lib = super::KernelLibrary::from_module(&mut d, m)
            .expect("the fake library has every ABI kernel");
        let q = VirtualQueue::new(
            &mut d,
            StreamPriority::BestEffort,
            QueueConfig::default(),
            KillMechanism::Cooperative,
        )
        .expect("the fake driver makes a stream");
        (d, q, lib)
    }

    /// A C parameter type of the ABI.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum CType {
        /// Any pointer (8 bytes).
        Ptr,
        /// `int`.
        Int,
        /// `unsigned int`.
        Uint,
        /// `unsigned long long`.
        U64,
        /// `float`.
        Float,
    }

    impl CType {
        /// Size and alignment in bytes.
        pub const fn size(self) -> usize {
            match self {
                CType::Ptr | CType::U64 => 8,
                CType::Int | CType::Uint | CType::Float => 4,
            }
        }
    }

    /// One parameter of a kernel's C signature.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Param {
        /// Its name in the source.
        pub name: String,
        /// Its type.
        pub ty: CType,
        /// Byte offset in the whole parameter buffer (prologue included).
        pub offset: usize,
    }

    /// The parameters of `kernel` (an `extern "C"` name), prologue included,
    /// parsed from its definition in the library's sources and laid out at
    /// natural alignment. `None` when no source defines it or a type is not
    /// one of the ABI's.
    pub fn signature(kernel: &str) -> Option<Vec<Param>> {
        let file = kernels::Kernel::from_name(kernel)?.file();
        let text = SOURCES.iter().find(|s| s.file == file)?.text;
        let at = text.find(&format!("\n{kernel}("))? + kernel.len() + 2;
        let close = text[at..].find(')')? + at;
        let mut offset = 0usize;
        let mut params = Vec::new();
        for p in text[at..close].split(',') {
            let p = p.split_whitespace().collect::<Vec<_>>().join(" ");
            let (ty_text, name) = p.rsplit_once(' ')?;
            let ty = if ty_text.contains('*') || name.starts_with('*') {
                CType::Ptr
            } else {
                match ty_text {
                    "int" => CType::Int,
                    "unsigned int" => CType::Uint,
                    "unsigned long long" => CType::U64,
                    "float" => CType::Float,
                    _ => return None,
                }
            };
            offset = offset.next_multiple_of(ty.size());
            params.push(Param {
                name: name.trim_start_matches('*').to_owned(),
                ty,
                offset,
            });
            offset += ty.size();
        }
        Some(params)
    }

    /// A kernel's own arguments (the parameter buffer after the prologue)
    /// read through its signature.
    #[derive(Debug)]
    pub struct Args<'a> {
        kernel: &'a str,
        sig: &'a [Param],
        user: &'a [u8],
    }

    impl<'a> Args<'a> {
        /// `user` is the parameter buffer after the prologue, as a fake
        /// kernel's effect receives it.
        pub fn new(kernel: &'a str, sig: &'a [Param], user: &'a [u8]) -> Self {
            Self { kernel, sig, user }
        }

        fn bytes<const N: usize>(&self, name: &str, ty: CType) -> [u8; N] {
            let p = self
                .sig
                .iter()
                .find(|p| p.name == name)
                .unwrap_or_else(|| panic!("{} has no parameter `{name}`", self.kernel));
            assert_eq!(p.ty, ty, "{} parameter `{name}`", self.kernel);
            let at = p.offset - PROLOGUE_BYTES;
            self.user
                .get(at..at + N)
                .and_then(|b| b.try_into().ok())
                .unwrap_or_else(|| {
                    panic!(
                        "{}: parameter `{name}` at byte {} is past the {}-byte parameter buffer",
                        self.kernel,
                        p.offset,
                        self.user.len() + PROLOGUE_BYTES
                    )
                })
        }

        /// A pointer parameter.
        pub fn ptr(&self, name: &str) -> DevicePtr {
            DevicePtr(u64::from_ne_bytes(self.bytes(name, CType::Ptr)))
        }

        /// An `int` parameter as a size (panics when negative).
        pub fn size(&self, name: &str) -> usize {
            let v = i32::from_ne_bytes(self.bytes(name, CType::Int));
            usize::try_from(v)
                .unwrap_or_else(|_| panic!("{}: `{name}` = {v} is negative", self.kernel))
        }

        /// An `int` parameter.
        pub fn int(&self, name: &str) -> i32 {
            i32::from_ne_bytes(self.bytes(name, CType::Int))
        }

        /// A `float` parameter.
        pub fn float(&self, name: &str) -> f32 {
            f32::from_ne_bytes(self.bytes(name, CType::Float))
        }
    }

    /// `n` f32 at `p` (panics when outside fake memory).
    pub fn load(mem: &mut FakeMemory, p: DevicePtr, n: usize) -> Vec<f32> {
        let mut b = vec![0u8; n * 4];
        mem.read(p, &mut b)
            .unwrap_or_else(|e| panic!("fake kernel read: {e}"));
        b.chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    fn load_opt(mem: &mut FakeMemory, p: DevicePtr, n: usize) -> Option<Vec<f32>> {
        (p != DevicePtr::NULL).then(|| load(mem, p, n))
    }

    fn store(mem: &mut FakeMemory, p: DevicePtr, v: &[f32], run: Run) {
        let bytes: Vec<u8> = match run {
            Run::Full => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
            Run::Partial => v.iter().flat_map(|_| GARBAGE.to_ne_bytes()).collect(),
        };
        mem.write(p, &bytes)
            .unwrap_or_else(|e| panic!("fake kernel write: {e}"));
    }

    fn act(code: i32) -> Act {
        match code {
            0 => Act::None,
            1 => Act::Relu,
            2 => Act::Gelu,
            _ => panic!("act = {code} is not an activation code"),
        }
    }

    fn ok(kernel: &str, r: Result<(), reference::ShapeError>) {
        if let Err(e) = r {
            panic!("{kernel}: {e}");
        }
    }

    /// Runs `kernel` on fake memory with its own arguments `user`.
    fn run(kernel: Kernel, sig: &[Param], mem: &mut FakeMemory, user: &[u8], how: Run) {
        let name = kernel.abi_name();
        let a = Args::new(name, sig, user);
        match kernel {
            Kernel::Gemm => {
                let s = GemmShape {
                    m: a.size("M"),
                    n: a.size("N"),
                    k: a.size("K"),
                };
                let x = load(mem, a.ptr("A"), s.m * s.k);
                let w = load(mem, a.ptr("B"), s.k * s.n);
                let bias = load_opt(mem, a.ptr("bias"), s.n);
                let mut c = vec![0.0; s.m * s.n];
                ok(
                    name,
                    reference::gemm(&s, &x, &w, bias.as_deref(), &mut c, act(a.int("act"))),
                );
                store(mem, a.ptr("C"), &c, how);
            }
            Kernel::Conv2d => {
                let s = Conv2dShape {
                    cin: a.size("Cin"),
                    h: a.size("H"),
                    w: a.size("W"),
                    cout: a.size("Cout"),
                    kh: a.size("KH"),
                    kw: a.size("KW"),
                    stride: a.size("stride"),
                    pad: a.size("pad"),
                };
                let (oh, ow) = s.out_hw().unwrap_or_else(|e| panic!("{name}: {e}"));
                let x = load(mem, a.ptr("x"), s.cin * s.h * s.w);
                let w = load(mem, a.ptr("w"), s.cout * s.cin * s.kh * s.kw);
                let bias = load_opt(mem, a.ptr("bias"), s.cout);
                let mut y = vec![0.0; s.cout * oh * ow];
                ok(
                    name,
                    reference::conv2d(&s, &x, &w, bias.as_deref(), &mut y, act(a.int("act"))),
                );
                store(mem, a.ptr("y"), &y, how);
            }
            Kernel::Pool2d => {
                let s = Pool2dShape {
                    c: a.size("C"),
                    h: a.size("H"),
                    w: a.size("W"),
                    k: a.size("k"),
                    stride: a.size("stride"),
                    pad: a.size("pad"),
                };
                let mode = match a.int("mode") {
                    0 => PoolMode::Max,
                    1 => PoolMode::Avg,
                    m => panic!("{name}: mode = {m}"),
                };
                let (oh, ow) = s.out_hw().unwrap_or_else(|e| panic!("{name}: {e}"));
                let x = load(mem, a.ptr("x"), s.c * s.h * s.w);
                let mut y = vec![0.0; s.c * oh * ow];
                ok(name, reference::pool2d(&s, &x, &mut y, mode));
                store(mem, a.ptr("y"), &y, how);
            }
            Kernel::GlobalAvgPool => {
                let s = GlobalPoolShape {
                    c: a.size("C"),
                    hw: a.size("HW"),
                };
                let x = load(mem, a.ptr("x"), s.c * s.hw);
                let mut y = vec![0.0; s.c];
                ok(name, reference::global_avgpool(&s, &x, &mut y));
                store(mem, a.ptr("y"), &y, how);
            }
            Kernel::Eltwise => {
                let n = a.size("n");
                let op = match a.int("op") {
                    0 => EltwiseOp::Add,
                    1 => EltwiseOp::AddRelu,
                    2 => EltwiseOp::Relu,
                    3 => EltwiseOp::Gelu,
                    o => panic!("{name}: op = {o}"),
                };
                let x = load(mem, a.ptr("a"), n);
                let b = load_opt(mem, a.ptr("b"), n);
                let mut y = vec![0.0; n];
                ok(name, reference::eltwise(op, n, &x, b.as_deref(), &mut y));
                store(mem, a.ptr("y"), &y, how);
            }
            Kernel::Softmax => {
                let s = RowsShape {
                    rows: a.size("rows"),
                    cols: a.size("cols"),
                };
                let x = load(mem, a.ptr("x"), s.rows * s.cols);
                let mut y = vec![0.0; s.rows * s.cols];
                ok(name, reference::softmax(&s, &x, &mut y));
                store(mem, a.ptr("y"), &y, how);
            }
            Kernel::Layernorm => {
                let s = RowsShape {
                    rows: a.size("rows"),
                    cols: a.size("cols"),
                };
                let x = load(mem, a.ptr("x"), s.rows * s.cols);
                let g = load(mem, a.ptr("gamma"), s.cols);
                let b = load(mem, a.ptr("beta"), s.cols);
                let mut y = vec![0.0; s.rows * s.cols];
                ok(
                    name,
                    reference::layernorm(&s, &x, &g, &b, &mut y, a.float("eps")),
                );
                store(mem, a.ptr("y"), &y, how);
            }
            Kernel::Attention => {
                let s = AttentionShape {
                    t: a.size("T"),
                    h: a.size("H"),
                    d: a.size("D"),
                    causal: a.int("causal") != 0,
                };
                let qkv = load(mem, a.ptr("qkv"), s.t * 3 * s.h * s.d);
                let mut out = vec![0.0; s.t * s.h * s.d];
                ok(name, reference::attention(&s, &qkv, &mut out));
                store(mem, a.ptr("out"), &out, how);
            }
            Kernel::Elementwise => {
                let n = a.size("n");
                let (p0, p1) = (a.float("p0"), a.float("p1"));
                let op = ElemOp::from_code(a.int("op"), p0, p1)
                    .unwrap_or_else(|| panic!("{name}: op = {}", a.int("op")));
                let act = match ElemOp::from_code(a.int("act"), p0, p1) {
                    Some(ElemOp::Unary(u)) => u,
                    _ => panic!("{name}: act = {}", a.int("act")),
                };
                let desc = reference::elem_desc_from(&load(mem, a.ptr("desc"), ELEM_DESC_LEN));
                let s = ElemShape { n, desc, op, act };
                // Each operand as far as its strides reach.
                let reach = |k: usize| {
                    (0..6)
                        .map(|r| desc[r].saturating_sub(1) * desc[6 * (k + 1) + r])
                        .sum::<usize>()
                        + 1
                };
                let x = load(mem, a.ptr("a"), reach(0));
                let b = (op.operands() >= 2).then(|| load(mem, a.ptr("b"), reach(1)));
                let c = (op.operands() >= 3).then(|| load(mem, a.ptr("c"), reach(2)));
                let mut y = vec![0.0; n];
                ok(
                    name,
                    reference::elementwise(&s, &x, b.as_deref(), c.as_deref(), &mut y),
                );
                store(mem, a.ptr("y"), &y, how);
            }
            Kernel::Gather => {
                let s = GatherShape {
                    n: a.size("n"),
                    lens: [a.size("n0"), a.size("n1"), a.size("n2"), a.size("n3")],
                    fill: a.float("fill"),
                };
                let srcs: Vec<Option<Vec<f32>>> = ["x0", "x1", "x2", "x3"]
                    .iter()
                    .zip(s.lens)
                    .map(|(p, len)| load_opt(mem, a.ptr(p), len))
                    .collect();
                let idx = load(mem, a.ptr("idx"), s.n);
                let mut y = vec![0.0; s.n];
                let refs = [0, 1, 2, 3].map(|k| srcs[k].as_deref());
                ok(name, reference::gather(&s, refs, &idx, &mut y));
                store(mem, a.ptr("y"), &y, how);
            }
            Kernel::Bmm => {
                let s = BmmShape {
                    batch: a.size("batch"),
                    m: a.size("M"),
                    n: a.size("N"),
                    k: a.size("K"),
                    sa: a.size("sa"),
                    sb: a.size("sb"),
                };
                let x = load(mem, a.ptr("a"), (s.batch - 1) * s.sa + s.m * s.k);
                let w = load(mem, a.ptr("b"), (s.batch - 1) * s.sb + s.k * s.n);
                let mut y = vec![0.0; s.batch * s.m * s.n];
                ok(name, reference::bmm(&s, &x, &w, &mut y));
                store(mem, a.ptr("y"), &y, how);
            }
            Kernel::Embedding => {
                let s = EmbeddingShape {
                    count: a.size("count"),
                    dim: a.size("dim"),
                    vocab: a.size("vocab"),
                };
                let table = load(mem, a.ptr("table"), s.vocab * s.dim);
                let ids = load(mem, a.ptr("ids"), s.count);
                let mut y = vec![0.0; s.count * s.dim];
                ok(name, reference::embedding(&s, &table, &ids, &mut y));
                store(mem, a.ptr("y"), &y, how);
            }
            Kernel::Conv2dEx => {
                let s = ConvExShape {
                    n: a.size("N"),
                    cin: a.size("Cin"),
                    h: a.size("H"),
                    w: a.size("W"),
                    cout: a.size("Cout"),
                    oh: a.size("OH"),
                    ow: a.size("OW"),
                    kh: a.size("KH"),
                    kw: a.size("KW"),
                    sh: a.size("sh"),
                    sw: a.size("sw"),
                    ph: a.size("ph"),
                    pw: a.size("pw"),
                    dh: a.size("dh"),
                    dw: a.size("dw"),
                    groups: a.size("groups"),
                };
                let x = load(mem, a.ptr("x"), s.n * s.cin * s.h * s.w);
                let w = load(
                    mem,
                    a.ptr("w"),
                    s.cout * (s.cin / s.groups.max(1)) * s.kh * s.kw,
                );
                let bias = load_opt(mem, a.ptr("bias"), s.cout);
                let mut y = vec![0.0; s.n * s.cout * s.oh * s.ow];
                ok(
                    name,
                    reference::conv2d_ex(&s, &x, &w, bias.as_deref(), &mut y, act(a.int("act"))),
                );
                store(mem, a.ptr("y"), &y, how);
            }
            Kernel::Pool2dEx => {
                let s = PoolExShape {
                    nc: a.size("NC"),
                    h: a.size("H"),
                    w: a.size("W"),
                    oh: a.size("OH"),
                    ow: a.size("OW"),
                    kh: a.size("KH"),
                    kw: a.size("KW"),
                    sh: a.size("sh"),
                    sw: a.size("sw"),
                    ph: a.size("ph"),
                    pw: a.size("pw"),
                    peh: a.size("peh"),
                    pew: a.size("pew"),
                    dh: a.size("dh"),
                    dw: a.size("dw"),
                };
                let x = load(mem, a.ptr("x"), s.nc * s.h * s.w);
                let mut y = vec![0.0; s.nc * s.oh * s.ow];
                ok(name, reference::pool2d_ex(&s, &x, &mut y, a.int("mode")));
                store(mem, a.ptr("y"), &y, how);
            }
            Kernel::Lrn => {
                let s = LrnShape {
                    n: a.size("N"),
                    c: a.size("C"),
                    hw: a.size("HW"),
                    size: a.size("size"),
                    alpha: a.float("alpha"),
                    beta: a.float("beta"),
                    bias: a.float("bias"),
                };
                let x = load(mem, a.ptr("x"), s.n * s.c * s.hw);
                let mut y = vec![0.0; x.len()];
                ok(name, reference::lrn(&s, &x, &mut y));
                store(mem, a.ptr("y"), &y, how);
            }
            Kernel::Interp => {
                let s = InterpShape {
                    n: a.size("n"),
                    taps: a.size("taps"),
                    src: a.size("src"),
                };
                let x = load(mem, a.ptr("x"), s.src);
                let idx = load(mem, a.ptr("idx"), s.n * s.taps);
                let w = load(mem, a.ptr("w"), s.n * s.taps);
                let mut y = vec![0.0; s.n];
                ok(name, reference::interp(&s, &x, &idx, &w, &mut y));
                store(mem, a.ptr("y"), &y, how);
            }
        }
    }

    /// Run times of the fake kernels, virtual ns.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct FakeTimes {
        /// Run time of the kernels whose main loop polls the flag (GEMM,
        /// conv2d, attention).
        pub polling_ns: u64,
        /// Their poll interval.
        pub poll_every_ns: u64,
        /// Run time of the others (they check the flag only at entry).
        pub other_ns: u64,
    }

    impl Default for FakeTimes {
        fn default() -> Self {
            Self {
                polling_ns: 20_000,
                poll_every_ns: 2_000,
                other_ns: 5_000,
            }
        }
    }

    /// Defines every ABI kernel on `d` with `times`. Whether a kernel
    /// polls follows the library's table ([`kernels::Kernel::polls`]).
    ///
    /// # Panics
    ///
    /// If a kernel's signature cannot be parsed from the sources (a test of
    /// this module rules that out).
    pub fn define(d: &FakeDriver, times: FakeTimes) {
        for k in super::PLAN_KERNELS {
            let name = k.abi_name();
            let sig = signature(name).unwrap_or_else(|| panic!("cannot parse {name}'s signature"));
            let polls = kernels::Kernel::from_name(name).is_some_and(kernels::Kernel::polls);
            let fk = if polls {
                FakeKernel::new(times.polling_ns).polling(times.poll_every_ns)
            } else {
                FakeKernel::new(times.other_ns)
            };
            d.define_kernel(
                name,
                fk.with_effect(move |mem, user, how| run(k, &sig, mem, user, how)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake_abi::{self, CType, FakeTimes};
    use super::*;
    use crate::driver::{
        PROLOGUE_BYTES, PROLOGUE_CTL_OFFSET, PROLOGUE_KIDX_OFFSET, StreamPriority,
    };
    use crate::fake::{Executed, FakeDriver, KernelOutcome};
    use crate::queue::{KillMechanism, QueueConfig};
    use sluice_nn::builders::{BuiltModel, MODEL_NAMES, run_cpu};

    fn small(name: &str) -> BuiltModel {
        sluice_nn::builders::build_small(name).unwrap()
    }

    struct Rig {
        d: FakeDriver,
        q: VirtualQueue,
        lib: KernelLibrary,
    }

    fn rig() -> Rig {
        let (d, q, lib) = fake_abi::rig(FakeTimes::default());
        Rig { d, q, lib }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn signatures_parse_with_the_prologue_at_the_driver_offsets() {
        for k in PLAN_KERNELS {
            let sig = fake_abi::signature(k.abi_name()).unwrap();
            assert_eq!(sig[0].ty, CType::Ptr, "{}", k.abi_name());
            assert_eq!(sig[0].offset, PROLOGUE_CTL_OFFSET);
            assert_eq!(sig[1].ty, CType::Uint);
            assert_eq!(sig[1].offset, PROLOGUE_KIDX_OFFSET);
            assert!(sig[2].offset >= PROLOGUE_BYTES);
        }
        let g = fake_abi::signature("sluice_layernorm").unwrap();
        let names: Vec<_> = g
            .iter()
            .map(|p| (p.name.as_str(), p.ty, p.offset))
            .collect();
        assert_eq!(
            names,
            [
                ("ctl", CType::Ptr, 0),
                ("kidx", CType::Uint, 8),
                ("x", CType::Ptr, 16),
                ("gamma", CType::Ptr, 24),
                ("beta", CType::Ptr, 32),
                ("y", CType::Ptr, 40),
                ("rows", CType::Int, 48),
                ("cols", CType::Int, 52),
                ("eps", CType::Float, 56),
            ]
        );
        assert_eq!(fake_abi::signature("no_such_kernel"), None);
    }

    #[test]
    fn kernel_args_put_each_argument_where_the_kernel_reads_it() {
        // Every step of every Small model: read each argument back through
        // the kernel's C signature and compare with the step's typed
        // arguments.
        let arena = DevicePtr(0x7000_0000);
        for name in MODEL_NAMES {
            let m = small(name);
            let plan = m.plan();
            for (i, s) in plan.steps().iter().enumerate() {
                let k = kernel_args(plan, i, arena).unwrap();
                let sig = fake_abi::signature(s.op.kernel().abi_name()).unwrap();
                let want = s.op.args().unwrap();
                assert_eq!(sig.len(), 2 + want.len(), "{}", s.kernel_name());
                let end = sig.last().map(|p| p.offset + p.ty.size()).unwrap();
                assert_eq!(k.len(), end, "{}", s.kernel_name());
                let a = fake_abi::Args::new("k", &sig, k.user_bytes());
                for (p, w) in sig[2..].iter().zip(&want) {
                    match *w {
                        Arg::Tensor(r) => {
                            let b = plan.buffer(r.buf);
                            assert_eq!(
                                a.ptr(&p.name),
                                DevicePtr(arena.0 + b.offset + r.offset as u64 * 4),
                                "{} {}",
                                s.kernel_name(),
                                p.name
                            );
                        }
                        Arg::Null => assert_eq!(a.ptr(&p.name), DevicePtr::NULL),
                        Arg::Int(v) => assert_eq!(a.int(&p.name), v),
                        Arg::Float(v) => assert_eq!(a.float(&p.name).to_bits(), v.to_bits()),
                    }
                }
            }
        }
        let plan = small("vgg19");
        let e = kernel_args(plan.plan(), 999, arena).unwrap_err();
        assert_eq!(
            e.to_string(),
            "step 999 does not exist; the plan has 24 steps"
        );
    }

    #[test]
    fn every_small_model_on_the_fake_device_equals_run_cpu_bit_for_bit() {
        for name in MODEL_NAMES {
            let Rig { mut d, mut q, lib } = rig();
            let m = small(name);
            let w = m.weights(7);
            let input = m.random_input(11);
            // A small staging buffer, so the upload is split and refilled.
            let opts = LoadOptions {
                staging_bytes: 4096,
                ..LoadOptions::default()
            };
            let mut dm = DeviceModel::load(&mut d, &mut q, m.plan(), &w, &lib, &opts).unwrap();
            let got = dm.infer(&mut d, &mut q, &input).unwrap();
            let want = run_cpu(m.plan(), &w, &input).unwrap();
            assert!(want.iter().all(|v| v.is_finite()), "{name}");
            assert_eq!(bits(&got), bits(&want), "{name}");
            // Each kernel ran once, in step order, to its end.
            let ran: Vec<String> = d
                .log()
                .into_iter()
                .filter_map(|l| match l.what {
                    Executed::Kernel { name, outcome, .. } => {
                        assert_eq!(outcome, KernelOutcome::Completed);
                        Some(name)
                    }
                    _ => None,
                })
                .collect();
            let steps: Vec<&str> = m
                .plan()
                .steps()
                .iter()
                .map(|s| s.op.kernel().abi_name())
                .collect();
            assert_eq!(ran, steps, "{name}");
            // A second input through the same loaded model.
            let input2 = m.random_input(12);
            let got2 = dm.infer(&mut d, &mut q, &input2).unwrap();
            assert_eq!(
                bits(&got2),
                bits(&run_cpu(m.plan(), &w, &input2).unwrap()),
                "{name}"
            );
            assert_ne!(bits(&got2), bits(&got), "{name}: output ignores the input");
            dm.free(&mut d).unwrap();
        }
    }

    fn outcomes(d: &FakeDriver) -> Vec<(u32, KernelOutcome)> {
        d.log()
            .into_iter()
            .filter_map(|l| match l.what {
                Executed::Kernel { kidx, outcome, .. } => Some((kidx, outcome)),
                _ => None,
            })
            .collect()
    }

    /// The first step at or after the middle whose kernel polls the flag.
    fn middle_polling_step(m: &BuiltModel) -> usize {
        let steps = m.plan().steps();
        (steps.len() / 2..steps.len())
            .find(|&i| {
                matches!(
                    steps[i].op.kernel(),
                    Kernel::Gemm | Kernel::Conv2d | Kernel::Attention
                )
            })
            .expect("every model has a GEMM or conv in its second half")
    }

    #[test]
    fn a_model_preempted_inside_a_kernel_and_restored_gives_the_uninterrupted_output() {
        for name in MODEL_NAMES {
            let Rig { mut d, mut q, lib } = rig();
            let m = small(name);
            let w = m.weights(3);
            let input = m.random_input(5);
            let mut dm =
                DeviceModel::load(&mut d, &mut q, m.plan(), &w, &lib, &LoadOptions::default())
                    .unwrap();
            let k = middle_polling_step(&m);
            let task = dm.submit(&mut d, &mut q, &input).unwrap();
            let mut done = Vec::new();
            // Before any re-run the execution index of step k's kernel is k
            // (the upload programs launched no kernel). Run until its block
            // (0,0,0) has passed the prologue: it has just started.
            for _ in 0..1_000_000 {
                q.poll(&mut d, &mut done).unwrap();
                if d.ctl_state(q.ctl()).unwrap().1 > k as u64 {
                    break;
                }
                d.wait_for_progress();
            }
            assert_eq!(d.ctl_state(q.ctl()).unwrap().1, k as u64 + 1, "{name}");
            let r = q.preempt(&mut d, &mut done).unwrap();
            let point = r.restore.expect("kernels were outstanding");
            assert_eq!(
                (point.task, point.interrupted, point.from),
                (task, k as u32 + 1, k as u32 + 1)
            );
            // Step k was cut short at a poll point and left garbage; the
            // kernels behind it returned at entry.
            let o = outcomes(&d);
            assert!(
                o.contains(&(k as u32, KernelOutcome::KilledAtPoll)),
                "{name}: {o:?}"
            );
            assert!(
                o.iter().any(|&(_, x)| x == KernelOutcome::EvictedAtEntry),
                "{name}"
            );
            let out = m.plan().steps()[k].op.write();
            let at = dm.arena().add(m.plan().byte_range(&out).start);
            let mut b = [0u8; 4];
            d.read_device(at, &mut b).unwrap();
            assert_eq!(f32::from_ne_bytes(b), fake_abi::GARBAGE, "{name}");
            assert!(done.is_empty());
            assert!(q.restore().unwrap() >= 1);
            done.extend(run_to_idle(&mut d, &mut q, DEFAULT_TIMEOUT_NS).unwrap());
            assert_eq!(done, [task], "{name}");
            let got = dm.read_output(&mut d).unwrap();
            let want = run_cpu(m.plan(), &w, &input).unwrap();
            assert_eq!(bits(&got), bits(&want), "{name}");
        }
    }

    #[test]
    fn repeated_preemptions_through_a_whole_model_still_give_the_cpu_output() {
        // Preempt every 61 us of virtual time (not a multiple of any
        // kernel's time, so the flag lands at varied points) until the
        // model completes.
        for name in MODEL_NAMES {
            let Rig { mut d, mut q, lib } = rig();
            let m = small(name);
            let w = m.weights(21);
            let input = m.random_input(22);
            let mut dm =
                DeviceModel::load(&mut d, &mut q, m.plan(), &w, &lib, &LoadOptions::default())
                    .unwrap();
            let task = dm.submit(&mut d, &mut q, &input).unwrap();
            let mut done = Vec::new();
            let mut preemptions = 0;
            let mut next = d.now_ns() + 61_000;
            for _ in 0..1_000_000 {
                q.poll(&mut d, &mut done).unwrap();
                if q.is_idle() {
                    break;
                }
                if d.now_ns() >= next {
                    q.preempt(&mut d, &mut done).unwrap();
                    q.restore().unwrap();
                    preemptions += 1;
                    next = d.now_ns() + 61_000;
                }
                d.wait_for_progress();
            }
            assert!(q.is_idle(), "{name}");
            assert_eq!(done, [task], "{name}");
            let killed = outcomes(&d)
                .iter()
                .filter(|&&(_, o)| o == KernelOutcome::KilledAtPoll)
                .count();
            assert!(
                preemptions >= 3 && killed >= 1,
                "{name}: {preemptions} preemptions, {killed} killed"
            );
            let got = dm.read_output(&mut d).unwrap();
            assert_eq!(
                bits(&got),
                bits(&run_cpu(m.plan(), &w, &input).unwrap()),
                "{name}"
            );
        }
    }

    #[test]
    fn kernels_from_ptx_images_are_found_by_their_entries() {
        let mut d = FakeDriver::default();
        fake_abi::define(&d, FakeTimes::default());
        let gemm = ".version 8.4\n.visible .entry sluice_gemm(\n .param .u64 p0\n)\n";
        let pool = ".visible .entry sluice_pool2d(\n)\n.visible .entry sluice_global_avgpool(\n)\n";
        let lib = KernelLibrary::from_ptx(&mut d, &[gemm, pool]).unwrap();
        assert!(lib.get(Kernel::Gemm).is_some());
        assert!(lib.get(Kernel::Pool2d).is_some());
        assert!(lib.get(Kernel::GlobalAvgPool).is_some());
        assert_eq!(lib.get(Kernel::Conv2d), None);
        assert_eq!(lib.synthetic(), None);
        d.define_kernel(
            crate::gpu::SYNTHETIC_KERNEL,
            crate::fake::FakeKernel::new(0),
        );
        let synth = ".visible .entry sluice_synthetic(\n)\n";
        let with = KernelLibrary::from_ptx(&mut d, &[gemm, synth]).unwrap();
        assert!(with.synthetic().is_some());
        // vgg19 needs conv2d: the load names the first step that does.
        let mut q = VirtualQueue::new(
            &mut d,
            StreamPriority::BestEffort,
            QueueConfig::default(),
            KillMechanism::Cooperative,
        )
        .unwrap();
        let m = small("vgg19");
        let e = DeviceModel::load(
            &mut d,
            &mut q,
            m.plan(),
            &m.weights(1),
            &lib,
            &LoadOptions::default(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "model `vgg19_small`: step 0 (`conv1_1`) launches `sluice_conv2d`, which the kernel \
             library does not have; load the module that defines it"
        );
    }

    #[test]
    fn bad_weights_and_inputs_are_refused_with_their_sizes() {
        let Rig { mut d, mut q, lib } = rig();
        let m = small("gpt2");
        let other = small("bert_base").weights(1);
        let e = DeviceModel::load(
            &mut d,
            &mut q,
            m.plan(),
            &other,
            &lib,
            &LoadOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(e, LoadError::Weights { .. }), "{e}");
        let mut dm = DeviceModel::load(
            &mut d,
            &mut q,
            m.plan(),
            &m.weights(1),
            &lib,
            &LoadOptions::default(),
        )
        .unwrap();
        let e = dm.infer(&mut d, &mut q, &[0.0; 3]).unwrap_err();
        let want = m.plan().buffer(m.plan().input()).len;
        assert_eq!(
            e.to_string(),
            format!(
                "model `gpt2_small`: input has 3 elements but the model takes {want}; pass a \
                 tensor of that size"
            )
        );
    }
}
