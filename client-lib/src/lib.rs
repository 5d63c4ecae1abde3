//! # sluice-client: the library latency-critical processes link
//!
//! ```no_run
//! use sluice_client::{Client, Priority, Span, Submit};
//! let mut c = Client::connect_default("obstacle-detector")?;
//! let model = c.lookup_model("vgg19")?;
//! let input = Span { off: 0, len: model.input_bytes };
//! let output = Span { off: model.input_bytes.next_multiple_of(64), len: model.output_bytes };
//! c.write_arena(input.off, &vec![0u8; model.input_bytes as usize])?;
//! let t = c.submit(&Submit { model_id: model.id, priority: Priority::RealTime,
//!                            deadline_ns: 0, input, output })?;
//! let done = c.wait(t)?;
//! assert_eq!(done.status, sluice_client::status::OK);
//! # Ok::<(), sluice_client::Error>(())
//! ```
//!
//! The fast path — [`Client::submit`], [`Client::try_poll`], [`Client::wait`]
//! — allocates nothing, cannot panic, and makes no syscall unless the peer
//! is asleep: submit writes the daemon's eventfd only when the daemon has
//! parked; wait spins for the spin budget and only then sleeps on a futex in
//! the shared region (see `shm_proto::wake`).
//!
//! ## The spin budget adapts to the wake-up cost
//!
//! By default ([`Spin::Adaptive`]) a wait spins for twice the wake-up cost
//! this client has measured: whenever a wait slept, the time from the
//! completion's `finished_ns` to the moment the woken client holds it (the
//! daemon's posting delay and the futex wake-up, i.e. what sleeping cost)
//! feeds a moving average. Spinning that long covers a completion that is
//! itself late because the *daemon* had to wake up (its wake-up costs what
//! ours does on the same machine), so a round trip pays at most one
//! wake-up, never two; a fixed budget shorter than the machine's wake-up
//! (a VM's can exceed 100 µs) made round trips bimodal. The budget starts at
//! 50 µs and stays within 2 µs ..= 2 ms. [`Client::set_spin`] fixes it
//! instead.
//!
//! The connection (control socket, region memfd, eventfd) is the only state;
//! when the daemon goes away every call returns [`Error::Disconnected`], and
//! a new [`Client::connect`] starts over.
//!
//! ## From C
//!
//! The same library is built as `libsluice_client.a` and
//! `libsluice_client.so`, with the C ABI of [`ffi`] and the header
//! `client-lib/include/sluice.h`. Every `cargo build` of this crate also
//! writes a pkg-config file, `sluice.pc`, next to the libraries in the
//! profile directory (`target/release/sluice.pc` for `cargo build
//! --release`; `build.rs` fills `sluice.pc.in`), so a C build needs only
//!
//! ```sh
//! export PKG_CONFIG_PATH=target/release
//! cc app.c $(pkg-config --cflags --libs sluice) \
//!     -Wl,-rpath,$(pkg-config --variable=libdir sluice)
//! ```
//!
//! See `docs/c-api.md`.

mod conn;
pub mod ffi;

use std::cell::RefCell;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use shm_proto::layout::{RegionHeader, STATE_CLOSED};
use shm_proto::region::{self, ClientRings, Mapping};
use shm_proto::ring::{Consumer, Producer, PushError};
use shm_proto::tensor::Detail;
use shm_proto::{Geometry, control::Msg, futex};

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of every timestamp and
/// deadline in sluice (vDSO, no syscall). Defined in [`shm_proto::clock`],
/// so the daemon and this library read the same clock.
pub use shm_proto::now_ns;
pub use shm_proto::{Completion, Priority, Request, control::refused, status};

/// Everything that can go wrong, one to one with the C `SLUICE_E*` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// No daemon listens on the socket path. C: `SLUICE_EUNREACHABLE` (-1).
    DaemonUnreachable,
    /// The daemon refused the session (code from [`refused`]); see
    /// [`last_error_message`]. C: `SLUICE_EREFUSED` (-2).
    Refused(u32),
    /// The daemon sent something this library does not understand. C: -3.
    Protocol,
    /// An OS error (errno) on the control path. C: -4.
    Io(i32),
    /// The daemon went away (exit, crash, restart) or dropped this client.
    /// Reconnect with [`Client::connect`]. C: `SLUICE_EDISCONNECTED` (-5).
    Disconnected,
    /// The submission ring is full: wait for a completion and retry. C: -6.
    RingFull,
    /// As many requests are in flight as the completion ring holds: wait
    /// for one first. C: -7.
    TooManyInFlight,
    /// The ticket is not in flight on this client (already taken, or never
    /// issued). C: -8.
    BadTicket,
    /// No model of that name. C: -9.
    ModelNotFound,
    /// A span lies outside the arena. C: -10.
    BadSpan,
    /// `wait_timeout` ran out. C: -11.
    Timeout,
    /// An argument was invalid (null pointer, bad priority). C: -12.
    InvalidArgument,
    /// A typed request does not fit the model: a tensor's length, its
    /// place, the tensor count or the batch; [`last_error_message`] names
    /// the tensor with the size expected and the size given. Found by this
    /// library before submitting, or reported by the daemon. C:
    /// `SLUICE_EBADTENSOR` (-13).
    BadTensor,
    /// The daemon completed the request with this error status (a
    /// `status` code other than a tensor refusal); [`last_error_message`]
    /// says which. Only [`Client::infer`] returns it. C: `SLUICE_EFAILED`
    /// (-14).
    RequestFailed(u32),
}

impl Error {
    /// The C error code (negative).
    pub const fn code(self) -> i32 {
        match self {
            Self::DaemonUnreachable => -1,
            Self::Refused(_) => -2,
            Self::Protocol => -3,
            Self::Io(_) => -4,
            Self::Disconnected => -5,
            Self::RingFull => -6,
            Self::TooManyInFlight => -7,
            Self::BadTicket => -8,
            Self::ModelNotFound => -9,
            Self::BadSpan => -10,
            Self::Timeout => -11,
            Self::InvalidArgument => -12,
            Self::BadTensor => -13,
            Self::RequestFailed(_) => -14,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Self::DaemonUnreachable => f.write_str("sluiced is not reachable on its socket"),
            Self::Refused(code) => write!(f, "sluiced refused the session (reason {code})"),
            Self::Protocol => f.write_str("unexpected message from sluiced (version skew?)"),
            Self::Io(errno) => write!(f, "I/O error on the control socket (errno {errno})"),
            Self::Disconnected => f.write_str("disconnected from sluiced; reconnect"),
            Self::RingFull => f.write_str("submission ring full; wait for a completion and retry"),
            Self::TooManyInFlight => {
                f.write_str("completion ring capacity in flight; wait for a completion first")
            }
            Self::BadTicket => f.write_str("ticket is not in flight on this client"),
            Self::ModelNotFound => f.write_str("no model of that name on this daemon"),
            Self::BadSpan => f.write_str("span lies outside the client's arena"),
            Self::Timeout => f.write_str("timed out waiting for the completion"),
            Self::InvalidArgument => f.write_str("invalid argument"),
            Self::BadTensor => f.write_str("the request's tensors do not fit the model"),
            Self::RequestFailed(code) => write!(
                f,
                "the daemon failed the request (status {code}: {})",
                status::describe(code)
            ),
        }?;
        // Only the control-path errors and the typed-request errors leave a
        // detailed message behind.
        if !matches!(
            self,
            Self::DaemonUnreachable
                | Self::Refused(_)
                | Self::Protocol
                | Self::ModelNotFound
                | Self::BadTensor
                | Self::RequestFailed(_)
        ) {
            return Ok(());
        }
        LAST_ERROR.with(|m| {
            let m = m.borrow();
            if m.is_empty() {
                Ok(())
            } else {
                write!(f, ": {m}")
            }
        })
    }
}

impl std::error::Error for Error {}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

pub(crate) fn set_last_error(msg: String) {
    LAST_ERROR.with(|m| *m.borrow_mut() = msg);
}

/// The detailed message of the last control-path error on this thread
/// (connect, handshake, look-up), e.g. the daemon's refusal text.
pub fn last_error_message() -> String {
    LAST_ERROR.with(|m| m.borrow().clone())
}

/// The socket path a client uses when none is given: `$SLUICE_SOCKET` if
/// set, else the daemon's default for this user — `/run/sluice/sluiced.sock`
/// for root, `$XDG_RUNTIME_DIR/sluice/sluiced.sock` when that is set, else
/// `/tmp/sluice-<uid>/sluiced.sock`. A system daemon serving other users
/// listens on `/run/sluice/sluiced.sock`: set `SLUICE_SOCKET` to that.
pub fn default_socket_path() -> PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_SOCKET") {
        return PathBuf::from(p);
    }
    let euid = rustix::process::geteuid();
    if euid.is_root() {
        return PathBuf::from("/run/sluice/sluiced.sock");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("sluice/sluiced.sock"),
        _ => PathBuf::from(format!("/tmp/sluice-{}/sluiced.sock", euid.as_raw())),
    }
}

/// A byte range in the client's arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Span {
    /// Offset from the arena's start.
    pub off: u64,
    /// Length in bytes.
    pub len: u64,
}

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Submit {
    /// From [`Client::lookup_model`].
    pub model_id: u32,
    /// Real-time or best-effort.
    pub priority: Priority,
    /// Absolute `CLOCK_MONOTONIC` deadline ([`now_ns`] + budget), 0 = none.
    pub deadline_ns: u64,
    /// Where the input tensor is.
    pub input: Span,
    /// Where the output should go.
    pub output: Span,
}

/// A model as the daemon describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    /// Id for [`Submit::model_id`].
    pub id: u32,
    /// Exact input length of an untyped request ([`Client::submit`]).
    pub input_bytes: u64,
    /// Output length of an untyped request.
    pub output_bytes: u64,
    /// Standalone execution time on the daemon's device, ns.
    pub standalone_ns: u64,
    /// Kernels per inference.
    pub kernels: u32,
    /// The model's name.
    pub name: String,
    /// Largest batch a typed request may carry.
    pub max_batch: u32,
    /// Inputs, in the order of a typed request's tensor table.
    pub inputs: Vec<TensorInfo>,
    /// Outputs, in order.
    pub outputs: Vec<TensorInfo>,
}

/// One input or output of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The model's name for it.
    pub name: String,
    /// Element type code (`shm_proto::tensor::ELEM_*`).
    pub elem: u32,
    /// Dims at batch 1; when [`TensorInfo::batched`], dim 0 is the batch.
    pub dims: Vec<u64>,
    /// Whether dim 0 grows with the batch.
    pub batched: bool,
}

impl TensorInfo {
    /// Bytes at `batch`; `None` on overflow.
    pub fn bytes(&self, batch: u32) -> Option<u64> {
        shm_proto::tensor::tensor_bytes(self.elem, &self.dims, self.batched, batch)
    }
    /// The element type's name (`"f32"`, ...).
    pub fn elem_name(&self) -> &'static str {
        shm_proto::tensor::elem_name(self.elem).unwrap_or("?")
    }
    /// The shape with the batch dimension as `N`, e.g. `i64[N,128]`.
    pub fn describe(&self) -> Shape<'_> {
        Shape(self)
    }
}

/// [`TensorInfo::describe`]: formats without allocating.
#[derive(Debug, Clone, Copy)]
pub struct Shape<'a>(&'a TensorInfo);

impl std::fmt::Display for Shape<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[", self.0.elem_name())?;
        for (i, d) in self.0.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if i == 0 && self.0.batched {
                f.write_str("N")?;
            } else {
                write!(f, "{d}")?;
            }
        }
        f.write_str("]")
    }
}

/// A typed request: a batch and one span per model input and output
/// ([`Client::submit_typed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypedSubmit<'a> {
    /// Real-time or best-effort.
    pub priority: Priority,
    /// Absolute `CLOCK_MONOTONIC` deadline, 0 = none.
    pub deadline_ns: u64,
    /// Batch size, 1 up to [`ModelInfo::max_batch`].
    pub batch: u32,
    /// Where in the arena the library writes the tensor table: 16 bytes
    /// per input and output; it must not overlap an output.
    pub table_off: u64,
    /// One span per model input, in the model's order.
    pub inputs: &'a [Span],
    /// One span per model output, in the model's order.
    pub outputs: &'a [Span],
}

/// What is wrong with a request: the completion's status and detail (see
/// `shm_proto::tensor`), found by the daemon or by this library before
/// submitting. [`ModelInfo::explain`] renders it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// A `status` code.
    pub status: u32,
    /// `Completion::detail`.
    pub detail: [u64; 2],
}

impl Fault {
    fn new(status: u32, what: Detail, given: Detail) -> Self {
        Self {
            status,
            detail: [what.pack(), given.pack()],
        }
    }
}

/// A fault explained against a model's metadata ([`ModelInfo::explain`]);
/// formats without allocating.
#[derive(Debug, Clone, Copy)]
pub struct Explain<'a> {
    model: &'a ModelInfo,
    batch: u32,
    fault: Fault,
}

impl ModelInfo {
    /// Explains a refusal of a request at `batch` to this model: names the
    /// tensor with its shape, the size expected and the size given, e.g.
    /// `input "ids" (i64[N,128]) takes 1024 bytes at batch 1; the request
    /// gave 512`. For a completion, pass `Fault { status, detail }`.
    pub fn explain(&self, batch: u32, fault: Fault) -> Explain<'_> {
        Explain {
            model: self,
            batch,
            fault,
        }
    }

    /// Checks a typed request against this model and the arena (`arena`
    /// bytes) by the daemon's rules (`shm_proto::tensor`), so that a bad
    /// request fails here with the same fault the daemon would give.
    pub fn check_typed(&self, arena: u64, s: &TypedSubmit<'_>) -> Result<(), Fault> {
        use shm_proto::tensor::*;
        let g = Geometry {
            sq_entries: 2,
            cq_entries: 2,
            arena_size: arena,
        };
        let batch_detail = |v: u64| Detail::new(ROLE_BATCH, 0, v);
        if s.batch == 0 || s.batch > self.max_batch || s.batch > u32::from(u16::MAX) {
            return Err(Fault::new(
                status::BAD_BATCH,
                batch_detail(u64::from(self.max_batch)),
                batch_detail(u64::from(s.batch)),
            ));
        }
        let n = self.inputs.len() + self.outputs.len();
        let want = (n * TABLE_ENTRY_BYTES) as u64;
        let given = ((s.inputs.len() + s.outputs.len()) * TABLE_ENTRY_BYTES) as u64;
        if s.inputs.len() != self.inputs.len() || s.outputs.len() != self.outputs.len() {
            return Err(Fault::new(
                status::BAD_TENSOR_TABLE,
                Detail::new(ROLE_TABLE, TABLE_LEN, want),
                Detail::new(ROLE_TABLE, TABLE_LEN, given),
            ));
        }
        if !g.span_in_arena(s.table_off, want) {
            return Err(Fault::new(
                status::BAD_TENSOR_TABLE,
                Detail::new(ROLE_TABLE, TABLE_OUTSIDE, arena),
                Detail::new(ROLE_TABLE, TABLE_OUTSIDE, s.table_off.saturating_add(want)),
            ));
        }
        for (role, specs, spans, bad_span) in [
            (ROLE_INPUT, &self.inputs, s.inputs, status::BAD_INPUT_SPAN),
            (
                ROLE_OUTPUT,
                &self.outputs,
                s.outputs,
                status::BAD_OUTPUT_SPAN,
            ),
        ] {
            for (i, (spec, span)) in specs.iter().zip(spans).enumerate() {
                let index = i as u8;
                if !g.span_in_arena(span.off, span.len) {
                    return Err(Fault::new(
                        bad_span,
                        Detail::new(role, index, arena),
                        Detail::new(role, index, span.off.saturating_add(span.len)),
                    ));
                }
                let want = spec.bytes(s.batch).unwrap_or(u64::MAX);
                if span.len != want {
                    return Err(Fault::new(
                        status::BAD_TENSOR_LEN,
                        Detail::new(role, index, want),
                        Detail::new(role, index, span.len),
                    ));
                }
            }
        }
        let overlap = |a: Span, b: Span| {
            a.len > 0 && b.len > 0 && a.off < b.off + b.len && b.off < a.off + a.len
        };
        for (o, &out) in s.outputs.iter().enumerate() {
            let others = s
                .outputs
                .iter()
                .enumerate()
                .filter(|&(k, _)| k != o)
                .map(|(k, &sp)| (ROLE_OUTPUT, k, sp))
                .chain(
                    s.inputs
                        .iter()
                        .enumerate()
                        .map(|(k, &sp)| (ROLE_INPUT, k, sp)),
                );
            for (role, k, other) in others {
                if overlap(out, other) {
                    return Err(Fault::new(
                        status::BAD_TENSOR_TABLE,
                        Detail::new(ROLE_OUTPUT, o as u8, out.off),
                        Detail::new(role, k as u8, other.off),
                    ));
                }
            }
            // The table is written before the request is pushed: an output
            // under it would be the daemon's to write while we write it.
            if overlap(
                out,
                Span {
                    off: s.table_off,
                    len: want,
                },
            ) {
                return Err(Fault::new(
                    status::BAD_TENSOR_TABLE,
                    Detail::new(ROLE_OUTPUT, o as u8, out.off),
                    Detail::new(ROLE_TABLE, TABLE_OUTSIDE, s.table_off),
                ));
            }
        }
        Ok(())
    }

    fn tensor(&self, role: u8, index: u8) -> Option<&TensorInfo> {
        match role {
            shm_proto::tensor::ROLE_INPUT => self.inputs.get(usize::from(index)),
            shm_proto::tensor::ROLE_OUTPUT => self.outputs.get(usize::from(index)),
            _ => None,
        }
    }
}

/// Writes `value`, or `at least value` when it was saturated.
struct Value(Detail);

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.saturated() {
            write!(f, "at least {}", self.0.value)
        } else {
            write!(f, "{}", self.0.value)
        }
    }
}

/// Names a tensor: `input "ids" (i64[N,128])`, or `input #3` when the
/// model has no such tensor.
struct Named<'a>(&'a ModelInfo, Detail);

impl std::fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dir = if self.1.role == shm_proto::tensor::ROLE_INPUT {
            "input"
        } else {
            "output"
        };
        match self.0.tensor(self.1.role, self.1.index) {
            Some(t) => write!(f, "{dir} {:?} ({})", t.name, t.describe()),
            None => write!(f, "{dir} #{}", self.1.index),
        }
    }
}

impl std::fmt::Display for Explain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use shm_proto::tensor::*;
        let m = self.model;
        let what = Detail::unpack(self.fault.detail[0]);
        let given = Detail::unpack(self.fault.detail[1]);
        match (self.fault.status, what.role) {
            (status::BAD_BATCH, _) => write!(
                f,
                "batch {} is outside 1..={} for model {:?}{}",
                Value(given),
                what.value,
                m.name,
                if what.value == 1 {
                    "; an untyped request is at batch 1 (0 or 1 in `batch`)"
                } else {
                    "; split the work into requests of at most max_batch"
                }
            ),
            (status::BAD_TENSOR_LEN, ROLE_INPUT | ROLE_OUTPUT) => write!(
                f,
                "{} takes {} bytes at batch {}; the request gave {}",
                Named(m, what),
                Value(what),
                self.batch,
                Value(given)
            ),
            (status::BAD_INPUT_SPAN | status::BAD_OUTPUT_SPAN, ROLE_INPUT | ROLE_OUTPUT) => {
                write!(
                    f,
                    "{} ends at byte {}, outside the arena of {} bytes; place it inside the arena",
                    Named(m, what),
                    Value(given),
                    what.value
                )
            }
            (status::BAD_TENSOR_TABLE, ROLE_OUTPUT) if given.role == ROLE_TABLE => write!(
                f,
                "{} at offset {} overlaps the tensor table at offset {}; put the table elsewhere",
                Named(m, what),
                Value(what),
                Value(given)
            ),
            (status::BAD_TENSOR_TABLE, ROLE_OUTPUT) => write!(
                f,
                "{} at offset {} overlaps {} at offset {}; give every output bytes of its own",
                Named(m, what),
                Value(what),
                Named(m, given),
                Value(given)
            ),
            (status::BAD_TENSOR_TABLE, ROLE_TABLE) => match what.index {
                TABLE_LEN => write!(
                    f,
                    "model {:?} takes a tensor table of {} bytes ({} inputs and {} outputs, \
                     {TABLE_ENTRY_BYTES} bytes each); the request gave {}",
                    m.name,
                    what.value,
                    m.inputs.len(),
                    m.outputs.len(),
                    Value(given)
                ),
                TABLE_OUTSIDE => write!(
                    f,
                    "the tensor table ends at byte {}, outside the arena of {} bytes",
                    Value(given),
                    what.value
                ),
                TABLE_OUTPUT_FIELDS => write!(
                    f,
                    "a typed request's output_off and output_len must be 0 (the tensor table \
                     locates the outputs); the request gave {}",
                    Value(given)
                ),
                TABLE_REQUIRED => write!(
                    f,
                    "model {:?} has {} inputs and {} outputs; an untyped request carries one \
                     of each: submit a typed request (tensor table)",
                    m.name, what.value, given.value
                ),
                r => write!(f, "tensor table fault {r}"),
            },
            (code, _) => write!(f, "{}", status::describe(code)),
        }
    }
}

/// The outputs the daemon's simulated GPU writes for a typed request of
/// `model` at `batch` with `inputs` (in the model's order), one per output,
/// each the output's size at the batch (`shm_proto::sim`, "Typed
/// requests"), for checking results.
pub fn expected_typed_outputs(model: &ModelInfo, batch: u32, inputs: &[&[u8]]) -> Vec<Vec<u8>> {
    (0u32..)
        .zip(&model.outputs)
        .map(|(k, t)| {
            let mut out = vec![0u8; t.bytes(batch).unwrap_or(0) as usize];
            shm_proto::sim::expected_typed_output(model.id, batch, inputs, k, &mut out);
            out
        })
        .collect()
}

/// One call's worth of a typed request by name ([`Client::infer`]).
#[derive(Debug, Clone, Copy)]
pub struct Infer<'a> {
    /// Real-time or best-effort.
    pub priority: Priority,
    /// Absolute `CLOCK_MONOTONIC` deadline, 0 = none.
    pub deadline_ns: u64,
    /// Batch size.
    pub batch: u32,
    /// Where in the arena the call may lay out the table and the tensors
    /// (it uses the bytes from here on, each part 64-byte aligned).
    pub arena_off: u64,
    /// Every model input by name, each once.
    pub inputs: &'a [(&'a str, &'a [u8])],
}

/// Names one request in flight. Redeem it with [`Client::wait`] or
/// [`Client::try_poll`]; it is the request id the daemon echoes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Ticket(pub u64);

const SLOT_FREE: u8 = 0;
const SLOT_IN_FLIGHT: u8 = 1;
const SLOT_DONE: u8 = 2;

#[derive(Debug, Clone, Copy, Default)]
struct TicketSlot {
    generation: u32,
    state: u8,
    /// The request's model and batch, to explain a refusal.
    model_id: u32,
    batch: u32,
    completion: Completion,
}

/// The last completion taken: which request, model and batch, for
/// [`Client::explain`].
#[derive(Debug, Clone, Copy, Default)]
struct LastDone {
    request_id: u64,
    model_id: u32,
    batch: u32,
}

/// A `MAP_SHARED` mapping of the region, unmapped on drop. The ring ends
/// hold it in an `Arc`, so it outlives them whatever the field order; the
/// client reaches it through them (`Client::map`).
#[derive(Debug)]
struct RegionMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is shared memory accessed only through atomics,
// by-value ring copies and `shm_proto::region` byte copies; no `&T` to
// plain data in it is formed, so the pointer may move and be shared
// between threads.
unsafe impl Send for RegionMap {}
// SAFETY: as above.
unsafe impl Sync for RegionMap {}

// SAFETY: `ptr`/`len` are fixed at construction and are exactly what mmap
// returned for a MAP_SHARED, read-write mapping of the region memfd, which
// the daemon sealed against shrinking (so no access faults); it is unmapped
// only in `drop`. `Client::connect` makes one `RegionMap` per mapping and
// hands it straight to `ClientRings::new`, so one value makes the client's
// ends.
unsafe impl Mapping for RegionMap {
    fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for RegionMap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; this runs when
        // the last `Arc` (held by the two ring ends) goes, so
        // nothing points into the mapping any more.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The region header at the start of a live mapping.
fn region_header(map: &RegionMap) -> &RegionHeader {
    // SAFETY: offset 0 of a mapping at least `region_size` (> 256) bytes
    // long and page aligned (every `RegionMap` goes to `ClientRings::new`
    // as soon as it is made, which checks both), alive while `map` is
    // borrowed. `RegionHeader` is made of atomics only, so the
    // daemon (or a hostile thread) writing it concurrently cannot make this
    // shared reference unsound.
    unsafe { &*(map.base() as *const RegionHeader) }
}

/// How long [`Client::wait`] spins before it sleeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spin {
    /// Twice the measured wake-up cost (see the crate docs); the default.
    Adaptive,
    /// A fixed budget ([`Duration::ZERO`]: go straight to the park
    /// protocol).
    Fixed(Duration),
}

/// The adaptive budget's first estimate of a wake-up: 25 µs, so the first
/// budget is the 50 µs fixed default of earlier versions.
const WAKE_ESTIMATE_START_NS: u64 = 25_000;
/// Bounds of the adaptive spin budget.
const ADAPTIVE_MIN_NS: u64 = 2_000;
/// Upper bound of the adaptive spin budget.
const ADAPTIVE_MAX_NS: u64 = 2_000_000;
/// A wake-up sample above this (a stalled daemon, a suspended VM) is
/// clamped to it, so one outlier cannot pin the budget at its maximum.
const WAKE_SAMPLE_MAX_NS: u64 = 1_000_000;

/// How often, in spin iterations, a spinning waiter checks that the daemon
/// is still there.
const LIVENESS_EVERY: u32 = 1 << 14;
/// Longest single futex sleep; between sleeps the waiter checks liveness.
const PARK_SLICE: Duration = Duration::from_millis(20);

/// A session with sluiced.
#[derive(Debug)]
pub struct Client {
    sq: Producer<Request, Arc<RegionMap>>,
    cq: Consumer<Completion, Arc<RegionMap>>,
    slots: Box<[TicketSlot]>,
    free: Vec<u32>,
    spin: Spin,
    wake_estimate_ns: u64,
    disconnected: bool,
    sleeps: u64,
    client_id: u32,
    geometry: Geometry,
    sock: UnixStream,
    wake: OwnedFd,
    scratch: Vec<u8>,
    /// Every model looked up on this session, for typed requests and
    /// explanations.
    models: Vec<ModelInfo>,
    last_done: LastDone,
    _region_fd: OwnedFd,
}

// A client may move between threads (the C ABI promises it too): its ring
// ends own their share of the mapping, so this holds without an `unsafe impl`.
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Client>();
};

impl Client {
    /// Connects to the daemon at [`default_socket_path`].
    pub fn connect_default(name: &str) -> Result<Self, Error> {
        Self::connect(default_socket_path(), name)
    }

    /// Connects to the daemon listening at `path`; `name` shows in
    /// `sluice status`.
    pub fn connect(path: impl AsRef<Path>, name: &str) -> Result<Self, Error> {
        set_last_error(String::new());
        let s = conn::handshake(path.as_ref(), name)?;
        let st = rustix::fs::fstat(&s.region).map_err(|e| Error::Io(e.raw_os_error()))?;
        if (st.st_size as u64) < s.region_size {
            set_last_error(format!(
                "region memfd has {} bytes, daemon announced {}",
                st.st_size, s.region_size
            ));
            return Err(Error::Protocol);
        }
        let len = s.region_size as usize;
        // SAFETY: a fresh shared mapping of a memfd the daemon sealed against
        // shrinking, so every byte stays backed while it is mapped.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                &s.region,
                0,
            )
        }
        .map_err(|e| Error::Io(e.raw_os_error()))?;
        let map = RegionMap {
            ptr: NonNull::new(ptr.cast()).ok_or(Error::Protocol)?,
            len,
        };
        let g = s.geometry;
        // Checks the geometry against the mapping (size, alignment) and
        // takes the mapping: from here on the ring ends keep it alive.
        let ClientRings { sq, cq } = ClientRings::new(map, &g).map_err(|e| {
            set_last_error(format!("cannot use the region: {e}"));
            Error::Protocol
        })?;
        use std::sync::atomic::Ordering::Acquire;
        let hdr = region_header(sq.owner());
        if hdr.magic.load(Acquire) != shm_proto::MAGIC
            || hdr.version.load(Acquire) != shm_proto::PROTOCOL_VERSION
            || hdr.layout_hash.load(Acquire) != shm_proto::LAYOUT_HASH
            || hdr.region_size.load(Acquire) != s.region_size
        {
            set_last_error("region header does not match this library's layout".into());
            return Err(Error::Protocol);
        }
        let n = g.cq_entries;
        Ok(Self {
            sq,
            cq,
            slots: vec![TicketSlot::default(); n as usize].into_boxed_slice(),
            free: (0..n).rev().collect(),
            spin: Spin::Adaptive,
            wake_estimate_ns: WAKE_ESTIMATE_START_NS,
            disconnected: false,
            sleeps: 0,
            client_id: s.client_id,
            geometry: g,
            sock: s.sock,
            wake: s.wake,
            scratch: Vec::with_capacity(512),
            models: Vec::new(),
            last_done: LastDone::default(),
            _region_fd: s.region,
        })
    }

    /// Daemon-assigned client number.
    pub fn client_id(&self) -> u32 {
        self.client_id
    }

    /// Requests submitted and not yet taken back.
    pub fn in_flight(&self) -> u32 {
        self.slots.len() as u32 - self.free.len() as u32
    }

    /// How many times a wait went to sleep on the futex (diagnostics: a
    /// wait whose completion arrived while it spun or prepared to park does
    /// not sleep).
    pub fn sleeps(&self) -> u64 {
        self.sleeps
    }

    /// The region's geometry (ring sizes, arena size).
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Fixes how long [`Client::wait`] spins before it sleeps (the default
    /// adapts to the measured wake-up cost: [`Client::set_spin_mode`]).
    /// Spinning costs a core; sleeping costs a futex wake (a few µs on bare
    /// metal, up to ~100 µs on some VMs) when the result comes.
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = Spin::Fixed(spin);
    }

    /// Sets the spin policy: [`Spin::Adaptive`] (the default) or fixed.
    pub fn set_spin_mode(&mut self, spin: Spin) {
        self.spin = spin;
    }

    /// The spin budget the next wait will use, in ns.
    pub fn spin_budget_ns(&self) -> u64 {
        match self.spin {
            Spin::Fixed(d) => u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Spin::Adaptive => self
                .wake_estimate_ns
                .saturating_mul(2)
                .clamp(ADAPTIVE_MIN_NS, ADAPTIVE_MAX_NS),
        }
    }

    /// The measured wake-up cost (moving average, ns) the adaptive budget
    /// follows.
    pub fn wake_estimate_ns(&self) -> u64 {
        self.wake_estimate_ns
    }

    /// Feeds one wake-up sample: a wait slept and got its completion at
    /// `now`.
    fn note_wake(&mut self, c: &Completion, now: u64) {
        if c.finished_ns == 0 || c.finished_ns > now {
            return;
        }
        let sample = (now - c.finished_ns).min(WAKE_SAMPLE_MAX_NS);
        // Moving average with weight 1/4 on the new sample.
        self.wake_estimate_ns = (self.wake_estimate_ns * 3 + sample) / 4;
    }

    /// Asks the daemon for a model by name (control path; blocks).
    pub fn lookup_model(&mut self, name: &str) -> Result<ModelInfo, Error> {
        if self.disconnected {
            return Err(Error::Disconnected);
        }
        let r = self.lookup_inner(name);
        if r == Err(Error::Disconnected) {
            self.disconnected = true;
        }
        r
    }

    fn lookup_inner(&mut self, name: &str) -> Result<ModelInfo, Error> {
        if name.len() > 256 {
            return Err(Error::InvalidArgument);
        }
        conn::send(&mut self.sock, &Msg::LookupModel { name })?;
        let mut fds = Vec::new();
        conn::recv(&mut self.sock, &mut self.scratch, &mut fds)?;
        let info = match Msg::decode(&self.scratch) {
            Ok(Msg::ModelInfo {
                id,
                input_bytes,
                output_bytes,
                standalone_ns,
                kernels,
                name,
                max_batch,
                inputs,
                outputs,
            }) => {
                let list = |t: shm_proto::control::Tensors<'_>| {
                    t.iter()
                        .map(|m| TensorInfo {
                            name: m.name.to_owned(),
                            elem: m.elem,
                            dims: m.dims().to_vec(),
                            batched: m.batched,
                        })
                        .collect()
                };
                ModelInfo {
                    id,
                    input_bytes,
                    output_bytes,
                    standalone_ns,
                    kernels,
                    name: name.to_owned(),
                    max_batch,
                    inputs: list(inputs),
                    outputs: list(outputs),
                }
            }
            Ok(Msg::ModelNotFound { .. }) => {
                set_last_error(format!("sluiced has no model named {name:?}"));
                return Err(Error::ModelNotFound);
            }
            Ok(_) => return Err(Error::Protocol),
            Err(e) => {
                set_last_error(format!("cannot decode the daemon's model information: {e}"));
                return Err(Error::Protocol);
            }
        };
        match self.models.iter_mut().find(|m| m.id == info.id) {
            Some(m) => *m = info.clone(),
            None => self.models.push(info.clone()),
        }
        Ok(info)
    }

    /// A model looked up on this session, by id.
    pub fn model(&self, id: u32) -> Option<&ModelInfo> {
        self.models.iter().find(|m| m.id == id)
    }

    /// Explains `c` when it is the completion last taken (by
    /// [`Client::wait`] or [`Client::try_poll`]) and carries an error
    /// status: against its model's metadata when the model was looked up on
    /// this session (naming the tensor, the size expected and the size
    /// given), else the status's description. `None` for an OK completion
    /// or another one.
    pub fn explain(&self, c: &Completion) -> Option<String> {
        if c.status == status::OK || c.request_id != self.last_done.request_id {
            return None;
        }
        let fault = Fault {
            status: c.status,
            detail: c.detail,
        };
        Some(match self.model(self.last_done.model_id) {
            Some(m) => m.explain(self.last_done.batch, fault).to_string(),
            None => status::describe(c.status).to_owned(),
        })
    }

    /// The model and batch of the completion last taken (for the C ABI's
    /// explanations).
    pub(crate) fn last_done(&self) -> (u64, u32, u32) {
        let d = self.last_done;
        (d.request_id, d.model_id, d.batch)
    }

    /// Arena size in bytes.
    pub fn arena_len(&self) -> u64 {
        self.geometry.arena_size
    }

    /// The region's mapping, which the ring ends own.
    fn map(&self) -> &RegionMap {
        self.sq.owner()
    }

    fn arena_base(&self) -> *mut u8 {
        // SAFETY: arena_offset < region_size <= mapping length
        // (`ClientRings::new` checked the validated geometry against it).
        unsafe { self.map().base().add(self.geometry.arena_offset() as usize) }
    }

    /// Copies `data` into the arena at `off`.
    ///
    /// The daemon reads the arena concurrently (the input spans of requests
    /// in flight); see `shm_proto::region::copy_to_shared` for the race
    /// this accepts.
    pub fn write_arena(&mut self, off: u64, data: &[u8]) -> Result<(), Error> {
        if !self.geometry.span_in_arena(off, data.len() as u64) {
            return Err(Error::BadSpan);
        }
        // SAFETY: the span is inside the arena (checked above), which is
        // inside our mapping, kept alive by the ring ends; `data` is private
        // memory, so no overlap. Accepted race: the daemon (or a buggy
        // thread of ours through `arena_ptr`) may touch the same bytes
        // while we copy; we copy bytes by value, form no reference into the
        // arena and never read them back, so that can only garble the data
        // of the request that span belongs to.
        unsafe { region::copy_to_shared(data, self.arena_base().add(off as usize)) };
        Ok(())
    }

    /// Copies arena bytes at `off` into `buf`.
    ///
    /// The daemon writes output spans of requests in flight; see
    /// `shm_proto::region::copy_from_shared` for the race this accepts.
    pub fn read_arena(&self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        if !self.geometry.span_in_arena(off, buf.len() as u64) {
            return Err(Error::BadSpan);
        }
        // SAFETY: the span is inside the arena (checked above), inside our
        // live mapping; `buf` is private memory, so no overlap. Accepted
        // race: the daemon may write these bytes concurrently (an output
        // span of a request still in flight); we copy bytes into `buf`
        // (every bit pattern is a valid `u8`) and keep no reference into the
        // arena, so the worst case is a torn copy of that request's output.
        unsafe { region::copy_from_shared(self.arena_base().add(off as usize), buf) };
        Ok(())
    }

    /// Raw pointer to the arena, for zero-copy producers of input tensors.
    /// Valid while the client lives; the daemon writes output spans of
    /// requests in flight, so do not touch those until they complete.
    pub fn arena_ptr(&mut self) -> *mut u8 {
        self.arena_base()
    }

    /// Submits a request without blocking. Errors: [`Error::BadSpan`],
    /// [`Error::TooManyInFlight`], [`Error::RingFull`] (back-pressure:
    /// nothing was queued; wait for a completion and retry),
    /// [`Error::Disconnected`].
    #[inline]
    pub fn submit(&mut self, s: &Submit) -> Result<Ticket, Error> {
        if !self.geometry.span_in_arena(s.input.off, s.input.len)
            || !self.geometry.span_in_arena(s.output.off, s.output.len)
        {
            return Err(Error::BadSpan);
        }
        self.submit_request(Request {
            request_id: 0,
            model_id: s.model_id,
            priority: s.priority as u32,
            deadline_ns: s.deadline_ns,
            input_off: s.input.off,
            input_len: s.input.len,
            output_off: s.output.off,
            output_len: s.output.len,
            flags: 0,
            batch: 0,
            seq: 0,
        })
    }

    /// Submits a typed request of `model` without blocking: checks it
    /// against the model's metadata ([`ModelInfo::check_typed`]), writes
    /// the tensor table at `s.table_off`, and pushes the request. Errors:
    /// [`Error::BadTensor`] (nothing was submitted; [`last_error_message`]
    /// names the tensor, the size expected and the size given), and those
    /// of [`Client::submit`]. Allocates only to report a bad tensor.
    pub fn submit_typed(
        &mut self,
        model: &ModelInfo,
        s: &TypedSubmit<'_>,
    ) -> Result<Ticket, Error> {
        if let Err(f) = model.check_typed(self.geometry.arena_size, s) {
            set_last_error(model.explain(s.batch, f).to_string());
            return Err(Error::BadTensor);
        }
        self.submit_typed_checked(model.id, s)
    }

    /// [`Client::submit_typed`] after [`ModelInfo::check_typed`] passed
    /// (the C ABI reports the fault itself, without allocating).
    pub(crate) fn submit_typed_checked(
        &mut self,
        model_id: u32,
        s: &TypedSubmit<'_>,
    ) -> Result<Ticket, Error> {
        let mut entry = [0u8; shm_proto::tensor::TABLE_ENTRY_BYTES];
        let mut at = s.table_off;
        for span in s.inputs.iter().chain(s.outputs) {
            shm_proto::tensor::write_entry(&mut entry, span.off, span.len);
            self.write_arena(at, &entry)?;
            at += entry.len() as u64;
        }
        let len = at - s.table_off;
        self.submit_request(Request {
            request_id: 0,
            model_id,
            priority: s.priority as u32,
            deadline_ns: s.deadline_ns,
            input_off: s.table_off,
            input_len: len,
            output_off: 0,
            output_len: 0,
            flags: shm_proto::tensor::FLAG_TENSOR_TABLE,
            batch: u16::try_from(s.batch).map_err(|_| Error::BadTensor)?,
            seq: 0,
        })
    }

    /// Runs a typed request of `model` by name and waits for it: lays out
    /// the tensor table, every input (copied from `req.inputs`) and every
    /// output in the arena from `req.arena_off`, submits, waits, and
    /// returns each output by name, in the model's order.
    ///
    /// Errors: [`Error::BadTensor`] for a missing, unknown or wrongly sized
    /// input (found before submitting) or a tensor refusal from the daemon,
    /// [`Error::RequestFailed`] for another error status, [`Error::BadSpan`]
    /// when the layout does not fit the arena; [`last_error_message`] says
    /// which, naming the tensor.
    pub fn infer(
        &mut self,
        model: &ModelInfo,
        req: &Infer<'_>,
    ) -> Result<Vec<(String, Vec<u8>)>, Error> {
        for (name, _) in req.inputs {
            if !model.inputs.iter().any(|t| t.name == *name) {
                let known: Vec<&str> = model.inputs.iter().map(|t| t.name.as_str()).collect();
                set_last_error(format!(
                    "model {:?} has no input named {name:?}; its inputs are {known:?}",
                    model.name
                ));
                return Err(Error::BadTensor);
            }
        }
        let mut data = Vec::with_capacity(model.inputs.len());
        for t in &model.inputs {
            let mut given = req.inputs.iter().filter(|(n, _)| *n == t.name);
            match (given.next(), given.next()) {
                (Some((_, bytes)), None) => data.push(*bytes),
                (None, _) => {
                    set_last_error(format!(
                        "input {:?} ({}) of model {:?} is missing; give every input once",
                        t.name,
                        t.describe(),
                        model.name
                    ));
                    return Err(Error::BadTensor);
                }
                (Some(_), Some(_)) => {
                    set_last_error(format!("input {:?} is given twice; give it once", t.name));
                    return Err(Error::BadTensor);
                }
            }
        }
        let align = |x: u64| x.next_multiple_of(64);
        let table_off = align(req.arena_off);
        let table_len = ((model.inputs.len() + model.outputs.len())
            * shm_proto::tensor::TABLE_ENTRY_BYTES) as u64;
        let mut at = align(table_off + table_len);
        let mut place = |len: u64| {
            let s = Span { off: at, len };
            at = align(at.saturating_add(len));
            s
        };
        let inputs: Vec<Span> = data.iter().map(|d| place(d.len() as u64)).collect();
        let outputs: Vec<Span> = model
            .outputs
            .iter()
            .map(|t| place(t.bytes(req.batch).unwrap_or(u64::MAX)))
            .collect();
        let s = TypedSubmit {
            priority: req.priority,
            deadline_ns: req.deadline_ns,
            batch: req.batch,
            table_off,
            inputs: &inputs,
            outputs: &outputs,
        };
        // Sizes first, so that a wrong input names itself rather than the
        // arena.
        if let Err(f) = model.check_typed(u64::MAX, &s) {
            set_last_error(model.explain(req.batch, f).to_string());
            return Err(Error::BadTensor);
        }
        if at > self.geometry.arena_size {
            set_last_error(format!(
                "model {:?} at batch {} needs {at} bytes of arena from offset {}; the arena has {}",
                model.name, req.batch, req.arena_off, self.geometry.arena_size
            ));
            return Err(Error::BadSpan);
        }
        for (span, d) in inputs.iter().zip(&data) {
            self.write_arena(span.off, d)?;
        }
        let t = self.submit_typed(model, &s)?;
        let done = self.wait(t)?;
        if done.status != status::OK {
            let fault = Fault {
                status: done.status,
                detail: done.detail,
            };
            set_last_error(model.explain(req.batch, fault).to_string());
            return Err(match done.status {
                status::BAD_BATCH
                | status::BAD_TENSOR_TABLE
                | status::BAD_TENSOR_LEN
                | status::BAD_INPUT_SPAN
                | status::BAD_OUTPUT_SPAN => Error::BadTensor,
                code => Error::RequestFailed(code),
            });
        }
        let mut out = Vec::with_capacity(outputs.len());
        for (t, span) in model.outputs.iter().zip(&outputs) {
            let mut bytes = vec![0u8; span.len as usize];
            self.read_arena(span.off, &mut bytes)?;
            out.push((t.name.clone(), bytes));
        }
        Ok(out)
    }

    /// Submits a raw record unchecked (its `request_id` is replaced by the
    /// ticket). For tests that feed the daemon garbage.
    #[doc(hidden)]
    pub fn submit_request(&mut self, mut req: Request) -> Result<Ticket, Error> {
        if self.disconnected {
            return Err(Error::Disconnected);
        }
        let Some(idx) = self.free.pop() else {
            return Err(Error::TooManyInFlight);
        };
        let Some(slot) = self.slots.get_mut(idx as usize) else {
            return Err(Error::BadTicket);
        };
        let generation = slot.generation.wrapping_add(1);
        req.request_id = (u64::from(generation) << 32) | u64::from(idx);
        match self.sq.push(req) {
            Ok(()) => {}
            Err(PushError::Full) => {
                self.free.push(idx);
                return Err(Error::RingFull);
            }
            Err(PushError::Corrupt(_)) => {
                self.free.push(idx);
                self.disconnected = true;
                return Err(Error::Disconnected);
            }
        }
        slot.generation = generation;
        slot.state = SLOT_IN_FLIGHT;
        slot.model_id = req.model_id;
        slot.batch = u32::from(req.batch.max(1));
        if self.sq.needs_wake() {
            // The daemon is parked in epoll on our eventfd: ring it.
            let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
        }
        Ok(Ticket(req.request_id))
    }

    fn slot_of(&self, t: Ticket) -> Result<usize, Error> {
        let idx = (t.0 & 0xffff_ffff) as usize;
        match self.slots.get(idx) {
            Some(s) if s.state != SLOT_FREE && u64::from(s.generation) == t.0 >> 32 => Ok(idx),
            _ => Err(Error::BadTicket),
        }
    }

    /// Moves completions from the ring into the ticket table until the one
    /// for slot `want` is there (`Ok(true)`) or the ring is empty
    /// (`Ok(false)`; the ring then publishes how far we read). Stopping at
    /// `want` leaves the head's publication to the next poll, which comes
    /// after the caller's next submit: off the round trip.
    #[inline]
    fn poll_for(&mut self, want: usize) -> Result<bool, Error> {
        loop {
            match self.cq.pop() {
                Ok(Some(c)) => {
                    let idx = (c.request_id & 0xffff_ffff) as usize;
                    if let Some(s) = self.slots.get_mut(idx)
                        && s.state == SLOT_IN_FLIGHT
                        && u64::from(s.generation) == c.request_id >> 32
                    {
                        s.state = SLOT_DONE;
                        s.completion = c;
                        if idx == want {
                            return Ok(true);
                        }
                    }
                }
                Ok(None) => return Ok(false),
                Err(_) => {
                    self.disconnected = true;
                    // No stale control-path message (clearing allocates nothing).
                    LAST_ERROR.with(|m| m.borrow_mut().clear());
                    return Err(Error::Protocol);
                }
            }
        }
    }

    fn take(&mut self, idx: usize) -> Option<Completion> {
        let s = self.slots.get_mut(idx)?;
        if s.state != SLOT_DONE {
            return None;
        }
        s.state = SLOT_FREE;
        let c = s.completion;
        self.last_done = LastDone {
            request_id: c.request_id,
            model_id: s.model_id,
            batch: s.batch,
        };
        self.free.push(idx as u32);
        Some(c)
    }

    /// Returns the completion if it has arrived, without blocking.
    #[inline]
    pub fn try_poll(&mut self, t: Ticket) -> Result<Option<Completion>, Error> {
        let idx = self.slot_of(t)?;
        if let Some(c) = self.take(idx) {
            return Ok(Some(c));
        }
        self.poll_for(idx)?;
        if let Some(c) = self.take(idx) {
            return Ok(Some(c));
        }
        if self.disconnected {
            return Err(Error::Disconnected);
        }
        Ok(None)
    }

    /// Waits for the completion: spins for the spin budget, then sleeps on
    /// the completion ring's futex until the daemon wakes it.
    #[inline]
    pub fn wait(&mut self, t: Ticket) -> Result<Completion, Error> {
        self.wait_timeout(t, None)
    }

    /// [`Client::wait`] with an upper bound; [`Error::Timeout`] after it
    /// (the request stays in flight and can be waited for again).
    ///
    /// The clock is read only once the completion is found missing, and
    /// then every 64 polls of the ring while spinning.
    pub fn wait_timeout(
        &mut self,
        t: Ticket,
        timeout: Option<Duration>,
    ) -> Result<Completion, Error> {
        let idx = self.slot_of(t)?;
        if let Some(c) = self.take(idx) {
            return Ok(c);
        }
        if self.poll_for(idx)?
            && let Some(c) = self.take(idx)
        {
            return Ok(c);
        }
        let budget = self.spin_budget_ns();
        let start = now_ns();
        let spin_until = start.saturating_add(budget);
        let give_up = timeout.map(|d| start.saturating_add(d.as_nanos() as u64));
        let mut iter: u32 = 0;
        loop {
            if self.poll_for(idx)?
                && let Some(c) = self.take(idx)
            {
                return Ok(c);
            }
            iter = iter.wrapping_add(1);
            if iter % LIVENESS_EVERY == 0 {
                self.check_alive()?;
            }
            if budget != 0 && iter % 64 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let now = now_ns();
            if now < spin_until {
                std::hint::spin_loop();
                continue;
            }
            if let Some(g) = give_up
                && now >= g
            {
                return Err(Error::Timeout);
            }
            let slice = match give_up {
                Some(g) => Duration::from_nanos(g.saturating_sub(now)).min(PARK_SLICE),
                None => PARK_SLICE,
            };
            match self.cq.prepare_park() {
                Ok(Some(expected)) => {
                    let slept = futex::wait(self.cq.wake_word(), expected, Some(slice));
                    if slept {
                        self.sleeps += 1;
                    }
                    self.cq.unpark();
                    if self.poll_for(idx)?
                        && let Some(c) = self.take(idx)
                    {
                        if slept {
                            self.note_wake(&c, now_ns());
                        }
                        return Ok(c);
                    }
                    self.check_alive()?;
                }
                Ok(None) => {}
                Err(_) => {
                    self.disconnected = true;
                    // No stale control-path message (clearing allocates nothing).
                    LAST_ERROR.with(|m| m.borrow_mut().clear());
                    return Err(Error::Protocol);
                }
            }
        }
    }

    /// Checks, without blocking, that the daemon still serves us: the
    /// region's state word and a hang-up on the control socket.
    fn check_alive(&mut self) -> Result<(), Error> {
        if self.disconnected {
            return Err(Error::Disconnected);
        }
        let hdr = region_header(self.map());
        let closed = hdr.daemon_state.load(std::sync::atomic::Ordering::Acquire) == STATE_CLOSED;
        let mut fds = [rustix::event::PollFd::new(
            &self.sock,
            rustix::event::PollFlags::IN | rustix::event::PollFlags::RDHUP,
        )];
        let hung_up = matches!(rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 })), Ok(n) if n > 0);
        if closed || hung_up {
            self.disconnected = true;
            return Err(Error::Disconnected);
        }
        Ok(())
    }

    /// Whether the daemon is known to be gone.
    pub fn is_disconnected(&mut self) -> bool {
        self.check_alive().is_err()
    }

    /// The whole shared region, for tests that play a hostile client.
    #[doc(hidden)]
    pub fn raw_region(&mut self) -> (*mut u8, usize) {
        (self.map().base(), self.map().len())
    }

    /// The control socket, for tests.
    #[doc(hidden)]
    pub fn raw_socket(&mut self) -> &mut UnixStream {
        &mut self.sock
    }

    /// Rings the daemon's eventfd unconditionally (tests).
    #[doc(hidden)]
    pub fn ring_doorbell(&mut self) {
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }
}

/// Sends a one-shot status query to the daemon at `path` and returns its
/// JSON answer: the counters and the **first page** of clients. When the
/// daemon has more clients than fit one reply, the JSON's `next_client_id`
/// names where the next page starts: ask [`query_status_page`] with it until
/// a page has none (`sluice status` merges every page this way).
pub fn query_status(path: impl AsRef<Path>) -> Result<String, Error> {
    status_query(path.as_ref(), &Msg::StatusRequest)
}

/// One page of the daemon's status: the clients with ids from `from_id` on
/// (as many as fit one reply), with the counters; see [`query_status`].
pub fn query_status_page(path: impl AsRef<Path>, from_id: u32) -> Result<String, Error> {
    status_query(path.as_ref(), &Msg::StatusPage { from_id })
}

fn status_query(path: &Path, request: &Msg<'_>) -> Result<String, Error> {
    let mut sock = UnixStream::connect(path).map_err(|e| {
        set_last_error(format!(
            "cannot connect to sluiced at {}: {e}",
            path.display()
        ));
        Error::DaemonUnreachable
    })?;
    let mut body = Vec::new();
    let mut fds = Vec::new();
    conn::first_exchange(&mut sock, request, &mut body, &mut fds)?;
    match Msg::decode(&body).map_err(|_| Error::Protocol)? {
        Msg::StatusReply { json } => Ok(json.to_owned()),
        Msg::Refused { code, message } => {
            set_last_error(message.to_owned());
            Err(Error::Refused(code))
        }
        _ => Err(Error::Protocol),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shm_proto::tensor::{ELEM_F32, ELEM_I64};

    fn pair() -> ModelInfo {
        let t = |name: &str, elem, dims: &[u64], batched| TensorInfo {
            name: name.into(),
            elem,
            dims: dims.to_vec(),
            batched,
        };
        ModelInfo {
            id: 3,
            input_bytes: 1088,
            output_bytes: 168,
            standalone_ns: 0,
            kernels: 1,
            name: "pair".into(),
            max_batch: 8,
            inputs: vec![
                t("ids", ELEM_I64, &[1, 128], true),
                t("mask", ELEM_F32, &[16], false),
            ],
            outputs: vec![
                t("logits", ELEM_F32, &[1, 10], true),
                t("pooled", ELEM_F32, &[1, 32], true),
            ],
        }
    }

    fn submit<'a>(batch: u32, inputs: &'a [Span], outputs: &'a [Span]) -> TypedSubmit<'a> {
        TypedSubmit {
            priority: Priority::RealTime,
            deadline_ns: 0,
            batch,
            table_off: 0,
            inputs,
            outputs,
        }
    }

    const ARENA: u64 = 1 << 16;

    fn span(off: u64, len: u64) -> Span {
        Span { off, len }
    }

    #[test]
    fn a_good_request_passes_at_each_batch() {
        let m = pair();
        for batch in [1u64, 4, 8] {
            let ins = [span(4096, 1024 * batch), span(16384, 64)];
            let outs = [span(20480, 40 * batch), span(24576, 128 * batch)];
            assert_eq!(
                m.check_typed(ARENA, &submit(batch as u32, &ins, &outs)),
                Ok(())
            );
        }
        assert_eq!(m.inputs[0].describe().to_string(), "i64[N,128]");
        assert_eq!(m.inputs[1].describe().to_string(), "f32[16]");
    }

    #[test]
    fn each_fault_is_explained_naming_the_tensor() {
        let m = pair();
        let text = |batch: u32, ins: &[Span], outs: &[Span]| {
            let f = m.check_typed(ARENA, &submit(batch, ins, outs)).unwrap_err();
            (f.status, m.explain(batch, f).to_string())
        };
        let ins = [span(4096, 1024), span(16384, 64)];
        let outs = [span(20480, 40), span(24576, 128)];
        assert_eq!(
            text(1, &[span(4096, 512), ins[1]], &outs),
            (
                status::BAD_TENSOR_LEN,
                "input \"ids\" (i64[N,128]) takes 1024 bytes at batch 1; the request gave 512"
                    .to_owned()
            )
        );
        assert_eq!(
            text(
                2,
                &[span(4096, 2048), ins[1]],
                &[span(20480, 80), span(24576, 128)]
            )
            .1,
            "output \"pooled\" (f32[N,32]) takes 256 bytes at batch 2; the request gave 128"
        );
        let (code, t) = text(9, &ins, &outs);
        assert_eq!(code, status::BAD_BATCH);
        assert!(
            t.starts_with("batch 9 is outside 1..=8 for model \"pair\""),
            "{t}"
        );
        assert_eq!(text(0, &ins, &outs).0, status::BAD_BATCH);
        let (code, t) = text(1, &ins[..1], &outs);
        assert_eq!(code, status::BAD_TENSOR_TABLE);
        assert!(
            t.contains("64 bytes (2 inputs and 2 outputs") && t.contains("gave 48"),
            "{t}"
        );
        let (code, t) = text(1, &ins, &[outs[0], span(ARENA - 64, 128)]);
        assert_eq!(code, status::BAD_OUTPUT_SPAN);
        assert_eq!(
            t,
            format!(
                "output \"pooled\" (f32[N,32]) ends at byte {}, outside the arena of {ARENA} \
                 bytes; place it inside the arena",
                ARENA + 64
            )
        );
        let (code, t) = text(1, &ins, &[outs[0], span(20480 + 8, 128)]);
        assert_eq!(code, status::BAD_TENSOR_TABLE);
        assert!(t.contains("overlaps output \"pooled\""), "{t}");
        let (_, t) = text(1, &ins, &[span(4096 + 8, 40), outs[1]]);
        assert!(
            t.contains("output \"logits\"") && t.contains("overlaps input \"ids\""),
            "{t}"
        );
        let (_, t) = text(1, &ins, &[span(0, 40), outs[1]]);
        assert!(t.contains("overlaps the tensor table"), "{t}");
        // A saturated value reads as a bound, not a wrong number.
        let f = Fault {
            status: status::BAD_TENSOR_LEN,
            detail: [
                Detail::new(shm_proto::tensor::ROLE_INPUT, 0, 1024).pack(),
                Detail::new(shm_proto::tensor::ROLE_INPUT, 0, u64::MAX).pack(),
            ],
        };
        assert!(
            m.explain(1, f)
                .to_string()
                .ends_with("gave at least 281474976710655"),
            "{}",
            m.explain(1, f)
        );
        // An index the model does not have is shown by number.
        let f = Fault {
            status: status::BAD_TENSOR_LEN,
            detail: [Detail::new(shm_proto::tensor::ROLE_OUTPUT, 7, 4).pack(), 0],
        };
        assert!(
            m.explain(1, f)
                .to_string()
                .starts_with("output #7 takes 4 bytes")
        );
    }

    #[test]
    fn typed_reference_outputs_follow_shm_proto() {
        let m = pair();
        let a = vec![1u8; 1024];
        let b = vec![2u8; 64];
        let outs = expected_typed_outputs(&m, 1, &[&a, &b]);
        assert_eq!(outs.iter().map(Vec::len).collect::<Vec<_>>(), [40, 128]);
        let mut want = vec![0u8; 128];
        shm_proto::sim::expected_typed_output(3, 1, &[&a, &b], 1, &mut want);
        assert_eq!(outs[1], want);
    }
}
