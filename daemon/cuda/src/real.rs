//! [`CuDriver`] over the CUDA driver API, through cudarc with `libcuda`
//! loaded at run time (feature `cuda`).
//!
//! - [`probe`] says whether this machine can run the CUDA backend, and why
//!   not, without ever panicking: cudarc's run-time loader panics inside a
//!   lazily initialised static when `libcuda` is missing (`culib()` in
//!   `cudarc::driver::sys`), so [`probe`] first `dlopen`s `libcuda.so.1`
//!   itself through libc, then asks cudarc's own non-panicking
//!   `is_culib_present`, and only then calls into cudarc.
//! - [`CudaDriver`] owns the device's primary context (one per daemon) and
//!   every stream, control block, event, module and allocation it hands out;
//!   handles are indices into its tables, so a stale handle is an error
//!   rather than a dangling pointer given to CUDA. The context is made
//!   current on whichever thread calls (cheap thread-local check).
//!
//! Kernel parameters are passed as one buffer (`CU_LAUNCH_PARAM_BUFFER_*`
//! in `cuLaunchKernel`'s `extra`), so the driver copies exactly the bytes we
//! hand it and never reads past them, whatever the kernel's signature.
//!
//! Green contexts (spatial partitions, CUDA ≥ 12.4) go through entry points
//! this module resolves itself from cudarc's loaded `libcuda` handle
//! ([`GreenApi`]): cudarc's `sys` wrappers for them (`cuGreenCtxCreate`, …)
//! exist in its `cuda-12040` bindings but panic when the symbol is missing,
//! so calling them on an older driver would abort the dispatcher instead of
//! answering "not supported".
//!
//! Run on an NVIDIA H200 on 2026-11-28 (its `real` tests pass there; the CI
//! machines have no GPU, where the tests check only that a missing driver
//! is reported); `docs/hardware.md` has the measurements and
//! `docs/cuda-backend.md` lists what is verified and what is not.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_void};
use std::fmt;
use std::mem::{offset_of, size_of};
use std::ptr;

use cudarc::driver::sys;

use super::driver::{
    CtlId, CuDriver, DevicePtr, DriverError, EventId, GREEN_CTX_MIN_DRIVER, GranuleSet, GreenCtxId,
    HostBufId, KernelHandle, LaunchDims, MAX_GRANULES, MAX_PARAM_BYTES, ModuleId, SluiceCtl,
    SmGranules, StreamId, StreamPriority, green_ctx_unsupported,
};

/// The library the NVIDIA driver installs (`libcuda.so.1`, the soname).
pub const LIBCUDA: &CStr = c"libcuda.so.1";

/// What [`probe`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaInfo {
    /// Number of CUDA devices.
    pub devices: i32,
    /// Name of the device (device 0 for [`probe`]), e.g.
    /// `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Its compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Its streaming multiprocessors.
    pub sm_count: i32,
    /// Its memory in bytes.
    pub total_mem: usize,
    /// The driver's CUDA version, e.g. 12040 for 12.4.
    pub driver_version: i32,
}

impl fmt::Display for CudaInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (compute capability {}.{}, {} SMs, {:.1} GiB; {} device{}), CUDA driver {}.{}",
            self.name,
            self.compute_capability.0,
            self.compute_capability.1,
            self.sm_count,
            self.total_mem as f64 / f64::from(1u32 << 30),
            self.devices,
            if self.devices == 1 { "" } else { "s" },
            self.driver_version / 1000,
            self.driver_version % 1000 / 10,
        )
    }
}

/// Why this machine cannot run the CUDA backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaUnavailable {
    /// The driver library is not installed (or not on the loader's path).
    #[error(
        "{library} not found: no NVIDIA driver on this machine ({detail}); install the NVIDIA \
         driver, or set device.backend = \"sim\""
    )]
    NoLibrary {
        /// The library, e.g. `libcuda.so.1`.
        library: String,
        /// What the dynamic loader said.
        detail: String,
    },
    /// `libcuda.so.1` loads, but none of the names cudarc tries does.
    #[error(
        "{library} loads, but cudarc finds none of its library names (libcuda.so, \
         libcuda.so.1, …) loadable; check LD_LIBRARY_PATH"
    )]
    CudarcCannotLoad {
        /// The library that did load.
        library: String,
    },
    /// `cuInit` failed.
    #[error(
        "cuInit failed with {name}: {description}; check that nvidia-smi lists the GPU and that \
         the daemon's user may open /dev/nvidia*"
    )]
    Init {
        /// The error's name, e.g. `CUDA_ERROR_NO_DEVICE`.
        name: String,
        /// The driver's description.
        description: String,
    },
    /// The driver reports no device.
    #[error("the NVIDIA driver reports no CUDA device; check nvidia-smi and CUDA_VISIBLE_DEVICES")]
    NoDevice,
    /// A device query failed.
    #[error("{0}")]
    Query(DriverError),
    /// cudarc panicked (a symbol missing from an old or partial libcuda).
    #[error(
        "loading the CUDA driver API failed: {0}; the driver is probably older than CUDA 12.4, \
         which sluice's bindings need"
    )]
    Panicked(String),
}

/// Turns a `CUresult` into our error, naming the call.
fn check(call: &'static str, r: sys::CUresult) -> Result<(), DriverError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut name: *const std::ffi::c_char = ptr::null();
    let mut desc: *const std::ffi::c_char = ptr::null();
    // SAFETY: both functions only write a pointer to a static string (or
    // leave it untouched on failure); the out-pointers are valid locals.
    unsafe {
        let _ = sys::cuGetErrorName(r, &mut name);
        let _ = sys::cuGetErrorString(r, &mut desc);
    }
    let text = |p: *const std::ffi::c_char| {
        if p.is_null() {
            "unknown".to_owned()
        } else {
            // SAFETY: non-null results point at NUL-terminated static
            // strings owned by the driver.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    Err(DriverError::Cuda {
        call,
        code: r as u32,
        name: text(name),
        description: text(desc),
    })
}

/// Whether this machine can run the CUDA backend: device 0's name,
/// compute capability, SM count and memory, and the driver version, or why
/// not. Never panics when the driver is missing.
pub fn probe() -> Result<CudaInfo, CudaUnavailable> {
    probe_library(LIBCUDA)
}

/// [`probe`] with another driver library name (tests use a name that does
/// not exist).
fn probe_library(library: &CStr) -> Result<CudaInfo, CudaUnavailable> {
    let lib = library.to_string_lossy().into_owned();
    // cudarc would panic on a missing library: check with dlopen first.
    // SAFETY: `library` is NUL-terminated. Loading libcuda runs its
    // initialisers, as cudarc's own loading would; the handle is closed
    // again (the library stays loaded while cudarc holds its own handle).
    let handle = unsafe { libc::dlopen(library.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns null or a NUL-terminated string that stays
        // valid until the next dl* call on this thread; we copy it at once.
        let detail = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                "dlopen failed".to_owned()
            } else {
                CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(CudaUnavailable::NoLibrary {
            library: lib,
            detail,
        });
    }
    // SAFETY: `handle` came from a successful dlopen and is closed once.
    unsafe { libc::dlclose(handle) };
    // SAFETY: only tries to load the library under cudarc's candidate names
    // (libloading), no symbol is called.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaUnavailable::CudarcCannotLoad { library: lib });
    }
    // The library is there, so cudarc's loader will not panic for it; a
    // symbol missing from an old driver still would, so catch that too.
    std::panic::catch_unwind(|| query_device(0)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "unknown panic".to_owned());
        Err(CudaUnavailable::Panicked(msg))
    })
}

/// Initialises the driver API and describes device `ordinal` (0 when there
/// is at least one device). Call only once the library is known present.
fn query_device(ordinal: i32) -> Result<CudaInfo, CudaUnavailable> {
    // SAFETY: cuInit takes flags 0 and may be called any number of times.
    let init = unsafe { sys::cuInit(0) };
    if let Err(DriverError::Cuda {
        name, description, ..
    }) = check("cuInit", init)
    {
        return Err(CudaUnavailable::Init { name, description });
    }
    let q = CudaUnavailable::Query;
    let mut devices = 0;
    // SAFETY: valid out-pointer; the driver is initialised.
    check("cuDeviceGetCount", unsafe {
        sys::cuDeviceGetCount(&mut devices)
    })
    .map_err(q)?;
    if devices < 1 {
        return Err(CudaUnavailable::NoDevice);
    }
    let dev = device(ordinal).map_err(q)?;
    let attr = |a| attribute(dev, a).map_err(q);
    use sys::CUdevice_attribute as A;
    let mut total_mem = 0usize;
    // SAFETY: `dev` is a device handle from cuDeviceGet; valid out-pointer.
    check("cuDeviceTotalMem_v2", unsafe {
        sys::cuDeviceTotalMem_v2(&mut total_mem, dev)
    })
    .map_err(q)?;
    let mut driver_version = 0;
    // SAFETY: valid out-pointer.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&mut driver_version)
    })
    .map_err(q)?;
    Ok(CudaInfo {
        devices,
        name: device_name(dev).map_err(q)?,
        compute_capability: (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        total_mem,
        driver_version,
    })
}

fn device(ordinal: i32) -> Result<sys::CUdevice, DriverError> {
    let mut dev = 0;
    // SAFETY: valid out-pointer; an out-of-range ordinal is an error code.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut dev, ordinal)
    })?;
    Ok(dev)
}

fn attribute(dev: sys::CUdevice, a: sys::CUdevice_attribute) -> Result<i32, DriverError> {
    let mut v = 0;
    // SAFETY: `dev` comes from cuDeviceGet; valid out-pointer.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut v, a, dev)
    })?;
    Ok(v)
}

fn device_name(dev: sys::CUdevice) -> Result<String, DriverError> {
    let mut buf = [0u8; 256];
    // SAFETY: the driver writes at most `len` bytes, NUL included, into the
    // buffer; `dev` comes from cuDeviceGet.
    check("cuDeviceGetName", unsafe {
        sys::cuDeviceGetName(buf.as_mut_ptr().cast(), buf.len() as i32, dev)
    })?;
    Ok(CStr::from_bytes_until_nul(&buf)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default())
}

/// [`CudaDriver::new`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CudaOpenError {
    /// No usable driver.
    #[error(transparent)]
    Unavailable(#[from] CudaUnavailable),
    /// No device with that ordinal.
    #[error("there is no CUDA device {ordinal}: the driver reports {count}; use 0..{count}")]
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: i32,
        /// Devices present.
        count: i32,
    },
    /// Setting up the context failed.
    #[error("setting up the CUDA context on device {ordinal}")]
    Context {
        /// The device.
        ordinal: i32,
        /// What the driver said.
        #[source]
        source: DriverError,
    },
}

/// One control block: the [`SluiceCtl`] the kernels read, in device
/// memory, and a pinned host page that stages the host's copies to and from
/// it ([`Staging`]).
///
/// The block was host-mapped pinned memory until an H200 in a Firecracker
/// VM showed that the GPU's reads of host memory are serialised at about
/// 1 us each: every block's prologue read cost ~0.9 us of kernel time
/// (`sluice_eltwise` over 392 blocks: 357 us against 3.7 us with the block
/// in device memory) and the synthetic kernel's per-warp polls cost ~1 ms
/// per kernel of 132 x 256 threads (`real::tests::flag_cost_on_this_machine`,
/// docs/hardware.md). In device memory the reads stay on the GPU; the host
/// writes the flag and reads `started` with small copies on its own stream
/// ([`CudaDriver::ctl_stream`]), each waited for, so the semantics are the
/// old ones: when `set_preempt` returns, every kernel that starts sees it.
#[derive(Debug)]
struct Ctl {
    host: *mut Staging,
    dev: sys::CUdeviceptr,
}

/// The pinned page behind one control block's copies. `zero` and `one` are
/// the flag values copied to the device and never change; `started` lands
/// the device's execution index; `zero64` clears it.
#[repr(C)]
#[derive(Debug)]
struct Staging {
    zero: u32,
    one: u32,
    started: u64,
    zero64: u64,
}

#[derive(Debug)]
struct HostBuf {
    ptr: *mut u8,
    len: usize,
}

/// The green-context entry points (CUDA 12.4), resolved at run time from
/// the `libcuda` cudarc loaded. Signatures as in cudarc's `cuda-12040`
/// bindings (`cuda.h` of CUDA 12.4).
#[derive(Debug, Clone, Copy)]
struct GreenApi {
    get_dev_resource: unsafe extern "C" fn(
        sys::CUdevice,
        *mut sys::CUdevResource,
        sys::CUdevResourceType,
    ) -> sys::CUresult,
    split_by_count: unsafe extern "C" fn(
        *mut sys::CUdevResource,
        *mut std::ffi::c_uint,
        *const sys::CUdevResource,
        *mut sys::CUdevResource,
        std::ffi::c_uint,
        std::ffi::c_uint,
    ) -> sys::CUresult,
    generate_desc: unsafe extern "C" fn(
        *mut sys::CUdevResourceDesc,
        *mut sys::CUdevResource,
        std::ffi::c_uint,
    ) -> sys::CUresult,
    create: unsafe extern "C" fn(
        *mut sys::CUgreenCtx,
        sys::CUdevResourceDesc,
        sys::CUdevice,
        std::ffi::c_uint,
    ) -> sys::CUresult,
    destroy: unsafe extern "C" fn(sys::CUgreenCtx) -> sys::CUresult,
    to_ctx: unsafe extern "C" fn(*mut sys::CUcontext, sys::CUgreenCtx) -> sys::CUresult,
    stream_create: unsafe extern "C" fn(
        *mut sys::CUstream,
        sys::CUgreenCtx,
        std::ffi::c_uint,
        std::ffi::c_int,
    ) -> sys::CUresult,
}

impl GreenApi {
    /// Resolves every entry point; `Err` names the first one missing.
    fn resolve() -> Result<Self, &'static str> {
        // SAFETY: a CudaDriver exists, so probe() found the library and
        // cudarc's `culib()` returns its handle without panicking.
        let lib = unsafe { sys::culib() };
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol, when present, is the CUDA 12.4 driver
                // function of that name, whose C signature is the field's
                // type (cudarc's cuda-12040 bindings); the library stays
                // loaded for the process (cudarc's static handle).
                unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map(|s| *s)
                    .map_err(|_| $name)?
            };
        }
        Ok(Self {
            get_dev_resource: sym!("cuDeviceGetDevResource"),
            split_by_count: sym!("cuDevSmResourceSplitByCount"),
            generate_desc: sym!("cuDevResourceGenerateDesc"),
            create: sym!("cuGreenCtxCreate"),
            destroy: sym!("cuGreenCtxDestroy"),
            to_ctx: sym!("cuCtxFromGreenCtx"),
            stream_create: sym!("cuGreenCtxStreamCreate"),
        })
    }
}

/// The device's SM split for green contexts, made once.
struct Green {
    api: GreenApi,
    layout: SmGranules,
    /// The split's groups, one per granule.
    groups: Vec<sys::CUdevResource>,
    ctxs: Vec<sys::CUgreenCtx>,
}

impl fmt::Debug for Green {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Green")
            .field("layout", &self.layout)
            .field("green_ctxs", &self.ctxs.len())
            .finish_non_exhaustive()
    }
}

thread_local! {
    /// The context last made current on this thread (as an address).
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// Bytes of a control block allocation (one cache line each).
const CTL_ALLOC: usize = 64;

/// The CUDA driver for one device and its primary context.
#[derive(Debug)]
pub struct CudaDriver {
    ordinal: i32,
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    info: CudaInfo,
    priorities: (i32, i32),
    streams: Vec<sys::CUstream>,
    ctls: Vec<Ctl>,
    /// The stream of the control blocks' copies (highest priority,
    /// non-blocking), made with the first control block.
    ctl_stream: Option<sys::CUstream>,
    events: Vec<sys::CUevent>,
    event_in_use: Vec<bool>,
    free_events: Vec<u32>,
    modules: Vec<sys::CUmodule>,
    kernels: Vec<sys::CUfunction>,
    host: Vec<Option<HostBuf>>,
    device_allocs: BTreeMap<u64, usize>,
    /// 8-aligned copy of the parameter buffer of the launch in progress.
    params: Box<[u64; MAX_PARAM_BYTES / 8]>,
    /// Green contexts: `None` until first asked; then the split, or why
    /// there is none.
    green: Option<Result<Green, DriverError>>,
}

// SAFETY: every raw pointer in CudaDriver is a CUDA driver handle or an
// address of pinned memory the driver owns and frees only in Drop; CUDA
// driver handles may be used from any thread once the context is current
// there, which `bind` ensures before every call. The driver is driven by one
// thread at a time (`&mut self`), it is only moved between threads.
unsafe impl Send for CudaDriver {}

impl CudaDriver {
    /// Opens device `ordinal`: retains its primary context (the daemon's
    /// one context) and reads its stream priority range.
    pub fn new(ordinal: i32) -> Result<Self, CudaOpenError> {
        let info = probe()?;
        if !(0..info.devices).contains(&ordinal) {
            return Err(CudaOpenError::NoSuchDevice {
                ordinal,
                count: info.devices,
            });
        }
        // probe() found the library, so cudarc's loader will not panic.
        let info = if ordinal == 0 {
            info
        } else {
            query_device(ordinal)?
        };
        let ctx_err = |source| CudaOpenError::Context { ordinal, source };
        let dev = device(ordinal).map_err(ctx_err)?;
        let mut ctx = ptr::null_mut();
        // SAFETY: `dev` comes from cuDeviceGet; valid out-pointer. Released
        // in Drop.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
        })
        .map_err(ctx_err)?;
        let mut d = Self {
            ordinal,
            dev,
            ctx,
            info,
            priorities: (0, 0),
            streams: Vec::new(),
            ctls: Vec::new(),
            ctl_stream: None,
            events: Vec::new(),
            event_in_use: Vec::new(),
            free_events: Vec::new(),
            modules: Vec::new(),
            kernels: Vec::new(),
            host: Vec::new(),
            device_allocs: BTreeMap::new(),
            params: Box::new([0; MAX_PARAM_BYTES / 8]),
            green: None,
        };
        d.bind().map_err(ctx_err)?;
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: the context is current; valid out-pointers.
        check("cuCtxGetStreamPriorityRange", unsafe {
            sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest)
        })
        .map_err(ctx_err)?;
        d.priorities = (least, greatest);
        Ok(d)
    }

    /// The device's name, compute capability, SMs and memory, and the
    /// driver version.
    pub fn info(&self) -> &CudaInfo {
        &self.info
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    /// Makes the context current on the calling thread if it is not yet.
    fn bind(&self) -> Result<(), DriverError> {
        let me = self.ctx as usize;
        if CURRENT.with(Cell::get) == me {
            return Ok(());
        }
        // SAFETY: `ctx` is the retained primary context, alive until Drop.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })?;
        CURRENT.with(|c| c.set(me));
        Ok(())
    }

    fn stream(&self, s: StreamId) -> Result<sys::CUstream, DriverError> {
        self.streams
            .get(s.0 as usize)
            .copied()
            .ok_or_else(|| unknown(s))
    }

    fn ctl(&self, c: CtlId) -> Result<&Ctl, DriverError> {
        self.ctls.get(c.0 as usize).ok_or_else(|| unknown(c))
    }

    fn host_range(
        &self,
        b: HostBufId,
        offset: usize,
        len: usize,
        what: &str,
    ) -> Result<*mut u8, DriverError> {
        let h = self
            .host
            .get(b.0 as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| unknown(b))?;
        if offset.checked_add(len).is_none_or(|end| end > h.len) {
            return Err(DriverError::OutOfBounds {
                what: format!("{what} {b}"),
                offset,
                count: len,
                len: h.len,
            });
        }
        // SAFETY: offset + len <= h.len, inside the allocation.
        Ok(unsafe { h.ptr.add(offset) })
    }

    /// Checks that `ptr..ptr+len` lies in one allocation of this driver.
    fn device_range(&self, ptr: DevicePtr, len: usize, what: &str) -> Result<(), DriverError> {
        let Some((&base, &alloc_len)) = self.device_allocs.range(..=ptr.0).next_back() else {
            return Err(DriverError::Invalid(format!(
                "{what}: device address {ptr} is not in any allocation of this driver"
            )));
        };
        let offset = (ptr.0 - base) as usize;
        if offset.checked_add(len).is_none_or(|end| end > alloc_len) {
            return Err(DriverError::OutOfBounds {
                what: format!("{what} at {ptr} in the allocation at {base:#x}"),
                offset,
                count: len,
                len: alloc_len,
            });
        }
        Ok(())
    }

    /// Resolves the green-context entry points and splits the device's
    /// SMs into granules (`cuDevSmResourceSplitByCount`, `minCount` = the
    /// default granule of its compute capability).
    fn split_sms(&self) -> Result<Green, DriverError> {
        let version = self.info.driver_version;
        let api = GreenApi::resolve().map_err(|missing| green_ctx_unsupported(version, missing))?;
        if version < GREEN_CTX_MIN_DRIVER {
            return Err(green_ctx_unsupported(
                version,
                "the green-context behaviour of CUDA 12.4 (its entry points are there)",
            ));
        }
        self.bind()?;
        // SAFETY: all-zero is a valid CUdevResource (type INVALID, zeroed
        // payload), a plain C struct.
        let mut all: sys::CUdevResource = unsafe { std::mem::zeroed() };
        // SAFETY: `dev` is this driver's device; valid out-pointer of the
        // struct type the 12.4 entry point writes.
        check("cuDeviceGetDevResource", unsafe {
            (api.get_dev_resource)(
                self.dev,
                &mut all,
                sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM,
            )
        })?;
        // SAFETY: an SM resource: the union's `sm` member is the one written.
        let sm_count = unsafe { all.__bindgen_anon_1.sm.smCount };
        let cc = (
            u32::try_from(self.info.compute_capability.0).unwrap_or(0),
            u32::try_from(self.info.compute_capability.1).unwrap_or(0),
        );
        let want = SmGranules::for_device(sm_count, cc);
        let mut n = want.granules.max(1);
        // SAFETY: as above.
        let mut groups: Vec<sys::CUdevResource> = vec![unsafe { std::mem::zeroed() }; n as usize];
        // SAFETY: as above.
        let mut rest: sys::CUdevResource = unsafe { std::mem::zeroed() };
        // SAFETY: `groups` has room for `n` results, `n` says so and gets
        // the count made; `all` came from cuDeviceGetDevResource.
        check("cuDevSmResourceSplitByCount", unsafe {
            (api.split_by_count)(
                groups.as_mut_ptr(),
                &mut n,
                &all,
                &mut rest,
                0,
                want.granule_sms,
            )
        })?;
        groups.truncate(n.min(MAX_GRANULES) as usize);
        // SAFETY: split results are SM resources.
        let sizes: Vec<u32> = groups
            .iter()
            .map(|g| unsafe { g.__bindgen_anon_1.sm.smCount })
            .collect();
        let granule_sms = sizes.first().copied().unwrap_or(0);
        if granule_sms == 0 || sizes.iter().any(|&s| s != granule_sms) {
            return Err(DriverError::Invalid(format!(
                "cuDevSmResourceSplitByCount(minCount = {}) on {sm_count} SMs gave groups of \
                 {sizes:?} SMs; sluice needs equal groups to map partitions onto them",
                want.granule_sms
            )));
        }
        Ok(Green {
            api,
            layout: SmGranules {
                sm_count,
                granule_sms,
                granules: groups.len() as u32,
                compute_capability: cc,
            },
            groups,
            ctxs: Vec::new(),
        })
    }

    fn green(&mut self) -> Result<&mut Green, DriverError> {
        if self.green.is_none() {
            self.green = Some(self.split_sms());
        }
        match self.green.as_mut() {
            Some(Ok(g)) => Ok(g),
            Some(Err(e)) => Err(e.clone()),
            None => unreachable!("set above"),
        }
    }

    /// The control blocks' stream: highest priority, non-blocking, made
    /// once. Its copies are tiny and run on the copy engines, never waiting
    /// for SMs that busy kernels hold.
    fn ctl_stream(&mut self) -> Result<sys::CUstream, DriverError> {
        if let Some(s) = self.ctl_stream {
            return Ok(s);
        }
        self.bind()?;
        let mut s = ptr::null_mut();
        // SAFETY: the context is current; valid out-pointer. Destroyed in
        // Drop.
        check("cuStreamCreateWithPriority (control stream)", unsafe {
            sys::cuStreamCreateWithPriority(
                &mut s,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                self.priorities.1,
            )
        })?;
        self.ctl_stream = Some(s);
        Ok(s)
    }

    /// Copies `len` bytes of `ctl`'s staging page at `src_off` (a constant
    /// word: `zero`, `one` or `zero64`) to its device block at `dst_off`, on
    /// the control stream, and waits.
    fn ctl_upload(
        &mut self,
        ctl: CtlId,
        what: &'static str,
        dst_off: usize,
        src_off: usize,
        len: usize,
    ) -> Result<(), DriverError> {
        debug_assert!(dst_off + len <= CTL_ALLOC && src_off + len <= size_of::<Staging>());
        let (host, dev) = {
            let c = self.ctl(ctl)?;
            (c.host, c.dev)
        };
        // SAFETY: in bounds of the live staging page (asserted above; the
        // callers pass field offsets and sizes).
        let src = unsafe { host.cast::<u8>().add(src_off) }.cast::<c_void>();
        self.ctl_copy(what, |cs| unsafe {
            // SAFETY: `dev + dst_off .. + len` lies in the block's CTL_ALLOC
            // device bytes; `src` is pinned, never written after create_ctl,
            // and outlives the wait.
            sys::cuMemcpyHtoDAsync_v2(dev + dst_off as u64, src, len, cs)
        })
    }

    /// Enqueues one control-block copy on the control stream and waits for
    /// it.
    fn ctl_copy(
        &mut self,
        what: &'static str,
        copy: impl FnOnce(sys::CUstream) -> sys::CUresult,
    ) -> Result<(), DriverError> {
        self.bind()?;
        let cs = self.ctl_stream()?;
        check(what, copy(cs))?;
        // SAFETY: `cs` is this context's live control stream.
        check(what, unsafe { sys::cuStreamSynchronize(cs) })
    }

    fn synchronize(&self) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: the context is current.
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }
}

fn unknown(handle: impl fmt::Display) -> DriverError {
    DriverError::UnknownHandle {
        handle: handle.to_string(),
    }
}

/// `cuStreamQuery`/`cuEventQuery` result: done, not ready, or an error.
fn ready(call: &'static str, r: sys::CUresult) -> Result<bool, DriverError> {
    if r == sys::CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check(call, r).map(|()| true)
}

impl CuDriver for CudaDriver {
    fn now_ns(&self) -> u64 {
        shm_proto::now_ns()
    }

    fn wait_for_progress(&mut self) {
        for _ in 0..64 {
            std::hint::spin_loop();
        }
    }

    fn create_stream(&mut self, priority: StreamPriority) -> Result<StreamId, DriverError> {
        self.bind()?;
        let prio = match priority {
            StreamPriority::RealTime => self.priorities.1,
            StreamPriority::BestEffort => self.priorities.0,
        };
        let mut s = ptr::null_mut();
        // SAFETY: the context is current; valid out-pointer. Destroyed in
        // Drop.
        check("cuStreamCreateWithPriority", unsafe {
            sys::cuStreamCreateWithPriority(
                &mut s,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                prio,
            )
        })?;
        self.streams.push(s);
        Ok(StreamId(self.streams.len() as u32 - 1))
    }

    fn stream_idle(&mut self, stream: StreamId) -> Result<bool, DriverError> {
        let s = self.stream(stream)?;
        self.bind()?;
        // SAFETY: `s` is a live stream of this context.
        ready("cuStreamQuery", unsafe { sys::cuStreamQuery(s) })
    }

    fn create_ctl(&mut self) -> Result<CtlId, DriverError> {
        self.bind()?;
        let cs = self.ctl_stream()?;
        let mut host: *mut c_void = ptr::null_mut();
        // SAFETY: the context is current; valid out-pointer. Freed in Drop
        // (or below on failure).
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(&mut host, CTL_ALLOC, sys::CU_MEMHOSTALLOC_PORTABLE)
        })?;
        let host = host.cast::<Staging>();
        // SAFETY: a fresh page-aligned allocation of CTL_ALLOC >=
        // size_of::<Staging>() bytes, written before any copy reads it.
        unsafe {
            host.write(Staging {
                zero: 0,
                one: 1,
                started: 0,
                zero64: 0,
            });
        }
        let mut dev = 0;
        let zeroed = (|| {
            // SAFETY: the context is current; valid out-pointer.
            check("cuMemAlloc_v2 (control block)", unsafe {
                sys::cuMemAlloc_v2(&mut dev, CTL_ALLOC)
            })?;
            // SAFETY: exactly the CTL_ALLOC bytes just allocated, on the
            // control stream, waited for below.
            check("cuMemsetD8Async (control block)", unsafe {
                sys::cuMemsetD8Async(dev, 0, CTL_ALLOC, cs)
            })?;
            // SAFETY: `cs` is this context's live control stream.
            check("cuStreamSynchronize (control block)", unsafe {
                sys::cuStreamSynchronize(cs)
            })
        })();
        if let Err(e) = zeroed {
            // SAFETY: each came from its allocator and is freed once.
            unsafe {
                if dev != 0 {
                    sys::cuMemFree_v2(dev);
                }
                sys::cuMemFreeHost(host.cast());
            }
            return Err(e);
        }
        self.ctls.push(Ctl { host, dev });
        Ok(CtlId(self.ctls.len() as u32 - 1))
    }

    fn ctl_device_ptr(&self, ctl: CtlId) -> Result<DevicePtr, DriverError> {
        Ok(DevicePtr(self.ctl(ctl)?.dev))
    }

    fn set_preempt(&mut self, ctl: CtlId, preempt: bool) -> Result<(), DriverError> {
        let value = if preempt {
            offset_of!(Staging, one)
        } else {
            offset_of!(Staging, zero)
        };
        // SYNC: the copy is waited for, so when this returns the flag is in
        // device memory, where the kernels' volatile loads read it: every
        // kernel that starts later sees it.
        self.ctl_upload(
            ctl,
            "set the preemption flag",
            offset_of!(SluiceCtl, preempt),
            value,
            size_of::<u32>(),
        )
    }

    fn read_started(&mut self, ctl: CtlId) -> Result<u64, DriverError> {
        let (host, dev) = {
            let c = self.ctl(ctl)?;
            (c.host, c.dev)
        };
        let off = offset_of!(SluiceCtl, started) as u64;
        // SAFETY: `host` is this control block's live Staging.
        let dst = unsafe { (&raw mut (*host).started).cast::<c_void>() };
        // SYNC: called after the queue observed the stream drained
        // (cuEventQuery/cuStreamQuery), so the kernels' atomicMax completed
        // before this copy starts; the copy is waited for before the read.
        self.ctl_copy("read the execution index", |cs| unsafe {
            // SAFETY: the 8-byte `started` inside the block's device bytes
            // into the pinned staging word, which outlives the wait.
            sys::cuMemcpyDtoHAsync_v2(dst, dev + off, 8, cs)
        })?;
        // SAFETY: the copy above completed (waited for); volatile because
        // the DMA engine, not Rust, wrote it.
        Ok(unsafe { ptr::read_volatile(&raw const (*host).started) })
    }

    fn reset_started(&mut self, ctl: CtlId) -> Result<(), DriverError> {
        // No kernel of the queue is outstanding (the caller's contract), so
        // nothing races with this copy.
        self.ctl_upload(
            ctl,
            "reset the execution index",
            offset_of!(SluiceCtl, started),
            offset_of!(Staging, zero64),
            size_of::<u64>(),
        )
    }

    fn load_module(&mut self, image: &str) -> Result<ModuleId, DriverError> {
        self.bind()?;
        let image = CString::new(image).map_err(|e| {
            DriverError::Invalid(format!(
                "module image has a NUL byte at {}; pass PTX text",
                e.nul_position()
            ))
        })?;
        let mut m = ptr::null_mut();
        // SAFETY: the context is current; `image` is a NUL-terminated PTX
        // string alive for the call; valid out-pointer. Unloaded in Drop.
        check("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut m, image.as_ptr().cast())
        })?;
        self.modules.push(m);
        Ok(ModuleId(self.modules.len() as u32 - 1))
    }

    fn kernel(&mut self, module: ModuleId, name: &str) -> Result<KernelHandle, DriverError> {
        let m = self
            .modules
            .get(module.0 as usize)
            .copied()
            .ok_or_else(|| unknown(module))?;
        let cname = CString::new(name)
            .map_err(|_| DriverError::Invalid(format!("kernel name {name:?} has a NUL byte")))?;
        self.bind()?;
        let mut f = ptr::null_mut();
        // SAFETY: `m` is a loaded module of this context; `cname` is
        // NUL-terminated; valid out-pointer.
        check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut f, m, cname.as_ptr())
        })?;
        self.kernels.push(f);
        Ok(KernelHandle(self.kernels.len() as u32 - 1))
    }

    fn alloc_device(&mut self, len: usize) -> Result<DevicePtr, DriverError> {
        self.bind()?;
        let mut p = 0;
        // SAFETY: the context is current; valid out-pointer. Freed in
        // free_device or Drop.
        check("cuMemAlloc_v2", unsafe {
            sys::cuMemAlloc_v2(&mut p, len.max(1))
        })?;
        self.device_allocs.insert(p, len);
        Ok(DevicePtr(p))
    }

    fn free_device(&mut self, ptr: DevicePtr) -> Result<(), DriverError> {
        if !self.device_allocs.contains_key(&ptr.0) {
            return Err(unknown(format!("device allocation {ptr}")));
        }
        self.synchronize()?;
        // SAFETY: `ptr` is a live allocation of this driver, and the context
        // has been synchronised, so no issued command uses it any more.
        check("cuMemFree_v2", unsafe { sys::cuMemFree_v2(ptr.0) })?;
        self.device_allocs.remove(&ptr.0);
        Ok(())
    }

    fn alloc_host(&mut self, len: usize) -> Result<HostBufId, DriverError> {
        self.bind()?;
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: the context is current; valid out-pointer. Freed in
        // free_host or Drop.
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(&mut p, len.max(1), sys::CU_MEMHOSTALLOC_PORTABLE)
        })?;
        // SAFETY: `p` points at `len.max(1)` writable bytes just allocated.
        unsafe { ptr::write_bytes(p.cast::<u8>(), 0, len) };
        self.host.push(Some(HostBuf { ptr: p.cast(), len }));
        Ok(HostBufId(self.host.len() as u32 - 1))
    }

    fn write_host(
        &mut self,
        buf: HostBufId,
        offset: usize,
        data: &[u8],
    ) -> Result<(), DriverError> {
        let dst = self.host_range(buf, offset, data.len(), "write_host")?;
        // SAFETY: `dst..dst+len` is inside the pinned buffer (checked), which
        // no Rust reference aliases; `data` is a separate Rust slice.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    fn read_host(
        &mut self,
        buf: HostBufId,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), DriverError> {
        let src = self.host_range(buf, offset, out.len(), "read_host")?;
        // SAFETY: as in write_host, in the other direction.
        unsafe { ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn free_host(&mut self, buf: HostBufId) -> Result<(), DriverError> {
        self.host_range(buf, 0, 0, "free_host")?;
        self.synchronize()?;
        let h = self.host[buf.0 as usize].take().expect("checked above");
        // SAFETY: `h.ptr` came from cuMemHostAlloc and is freed once (taken
        // out of the table); the context is synchronised, so no copy uses it.
        check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(h.ptr.cast()) })
    }

    fn launch(
        &mut self,
        stream: StreamId,
        kernel: KernelHandle,
        dims: &LaunchDims,
        params: &[u8],
    ) -> Result<(), DriverError> {
        let s = self.stream(stream)?;
        let f = self
            .kernels
            .get(kernel.0 as usize)
            .copied()
            .ok_or_else(|| unknown(kernel))?;
        if params.len() > MAX_PARAM_BYTES {
            return Err(DriverError::Invalid(format!(
                "launch: {} bytes of parameters, over CUDA's {MAX_PARAM_BYTES}-byte limit",
                params.len()
            )));
        }
        self.bind()?;
        // An 8-aligned copy: the buffer's offsets assume an aligned start.
        let aligned = self.params.as_mut_ptr().cast::<u8>();
        // SAFETY: `params.len() <= MAX_PARAM_BYTES`, the size of the scratch
        // array, which does not overlap `params`.
        unsafe { ptr::copy_nonoverlapping(params.as_ptr(), aligned, params.len()) };
        let mut size = params.len();
        let mut extra = [
            ptr::without_provenance_mut::<c_void>(
                sys::CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT as usize,
            ),
            aligned.cast::<c_void>(),
            ptr::without_provenance_mut::<c_void>(sys::CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT as usize),
            (&raw mut size).cast::<c_void>(),
            ptr::without_provenance_mut::<c_void>(sys::CU_LAUNCH_PARAM_END_AS_INT as usize),
        ];
        // SAFETY: `f` and `s` are live handles of this context, which is
        // current. The driver copies `size` bytes from `aligned` (in bounds)
        // before returning and reads nothing else of ours. What the kernel
        // does with the pointers in its parameters happens on the GPU: it
        // can reach device memory and the driver's pinned allocations, none
        // of which Rust code holds references into (they are accessed only
        // through raw pointers and atomics), so a bad pointer is a CUDA
        // error, not undefined behaviour in this process.
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                f,
                dims.grid[0],
                dims.grid[1],
                dims.grid[2],
                dims.block[0],
                dims.block[1],
                dims.block[2],
                dims.shared_mem,
                s,
                ptr::null_mut(),
                extra.as_mut_ptr(),
            )
        })
    }

    fn copy_to_device(
        &mut self,
        stream: StreamId,
        dst: DevicePtr,
        src: HostBufId,
        src_offset: usize,
        len: usize,
    ) -> Result<(), DriverError> {
        let s = self.stream(stream)?;
        let from = self.host_range(src, src_offset, len, "copy_to_device source")?;
        self.device_range(dst, len, "copy_to_device destination")?;
        self.bind()?;
        // SAFETY: both ranges were checked against live allocations of this
        // driver; host buffers are freed only after a context synchronise,
        // so the source outlives the asynchronous copy.
        check("cuMemcpyHtoDAsync_v2", unsafe {
            sys::cuMemcpyHtoDAsync_v2(dst.0, from.cast(), len, s)
        })
    }

    fn copy_to_host(
        &mut self,
        stream: StreamId,
        dst: HostBufId,
        dst_offset: usize,
        src: DevicePtr,
        len: usize,
    ) -> Result<(), DriverError> {
        let s = self.stream(stream)?;
        let to = self.host_range(dst, dst_offset, len, "copy_to_host destination")?;
        self.device_range(src, len, "copy_to_host source")?;
        self.bind()?;
        // SAFETY: as in copy_to_device; the destination is pinned memory no
        // Rust reference aliases.
        check("cuMemcpyDtoHAsync_v2", unsafe {
            sys::cuMemcpyDtoHAsync_v2(to.cast(), src.0, len, s)
        })
    }

    fn memset_d8(
        &mut self,
        stream: StreamId,
        dst: DevicePtr,
        value: u8,
        len: usize,
    ) -> Result<(), DriverError> {
        let s = self.stream(stream)?;
        self.device_range(dst, len, "memset_d8 destination")?;
        self.bind()?;
        // SAFETY: the range was checked against a live device allocation.
        check("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(dst.0, value, len, s)
        })
    }

    fn record_event(&mut self, stream: StreamId) -> Result<EventId, DriverError> {
        let s = self.stream(stream)?;
        self.bind()?;
        let id = match self.free_events.pop() {
            Some(i) => i,
            None => {
                let mut e = ptr::null_mut();
                // SAFETY: the context is current; valid out-pointer.
                // Destroyed in Drop.
                check("cuEventCreate", unsafe {
                    sys::cuEventCreate(&mut e, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
                })?;
                self.events.push(e);
                self.event_in_use.push(false);
                self.events.len() as u32 - 1
            }
        };
        // SAFETY: live event and stream of this context.
        if let Err(e) = check("cuEventRecord", unsafe {
            sys::cuEventRecord(self.events[id as usize], s)
        }) {
            self.free_events.push(id);
            return Err(e);
        }
        self.event_in_use[id as usize] = true;
        Ok(EventId(id))
    }

    fn event_done(&mut self, event: EventId) -> Result<bool, DriverError> {
        let e = match self.event_in_use.get(event.0 as usize) {
            Some(true) => self.events[event.0 as usize],
            _ => return Err(unknown(event)),
        };
        self.bind()?;
        // SAFETY: a live, recorded event of this context.
        ready("cuEventQuery", unsafe { sys::cuEventQuery(e) })
    }

    fn release_event(&mut self, event: EventId) -> Result<(), DriverError> {
        match self.event_in_use.get_mut(event.0 as usize) {
            Some(in_use @ true) => {
                *in_use = false;
                self.free_events.push(event.0);
                Ok(())
            }
            _ => Err(unknown(event)),
        }
    }

    fn stream_wait_event(&mut self, stream: StreamId, event: EventId) -> Result<(), DriverError> {
        let s = self.stream(stream)?;
        let e = match self.event_in_use.get(event.0 as usize) {
            Some(true) => self.events[event.0 as usize],
            _ => return Err(unknown(event)),
        };
        self.bind()?;
        // SAFETY: a live stream and a live, recorded event of this driver;
        // the wait captures the event's last record at this call.
        check("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(s, e, 0)
        })
    }

    fn sm_granules(&mut self) -> Result<SmGranules, DriverError> {
        Ok(self.green()?.layout)
    }

    fn create_green_ctx(&mut self, set: GranuleSet) -> Result<GreenCtxId, DriverError> {
        let dev = self.dev;
        let g = self.green()?;
        if set.is_empty() || set.iter().any(|i| i >= g.layout.granules) {
            return Err(DriverError::Invalid(format!(
                "create_green_ctx: granules {set} are not a non-empty subset of the split's \
                 0..{}",
                g.layout.granules
            )));
        }
        let mut chosen: Vec<sys::CUdevResource> =
            set.iter().map(|i| g.groups[i as usize]).collect();
        let mut desc: sys::CUdevResourceDesc = ptr::null_mut();
        // SAFETY: `chosen` holds `len` SM resources, all outputs of the one
        // split in `split_sms` (what the API requires to combine them);
        // valid out-pointer.
        check("cuDevResourceGenerateDesc", unsafe {
            (g.api.generate_desc)(&mut desc, chosen.as_mut_ptr(), chosen.len() as u32)
        })?;
        let mut ctx: sys::CUgreenCtx = ptr::null_mut();
        // SAFETY: `desc` was just generated for this device; valid
        // out-pointer. Destroyed in Drop, after its streams.
        check("cuGreenCtxCreate", unsafe {
            (g.api.create)(
                &mut ctx,
                desc,
                dev,
                sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32,
            )
        })?;
        g.ctxs.push(ctx);
        Ok(GreenCtxId(g.ctxs.len() as u32 - 1))
    }

    fn create_green_stream(
        &mut self,
        ctx: GreenCtxId,
        priority: StreamPriority,
    ) -> Result<StreamId, DriverError> {
        let prio = match priority {
            StreamPriority::RealTime => self.priorities.1,
            StreamPriority::BestEffort => self.priorities.0,
        };
        self.bind()?;
        let g = self.green()?;
        let api = g.api;
        let green = *g.ctxs.get(ctx.0 as usize).ok_or_else(|| unknown(ctx))?;
        let mut as_ctx: sys::CUcontext = ptr::null_mut();
        // SAFETY: a live green context of this driver; valid out-pointer.
        check("cuCtxFromGreenCtx", unsafe {
            (api.to_ctx)(&mut as_ctx, green)
        })?;
        // The stream is made with the green context current, then the
        // primary context (current before, `bind`) is current again.
        // SAFETY: `as_ctx` is the green context's CUcontext, alive as long
        // as the green context.
        check("cuCtxPushCurrent", unsafe {
            sys::cuCtxPushCurrent_v2(as_ctx)
        })?;
        let mut s = ptr::null_mut();
        // SAFETY: live green context; valid out-pointer; NON_BLOCKING is the
        // flag the API requires. Destroyed in Drop.
        let made = check("cuGreenCtxStreamCreate", unsafe {
            (api.stream_create)(
                &mut s,
                green,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                prio,
            )
        });
        let mut popped = ptr::null_mut();
        // SAFETY: pops the context pushed above; valid out-pointer.
        let pop = check("cuCtxPopCurrent", unsafe {
            sys::cuCtxPopCurrent_v2(&mut popped)
        });
        made?;
        pop?;
        self.streams.push(s);
        Ok(StreamId(self.streams.len() as u32 - 1))
    }
}

impl Drop for CudaDriver {
    fn drop(&mut self) {
        // Errors cannot be reported from Drop; a lost context fails every
        // call alike, and the process is usually exiting.
        let _ = self.synchronize();
        // SAFETY: every handle below was created by this driver in its
        // context (current after `synchronize`), is destroyed exactly once,
        // and no command uses it after the synchronise.
        unsafe {
            for &e in &self.events {
                sys::cuEventDestroy_v2(e);
            }
            for &s in &self.streams {
                sys::cuStreamDestroy_v2(s);
            }
            if let Some(Ok(g)) = &self.green {
                for &c in &g.ctxs {
                    (g.api.destroy)(c);
                }
            }
            if let Some(s) = self.ctl_stream {
                sys::cuStreamDestroy_v2(s);
            }
            for c in &self.ctls {
                sys::cuMemFree_v2(c.dev);
                sys::cuMemFreeHost(c.host.cast());
            }
            for h in self.host.iter().flatten() {
                sys::cuMemFreeHost(h.ptr.cast());
            }
            for &p in self.device_allocs.keys() {
                sys::cuMemFree_v2(p);
            }
            for &m in &self.modules {
                sys::cuModuleUnload(m);
            }
            sys::cuDevicePrimaryCtxRelease_v2(self.dev);
        }
        CURRENT.with(|c| {
            if c.get() == self.ctx as usize {
                c.set(0);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_driver_library_is_reported_not_panicked() {
        let e = probe_library(c"libsluice-no-such-cuda.so.1").unwrap_err();
        let CudaUnavailable::NoLibrary { library, detail } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(library, "libsluice-no-such-cuda.so.1");
        assert!(detail.contains("libsluice-no-such-cuda.so.1"), "{detail}");
        let text = e.to_string();
        assert!(
            text.starts_with(
                "libsluice-no-such-cuda.so.1 not found: no NVIDIA driver on this machine ("
            ),
            "{text}"
        );
        assert!(text.contains("device.backend = \"sim\""), "{text}");
    }

    #[test]
    fn probe_answers_without_panicking_on_this_machine() {
        // With a driver: device facts; without: the reason. Either way no
        // panic (cudarc's loader panics when called without libcuda).
        match probe() {
            Ok(info) => {
                assert!(info.devices >= 1);
                assert!(info.sm_count > 0, "{info}");
                assert!(info.compute_capability.0 >= 3, "{info}");
                assert!(info.driver_version >= 1000, "{info}");
            }
            Err(e) => {
                let text = e.to_string();
                assert!(!text.is_empty());
                // Without a driver library the first check must say so.
                // SAFETY: dlopen/dlclose of the driver library by name, as
                // probe does.
                let present = unsafe {
                    let h = libc::dlopen(LIBCUDA.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
                    if !h.is_null() {
                        libc::dlclose(h);
                    }
                    !h.is_null()
                };
                if !present {
                    assert!(matches!(e, CudaUnavailable::NoLibrary { .. }), "{e:?}");
                    assert!(text.starts_with("libcuda.so.1 not found"), "{text}");
                }
            }
        }
    }

    /// A kernel with the sluice prologue that stores `value` to `*out`
    /// (hand-written PTX, so the test needs no NVRTC).
    const STORE_PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64

.visible .entry sluice_test_store(
    .param .u64 ctl,
    .param .u32 kidx,
    .param .u64 out,
    .param .u64 value
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<7>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [ctl];
    ld.param.u32 %r1, [kidx];
    ld.param.u64 %rd2, [out];
    ld.param.u64 %rd3, [value];
    cvta.to.global.u64 %rd4, %rd1;
    ld.volatile.global.u32 %r2, [%rd4];
    setp.ne.u32 %p1, %r2, 0;
    @%p1 bra DONE;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %ctaid.x;
    or.b32 %r5, %r3, %r4;
    setp.ne.u32 %p2, %r5, 0;
    @%p2 bra DONE;
    add.u32 %r6, %r1, 1;
    cvt.u64.u32 %rd5, %r6;
    atom.global.max.u64 %rd6, [%rd4+8], %rd5;
    cvta.to.global.u64 %rd7, %rd2;
    st.global.u64 [%rd7], %rd3;
DONE:
    ret;
}
"#;

    fn wait(d: &mut CudaDriver, e: EventId) {
        // Watchdog: a bounded number of queries, not a wall-clock bound.
        for _ in 0..200_000_000u64 {
            if d.event_done(e).unwrap() {
                return;
            }
            std::hint::spin_loop();
        }
        panic!("event {e} never completed");
    }

    /// A measurement, not a check (run it by name with `--ignored
    /// --nocapture` on a GPU machine; `scripts/device/run.sh` does): where
    /// the synthetic kernels' per-kernel cost goes, and what the control
    /// block's host operations cost. Each kernel row launches 20 kernels back
    /// to back on one stream and prints the host time from the first launch
    /// to the last kernel's event observed complete, per kernel (median of 5
    /// such batches, with min and max), for a control block (a) absent
    /// (`ctl` null: no flag read at all), (b) as [`CudaDriver::create_ctl`]
    /// makes it (device memory), (c) in host-mapped pinned memory (what
    /// sluice used before: every flag read crosses PCIe). Kernel rows: an
    /// empty kernel (1 block, `block_ns` 0: the launch-and-observe floor),
    /// the synthetic kernel at 132 blocks x 256 threads for 10 and 100 us
    /// per block and at 1056 blocks (8 per SM) for 10 us, and
    /// `sluice_eltwise` over 100,352 floats (ResNet-152's layer-4 add: 392
    /// blocks, one flag read each in the prologue). Then the host side of
    /// the control block: `set_preempt` and `read_started` (each one copy
    /// on the control stream, waited for), median [min, max] of 200.
    #[test]
    #[ignore = "a measurement on a real GPU: cargo test ... -- --ignored --nocapture flag_cost"]
    fn flag_cost_on_this_machine() {
        use crate::driver::{KernelArgs, write_prologue};
        use crate::kernels;
        if probe().is_err() {
            eprintln!("flag_cost: no CUDA driver here; nothing measured");
            return;
        }
        let mut rig = crate::open::open_cuda().unwrap();
        let d = &mut rig.drv;
        let syn = rig.lib.synthetic().unwrap();
        let elt = rig.lib.get(sluice_nn::builders::Kernel::Eltwise).unwrap();
        let s = d.create_stream(StreamPriority::BestEffort).unwrap();
        let ctl = d.create_ctl().unwrap();
        let ctl_ptr = d.ctl_device_ptr(ctl).unwrap();
        // The old layout: a zeroed host-mapped pinned page.
        let mut mapped: *mut c_void = ptr::null_mut();
        let mut mapped_dev = 0;
        // SAFETY: the context is current (create_ctl bound it); valid
        // out-pointers; the page is zeroed before the GPU can read it and
        // freed at the end of the test, after a synchronise.
        unsafe {
            check(
                "cuMemHostAlloc",
                sys::cuMemHostAlloc(
                    &mut mapped,
                    CTL_ALLOC,
                    sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
                ),
            )
            .unwrap();
            ptr::write_bytes(mapped.cast::<u8>(), 0, CTL_ALLOC);
            check(
                "cuMemHostGetDevicePointer_v2",
                sys::cuMemHostGetDevicePointer_v2(&mut mapped_dev, mapped, 0),
            )
            .unwrap();
        }
        let sink = d.alloc_device(1056 * 4).unwrap();
        let n = 100_352usize;
        let a = d.alloc_device(n * 4).unwrap();
        let y = d.alloc_device(n * 4).unwrap();
        d.memset_d8(s, a, 0, n * 4).unwrap();
        let e = d.record_event(s).unwrap();
        wait(d, e);
        d.release_event(e).unwrap();
        let ctls = [DevicePtr(0), ctl_ptr, DevicePtr(mapped_dev)];
        // (name, kernel, dims, args after the prologue)
        let mut rows: Vec<(String, KernelHandle, LaunchDims, KernelArgs)> = Vec::new();
        for (blocks, block_ns) in [(1u32, 0u64), (132, 10_000), (132, 100_000), (1056, 10_000)] {
            let mut args = KernelArgs::new();
            args.ptr(sink).u64(block_ns);
            rows.push((
                format!("synthetic {blocks} x 256, {} us/block", block_ns / 1000),
                syn,
                LaunchDims::linear(blocks, 256),
                args,
            ));
        }
        let cfg = kernels::eltwise(n).unwrap();
        let mut args = KernelArgs::new();
        args.ptr(a).ptr(DevicePtr(0)).ptr(y).i32(n as i32).i32(1);
        rows.push((
            format!("eltwise add+relu n={n} ({} blocks)", cfg.grid[0]),
            elt,
            LaunchDims::linear(cfg.grid[0], cfg.block[0]),
            args,
        ));
        let spread = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            format!(
                "{:>10.1} [{:>6.1}, {:>6.1}]",
                v[v.len() / 2],
                v[0],
                v[v.len() - 1]
            )
        };
        println!("flag_cost: per kernel, us: median [min, max] of 5 batches of 20");
        println!(
            "{:<44} {:>26} {:>26} {:>26}",
            "kernel", "ctl none", "ctl device (create_ctl)", "ctl host-mapped"
        );
        for (name, k, dims, args) in &rows {
            let mut line = format!("{name:<44}");
            for c in ctls {
                let mut per = Vec::new();
                for _ in 0..5 {
                    let t0 = d.now_ns();
                    for i in 0..20u32 {
                        let mut p = args.as_bytes().to_vec();
                        write_prologue(&mut p, c, i);
                        d.launch(s, *k, dims, &p).unwrap();
                    }
                    let e = d.record_event(s).unwrap();
                    wait(d, e);
                    d.release_event(e).unwrap();
                    per.push((d.now_ns() - t0) as f64 / 20.0 / 1e3);
                }
                line += &format!(" {}", spread(per));
            }
            println!("{line}");
        }
        let mut host_ops = |what: &str, op: &mut dyn FnMut(&mut CudaDriver)| {
            let v: Vec<f64> = (0..200)
                .map(|_| {
                    let t0 = d.now_ns();
                    op(d);
                    (d.now_ns() - t0) as f64 / 1e3
                })
                .collect();
            println!("{what:<44} {}", spread(v));
        };
        println!("flag_cost: host side of the control block, us: median [min, max] of 200");
        host_ops("set_preempt(true) + set_preempt(false)", &mut |d| {
            d.set_preempt(ctl, true).unwrap();
            d.set_preempt(ctl, false).unwrap();
        });
        host_ops("read_started", &mut |d| {
            d.read_started(ctl).unwrap();
        });
        d.synchronize().unwrap();
        // SAFETY: allocated above; the device is idle, nothing reads it.
        unsafe { sys::cuMemFreeHost(mapped) };
    }

    /// Without a driver: opening is an error, not a panic. With one: the
    /// prologue, the parameter buffer, the mapped control block, copies,
    /// memsets, events and the virtual queue work on the real device.
    #[test]
    fn driver_on_this_machine() {
        use crate::driver::{KernelArgs, write_prologue};
        use crate::queue::{Command, KillMechanism, Program, QueueConfig, TaskId, VirtualQueue};
        if let Err(why) = probe() {
            let e = CudaDriver::new(0).unwrap_err();
            assert!(matches!(e, CudaOpenError::Unavailable(_)), "{e:?}");
            assert_eq!(e.to_string(), why.to_string());
            return;
        }
        let mut d = CudaDriver::new(0).unwrap();
        let s = d.create_stream(StreamPriority::BestEffort).unwrap();
        let ctl = d.create_ctl().unwrap();
        let m = d.load_module(STORE_PTX).unwrap();
        let k = d.kernel(m, "sluice_test_store").unwrap();
        let out = d.alloc_device(8).unwrap();
        let host = d.alloc_host(8).unwrap();
        let launch = |d: &mut CudaDriver, kidx: u32, value: u64| {
            let mut args = KernelArgs::new();
            args.ptr(out).u64(value);
            let mut p = args.as_bytes().to_vec();
            write_prologue(&mut p, d.ctl_device_ptr(ctl).unwrap(), kidx);
            d.launch(s, k, &LaunchDims::linear(2, 32), &p).unwrap();
        };
        let read = |d: &mut CudaDriver| {
            d.copy_to_host(s, host, 0, out, 8).unwrap();
            let e = d.record_event(s).unwrap();
            wait(d, e);
            d.release_event(e).unwrap();
            let mut b = [0; 8];
            d.read_host(host, 0, &mut b).unwrap();
            u64::from_ne_bytes(b)
        };
        d.memset_d8(s, out, 0xff, 8).unwrap();
        assert_eq!(read(&mut d), u64::MAX);
        launch(&mut d, 6, 42);
        assert_eq!(read(&mut d), 42);
        assert_eq!(d.read_started(ctl).unwrap(), 7);
        // With the flag set the kernel returns at entry.
        d.set_preempt(ctl, true).unwrap();
        launch(&mut d, 7, 43);
        assert_eq!(read(&mut d), 42);
        assert_eq!(d.read_started(ctl).unwrap(), 7);
        d.set_preempt(ctl, false).unwrap();
        assert!(d.stream_idle(s).unwrap());

        // The queue on the real driver: 10 kernels under a cap of 4.
        let mut q = VirtualQueue::new(
            &mut d,
            StreamPriority::BestEffort,
            QueueConfig::default(),
            KillMechanism::Cooperative,
        )
        .unwrap();
        let cmds = (0..10u64)
            .map(|v| {
                let mut args = KernelArgs::new();
                args.ptr(out).u64(100 + v);
                Command::Kernel {
                    kernel: k,
                    dims: LaunchDims::linear(1, 32),
                    args,
                }
            })
            .collect();
        q.submit(&Program::each_idempotent(TaskId(1), cmds).unwrap());
        let mut done = Vec::new();
        for _ in 0..200_000_000u64 {
            q.poll(&mut d, &mut done).unwrap();
            assert!(q.outstanding_kernels() <= 4);
            if q.is_idle() {
                break;
            }
        }
        assert_eq!(done, [TaskId(1)]);
        assert_eq!(d.read_started(q.ctl()).unwrap(), 10);
        assert_eq!(read(&mut d), 109);
    }

    /// With a CUDA >= 12.4 driver: the SM split, a green context of one
    /// granule, a kernel of the primary context's module launched on its
    /// stream behind a kernel on the whole device (`cuStreamWaitEvent`),
    /// and a queue moved between them. With an older driver: the
    /// "not supported" error names the version. Without one: nothing.
    #[test]
    fn green_contexts_on_this_machine() {
        use crate::driver::{KernelArgs, write_prologue};
        use crate::queue::{Command, KillMechanism, Program, QueueConfig, TaskId, VirtualQueue};
        if probe().is_err() {
            return;
        }
        let mut d = CudaDriver::new(0).unwrap();
        let layout = match d.sm_granules() {
            Ok(l) => l,
            Err(e) => {
                let text = e.to_string();
                assert!(matches!(e, DriverError::Unsupported { .. }), "{e:?}");
                assert!(text.contains("CUDA 12.4"), "{text}");
                assert!(d.info().driver_version < GREEN_CTX_MIN_DRIVER, "{text}");
                return;
            }
        };
        assert_eq!(i64::from(layout.sm_count), i64::from(d.info().sm_count));
        assert!(
            layout.granules >= 1 && layout.granule_sms >= 1,
            "{layout:?}"
        );
        let g = d.create_green_ctx(GranuleSet::range(0, 1)).unwrap();
        let s = d.create_stream(StreamPriority::BestEffort).unwrap();
        let gs = d
            .create_green_stream(g, StreamPriority::BestEffort)
            .unwrap();
        let ctl = d.create_ctl().unwrap();
        let m = d.load_module(STORE_PTX).unwrap();
        let k = d.kernel(m, "sluice_test_store").unwrap();
        let out = d.alloc_device(8).unwrap();
        let host = d.alloc_host(8).unwrap();
        let cmd = |v: u64| {
            let mut args = KernelArgs::new();
            args.ptr(out).u64(v);
            args
        };
        // Whole device, then the green stream behind it: the last store wins.
        let mut p = cmd(1).as_bytes().to_vec();
        write_prologue(&mut p, d.ctl_device_ptr(ctl).unwrap(), 0);
        d.launch(s, k, &LaunchDims::linear(4096, 32), &p).unwrap();
        let e = d.record_event(s).unwrap();
        d.stream_wait_event(gs, e).unwrap();
        let mut p = cmd(2).as_bytes().to_vec();
        write_prologue(&mut p, d.ctl_device_ptr(ctl).unwrap(), 1);
        d.launch(gs, k, &LaunchDims::linear(1, 32), &p).unwrap();
        d.copy_to_host(gs, host, 0, out, 8).unwrap();
        let done = d.record_event(gs).unwrap();
        wait(&mut d, done);
        let mut b = [0; 8];
        d.read_host(host, 0, &mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 2);
        // A queue moved onto the green stream mid-task completes once.
        let mut q = VirtualQueue::new(
            &mut d,
            StreamPriority::BestEffort,
            QueueConfig::default(),
            KillMechanism::Cooperative,
        )
        .unwrap();
        let cmds = (0..10u64)
            .map(|v| Command::Kernel {
                kernel: k,
                dims: LaunchDims::linear(1, 32),
                args: cmd(100 + v),
            })
            .collect();
        q.submit(&Program::each_idempotent(TaskId(1), cmds).unwrap());
        let mut finished = Vec::new();
        q.poll(&mut d, &mut finished).unwrap();
        q.rebind(&mut d, gs).unwrap();
        for _ in 0..200_000_000u64 {
            q.poll(&mut d, &mut finished).unwrap();
            if q.is_idle() {
                break;
            }
        }
        assert_eq!(finished, [TaskId(1)]);
        assert_eq!(d.read_started(q.ctl()).unwrap(), 10);
    }

    #[test]
    fn info_display_names_the_facts() {
        let info = CudaInfo {
            devices: 1,
            name: "NVIDIA H100 80GB HBM3".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            total_mem: 80 << 30,
            driver_version: 12040,
        };
        assert_eq!(
            info.to_string(),
            "NVIDIA H100 80GB HBM3 (compute capability 9.0, 132 SMs, 80.0 GiB; 1 device), CUDA \
             driver 12.4"
        );
    }
}
