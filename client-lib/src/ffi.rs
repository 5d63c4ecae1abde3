//! # The C ABI of the client library
//!
//! Every function is `sluice_*`, takes and returns only C types, and is
//! described in `include/sluice.h`, which cbindgen generates from this file
//! (`tests/header.rs` checks that the committed header is current; bless it
//! with `SLUICE_BLESS=1 cargo test -p sluice-client --test header`).
//!
//! - A session is an opaque `struct sluice_client *`: a boxed [`Client`],
//!   made by [`sluice_connect`] and freed by [`sluice_disconnect`]. Like the
//!   Rust [`Client`] it may move between threads but is used by one thread
//!   at a time.
//! - Functions that can fail return `int`: `SLUICE_OK` (0), a negative
//!   `SLUICE_E*` equal to [`Error::code`], or (only [`sluice_try_poll`]) the
//!   positive `SLUICE_PENDING`. [`sluice_strerror`] names a code;
//!   [`sluice_last_error_message`] gives this thread's detailed message.
//! - Every pointer argument is checked for NULL (`SLUICE_EINVAL`).
//! - The fast path — [`sluice_submit()`], [`sluice_try_poll`], [`sluice_wait`],
//!   [`sluice_wait_timeout`], [`sluice_write_arena`], [`sluice_read_arena`]
//!   — allocates nothing and cannot panic: it calls the Rust fast path,
//!   which guarantees both, and records its error message by formatting
//!   into a fixed thread-local buffer. The control-path functions run under
//!   [`std::panic::catch_unwind`] all the same, so a bug there returns
//!   `SLUICE_EIO` with a message instead of unwinding into C.
#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::{CStr, CString, OsStr, c_char, c_int};
use std::fmt::{self, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::Duration;

use crate::{
    Client, Completion, Error, Fault, ModelInfo, Priority, Span, Submit, Ticket, TypedSubmit,
    status,
};

// ---------------------------------------------------------------------------
// Return codes
// ---------------------------------------------------------------------------

/// Success.
pub const SLUICE_OK: c_int = 0;
/// sluice_try_poll only: the request has not completed yet (positive, not an error).
pub const SLUICE_PENDING: c_int = 1;
/// No daemon listens on the socket path: start sluiced, or pass its socket.
pub const SLUICE_EUNREACHABLE: c_int = -1;
/// The daemon refused the session; sluice_last_error_message() says why.
pub const SLUICE_EREFUSED: c_int = -2;
/// The daemon sent something this library does not understand (version skew?).
pub const SLUICE_EPROTO: c_int = -3;
/// An OS error on the control path (also: an internal error of this library;
/// sluice_last_error_message() says which).
pub const SLUICE_EIO: c_int = -4;
/// The daemon went away or dropped this client: sluice_disconnect() and
/// sluice_connect() again.
pub const SLUICE_EDISCONNECTED: c_int = -5;
/// The submission ring is full (back-pressure; nothing was queued): wait for
/// a completion and retry.
pub const SLUICE_ERINGFULL: c_int = -6;
/// As many requests are in flight as the completion ring holds: wait for one
/// first.
pub const SLUICE_ETOOMANY: c_int = -7;
/// The ticket is not in flight on this client (already redeemed, or never issued).
pub const SLUICE_EBADTICKET: c_int = -8;
/// The daemon has no model of that name.
pub const SLUICE_ENOMODEL: c_int = -9;
/// A span lies outside the client's arena.
pub const SLUICE_EBADSPAN: c_int = -10;
/// sluice_wait_timeout() ran out; the request stays in flight.
pub const SLUICE_ETIMEDOUT: c_int = -11;
/// An argument was invalid (NULL pointer, bad priority, name not UTF-8).
pub const SLUICE_EINVAL: c_int = -12;
/// A typed request does not fit the model (a tensor's length or place, the
/// tensor count, the batch); sluice_last_error_message() names the tensor
/// with the size expected and the size given. Nothing was submitted.
pub const SLUICE_EBADTENSOR: c_int = -13;
/// The daemon completed the request with an error status
/// (sluice_last_error_message() says which).
pub const SLUICE_EFAILED: c_int = -14;

const _: () = {
    assert!(SLUICE_EUNREACHABLE == Error::DaemonUnreachable.code());
    assert!(SLUICE_EREFUSED == Error::Refused(0).code());
    assert!(SLUICE_EPROTO == Error::Protocol.code());
    assert!(SLUICE_EIO == Error::Io(0).code());
    assert!(SLUICE_EDISCONNECTED == Error::Disconnected.code());
    assert!(SLUICE_ERINGFULL == Error::RingFull.code());
    assert!(SLUICE_ETOOMANY == Error::TooManyInFlight.code());
    assert!(SLUICE_EBADTICKET == Error::BadTicket.code());
    assert!(SLUICE_ENOMODEL == Error::ModelNotFound.code());
    assert!(SLUICE_EBADSPAN == Error::BadSpan.code());
    assert!(SLUICE_ETIMEDOUT == Error::Timeout.code());
    assert!(SLUICE_EINVAL == Error::InvalidArgument.code());
    assert!(SLUICE_EBADTENSOR == Error::BadTensor.code());
    assert!(SLUICE_EFAILED == Error::RequestFailed(0).code());
};

// ---------------------------------------------------------------------------
// Priorities and completion status codes
// ---------------------------------------------------------------------------

/// Priority: latency-critical, scheduled before any best-effort work.
pub const SLUICE_PRIORITY_RT: u32 = 0;
/// Priority: throughput work that fills the GPU when no real-time work needs it.
pub const SLUICE_PRIORITY_BE: u32 = 1;

const _: () = {
    assert!(SLUICE_PRIORITY_RT == Priority::RealTime as u32);
    assert!(SLUICE_PRIORITY_BE == Priority::BestEffort as u32);
};

/// Completion status: the request ran; output_len bytes of output are in the arena.
pub const SLUICE_STATUS_OK: u32 = 0;
/// Completion status: model_id names no model in the daemon's registry.
pub const SLUICE_STATUS_UNKNOWN_MODEL: u32 = 1;
/// Completion status: the input span does not fit in the arena.
pub const SLUICE_STATUS_BAD_INPUT_SPAN: u32 = 2;
/// Completion status: the output span does not fit in the arena.
pub const SLUICE_STATUS_BAD_OUTPUT_SPAN: u32 = 3;
/// Completion status: the input length is not what the model takes.
pub const SLUICE_STATUS_BAD_INPUT_LEN: u32 = 4;
/// Completion status: the output span is smaller than the model's output.
pub const SLUICE_STATUS_OUTPUT_TOO_SMALL: u32 = 5;
/// Completion status: the priority is neither real-time nor best-effort.
pub const SLUICE_STATUS_BAD_PRIORITY: u32 = 6;
/// sluice_set_spin_ns(): let the spin budget follow the measured wake-up
/// cost (the default).
pub const SLUICE_SPIN_ADAPTIVE: u64 = 0xffff_ffff_ffff_ffff;

/// Completion status: unknown flag bits.
pub const SLUICE_STATUS_BAD_FLAGS: u32 = 7;
/// Completion status: the absolute deadline passed before the request could start.
pub const SLUICE_STATUS_DEADLINE_MISSED: u32 = 8;
/// Completion status: the device failed while running the request.
pub const SLUICE_STATUS_DEVICE_ERROR: u32 = 9;
/// Completion status: the daemon is shutting down and dropped the request.
pub const SLUICE_STATUS_SHUTTING_DOWN: u32 = 10;
/// Completion status: the batch is 0 or over the model's max_batch (typed),
/// or over 1 (untyped).
pub const SLUICE_STATUS_BAD_BATCH: u32 = 11;
/// Completion status: the tensor table is malformed (count, place, overlap)
/// or the model needs one (an untyped request to a model of several tensors).
pub const SLUICE_STATUS_BAD_TENSOR_TABLE: u32 = 12;
/// Completion status: a tensor's length differs from its size at the batch.
pub const SLUICE_STATUS_BAD_TENSOR_LEN: u32 = 13;
/// Completion status: the model was unloaded before the request reached the
/// device; look it up again.
pub const SLUICE_STATUS_MODEL_UNLOADED: u32 = 14;

/// sluice_model_tensor() direction: the model's inputs.
pub const SLUICE_INPUT: u32 = 0;
/// sluice_model_tensor() direction: the model's outputs.
pub const SLUICE_OUTPUT: u32 = 1;
/// Most dims of a tensor (struct sluice_tensor_info.dims).
pub const SLUICE_MAX_DIMS: usize = 8;

/// Element type: untyped bytes.
pub const SLUICE_ELEM_U8: u32 = 0;
/// Element type: IEEE 754 binary32.
pub const SLUICE_ELEM_F32: u32 = 1;
/// Element type: IEEE 754 binary16.
pub const SLUICE_ELEM_F16: u32 = 2;
/// Element type: bfloat16.
pub const SLUICE_ELEM_BF16: u32 = 3;
/// Element type: signed 64-bit integer.
pub const SLUICE_ELEM_I64: u32 = 4;
/// Element type: signed 32-bit integer.
pub const SLUICE_ELEM_I32: u32 = 5;
/// Element type: one byte, 0 or 1.
pub const SLUICE_ELEM_BOOL: u32 = 6;

const _: () = {
    use shm_proto::tensor as t;
    assert!(SLUICE_MAX_DIMS == t::MAX_DIMS);
    assert!(SLUICE_ELEM_U8 == t::ELEM_U8 && SLUICE_ELEM_F32 == t::ELEM_F32);
    assert!(SLUICE_ELEM_F16 == t::ELEM_F16 && SLUICE_ELEM_BF16 == t::ELEM_BF16);
    assert!(SLUICE_ELEM_I64 == t::ELEM_I64 && SLUICE_ELEM_I32 == t::ELEM_I32);
    assert!(SLUICE_ELEM_BOOL == t::ELEM_BOOL);
};

const _: () = {
    assert!(SLUICE_STATUS_OK == status::OK);
    assert!(SLUICE_STATUS_UNKNOWN_MODEL == status::UNKNOWN_MODEL);
    assert!(SLUICE_STATUS_BAD_INPUT_SPAN == status::BAD_INPUT_SPAN);
    assert!(SLUICE_STATUS_BAD_OUTPUT_SPAN == status::BAD_OUTPUT_SPAN);
    assert!(SLUICE_STATUS_BAD_INPUT_LEN == status::BAD_INPUT_LEN);
    assert!(SLUICE_STATUS_OUTPUT_TOO_SMALL == status::OUTPUT_TOO_SMALL);
    assert!(SLUICE_STATUS_BAD_PRIORITY == status::BAD_PRIORITY);
    assert!(SLUICE_STATUS_BAD_FLAGS == status::BAD_FLAGS);
    assert!(SLUICE_STATUS_DEADLINE_MISSED == status::DEADLINE_MISSED);
    assert!(SLUICE_STATUS_DEVICE_ERROR == status::DEVICE_ERROR);
    assert!(SLUICE_STATUS_SHUTTING_DOWN == status::SHUTTING_DOWN);
    assert!(SLUICE_STATUS_BAD_BATCH == status::BAD_BATCH);
    assert!(SLUICE_STATUS_BAD_TENSOR_TABLE == status::BAD_TENSOR_TABLE);
    assert!(SLUICE_STATUS_BAD_TENSOR_LEN == status::BAD_TENSOR_LEN);
    assert!(SLUICE_STATUS_MODEL_UNLOADED == status::MODEL_UNLOADED);
};

// ---------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------

/// A session with sluiced (opaque). Made by sluice_connect(), freed by
/// sluice_disconnect(). Used by one thread at a time; it may move between
/// threads.
#[derive(Debug)]
pub struct sluice_client {
    client: Client,
    /// NUL-terminated tensor names of each model looked up, by id: the
    /// strings sluice_model_tensor() points at.
    names: Vec<(u32, Vec<CString>, Vec<CString>)>,
}

/// A model's batch limit and tensor counts (filled by sluice_model_io()).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct sluice_model_io {
    /// Largest batch a typed request may carry.
    pub max_batch: u32,
    /// Inputs (index them 0..n_inputs with SLUICE_INPUT).
    pub n_inputs: u32,
    /// Outputs (index them 0..n_outputs with SLUICE_OUTPUT).
    pub n_outputs: u32,
    /// Zero.
    pub reserved: u32,
}

/// One input or output of a model (filled by sluice_model_tensor()).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct sluice_tensor_info {
    /// The model's name for it, NUL-terminated; valid until the next
    /// sluice_lookup_model() of this model or sluice_disconnect().
    pub name: *const c_char,
    /// A SLUICE_ELEM_* code; sluice_elem_name() names it.
    pub elem: u32,
    /// 1 when dims[0] is the batch dimension (it grows with the batch), else 0.
    pub batched: u32,
    /// Dims in use.
    pub rank: u32,
    /// Zero.
    pub reserved: u32,
    /// Dims at batch 1 (dims[rank..] are 0).
    pub dims: [u64; SLUICE_MAX_DIMS],
}

/// A typed request (argument of sluice_submit_typed()).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct sluice_typed_submit {
    /// From sluice_lookup_model() on this session.
    pub model_id: u32,
    /// SLUICE_PRIORITY_RT or SLUICE_PRIORITY_BE.
    pub priority: u32,
    /// Absolute CLOCK_MONOTONIC deadline, 0 = none.
    pub deadline_ns: u64,
    /// Batch size, 1 up to the model's max_batch.
    pub batch: u32,
    /// Zero.
    pub reserved: u32,
    /// Where in the arena the library writes the tensor table (16 bytes per
    /// input and output); it must not overlap an output.
    pub table_off: u64,
    /// n_inputs spans, one per model input in order; each exactly the
    /// input's size at the batch.
    pub inputs: *const sluice_span,
    /// Number of entries in inputs.
    pub n_inputs: usize,
    /// n_outputs spans, one per model output in order.
    pub outputs: *const sluice_span,
    /// Number of entries in outputs.
    pub n_outputs: usize,
}

/// A model as the daemon describes it (filled by sluice_lookup_model()).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct sluice_model_info {
    /// Id for sluice_submit.model_id.
    pub id: u32,
    /// Kernels per inference.
    pub kernels: u32,
    /// Exact input length in bytes.
    pub input_bytes: u64,
    /// Output length in bytes.
    pub output_bytes: u64,
    /// Standalone execution time on the daemon's device, ns.
    pub standalone_ns: u64,
}

/// A byte range in the client's arena.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct sluice_span {
    /// Offset from the arena's start.
    pub off: u64,
    /// Length in bytes.
    pub len: u64,
}

/// What to run (argument of sluice_submit()).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct sluice_submit {
    /// From sluice_lookup_model().
    pub model_id: u32,
    /// SLUICE_PRIORITY_RT or SLUICE_PRIORITY_BE.
    pub priority: u32,
    /// Absolute CLOCK_MONOTONIC deadline (sluice_now_ns() + budget), 0 = none.
    pub deadline_ns: u64,
    /// Where the input tensor is; its length must be the model's input_bytes.
    pub input: sluice_span,
    /// Where the output goes; at least the model's output_bytes long.
    pub output: sluice_span,
}

/// The outcome of one request (filled by sluice_try_poll() and sluice_wait()).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct sluice_completion {
    /// The request's ticket.
    pub request_id: u64,
    /// A SLUICE_STATUS_* code; see sluice_status_str().
    pub status: u32,
    /// Zero.
    pub reserved: u32,
    /// Output bytes written into the output span (0 on error).
    pub output_len: u64,
    /// When the daemon took the request off the ring (CLOCK_MONOTONIC ns).
    pub received_ns: u64,
    /// When the device started it.
    pub started_ns: u64,
    /// When the device finished it.
    pub finished_ns: u64,
}

// The C layout is part of the ABI: pin it.
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<sluice_model_info>() == 32 && align_of::<sluice_model_info>() == 8);
    assert!(offset_of!(sluice_model_info, id) == 0);
    assert!(offset_of!(sluice_model_info, kernels) == 4);
    assert!(offset_of!(sluice_model_info, input_bytes) == 8);
    assert!(offset_of!(sluice_model_info, output_bytes) == 16);
    assert!(offset_of!(sluice_model_info, standalone_ns) == 24);
    assert!(size_of::<sluice_span>() == 16 && align_of::<sluice_span>() == 8);
    assert!(offset_of!(sluice_span, off) == 0 && offset_of!(sluice_span, len) == 8);
    assert!(size_of::<sluice_submit>() == 48 && align_of::<sluice_submit>() == 8);
    assert!(offset_of!(sluice_submit, model_id) == 0);
    assert!(offset_of!(sluice_submit, priority) == 4);
    assert!(offset_of!(sluice_submit, deadline_ns) == 8);
    assert!(offset_of!(sluice_submit, input) == 16);
    assert!(offset_of!(sluice_submit, output) == 32);
    assert!(size_of::<sluice_completion>() == 48 && align_of::<sluice_completion>() == 8);
    assert!(offset_of!(sluice_completion, request_id) == 0);
    assert!(offset_of!(sluice_completion, status) == 8);
    assert!(offset_of!(sluice_completion, reserved) == 12);
    assert!(offset_of!(sluice_completion, output_len) == 16);
    assert!(offset_of!(sluice_completion, received_ns) == 24);
    assert!(offset_of!(sluice_completion, started_ns) == 32);
    assert!(offset_of!(sluice_completion, finished_ns) == 40);
    assert!(size_of::<sluice_model_io>() == 16);
    assert!(size_of::<sluice_tensor_info>() == 24 + 8 * SLUICE_MAX_DIMS);
    assert!(offset_of!(sluice_tensor_info, elem) == 8);
    assert!(offset_of!(sluice_tensor_info, dims) == 24);
    assert!(size_of::<sluice_typed_submit>() == 64);
    assert!(offset_of!(sluice_typed_submit, batch) == 16);
    assert!(offset_of!(sluice_typed_submit, table_off) == 24);
    assert!(offset_of!(sluice_typed_submit, inputs) == 32);
    assert!(offset_of!(sluice_typed_submit, n_outputs) == 56);
};

impl From<ModelInfo> for sluice_model_info {
    fn from(m: ModelInfo) -> Self {
        Self::from(&m)
    }
}

impl From<&ModelInfo> for sluice_model_info {
    fn from(m: &ModelInfo) -> Self {
        Self {
            id: m.id,
            kernels: m.kernels,
            input_bytes: m.input_bytes,
            output_bytes: m.output_bytes,
            standalone_ns: m.standalone_ns,
        }
    }
}

impl From<sluice_span> for Span {
    fn from(s: sluice_span) -> Self {
        Self {
            off: s.off,
            len: s.len,
        }
    }
}

impl From<Completion> for sluice_completion {
    fn from(c: Completion) -> Self {
        Self {
            request_id: c.request_id,
            status: c.status,
            reserved: 0,
            output_len: c.output_len,
            received_ns: c.received_ns,
            started_ns: c.started_ns,
            finished_ns: c.finished_ns,
        }
    }
}

// ---------------------------------------------------------------------------
// Error messages
// ---------------------------------------------------------------------------

/// Capacity of the fast path's message buffer; longer messages are cut.
const FAST_MSG_CAP: usize = 256;

/// The fast path's last error message, formatted in place (no allocation).
#[derive(Debug)]
struct FastMsg {
    /// Whether this, not the control path's message, is the latest.
    set: bool,
    len: usize,
    buf: [u8; FAST_MSG_CAP],
}

impl fmt::Write for FastMsg {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let start = self.len.min(FAST_MSG_CAP);
        let n = s.len().min(FAST_MSG_CAP - start);
        if let (Some(dst), Some(src)) = (self.buf.get_mut(start..start + n), s.as_bytes().get(..n))
        {
            dst.copy_from_slice(src);
            self.len = start + n;
        }
        Ok(())
    }
}

thread_local! {
    // Const-initialised and without a destructor: access is a TLS load,
    // never an allocation or a destructor registration.
    static FAST_MSG: RefCell<FastMsg> = const {
        RefCell::new(FastMsg { set: false, len: 0, buf: [0; FAST_MSG_CAP] })
    };
    // Backing store of the pointer sluice_last_error_message() returns.
    static MSG_CSTR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records a fast-path failure and returns `code`. Formats into the fixed
/// thread-local buffer: no allocation, no panic.
#[cold]
fn fast_fail(code: c_int, args: fmt::Arguments<'_>) -> c_int {
    let _ = FAST_MSG.try_with(|m| {
        if let Ok(mut m) = m.try_borrow_mut() {
            m.set = true;
            m.len = 0;
            let _ = m.write_fmt(args);
        }
    });
    code
}

/// Records a fast-path [`Error`] from `func` with the generic text of its code.
#[cold]
fn fast_error(func: &str, e: Error) -> c_int {
    let text = error_text(e.code()).to_str().unwrap_or("");
    fast_fail(e.code(), format_args!("{func}: {text}"))
}

/// Records a control-path failure (the message may allocate) and returns
/// `code`.
#[cold]
fn cold_fail(code: c_int, msg: String) -> c_int {
    let _ = FAST_MSG.try_with(|m| {
        if let Ok(mut m) = m.try_borrow_mut() {
            m.set = false;
        }
    });
    crate::set_last_error(msg);
    code
}

/// The most specific text for a control-path error: the library's detailed
/// message when it recorded one during this call, else the error's text.
fn detail(e: Error) -> String {
    let m = crate::last_error_message();
    if m.is_empty() { e.to_string() } else { m }
}

/// Runs a control-path function, turning a panic into `SLUICE_EIO` with a
/// message instead of unwinding into C. Clears the detailed message first
/// so that a failure's message is about this call only.
fn guard(func: &'static str, f: impl FnOnce() -> c_int) -> c_int {
    let run = || {
        crate::set_last_error(String::new());
        f()
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(rc) => rc,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("non-string payload");
            cold_fail(
                SLUICE_EIO,
                format!(
                    "{func}: internal panic ({what}); this is a bug in sluice-client, please report it"
                ),
            )
        }
    }
}

/// The short text of a return code (static, NUL-terminated).
const fn error_text(code: c_int) -> &'static CStr {
    match code {
        SLUICE_OK => c"ok",
        SLUICE_PENDING => c"the request has not completed yet",
        SLUICE_EUNREACHABLE => c"sluiced is not reachable on its socket",
        SLUICE_EREFUSED => c"sluiced refused the session",
        SLUICE_EPROTO => c"unexpected message from sluiced (version skew?)",
        SLUICE_EIO => c"I/O error on the control socket",
        SLUICE_EDISCONNECTED => c"disconnected from sluiced; reconnect",
        SLUICE_ERINGFULL => c"submission ring full; wait for a completion and retry",
        SLUICE_ETOOMANY => c"completion ring capacity in flight; wait for a completion first",
        SLUICE_EBADTICKET => c"ticket is not in flight on this client",
        SLUICE_ENOMODEL => c"no model of that name on this daemon",
        SLUICE_EBADSPAN => c"span lies outside the client's arena",
        SLUICE_ETIMEDOUT => c"timed out waiting for the completion",
        SLUICE_EINVAL => c"invalid argument",
        SLUICE_EBADTENSOR => c"the request's tensors do not fit the model",
        SLUICE_EFAILED => c"the daemon failed the request",
        _ => c"unknown sluice error code",
    }
}

/// Reads a NUL-terminated string argument as UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
unsafe fn utf8_arg<'a>(func: &str, what: &str, p: *const c_char) -> Result<&'a str, c_int> {
    if p.is_null() {
        return Err(cold_fail(SLUICE_EINVAL, format!("{func}: {what} is NULL")));
    }
    // SAFETY: non-null, NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|e| {
        cold_fail(
            SLUICE_EINVAL,
            format!("{func}: {what} {s:?} is not valid UTF-8 ({e})"),
        )
    })
}

/// A byte slice from a C pointer and length; NULL is allowed when `len` is 0.
///
/// # Safety
/// If `len > 0`, `p` points to `len` readable bytes that stay unchanged for `'a`.
unsafe fn bytes_in<'a>(p: *const u8, len: usize) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    if p.is_null() || len > isize::MAX as usize {
        return None;
    }
    // SAFETY: non-null, `len` readable bytes by the caller's contract, and
    // `len` fits in an isize.
    Some(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A mutable byte slice from a C pointer and length; NULL is allowed when
/// `len` is 0.
///
/// # Safety
/// If `len > 0`, `p` points to `len` writable bytes that nothing else
/// accesses for `'a`.
unsafe fn bytes_out<'a>(p: *mut u8, len: usize) -> Option<&'a mut [u8]> {
    if len == 0 {
        return Some(&mut []);
    }
    if p.is_null() || len > isize::MAX as usize {
        return None;
    }
    // SAFETY: non-null, `len` writable unaliased bytes by the caller's
    // contract, and `len` fits in an isize.
    Some(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

// ---------------------------------------------------------------------------
// Connection (control path)
// ---------------------------------------------------------------------------

/// Connects to sluiced and stores the new session in *out (NULL on failure).
///
/// socket_path may be NULL: then `$SLUICE_SOCKET` if set, else the daemon's
/// default for this user (`/run/sluice/sluiced.sock` for root,
/// `$XDG_RUNTIME_DIR/sluice/sluiced.sock`, else `/tmp/sluice-<uid>/sluiced.sock`).
/// name (UTF-8) shows in `sluice status`. Blocks for the handshake.
///
/// Returns SLUICE_OK, SLUICE_EUNREACHABLE, SLUICE_EREFUSED, SLUICE_EPROTO,
/// SLUICE_EIO or SLUICE_EINVAL.
///
/// # Safety
/// - `socket_path` is NULL or a NUL-terminated string.
/// - `name` is NULL or a NUL-terminated string.
/// - `out` is NULL or valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_connect(
    socket_path: *const c_char,
    name: *const c_char,
    out: *mut *mut sluice_client,
) -> c_int {
    guard("sluice_connect", || {
        // SAFETY: `out` is NULL or writable by the caller's contract.
        let Some(out) = (unsafe { out.as_mut() }) else {
            return cold_fail(SLUICE_EINVAL, "sluice_connect: out is NULL".into());
        };
        *out = std::ptr::null_mut();
        // SAFETY: `name` is NULL or NUL-terminated by the caller's contract.
        let name = match unsafe { utf8_arg("sluice_connect", "name", name) } {
            Ok(n) => n,
            Err(rc) => return rc,
        };
        let path = if socket_path.is_null() {
            crate::default_socket_path()
        } else {
            // SAFETY: non-null and NUL-terminated by the caller's contract.
            let bytes = unsafe { CStr::from_ptr(socket_path) }.to_bytes();
            Path::new(OsStr::from_bytes(bytes)).to_path_buf()
        };
        match Client::connect(&path, name) {
            Ok(client) => {
                *out = Box::into_raw(Box::new(sluice_client {
                    client,
                    names: Vec::new(),
                }));
                SLUICE_OK
            }
            Err(e) => cold_fail(
                e.code(),
                format!("sluice_connect({}): {}", path.display(), detail(e)),
            ),
        }
    })
}

/// Ends the session and frees the handle. NULL is a no-op. Requests still
/// in flight are abandoned (the daemon drops their results).
///
/// # Safety
/// `c` is NULL or a handle from sluice_connect() that has not been
/// disconnected yet and that no other thread is using; it is invalid
/// afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_disconnect(c: *mut sluice_client) {
    if c.is_null() {
        return;
    }
    let _ = guard("sluice_disconnect", || {
        // SAFETY: a live handle from Box::into_raw in sluice_connect, given
        // up by the caller here.
        drop(unsafe { Box::from_raw(c) });
        SLUICE_OK
    });
}

/// Looks a model up by name (UTF-8) and fills *out. Blocks for one round
/// trip on the control socket.
///
/// Returns SLUICE_OK, SLUICE_ENOMODEL (no model of that name),
/// SLUICE_EDISCONNECTED, SLUICE_EPROTO, SLUICE_EIO or SLUICE_EINVAL: NULL
/// `c`, `name` or `out`, `name` not UTF-8, or `name` longer than 256 bytes
/// (no model has such a name; nothing is sent to the daemon).
///
/// # Safety
/// - `c` is NULL or a live handle that no other thread is using.
/// - `name` is NULL or a NUL-terminated string.
/// - `out` is NULL or valid for writing a struct sluice_model_info.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_lookup_model(
    c: *mut sluice_client,
    name: *const c_char,
    out: *mut sluice_model_info,
) -> c_int {
    guard("sluice_lookup_model", || {
        // SAFETY: `c` is NULL or a live, unshared handle (caller's contract).
        let Some(c) = (unsafe { c.as_mut() }) else {
            return cold_fail(SLUICE_EINVAL, "sluice_lookup_model: client is NULL".into());
        };
        // SAFETY: `out` is NULL or writable (caller's contract).
        let Some(out) = (unsafe { out.as_mut() }) else {
            return cold_fail(SLUICE_EINVAL, "sluice_lookup_model: out is NULL".into());
        };
        // SAFETY: `name` is NULL or NUL-terminated (caller's contract).
        let name = match unsafe { utf8_arg("sluice_lookup_model", "name", name) } {
            Ok(n) => n,
            Err(rc) => return rc,
        };
        match c.client.lookup_model(name) {
            Ok(m) => {
                // A NUL in a tensor name is shown as `\0`.
                let cstr = |t: &crate::TensorInfo| {
                    CString::new(t.name.replace('\0', "\\0")).unwrap_or_default()
                };
                let entry = (
                    m.id,
                    m.inputs.iter().map(cstr).collect(),
                    m.outputs.iter().map(cstr).collect(),
                );
                match c.names.iter_mut().find(|e| e.0 == m.id) {
                    Some(e) => *e = entry,
                    None => c.names.push(entry),
                }
                *out = m.into();
                SLUICE_OK
            }
            Err(e) => cold_fail(
                e.code(),
                format!("sluice_lookup_model({name:?}): {}", detail(e)),
            ),
        }
    })
}

// ---------------------------------------------------------------------------
// Fast path
// ---------------------------------------------------------------------------

/// Submits a request without blocking and stores its ticket in *ticket_out.
/// Allocates nothing; makes a syscall only to wake a parked daemon.
///
/// Returns SLUICE_OK, SLUICE_EBADSPAN, SLUICE_ETOOMANY, SLUICE_ERINGFULL
/// (nothing was queued: wait for a completion and retry),
/// SLUICE_EDISCONNECTED or SLUICE_EINVAL (NULL pointer, bad priority).
///
/// # Safety
/// - `c` is NULL or a live handle that no other thread is using.
/// - `req` is NULL or points to a readable struct sluice_submit.
/// - `ticket_out` is NULL or valid for writing a uint64_t.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_submit(
    c: *mut sluice_client,
    req: *const sluice_submit,
    ticket_out: *mut u64,
) -> c_int {
    const F: &str = "sluice_submit";
    // SAFETY: `c` is NULL or a live, unshared handle (caller's contract).
    let Some(c) = (unsafe { c.as_mut() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: client is NULL"));
    };
    // SAFETY: `req` is NULL or readable (caller's contract).
    let Some(&req) = (unsafe { req.as_ref() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: request is NULL"));
    };
    // SAFETY: `ticket_out` is NULL or writable (caller's contract).
    let Some(ticket_out) = (unsafe { ticket_out.as_mut() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: ticket_out is NULL"));
    };
    let Some(priority) = Priority::from_raw(req.priority) else {
        return fast_fail(
            SLUICE_EINVAL,
            format_args!(
                "{F}: priority {} is neither SLUICE_PRIORITY_RT (0) nor SLUICE_PRIORITY_BE (1)",
                req.priority
            ),
        );
    };
    let s = Submit {
        model_id: req.model_id,
        priority,
        deadline_ns: req.deadline_ns,
        input: req.input.into(),
        output: req.output.into(),
    };
    match c.client.submit(&s) {
        Ok(Ticket(t)) => {
            *ticket_out = t;
            SLUICE_OK
        }
        Err(Error::BadSpan) => {
            let g = c.client.geometry();
            let (which, span) = if g.span_in_arena(req.input.off, req.input.len) {
                ("output", req.output)
            } else {
                ("input", req.input)
            };
            fast_fail(
                SLUICE_EBADSPAN,
                format_args!(
                    "{F}: {which} span [off {}, len {}] lies outside the arena ({} bytes)",
                    span.off, span.len, g.arena_size
                ),
            )
        }
        Err(Error::TooManyInFlight) => fast_fail(
            SLUICE_ETOOMANY,
            format_args!(
                "{F}: {} requests in flight, the completion ring's capacity; wait for one first",
                c.client.in_flight()
            ),
        ),
        Err(e) => fast_error(F, e),
    }
}

/// Returns SLUICE_OK and fills *out if the request has completed (the
/// ticket is then redeemed), SLUICE_PENDING (1) if not yet; never blocks.
///
/// Errors: SLUICE_EBADTICKET, SLUICE_EDISCONNECTED, SLUICE_EPROTO,
/// SLUICE_EINVAL.
///
/// # Safety
/// - `c` is NULL or a live handle that no other thread is using.
/// - `out` is NULL or valid for writing a struct sluice_completion.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_try_poll(
    c: *mut sluice_client,
    ticket: u64,
    out: *mut sluice_completion,
) -> c_int {
    const F: &str = "sluice_try_poll";
    // SAFETY: `c` is NULL or a live, unshared handle (caller's contract).
    let Some(c) = (unsafe { c.as_mut() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: client is NULL"));
    };
    // SAFETY: `out` is NULL or writable (caller's contract).
    let Some(out) = (unsafe { out.as_mut() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: out is NULL"));
    };
    match c.client.try_poll(Ticket(ticket)) {
        Ok(Some(done)) => {
            note_completion(F, c, &done);
            *out = done.into();
            SLUICE_OK
        }
        Ok(None) => SLUICE_PENDING,
        Err(e) => ticket_error(F, e, ticket, 0),
    }
}

/// Waits for the request to complete and fills *out (the ticket is then
/// redeemed): spins for the spin budget (sluice_set_spin_ns()), then sleeps
/// on a futex until the daemon wakes it.
///
/// Errors: SLUICE_EBADTICKET, SLUICE_EDISCONNECTED, SLUICE_EPROTO,
/// SLUICE_EINVAL.
///
/// # Safety
/// - `c` is NULL or a live handle that no other thread is using.
/// - `out` is NULL or valid for writing a struct sluice_completion.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_wait(
    c: *mut sluice_client,
    ticket: u64,
    out: *mut sluice_completion,
) -> c_int {
    // SAFETY: forwarded under the same contract.
    unsafe { wait_inner("sluice_wait", c, ticket, None, out) }
}

/// sluice_wait() with an upper bound of timeout_ns: SLUICE_ETIMEDOUT after
/// it; the request then stays in flight and can be waited for again.
///
/// # Safety
/// As sluice_wait().
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_wait_timeout(
    c: *mut sluice_client,
    ticket: u64,
    timeout_ns: u64,
    out: *mut sluice_completion,
) -> c_int {
    // SAFETY: forwarded under the same contract.
    unsafe { wait_inner("sluice_wait_timeout", c, ticket, Some(timeout_ns), out) }
}

/// # Safety
/// As [`sluice_wait`].
#[inline]
unsafe fn wait_inner(
    f: &str,
    c: *mut sluice_client,
    ticket: u64,
    timeout_ns: Option<u64>,
    out: *mut sluice_completion,
) -> c_int {
    // SAFETY: `c` is NULL or a live, unshared handle (caller's contract).
    let Some(c) = (unsafe { c.as_mut() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{f}: client is NULL"));
    };
    // SAFETY: `out` is NULL or writable (caller's contract).
    let Some(out) = (unsafe { out.as_mut() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{f}: out is NULL"));
    };
    match c
        .client
        .wait_timeout(Ticket(ticket), timeout_ns.map(Duration::from_nanos))
    {
        Ok(done) => {
            note_completion(f, c, &done);
            *out = done.into();
            SLUICE_OK
        }
        Err(e) => ticket_error(f, e, ticket, timeout_ns.unwrap_or(0)),
    }
}

/// A completion with an error status: records its explanation (naming the
/// tensor, against the model looked up on this session) as this thread's
/// message, without allocating.
#[inline]
fn note_completion(f: &str, c: &sluice_client, done: &Completion) {
    if done.status == status::OK {
        return;
    }
    explain_completion(f, c, done);
}

#[cold]
fn explain_completion(f: &str, c: &sluice_client, done: &Completion) {
    let (rid, model_id, batch) = c.client.last_done();
    if rid != done.request_id {
        return;
    }
    let fault = Fault {
        status: done.status,
        detail: done.detail,
    };
    match c.client.model(model_id) {
        Some(m) => fast_fail(
            SLUICE_OK,
            format_args!("{f}: request {rid:#x}: {}", m.explain(batch, fault)),
        ),
        None => fast_fail(
            SLUICE_OK,
            format_args!("{f}: request {rid:#x}: {}", status::describe(done.status)),
        ),
    };
}

/// Records an error of try_poll/wait with the ticket or timeout in it.
#[cold]
fn ticket_error(f: &str, e: Error, ticket: u64, timeout_ns: u64) -> c_int {
    match e {
        Error::BadTicket => fast_fail(
            SLUICE_EBADTICKET,
            format_args!(
                "{f}: ticket {ticket:#x} is not in flight on this client (already redeemed, or never issued)"
            ),
        ),
        Error::Timeout => fast_fail(
            SLUICE_ETIMEDOUT,
            format_args!(
                "{f}: ticket {ticket:#x} not done after {timeout_ns} ns; it stays in flight"
            ),
        ),
        e => fast_error(f, e),
    }
}

/// Copies len bytes from data into the arena at offset off.
///
/// Returns SLUICE_OK, SLUICE_EBADSPAN or SLUICE_EINVAL.
///
/// # Safety
/// - `c` is NULL or a live handle that no other thread is using.
/// - If `len > 0`, `data` is NULL or points to `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_write_arena(
    c: *mut sluice_client,
    off: u64,
    data: *const u8,
    len: usize,
) -> c_int {
    const F: &str = "sluice_write_arena";
    // SAFETY: `c` is NULL or a live, unshared handle (caller's contract).
    let Some(c) = (unsafe { c.as_mut() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: client is NULL"));
    };
    // SAFETY: `data` points to `len` readable bytes (caller's contract).
    let Some(data) = (unsafe { bytes_in(data, len) }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: data is NULL, len {len}"));
    };
    match c.client.write_arena(off, data) {
        Ok(()) => SLUICE_OK,
        Err(e) => arena_error(F, e, off, len, c.client.arena_len()),
    }
}

/// Copies len bytes of the arena at offset off into buf.
///
/// Returns SLUICE_OK, SLUICE_EBADSPAN or SLUICE_EINVAL.
///
/// # Safety
/// - `c` is NULL or a live handle that no other thread is using.
/// - If `len > 0`, `buf` is NULL or points to `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_read_arena(
    c: *mut sluice_client,
    off: u64,
    buf: *mut u8,
    len: usize,
) -> c_int {
    const F: &str = "sluice_read_arena";
    // SAFETY: `c` is NULL or a live, unshared handle (caller's contract).
    let Some(c) = (unsafe { c.as_mut() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: client is NULL"));
    };
    // SAFETY: `buf` points to `len` writable bytes (caller's contract).
    let Some(buf) = (unsafe { bytes_out(buf, len) }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: buf is NULL, len {len}"));
    };
    match c.client.read_arena(off, buf) {
        Ok(()) => SLUICE_OK,
        Err(e) => arena_error(F, e, off, len, c.client.arena_len()),
    }
}

#[cold]
fn arena_error(f: &str, e: Error, off: u64, len: usize, arena: u64) -> c_int {
    match e {
        Error::BadSpan => fast_fail(
            SLUICE_EBADSPAN,
            format_args!("{f}: [off {off}, len {len}] lies outside the arena ({arena} bytes)"),
        ),
        e => fast_error(f, e),
    }
}

// ---------------------------------------------------------------------------
// Typed tensors
// ---------------------------------------------------------------------------

/// Fills *out with the batch limit and tensor counts of model_id, which
/// must have been looked up on this session (sluice_lookup_model()).
///
/// Returns SLUICE_OK, SLUICE_ENOMODEL (not looked up on this session) or
/// SLUICE_EINVAL.
///
/// # Safety
/// - `c` is NULL or a live handle that no other thread is using.
/// - `out` is NULL or valid for writing a struct sluice_model_io.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_model_io(
    c: *const sluice_client,
    model_id: u32,
    out: *mut sluice_model_io,
) -> c_int {
    const F: &str = "sluice_model_io";
    // SAFETY: `c` is NULL or a live handle (caller's contract).
    let Some(c) = (unsafe { c.as_ref() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: client is NULL"));
    };
    // SAFETY: `out` is NULL or writable (caller's contract).
    let Some(out) = (unsafe { out.as_mut() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: out is NULL"));
    };
    let Some(m) = c.client.model(model_id) else {
        return not_looked_up(F, model_id);
    };
    *out = sluice_model_io {
        max_batch: m.max_batch,
        n_inputs: m.inputs.len() as u32,
        n_outputs: m.outputs.len() as u32,
        reserved: 0,
    };
    SLUICE_OK
}

#[cold]
fn not_looked_up(f: &str, model_id: u32) -> c_int {
    fast_fail(
        SLUICE_ENOMODEL,
        format_args!(
            "{f}: model id {model_id} was not looked up on this session; call \
             sluice_lookup_model() first"
        ),
    )
}

/// Fills *out with input (direction SLUICE_INPUT) or output
/// (SLUICE_OUTPUT) number index of model_id, which must have been looked
/// up on this session. out->name stays valid until the next
/// sluice_lookup_model() of this model or sluice_disconnect().
///
/// Returns SLUICE_OK, SLUICE_ENOMODEL (not looked up on this session) or
/// SLUICE_EINVAL (NULL pointer, unknown direction, index out of range).
///
/// # Safety
/// - `c` is NULL or a live handle that no other thread is using.
/// - `out` is NULL or valid for writing a struct sluice_tensor_info.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_model_tensor(
    c: *const sluice_client,
    model_id: u32,
    direction: u32,
    index: u32,
    out: *mut sluice_tensor_info,
) -> c_int {
    const F: &str = "sluice_model_tensor";
    // SAFETY: `c` is NULL or a live handle (caller's contract).
    let Some(c) = (unsafe { c.as_ref() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: client is NULL"));
    };
    // SAFETY: `out` is NULL or writable (caller's contract).
    let Some(out) = (unsafe { out.as_mut() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: out is NULL"));
    };
    let (Some(m), Some(names)) = (
        c.client.model(model_id),
        c.names.iter().find(|e| e.0 == model_id),
    ) else {
        return not_looked_up(F, model_id);
    };
    let (list, cnames, dir) = match direction {
        SLUICE_INPUT => (&m.inputs, &names.1, "input"),
        SLUICE_OUTPUT => (&m.outputs, &names.2, "output"),
        d => {
            return fast_fail(
                SLUICE_EINVAL,
                format_args!(
                    "{F}: direction {d} is neither SLUICE_INPUT (0) nor SLUICE_OUTPUT (1)"
                ),
            );
        }
    };
    let (Some(t), Some(name)) = (list.get(index as usize), cnames.get(index as usize)) else {
        return fast_fail(
            SLUICE_EINVAL,
            format_args!(
                "{F}: model {:?} has {} {dir}s; index {index} is out of range",
                m.name,
                list.len()
            ),
        );
    };
    let mut dims = [0u64; SLUICE_MAX_DIMS];
    let rank = t.dims.len().min(SLUICE_MAX_DIMS);
    dims[..rank].copy_from_slice(&t.dims[..rank]);
    *out = sluice_tensor_info {
        name: name.as_ptr(),
        elem: t.elem,
        batched: u32::from(t.batched),
        rank: rank as u32,
        reserved: 0,
        dims,
    };
    SLUICE_OK
}

/// The name of a SLUICE_ELEM_* code ("f32", "i64", ...), or "?" for an
/// unknown one; never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn sluice_elem_name(elem: u32) -> *const c_char {
    let s: &'static CStr = match elem {
        SLUICE_ELEM_U8 => c"u8",
        SLUICE_ELEM_F32 => c"f32",
        SLUICE_ELEM_F16 => c"f16",
        SLUICE_ELEM_BF16 => c"bf16",
        SLUICE_ELEM_I64 => c"i64",
        SLUICE_ELEM_I32 => c"i32",
        SLUICE_ELEM_BOOL => c"bool",
        _ => c"?",
    };
    s.as_ptr()
}

/// Bytes of tensor t at batch size batch (the product of its dims, dims[0]
/// times batch when batched, times the element size); 0 when t is NULL,
/// its element type unknown, or the size overflows.
///
/// # Safety
/// `t` is NULL or points to a readable struct sluice_tensor_info.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_tensor_bytes(t: *const sluice_tensor_info, batch: u32) -> u64 {
    // SAFETY: `t` is NULL or readable (caller's contract).
    let Some(t) = (unsafe { t.as_ref() }) else {
        return 0;
    };
    let rank = (t.rank as usize).min(SLUICE_MAX_DIMS);
    shm_proto::tensor::tensor_bytes(t.elem, &t.dims[..rank], t.batched != 0, batch).unwrap_or(0)
}

/// Submits a typed request without blocking and stores its ticket in
/// *ticket_out: checks it against the model's metadata (the model must
/// have been looked up on this session), writes the tensor table at
/// req->table_off, and pushes the request. Allocates nothing.
///
/// Returns SLUICE_OK; SLUICE_EBADTENSOR (a span's length is not its
/// tensor's size at the batch, a span lies outside the arena, outputs
/// overlap, wrong tensor counts, or a bad batch: nothing was submitted and
/// sluice_last_error_message() names the tensor with the size expected and
/// the size given); SLUICE_ENOMODEL (model not looked up on this session);
/// SLUICE_ETOOMANY, SLUICE_ERINGFULL, SLUICE_EDISCONNECTED, SLUICE_EINVAL.
///
/// # Safety
/// - `c` is NULL or a live handle that no other thread is using.
/// - `req` is NULL or points to a readable struct sluice_typed_submit whose
///   `inputs` and `outputs` point to `n_inputs` and `n_outputs` readable
///   spans (either may be NULL when its count is 0).
/// - `ticket_out` is NULL or valid for writing a uint64_t.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_submit_typed(
    c: *mut sluice_client,
    req: *const sluice_typed_submit,
    ticket_out: *mut u64,
) -> c_int {
    const F: &str = "sluice_submit_typed";
    // SAFETY: `c` is NULL or a live, unshared handle (caller's contract).
    let Some(c) = (unsafe { c.as_mut() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: client is NULL"));
    };
    // SAFETY: `req` is NULL or readable (caller's contract).
    let Some(&req) = (unsafe { req.as_ref() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: request is NULL"));
    };
    // SAFETY: `ticket_out` is NULL or writable (caller's contract).
    let Some(ticket_out) = (unsafe { ticket_out.as_mut() }) else {
        return fast_fail(SLUICE_EINVAL, format_args!("{F}: ticket_out is NULL"));
    };
    let Some(priority) = Priority::from_raw(req.priority) else {
        return fast_fail(
            SLUICE_EINVAL,
            format_args!(
                "{F}: priority {} is neither SLUICE_PRIORITY_RT (0) nor SLUICE_PRIORITY_BE (1)",
                req.priority
            ),
        );
    };
    // SAFETY: `inputs` points to `n_inputs` spans (caller's contract).
    let Some(inputs) = (unsafe { spans_in(req.inputs, req.n_inputs) }) else {
        return fast_fail(
            SLUICE_EINVAL,
            format_args!("{F}: inputs is NULL with n_inputs {}", req.n_inputs),
        );
    };
    // SAFETY: `outputs` points to `n_outputs` spans (caller's contract).
    let Some(outputs) = (unsafe { spans_in(req.outputs, req.n_outputs) }) else {
        return fast_fail(
            SLUICE_EINVAL,
            format_args!("{F}: outputs is NULL with n_outputs {}", req.n_outputs),
        );
    };
    // `sluice_span` is `#[repr(C)]` { u64, u64 }, as `Span` is.
    let inputs: &[Span] = span_slice(inputs);
    let outputs: &[Span] = span_slice(outputs);
    let s = TypedSubmit {
        priority,
        deadline_ns: req.deadline_ns,
        batch: req.batch,
        table_off: req.table_off,
        inputs,
        outputs,
    };
    let Some(m) = c.client.model(req.model_id) else {
        return not_looked_up(F, req.model_id);
    };
    if let Err(fault) = m.check_typed(c.client.arena_len(), &s) {
        return fast_fail(
            SLUICE_EBADTENSOR,
            format_args!("{F}: {}", m.explain(req.batch, fault)),
        );
    }
    match c.client.submit_typed_checked(req.model_id, &s) {
        Ok(Ticket(t)) => {
            *ticket_out = t;
            SLUICE_OK
        }
        Err(Error::TooManyInFlight) => fast_fail(
            SLUICE_ETOOMANY,
            format_args!(
                "{F}: {} requests in flight, the completion ring's capacity; wait for one first",
                c.client.in_flight()
            ),
        ),
        Err(e) => fast_error(F, e),
    }
}

/// A slice of spans from a C pointer and count; NULL is allowed when the
/// count is 0.
///
/// # Safety
/// If `n > 0`, `p` points to `n` readable spans that stay unchanged for `'a`.
unsafe fn spans_in<'a>(p: *const sluice_span, n: usize) -> Option<&'a [sluice_span]> {
    if n == 0 {
        return Some(&[]);
    }
    if p.is_null() || n > isize::MAX as usize / size_of::<sluice_span>() {
        return None;
    }
    // SAFETY: non-null, `n` readable spans by the caller's contract, and the
    // byte length fits in an isize.
    Some(unsafe { std::slice::from_raw_parts(p, n) })
}

const _: () = {
    assert!(size_of::<sluice_span>() == size_of::<Span>());
    assert!(align_of::<sluice_span>() == align_of::<Span>());
    assert!(std::mem::offset_of!(Span, off) == std::mem::offset_of!(sluice_span, off));
    assert!(std::mem::offset_of!(Span, len) == std::mem::offset_of!(sluice_span, len));
};

/// The same spans as [`Span`]s.
fn span_slice(s: &[sluice_span]) -> &[Span] {
    // SAFETY: both types are `#[repr(C)]` structs of two `u64`s, `off` then
    // `len` (asserted above), so the slices have the same layout; the
    // lifetime is kept.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<Span>(), s.len()) }
}

/// Computes into out[0..out_len) output number index of a typed request
/// to model_id at batch with the n_inputs inputs inputs[i][0..input_lens[i])
/// (in the model's order), as the daemon's simulated GPU writes it, so that
/// a client can check its results (out_len is the output's size at the
/// batch). Returns SLUICE_OK or SLUICE_EINVAL.
///
/// # Safety
/// - If `n_inputs > 0`, `inputs` and `input_lens` point to `n_inputs`
///   readable entries, and each `inputs[i]` to `input_lens[i]` readable
///   bytes (NULL allowed when that length is 0).
/// - If `out_len > 0`, `out` points to `out_len` writable bytes that do not
///   overlap the inputs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_expected_typed_output(
    model_id: u32,
    batch: u32,
    inputs: *const *const u8,
    input_lens: *const usize,
    n_inputs: usize,
    index: u32,
    out: *mut u8,
    out_len: usize,
) -> c_int {
    const F: &str = "sluice_expected_typed_output";
    guard(F, || {
        if n_inputs > 0 && (inputs.is_null() || input_lens.is_null()) {
            return cold_fail(
                SLUICE_EINVAL,
                format!("{F}: inputs or input_lens is NULL with n_inputs {n_inputs}"),
            );
        }
        let mut slices = Vec::with_capacity(n_inputs);
        for i in 0..n_inputs {
            // SAFETY: `inputs` and `input_lens` have `n_inputs` readable
            // entries (caller's contract; non-null checked above).
            let (p, len) = unsafe { (*inputs.add(i), *input_lens.add(i)) };
            // SAFETY: `p` points to `len` readable bytes (caller's contract).
            let Some(b) = (unsafe { bytes_in(p, len) }) else {
                return cold_fail(
                    SLUICE_EINVAL,
                    format!("{F}: inputs[{i}] is NULL with length {len}"),
                );
            };
            slices.push(b);
        }
        // SAFETY: `out` points to `out_len` writable bytes, disjoint from
        // the inputs (caller's contract).
        let Some(out) = (unsafe { bytes_out(out, out_len) }) else {
            return cold_fail(
                SLUICE_EINVAL,
                format!("{F}: out is NULL with out_len {out_len}"),
            );
        };
        shm_proto::sim::expected_typed_output(model_id, batch, &slices, index, out);
        SLUICE_OK
    })
}

// ---------------------------------------------------------------------------
// Accessors
// ---------------------------------------------------------------------------

/// Sets how long sluice_wait() spins before it sleeps, in ns, or
/// SLUICE_SPIN_ADAPTIVE (the default): twice the wake-up cost this client
/// has measured (starting at 50 µs, within 2 µs..2 ms), so that a round
/// trip pays at most one wake-up even where wake-ups are slow (VMs).
/// Spinning costs a core; sleeping costs a futex wake (a few µs on bare
/// metal, up to ~100 µs on some VMs) when the result comes. Returns
/// SLUICE_OK or SLUICE_EINVAL.
///
/// # Safety
/// `c` is NULL or a live handle that no other thread is using.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_set_spin_ns(c: *mut sluice_client, ns: u64) -> c_int {
    // SAFETY: `c` is NULL or a live, unshared handle (caller's contract).
    let Some(c) = (unsafe { c.as_mut() }) else {
        return fast_fail(
            SLUICE_EINVAL,
            format_args!("sluice_set_spin_ns: client is NULL"),
        );
    };
    if ns == SLUICE_SPIN_ADAPTIVE {
        c.client.set_spin_mode(crate::Spin::Adaptive);
    } else {
        c.client.set_spin(Duration::from_nanos(ns));
    }
    SLUICE_OK
}

/// The arena's size in bytes (0 if c is NULL).
///
/// # Safety
/// `c` is NULL or a live handle that no other thread is using.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_arena_len(c: *const sluice_client) -> u64 {
    // SAFETY: `c` is NULL or a live handle (caller's contract).
    match unsafe { c.as_ref() } {
        Some(c) => c.client.arena_len(),
        None => 0,
    }
}

/// The arena's first byte, for writing inputs and reading outputs in place
/// (NULL if c is NULL). Valid until sluice_disconnect(). The daemon writes
/// the output spans of requests in flight: do not touch those until they
/// complete.
///
/// # Safety
/// `c` is NULL or a live handle that no other thread is using.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_arena_ptr(c: *mut sluice_client) -> *mut u8 {
    // SAFETY: `c` is NULL or a live, unshared handle (caller's contract).
    match unsafe { c.as_mut() } {
        Some(c) => c.client.arena_ptr(),
        None => std::ptr::null_mut(),
    }
}

/// Requests submitted and not yet redeemed (0 if c is NULL).
///
/// # Safety
/// `c` is NULL or a live handle that no other thread is using.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_in_flight(c: *const sluice_client) -> u32 {
    // SAFETY: `c` is NULL or a live handle (caller's contract).
    match unsafe { c.as_ref() } {
        Some(c) => c.client.in_flight(),
        None => 0,
    }
}

/// The daemon-assigned client number (0 if c is NULL).
///
/// # Safety
/// `c` is NULL or a live handle that no other thread is using.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_client_id(c: *const sluice_client) -> u32 {
    // SAFETY: `c` is NULL or a live handle (caller's contract).
    match unsafe { c.as_ref() } {
        Some(c) => c.client.client_id(),
        None => 0,
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of every timestamp and
/// deadline in sluice (vDSO, no syscall).
#[unsafe(no_mangle)]
pub extern "C" fn sluice_now_ns() -> u64 {
    crate::now_ns()
}

// ---------------------------------------------------------------------------
// Errors and helpers
// ---------------------------------------------------------------------------

/// A short static description of a return code (SLUICE_OK, SLUICE_PENDING
/// or SLUICE_E*); never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn sluice_strerror(code: c_int) -> *const c_char {
    error_text(code).as_ptr()
}

/// A short static description of a SLUICE_STATUS_* completion status;
/// never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn sluice_status_str(status: u32) -> *const c_char {
    let s: &'static CStr = match status {
        SLUICE_STATUS_OK => c"ok",
        SLUICE_STATUS_UNKNOWN_MODEL => c"unknown model id (look the model up by name first)",
        SLUICE_STATUS_BAD_INPUT_SPAN => c"input span lies outside the arena",
        SLUICE_STATUS_BAD_OUTPUT_SPAN => c"output span lies outside the arena",
        SLUICE_STATUS_BAD_INPUT_LEN => c"input length differs from the model's input size",
        SLUICE_STATUS_OUTPUT_TOO_SMALL => c"output span is smaller than the model's output size",
        SLUICE_STATUS_BAD_PRIORITY => c"priority is neither real-time (0) nor best-effort (1)",
        SLUICE_STATUS_BAD_FLAGS => c"unknown flag bits",
        SLUICE_STATUS_DEADLINE_MISSED => c"deadline passed before the request started",
        SLUICE_STATUS_DEVICE_ERROR => c"the device failed while running the request",
        SLUICE_STATUS_SHUTTING_DOWN => c"the daemon is shutting down",
        SLUICE_STATUS_BAD_BATCH => c"batch size is 0 or over the model's max_batch",
        SLUICE_STATUS_BAD_TENSOR_TABLE => {
            c"tensor table is malformed (count, place, overlap) or the model needs one"
        }
        SLUICE_STATUS_BAD_TENSOR_LEN => {
            c"a tensor's length differs from its size at the request's batch"
        }
        SLUICE_STATUS_MODEL_UNLOADED => {
            c"the model was unloaded before the request reached the device"
        }
        _ => c"unknown status code",
    };
    s.as_ptr()
}

/// The detailed message of the last failed sluice_* call on this thread
/// (what failed, with the offending value, and what to do), or "" if none
/// failed yet; never NULL. The string stays valid until the next
/// sluice_last_error_message() call on this thread; copy it to keep it.
#[unsafe(no_mangle)]
pub extern "C" fn sluice_last_error_message() -> *const c_char {
    let r = catch_unwind(|| {
        let fast = FAST_MSG.with(|m| {
            let m = m.borrow();
            m.set.then(|| {
                String::from_utf8_lossy(m.buf.get(..m.len).unwrap_or_default()).into_owned()
            })
        });
        let msg = fast.unwrap_or_else(crate::last_error_message);
        let msg = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
        MSG_CSTR.with(|m| {
            let mut m = m.borrow_mut();
            *m = msg;
            m.as_ptr()
        })
    });
    r.unwrap_or(c"(sluice_last_error_message failed internally)".as_ptr())
}

/// Computes into out[0..out_len) the output the daemon's simulated GPU
/// produces for model_id and input in[0..in_len), so that a client can
/// check its results (compare with output_len bytes of the output span).
/// Either pointer may be NULL when its length is 0.
///
/// Returns SLUICE_OK or SLUICE_EINVAL.
///
/// # Safety
/// - If `in_len > 0`, `input` points to `in_len` readable bytes.
/// - If `out_len > 0`, `out` points to `out_len` writable bytes that do not
///   overlap the input.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_expected_output(
    model_id: u32,
    input: *const u8,
    in_len: usize,
    out: *mut u8,
    out_len: usize,
) -> c_int {
    guard("sluice_expected_output", || {
        // SAFETY: `input` points to `in_len` readable bytes (caller's contract).
        let Some(input) = (unsafe { bytes_in(input, in_len) }) else {
            return cold_fail(
                SLUICE_EINVAL,
                format!("sluice_expected_output: input is NULL with in_len {in_len}"),
            );
        };
        // SAFETY: `out` points to `out_len` writable bytes, disjoint from
        // the input (caller's contract).
        let Some(out) = (unsafe { bytes_out(out, out_len) }) else {
            return cold_fail(
                SLUICE_EINVAL,
                format!("sluice_expected_output: out is NULL with out_len {out_len}"),
            );
        };
        shm_proto::sim::expected_output(model_id, input, out);
        SLUICE_OK
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::{null, null_mut};

    fn last_msg() -> String {
        // SAFETY: the function returns a NUL-terminated thread-local string
        // that stays valid until its next call.
        unsafe { CStr::from_ptr(sluice_last_error_message()) }
            .to_str()
            .unwrap()
            .to_owned()
    }

    fn strerror(code: c_int) -> &'static str {
        // SAFETY: sluice_strerror returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(sluice_strerror(code)) }
            .to_str()
            .unwrap()
    }

    #[test]
    fn codes_match_errors_and_texts_match_display() {
        let all = [
            Error::DaemonUnreachable,
            Error::Refused(3),
            Error::Protocol,
            Error::Io(5),
            Error::Disconnected,
            Error::RingFull,
            Error::TooManyInFlight,
            Error::BadTicket,
            Error::ModelNotFound,
            Error::BadSpan,
            Error::Timeout,
            Error::InvalidArgument,
            Error::BadTensor,
            Error::RequestFailed(9),
        ];
        crate::set_last_error(String::new());
        for (i, e) in all.into_iter().enumerate() {
            assert_eq!(e.code(), -(i as c_int) - 1, "{e:?}");
            let text = strerror(e.code());
            assert_ne!(text, "unknown sluice error code", "{e:?}");
            // Display adds the value for Refused/Io; the static text is its prefix.
            assert!(e.to_string().starts_with(text), "{e:?}: {text:?}");
        }
        assert_eq!(strerror(SLUICE_OK), "ok");
        assert_eq!(
            strerror(SLUICE_PENDING),
            "the request has not completed yet"
        );
        assert_eq!(strerror(-15), "unknown sluice error code");
        assert_eq!(strerror(c_int::MIN), "unknown sluice error code");
    }

    #[test]
    fn status_strings_match_shm_proto() {
        for code in 0..=13u32 {
            // SAFETY: sluice_status_str returns a static NUL-terminated string.
            let s = unsafe { CStr::from_ptr(sluice_status_str(code)) };
            assert_eq!(s.to_str().unwrap(), status::describe(code), "status {code}");
        }
    }

    #[test]
    fn connect_rejects_null_arguments() {
        let mut out: *mut sluice_client = std::ptr::dangling_mut();
        // SAFETY: valid strings and out pointer, or NULLs.
        let rc = unsafe { sluice_connect(null(), null(), &mut out) };
        assert_eq!(rc, SLUICE_EINVAL);
        assert!(out.is_null(), "out must be NULL after a failure");
        assert_eq!(last_msg(), "sluice_connect: name is NULL");
        // SAFETY: as above.
        let rc = unsafe { sluice_connect(null(), c"t".as_ptr(), null_mut()) };
        assert_eq!(rc, SLUICE_EINVAL);
        assert_eq!(last_msg(), "sluice_connect: out is NULL");
        let bad = c"\xff\xfe";
        // SAFETY: as above.
        let rc = unsafe { sluice_connect(null(), bad.as_ptr(), &mut out) };
        assert_eq!(rc, SLUICE_EINVAL);
        assert!(last_msg().contains("not valid UTF-8"), "{}", last_msg());
    }

    #[test]
    fn connect_to_missing_socket_is_unreachable_with_message() {
        let path = c"/nonexistent-sluice-test-dir/sluiced.sock";
        let mut out: *mut sluice_client = null_mut();
        // SAFETY: valid strings and out pointer.
        let rc = unsafe { sluice_connect(path.as_ptr(), c"ffi-test".as_ptr(), &mut out) };
        assert_eq!(rc, SLUICE_EUNREACHABLE);
        assert!(out.is_null());
        let msg = last_msg();
        assert!(
            msg.starts_with("sluice_connect(/nonexistent-sluice-test-dir/sluiced.sock)")
                && msg.contains("is the daemon running"),
            "{msg}"
        );
        assert_eq!(strerror(rc), "sluiced is not reachable on its socket");
    }

    #[test]
    fn disconnect_null_is_a_no_op() {
        // SAFETY: NULL is explicitly allowed.
        unsafe { sluice_disconnect(null_mut()) };
    }

    #[test]
    fn lookup_rejects_null_arguments() {
        let mut info = sluice_model_info::default();
        // SAFETY: NULL client, valid name and out.
        let rc = unsafe { sluice_lookup_model(null_mut(), c"echo_small".as_ptr(), &mut info) };
        assert_eq!(rc, SLUICE_EINVAL);
        assert_eq!(last_msg(), "sluice_lookup_model: client is NULL");
    }

    #[test]
    fn fast_path_rejects_null_arguments_with_messages() {
        let req = sluice_submit::default();
        let mut t = 0u64;
        let mut done = sluice_completion::default();
        // SAFETY: every call passes a NULL client, which must be rejected
        // before anything else is touched; the other pointers are valid.
        unsafe {
            assert_eq!(sluice_submit(null_mut(), &req, &mut t), SLUICE_EINVAL);
            assert_eq!(last_msg(), "sluice_submit: client is NULL");
            assert_eq!(sluice_try_poll(null_mut(), 1, &mut done), SLUICE_EINVAL);
            assert_eq!(last_msg(), "sluice_try_poll: client is NULL");
            assert_eq!(sluice_wait(null_mut(), 1, &mut done), SLUICE_EINVAL);
            assert_eq!(last_msg(), "sluice_wait: client is NULL");
            assert_eq!(
                sluice_wait_timeout(null_mut(), 1, 10, &mut done),
                SLUICE_EINVAL
            );
            assert_eq!(last_msg(), "sluice_wait_timeout: client is NULL");
            assert_eq!(
                sluice_write_arena(null_mut(), 0, [1u8].as_ptr(), 1),
                SLUICE_EINVAL
            );
            assert_eq!(last_msg(), "sluice_write_arena: client is NULL");
            let mut b = [0u8; 1];
            assert_eq!(
                sluice_read_arena(null_mut(), 0, b.as_mut_ptr(), 1),
                SLUICE_EINVAL
            );
            assert_eq!(last_msg(), "sluice_read_arena: client is NULL");
            assert_eq!(sluice_set_spin_ns(null_mut(), 0), SLUICE_EINVAL);
            assert_eq!(sluice_arena_len(null()), 0);
            assert!(sluice_arena_ptr(null_mut()).is_null());
            assert_eq!(sluice_in_flight(null()), 0);
            assert_eq!(sluice_client_id(null()), 0);
        }
    }

    #[test]
    fn control_path_failure_replaces_fast_path_message() {
        let mut done = sluice_completion::default();
        // SAFETY: NULL client, valid out.
        let rc = unsafe { sluice_wait(null_mut(), 1, &mut done) };
        assert_eq!(rc, SLUICE_EINVAL);
        assert_eq!(last_msg(), "sluice_wait: client is NULL");
        let mut out = null_mut();
        // SAFETY: valid strings and out pointer.
        let rc =
            unsafe { sluice_connect(c"/nonexistent-x/s.sock".as_ptr(), c"t".as_ptr(), &mut out) };
        assert_eq!(rc, SLUICE_EUNREACHABLE);
        assert!(last_msg().starts_with("sluice_connect(/nonexistent-x/s.sock)"));
    }

    /// Counts allocations per thread, so a test can show that a code path
    /// allocates nothing while other tests run.
    struct CountingAlloc;

    thread_local! {
        static ALLOCS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    // SAFETY: forwards to the system allocator unchanged; the counter is a
    // const-initialised thread-local without a destructor, so counting
    // itself never allocates.
    unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
        unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
            let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
            // SAFETY: the caller's contract is passed on.
            unsafe { std::alloc::System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
            // SAFETY: the caller's contract is passed on.
            unsafe { std::alloc::System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc;

    #[test]
    fn fast_path_failures_do_not_allocate() {
        let req = sluice_submit::default();
        let mut t = 0u64;
        let mut done = sluice_completion::default();
        let before = ALLOCS.with(|n| n.get());
        // SAFETY: NULL clients are rejected before anything is touched; the
        // other pointers are valid.
        let rcs = unsafe {
            [
                sluice_submit(null_mut(), &req, &mut t),
                sluice_try_poll(null_mut(), 1, &mut done),
                sluice_wait(null_mut(), 1, &mut done),
                sluice_wait_timeout(null_mut(), 1, 1, &mut done),
                sluice_write_arena(null_mut(), 0, null(), 0),
                sluice_read_arena(null_mut(), 0, null_mut(), 0),
                ticket_error("sluice_wait_timeout", Error::Timeout, 0x1_0000_0002, 5),
                arena_error("sluice_read_arena", Error::BadSpan, 1 << 40, 8, 1 << 20),
                sluice_submit_typed(null_mut(), null(), &mut t),
                sluice_model_io(null(), 0, null_mut()),
                sluice_model_tensor(null(), 0, SLUICE_INPUT, 0, null_mut()),
                not_looked_up("sluice_submit_typed", 7),
                fast_error("sluice_submit", Error::RingFull),
            ]
        };
        let after = ALLOCS.with(|n| n.get());
        assert_eq!(after - before, 0, "the fast path's error paths allocated");
        assert!(rcs.iter().all(|&rc| rc < 0), "{rcs:?}");
        assert_eq!(
            last_msg(),
            "sluice_submit: submission ring full; wait for a completion and retry"
        );
    }

    #[test]
    fn guard_turns_a_panic_into_eio_with_message() {
        let rc = guard("sluice_test", || panic!("boom {}", 42));
        assert_eq!(rc, SLUICE_EIO);
        let m = last_msg();
        assert!(
            m.starts_with("sluice_test: internal panic (boom 42)"),
            "{m}"
        );
    }

    #[test]
    fn fast_message_is_truncated_not_overflowed() {
        let long = "x".repeat(3 * FAST_MSG_CAP);
        assert_eq!(
            fast_fail(SLUICE_EINVAL, format_args!("a{long}")),
            SLUICE_EINVAL
        );
        let m = last_msg();
        assert_eq!(m.len(), FAST_MSG_CAP);
        assert!(m.starts_with("axx"));
    }

    #[test]
    fn expected_output_matches_reference_and_checks_pointers() {
        let input: Vec<u8> = (0..100u8).collect();
        let mut want = [0u8; 40];
        shm_proto::sim::expected_output(7, &input, &mut want);
        let mut got = [0u8; 40];
        // SAFETY: valid buffers of the given lengths.
        let rc = unsafe {
            sluice_expected_output(7, input.as_ptr(), input.len(), got.as_mut_ptr(), got.len())
        };
        assert_eq!(rc, SLUICE_OK);
        assert_eq!(got, want);
        // SAFETY: NULL with non-zero length must be rejected, not read.
        let rc = unsafe { sluice_expected_output(7, null(), 4, got.as_mut_ptr(), got.len()) };
        assert_eq!(rc, SLUICE_EINVAL);
        assert_eq!(
            last_msg(),
            "sluice_expected_output: input is NULL with in_len 4"
        );
        // SAFETY: as above.
        let rc = unsafe { sluice_expected_output(7, input.as_ptr(), 1, null_mut(), 8) };
        assert_eq!(rc, SLUICE_EINVAL);
        // SAFETY: NULL with zero length is allowed.
        let rc = unsafe { sluice_expected_output(7, null(), 0, null_mut(), 0) };
        assert_eq!(rc, SLUICE_OK);
    }

    #[test]
    fn now_is_monotonic() {
        let a = sluice_now_ns();
        let b = sluice_now_ns();
        assert!(a > 0 && b >= a);
    }
}
