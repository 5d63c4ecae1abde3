//! What the CUDA backend's queue logic needs from the CUDA driver, as one
//! small trait.
//!
//! [`CuDriver`] has two implementations:
//!
//! - `real::CudaDriver` (feature `cuda`): the CUDA driver API through
//!   cudarc, with `libcuda` loaded at run time;
//! - [`super::fake::FakeDriver`]: a deterministic fake with virtual time that
//!   records every call, so the queue logic in [`super::queue`] is tested on
//!   machines without a GPU.
//!
//! Handles ([`StreamId`], [`CtlId`], …) are small numbers that index tables
//! inside the driver, so a stale or foreign handle is answered with
//! [`DriverError::UnknownHandle`] instead of reaching CUDA.
//!
//! # The control block and the kernel prologue
//!
//! Every queue (stream) owns one [`SluiceCtl`] in device memory
//! (`docs/cuda-backend.md`, the kernel ABI; host-mapped memory until the H200
//! showed its reads cost ~1 us each, docs/hardware.md). Every sluice kernel
//! takes two leading parameters, `const SluiceCtl* ctl, unsigned int kidx`; its
//! prologue returns at once when `ctl->preempt != 0` (lazy eviction, REEF
//! §4.2) and otherwise records `atomicMax(&ctl->started, kidx + 1)` (the
//! kernel execution index, REEF §4.4). [`KernelArgs`] reserves room for the
//! two prologue parameters; the queue fills them in when it issues a launch.

use std::fmt;
use std::mem::{align_of, offset_of, size_of};

/// The per-queue control block shared with the kernels, laid out exactly as
/// the kernels' `struct SluiceCtl { volatile unsigned int preempt; unsigned
/// int _pad; unsigned long long started; }`.
///
/// Only the driver touches it from the host, through small copies waited
/// for (the real driver) or its own state (the fake); this type documents
/// and pins the layout.
#[repr(C)]
#[derive(Debug, Default)]
pub struct SluiceCtl {
    /// Non-zero: kernels of the queue return at entry and at their poll
    /// points. Written by the host only.
    pub preempt: u32,
    /// Padding, always 0.
    pub pad: u32,
    /// The execution index: `kidx + 1` of the highest kernel of the queue
    /// whose block (0,0,0) passed the prologue. Written by the kernels
    /// (`atomicMax`); the host reads it and resets it to 0 when the queue is
    /// idle.
    pub started: u64,
}

const _: () = {
    assert!(size_of::<SluiceCtl>() == 16);
    assert!(align_of::<SluiceCtl>() == 8);
    assert!(offset_of!(SluiceCtl, preempt) == 0);
    assert!(offset_of!(SluiceCtl, pad) == 4);
    assert!(offset_of!(SluiceCtl, started) == 8);
};

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}#{}", stringify!($name), self.0)
            }
        }
    };
}

handle!(
    /// A stream created by [`CuDriver::create_stream`].
    StreamId
);
handle!(
    /// A control block created by [`CuDriver::create_ctl`].
    CtlId
);
handle!(
    /// An event recorded by [`CuDriver::record_event`].
    EventId
);
handle!(
    /// A module loaded by [`CuDriver::load_module`].
    ModuleId
);
handle!(
    /// A kernel looked up by [`CuDriver::kernel`].
    KernelHandle
);
handle!(
    /// Pinned host memory allocated by [`CuDriver::alloc_host`].
    HostBufId
);
handle!(
    /// A green context created by [`CuDriver::create_green_ctx`].
    GreenCtxId
);

/// The CUDA version that brought green contexts (`cuGreenCtxCreate` and
/// the `cuDevSmResource*` calls), as `cuDriverGetVersion` reports it.
pub const GREEN_CTX_MIN_DRIVER: i32 = 12040;

/// How a device's SMs split into green contexts.
///
/// The driver splits the device's SMs once into `granules` disjoint groups
/// of `granule_sms` SMs each (`cuDevSmResourceSplitByCount` with
/// `minCount = granule_sms`); a green context is made of any set of them
/// (`cuDevResourceGenerateDesc` accepts several groups of one split), so
/// two green contexts made of disjoint granule sets have disjoint SMs. SMs
/// left over by the split (4 of an H100 SXM's 132) belong to no granule:
/// only the whole device (the primary context's streams) uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmGranules {
    /// SMs of the whole device.
    pub sm_count: u32,
    /// SMs per granule: the split's group size (8 on compute capability
    /// 9.x, 4 on 8.x, 2 on 7.x, as the driver rounds `minCount`).
    pub granule_sms: u32,
    /// Granules the split made (at most [`MAX_GRANULES`]).
    pub granules: u32,
    /// The device's compute capability (major, minor).
    pub compute_capability: (u32, u32),
}

/// Most granules a [`GranuleSet`] holds.
pub const MAX_GRANULES: u32 = 128;

/// A set of granules of an [`SmGranules`] split, as a bit set (bit `i`:
/// granule `i`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct GranuleSet(pub u128);

impl GranuleSet {
    /// Granules `first..first + count`.
    pub fn range(first: u32, count: u32) -> Self {
        let mut bits = 0u128;
        for g in first..(first + count).min(MAX_GRANULES) {
            bits |= 1 << g;
        }
        Self(bits)
    }

    /// Number of granules.
    pub fn len(self) -> u32 {
        self.0.count_ones()
    }

    /// No granule.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether granule `g` is in the set.
    pub fn contains(self, g: u32) -> bool {
        g < MAX_GRANULES && self.0 & (1 << g) != 0
    }

    /// The granules, lowest first.
    pub fn iter(self) -> impl Iterator<Item = u32> {
        (0..MAX_GRANULES).filter(move |&g| self.contains(g))
    }
}

impl fmt::Display for GranuleSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Runs of granules, e.g. `0-3,6`.
        let mut first = true;
        let mut g = 0;
        while g < MAX_GRANULES {
            if !self.contains(g) {
                g += 1;
                continue;
            }
            let start = g;
            while g + 1 < MAX_GRANULES && self.contains(g + 1) {
                g += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == g {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{g}")?;
            }
            g += 1;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

impl SmGranules {
    /// The granule size the CUDA headers give as the default split
    /// granularity for compute capability `major.minor` (CUDA 12.4+
    /// `cuDevSmResourceSplitByCount`: 6.x at least 1 SM; 7.x at least 2 and
    /// a multiple of 2; 8.x at least 4 and a multiple of 2; 9.0 and later
    /// at least 8 and a multiple of 8). The real driver asks for this size
    /// and records what the split gave.
    pub fn default_granule(major: u32) -> u32 {
        match major {
            0..=6 => 1,
            7 => 2,
            8 => 4,
            _ => 8,
        }
    }

    /// The layout a driver makes of `sm_count` SMs at compute capability
    /// `cc`: as many whole default granules as fit (at most
    /// [`MAX_GRANULES`]; the granule doubles until they do).
    pub fn for_device(sm_count: u32, cc: (u32, u32)) -> Self {
        let mut granule_sms = Self::default_granule(cc.0);
        while sm_count / granule_sms > MAX_GRANULES {
            granule_sms *= 2;
        }
        Self {
            sm_count,
            granule_sms,
            granules: sm_count / granule_sms,
            compute_capability: cc,
        }
    }

    /// Every granule.
    pub fn all(&self) -> GranuleSet {
        GranuleSet::range(0, self.granules)
    }

    /// SMs of a green context made of `set`.
    pub fn sms(&self, set: GranuleSet) -> u32 {
        set.len() * self.granule_sms
    }
}

/// A device address (`CUdeviceptr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The null device pointer (for a kernel's nullable arguments).
    pub const NULL: DevicePtr = DevicePtr(0);

    /// `self + bytes`.
    pub const fn add(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0 + bytes)
    }
}

impl fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Scheduling priority of a stream (CUDA stream priorities: a higher one
/// gets free SMs first; nothing running is preempted by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamPriority {
    /// The context's greatest priority.
    RealTime,
    /// The context's least priority.
    BestEffort,
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchDims {
    /// Blocks in x, y, z; each at least 1.
    pub grid: [u32; 3],
    /// Threads per block in x, y, z; each at least 1.
    pub block: [u32; 3],
    /// Dynamic shared memory per block in bytes.
    pub shared_mem: u32,
}

impl LaunchDims {
    /// A 1-D launch of `blocks` blocks of `threads` threads, no dynamic
    /// shared memory.
    pub const fn linear(blocks: u32, threads: u32) -> Self {
        Self {
            grid: [blocks, 1, 1],
            block: [threads, 1, 1],
            shared_mem: 0,
        }
    }

    /// Total blocks.
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&d| u64::from(d)).product()
    }
}

/// Byte offset of the control-block pointer in every parameter buffer.
pub const PROLOGUE_CTL_OFFSET: usize = 0;
/// Byte offset of the `kidx` parameter in every parameter buffer.
pub const PROLOGUE_KIDX_OFFSET: usize = 8;
/// Bytes taken by the two prologue parameters.
pub const PROLOGUE_BYTES: usize = 12;
/// Largest parameter buffer a kernel may take (CUDA's 4 KiB limit).
pub const MAX_PARAM_BYTES: usize = 4096;

/// A kernel's parameters packed as its parameter buffer: every parameter at
/// its natural alignment, in declaration order, as the `extra`
/// (`CU_LAUNCH_PARAM_BUFFER_POINTER`) form of `cuLaunchKernel` expects.
///
/// The first two parameters are the sluice prologue (`const SluiceCtl*`,
/// `unsigned int kidx`); [`KernelArgs::new`] reserves them as zeros and the
/// queue fills them in at launch ([`write_prologue`]). Push the kernel's own
/// arguments after them:
///
/// ```
/// use sluice_cuda::driver::{DevicePtr, KernelArgs};
/// let mut a = KernelArgs::new();
/// a.ptr(DevicePtr(0x1000)).ptr(DevicePtr::NULL).i32(64).f32(1e-5);
/// // Prologue 0..12, padding to 16, two pointers, an int and a float.
/// assert_eq!(a.len(), 16 + 8 + 8 + 4 + 4);
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct KernelArgs {
    bytes: Vec<u8>,
}

impl Default for KernelArgs {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for KernelArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelArgs")
            .field("len", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

impl KernelArgs {
    /// Just the (zeroed) prologue.
    pub fn new() -> Self {
        Self {
            bytes: vec![0; PROLOGUE_BYTES],
        }
    }

    fn push(&mut self, align: usize, value: &[u8]) -> &mut Self {
        let at = self.bytes.len().next_multiple_of(align);
        self.bytes.resize(at, 0);
        self.bytes.extend_from_slice(value);
        self
    }

    /// A device pointer (`T*`, 8 bytes, 8-aligned).
    pub fn ptr(&mut self, p: DevicePtr) -> &mut Self {
        self.push(8, &p.0.to_ne_bytes())
    }

    /// An `int`.
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.push(4, &v.to_ne_bytes())
    }

    /// An `unsigned int`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.push(4, &v.to_ne_bytes())
    }

    /// An `unsigned long long`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.push(8, &v.to_ne_bytes())
    }

    /// A `float`.
    pub fn f32(&mut self, v: f32) -> &mut Self {
        self.push(4, &v.to_ne_bytes())
    }

    /// The whole buffer, prologue included.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Bytes in the buffer, prologue included.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: the prologue is always there.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The kernel's own arguments (everything after the prologue, from the
    /// prologue's end, padding included).
    pub fn user_bytes(&self) -> &[u8] {
        &self.bytes[PROLOGUE_BYTES..]
    }
}

/// Writes the prologue parameters into a parameter buffer copied from
/// [`KernelArgs::as_bytes`]. `params` must be at least [`PROLOGUE_BYTES`]
/// long (every [`KernelArgs`] is).
pub fn write_prologue(params: &mut [u8], ctl: DevicePtr, kidx: u32) {
    params[PROLOGUE_CTL_OFFSET..PROLOGUE_CTL_OFFSET + 8].copy_from_slice(&ctl.0.to_ne_bytes());
    params[PROLOGUE_KIDX_OFFSET..PROLOGUE_KIDX_OFFSET + 4].copy_from_slice(&kidx.to_ne_bytes());
}

/// Reads the prologue parameters back; `None` when `params` is too short.
pub fn read_prologue(params: &[u8]) -> Option<(DevicePtr, u32)> {
    let ctl = params.get(PROLOGUE_CTL_OFFSET..PROLOGUE_CTL_OFFSET + 8)?;
    let kidx = params.get(PROLOGUE_KIDX_OFFSET..PROLOGUE_KIDX_OFFSET + 4)?;
    Some((
        DevicePtr(u64::from_ne_bytes(ctl.try_into().ok()?)),
        u32::from_ne_bytes(kidx.try_into().ok()?),
    ))
}

/// A driver call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// A CUDA driver API call returned an error code.
    #[error(
        "{call} failed with {name} ({code}): {description}; a sticky error such as \
         CUDA_ERROR_ILLEGAL_ADDRESS or CUDA_ERROR_LAUNCH_FAILED means the context is lost \
         and the daemon must be restarted"
    )]
    Cuda {
        /// The driver function, e.g. `cuLaunchKernel`.
        call: &'static str,
        /// The `CUresult` value.
        code: u32,
        /// Its name, e.g. `CUDA_ERROR_INVALID_VALUE`.
        name: String,
        /// The driver's description of it.
        description: String,
    },
    /// A handle that this driver never gave out, or has freed.
    #[error(
        "{handle} is not a live handle of this driver (never created, or already freed); \
         this is a bug in the caller"
    )]
    UnknownHandle {
        /// The handle, e.g. `StreamId#3`.
        handle: String,
    },
    /// A range outside the buffer it names.
    #[error(
        "{what}: bytes {offset}..{end} are outside the {len}-byte buffer; this is a bug in \
         the caller",
        end = offset.saturating_add(*count)
    )]
    OutOfBounds {
        /// Which operation and buffer, e.g. `write_host HostBufId#2`.
        what: String,
        /// First byte asked for.
        offset: usize,
        /// Bytes asked for.
        count: usize,
        /// Size of the buffer.
        len: usize,
    },
    /// A bad argument, named with its value and what is allowed.
    #[error("{0}")]
    Invalid(String),
    /// The driver lacks a feature: what, what it needs, what was found and
    /// what to do.
    #[error("{feature} need {needed}; {found}")]
    Unsupported {
        /// The feature, e.g. `green contexts (spatial partitions)`.
        feature: &'static str,
        /// What it needs, e.g. the CUDA version and entry points.
        needed: String,
        /// What this driver has, and the fix.
        found: String,
    },
}

/// The error for a driver without green contexts: `driver_version` as
/// `cuDriverGetVersion` reports it (e.g. 12020), `missing` the first entry
/// point not found.
pub fn green_ctx_unsupported(driver_version: i32, missing: &str) -> DriverError {
    DriverError::Unsupported {
        feature: "green contexts (spatial SM partitions)",
        needed: format!(
            "CUDA {}.{} or later (NVIDIA driver 550 or later) with cuDeviceGetDevResource, \
             cuDevSmResourceSplitByCount, cuDevResourceGenerateDesc, cuGreenCtxCreate and \
             cuGreenCtxStreamCreate",
            GREEN_CTX_MIN_DRIVER / 1000,
            GREEN_CTX_MIN_DRIVER % 1000 / 10
        ),
        found: format!(
            "this driver reports CUDA {}.{} (cuDriverGetVersion = {driver_version}) and lacks \
             {missing}; update the NVIDIA driver, or run without partitions (every stream then \
             shares all SMs)",
            driver_version / 1000,
            driver_version % 1000 / 10
        ),
    }
}

/// The CUDA driver operations the queue logic needs.
///
/// One thread drives a driver (the dispatcher); the trait takes `&mut self`
/// throughout. Work on one stream runs in issue order; work on different
/// streams may overlap.
pub trait CuDriver: Send + fmt::Debug {
    /// The driver's clock in ns: `CLOCK_MONOTONIC` for the real driver,
    /// virtual time for the fake. Preemption latencies are measured on it.
    fn now_ns(&self) -> u64;

    /// Waits a little for the device to make progress, for loops that poll
    /// events: the real driver spins once (`spin_loop` hint); the fake
    /// advances virtual time to the next thing that happens on any stream.
    fn wait_for_progress(&mut self);

    /// Creates a non-blocking stream with the given priority.
    fn create_stream(&mut self, priority: StreamPriority) -> Result<StreamId, DriverError>;

    /// Whether everything issued to `stream` has completed (`cuStreamQuery`).
    fn stream_idle(&mut self, stream: StreamId) -> Result<bool, DriverError>;

    /// Allocates a zeroed [`SluiceCtl`] the kernels can read (device memory
    /// on the real driver).
    fn create_ctl(&mut self) -> Result<CtlId, DriverError>;

    /// The device address of `ctl`, the kernels' first parameter.
    fn ctl_device_ptr(&self, ctl: CtlId) -> Result<DevicePtr, DriverError>;

    /// Stores `preempt` (1 or 0) into `ctl.preempt`; when it returns, the
    /// value is where kernels read it: every kernel sees it at its next flag
    /// check (the real driver: one 4-byte copy on its control stream,
    /// waited for).
    fn set_preempt(&mut self, ctl: CtlId, preempt: bool) -> Result<(), DriverError>;

    /// Loads `ctl.started` (the real driver: one 8-byte copy, waited for).
    /// Meaningful once the kernels that may write it have finished.
    fn read_started(&mut self, ctl: CtlId) -> Result<u64, DriverError>;

    /// Stores 0 into `ctl.started`. Only while no kernel of the queue is
    /// outstanding (a running kernel could race with the store).
    fn reset_started(&mut self, ctl: CtlId) -> Result<(), DriverError>;

    /// Loads a module from a PTX (or cubin) image (`cuModuleLoadData`).
    fn load_module(&mut self, image: &str) -> Result<ModuleId, DriverError>;

    /// Looks up the `extern "C"` kernel `name` in `module`.
    fn kernel(&mut self, module: ModuleId, name: &str) -> Result<KernelHandle, DriverError>;

    /// Allocates `len` bytes of device memory.
    fn alloc_device(&mut self, len: usize) -> Result<DevicePtr, DriverError>;

    /// Frees device memory from [`CuDriver::alloc_device`]. Only once no
    /// issued command uses it.
    fn free_device(&mut self, ptr: DevicePtr) -> Result<(), DriverError>;

    /// Allocates `len` bytes of zeroed pinned host memory for copies.
    fn alloc_host(&mut self, len: usize) -> Result<HostBufId, DriverError>;

    /// Copies `data` into `buf` at `offset`. Bytes a pending copy reads may
    /// change under it: write before issuing the copy.
    fn write_host(&mut self, buf: HostBufId, offset: usize, data: &[u8])
    -> Result<(), DriverError>;

    /// Copies bytes of `buf` from `offset` into `out`. Read after the copy
    /// that fills them has completed.
    fn read_host(
        &mut self,
        buf: HostBufId,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), DriverError>;

    /// Frees pinned host memory (waiting first for any copy that uses it).
    fn free_host(&mut self, buf: HostBufId) -> Result<(), DriverError>;

    /// Launches `kernel` on `stream` with the parameter buffer `params`
    /// (a [`KernelArgs`] with its prologue written).
    fn launch(
        &mut self,
        stream: StreamId,
        kernel: KernelHandle,
        dims: &LaunchDims,
        params: &[u8],
    ) -> Result<(), DriverError>;

    /// Copies `len` bytes from `src` at `src_offset` to device memory `dst`,
    /// asynchronously on `stream`.
    fn copy_to_device(
        &mut self,
        stream: StreamId,
        dst: DevicePtr,
        src: HostBufId,
        src_offset: usize,
        len: usize,
    ) -> Result<(), DriverError>;

    /// Copies `len` bytes from device memory `src` to `dst` at `dst_offset`,
    /// asynchronously on `stream`.
    fn copy_to_host(
        &mut self,
        stream: StreamId,
        dst: HostBufId,
        dst_offset: usize,
        src: DevicePtr,
        len: usize,
    ) -> Result<(), DriverError>;

    /// Sets `len` bytes at `dst` to `value`, asynchronously on `stream`.
    fn memset_d8(
        &mut self,
        stream: StreamId,
        dst: DevicePtr,
        value: u8,
        len: usize,
    ) -> Result<(), DriverError>;

    /// Records an event on `stream` after everything issued so far.
    fn record_event(&mut self, stream: StreamId) -> Result<EventId, DriverError>;

    /// Whether `event` has completed (`cuEventQuery`).
    fn event_done(&mut self, event: EventId) -> Result<bool, DriverError>;

    /// Gives `event` back for reuse; only once it has completed.
    fn release_event(&mut self, event: EventId) -> Result<(), DriverError>;

    /// Makes everything issued to `stream` from now on wait until `event`
    /// (as last recorded) has completed, without blocking the host
    /// (`cuStreamWaitEvent`). The wait is captured at the call: releasing
    /// and re-recording `event` later does not change it.
    fn stream_wait_event(&mut self, stream: StreamId, event: EventId) -> Result<(), DriverError>;

    /// How the device's SMs split into green contexts (the split is made
    /// once, on the first call). [`DriverError::Unsupported`] when the
    /// driver has no green contexts (CUDA older than 12.4, or an entry
    /// point missing), naming the version found.
    fn sm_granules(&mut self) -> Result<SmGranules, DriverError>;

    /// Creates a green context on the granules `set` of
    /// [`CuDriver::sm_granules`]' split (`cuDevResourceGenerateDesc` on those
    /// groups, then `cuGreenCtxCreate`). Its SMs are `granule_sms ×
    /// set.len()`. Lives as long as the driver.
    fn create_green_ctx(&mut self, set: GranuleSet) -> Result<GreenCtxId, DriverError>;

    /// Creates a non-blocking stream with `priority` whose kernels run only
    /// on `ctx`'s SMs (`cuGreenCtxStreamCreate`). It takes the same
    /// commands, control blocks, kernels and memory as any other stream.
    fn create_green_stream(
        &mut self,
        ctx: GreenCtxId,
        priority: StreamPriority,
    ) -> Result<StreamId, DriverError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_follow_natural_alignment_after_the_prologue() {
        let mut a = KernelArgs::new();
        assert_eq!(a.len(), PROLOGUE_BYTES);
        // First pointer after `unsigned int kidx` at 8..12 is padded to 16.
        a.ptr(DevicePtr(0xdead_beef));
        assert_eq!(a.len(), 24);
        a.i32(-3).u64(7);
        // i32 at 24..28, u64 padded to 32..40.
        assert_eq!(a.len(), 40);
        assert_eq!(&a.as_bytes()[16..24], &0xdead_beef_u64.to_ne_bytes());
        assert_eq!(&a.as_bytes()[24..28], &(-3i32).to_ne_bytes());
        assert_eq!(&a.as_bytes()[28..32], &[0; 4]);
        assert_eq!(&a.as_bytes()[32..40], &7u64.to_ne_bytes());
        assert_eq!(a.user_bytes().len(), 40 - PROLOGUE_BYTES);
    }

    #[test]
    fn prologue_round_trips() {
        let mut a = KernelArgs::new();
        a.f32(2.5);
        let mut buf = a.as_bytes().to_vec();
        assert_eq!(read_prologue(&buf), Some((DevicePtr(0), 0)));
        write_prologue(&mut buf, DevicePtr(0x7000_0040), 41);
        assert_eq!(read_prologue(&buf), Some((DevicePtr(0x7000_0040), 41)));
        assert_eq!(&buf[12..16], &2.5f32.to_ne_bytes(), "user args untouched");
        assert_eq!(read_prologue(&buf[..11]), None);
    }

    #[test]
    fn errors_name_the_value() {
        let e = DriverError::OutOfBounds {
            what: "write_host HostBufId#2".into(),
            offset: 10,
            count: 8,
            len: 12,
        };
        assert_eq!(
            e.to_string(),
            "write_host HostBufId#2: bytes 10..18 are outside the 12-byte buffer; this is a bug \
             in the caller"
        );
        let e = DriverError::UnknownHandle {
            handle: StreamId(3).to_string(),
        };
        assert!(
            e.to_string().starts_with("StreamId#3 is not a live handle"),
            "{e}"
        );
    }
}
