//! # shm-proto: what the sluice daemon and its clients agree on
//!
//! One shared-memory *region* per client, created by the daemon as a sealed
//! memfd and mapped by both sides:
//!
//! ```text
//! offset 0            RegionHeader          magic, version, layout hash, geometry
//! sq_offset           RingHeader + [Request; sq_entries]     client -> daemon
//! cq_offset           RingHeader + [Completion; cq_entries]  daemon -> client
//! arena_offset        [u8; arena_size]      input and output tensors, by offset
//! ```
//!
//! - [`layout`]: the `#[repr(C)]` records with compile-time layout asserts.
//! - [`pod`]: [`Pod`], the sealed bound on what a ring may carry (every
//!   bit pattern valid, no padding).
//! - [`ring`]: the single-producer/single-consumer lock-free rings.
//! - [`region`]: [`region::Mapping`], the ring ends that own their mapping
//!   ([`region::ClientRings`], [`region::DaemonRings`]), and the byte copies
//!   to and from shared memory with the race they accept.
//! - [`wake`]: the hybrid notify/poll protocol ("waiter parked" words).
//! - [`control`]: the versioned handshake spoken on the daemon's Unix socket.
//! - [`tensor`]: typed tensors: element-type codes, the tensor table of a
//!   typed request, the bounds on what a peer may declare, and the detail of
//!   a refusal.
//! - [`sim`]: the reference function the simulated GPU computes, so clients
//!   can check their outputs.
//! - [`clock`]: [`now_ns`], the `CLOCK_MONOTONIC` clock of every timestamp.
//!
//! Only fixed-width integers and atomics cross the process boundary: no
//! `bool`, no Rust enum, no pointer. The crate makes no syscall except the
//! futex calls of [`futex`] (feature `futex`, on by default) and reads the
//! clock with [`now_ns`] (feature `clock`, on by default, vDSO).
#![cfg_attr(not(test), no_std)]

#[cfg(feature = "alloc")]
extern crate alloc;

#[cfg(feature = "clock")]
pub mod clock;
pub mod control;
pub mod layout;
pub mod pod;
pub mod region;
pub mod ring;
pub mod sim;
pub mod sync;
pub mod tensor;
pub mod wake;

#[cfg(all(feature = "futex", not(loom)))]
pub mod futex;

#[cfg(feature = "clock")]
pub use clock::now_ns;
pub use layout::{
    Completion, Geometry, LAYOUT_HASH, LayoutError, MAGIC, PROTOCOL_VERSION, RegionHeader, Request,
    RingHeader,
};
pub use pod::Pod;

/// Priority class of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum Priority {
    /// Latency-critical; scheduled before any best-effort work.
    RealTime = 0,
    /// Throughput work that fills the GPU when no real-time work needs it.
    BestEffort = 1,
}

impl Priority {
    /// Decodes the wire value; `None` for anything but 0 or 1.
    pub const fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            0 => Some(Self::RealTime),
            1 => Some(Self::BestEffort),
            _ => None,
        }
    }
    /// Short name: `"rt"` or `"be"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::RealTime => "rt",
            Self::BestEffort => "be",
        }
    }
}

/// Status codes carried in [`Completion::status`].
///
/// A `u32` on the wire; unknown values must be treated as errors.
pub mod status {
    /// The request ran; `output_len` bytes of output are in the arena.
    pub const OK: u32 = 0;
    /// `model_id` names no model in the daemon's registry.
    pub const UNKNOWN_MODEL: u32 = 1;
    /// The input span does not fit in the arena (offset or length out of range).
    pub const BAD_INPUT_SPAN: u32 = 2;
    /// The output span does not fit in the arena.
    pub const BAD_OUTPUT_SPAN: u32 = 3;
    /// The input length is not what the model takes.
    pub const BAD_INPUT_LEN: u32 = 4;
    /// The output span is smaller than the model's output.
    pub const OUTPUT_TOO_SMALL: u32 = 5;
    /// The priority field is neither real-time nor best-effort.
    pub const BAD_PRIORITY: u32 = 6;
    /// Unknown bits are set in `flags`.
    pub const BAD_FLAGS: u32 = 7;
    /// The absolute deadline passed before the request could start.
    pub const DEADLINE_MISSED: u32 = 8;
    /// The device failed while running the request.
    pub const DEVICE_ERROR: u32 = 9;
    /// The daemon is shutting down and dropped the request.
    pub const SHUTTING_DOWN: u32 = 10;
    /// The batch size is 0 or over the model's `max_batch` (typed), or not
    /// 0 or 1 (untyped). `Completion::detail`: the maximum, the batch given.
    pub const BAD_BATCH: u32 = 11;
    /// The tensor table is malformed: its length does not match the
    /// model's tensor count, it lies outside the arena, the typed request's
    /// output fields are not 0, an output overlaps another tensor, or an
    /// untyped request went to a model of several tensors. See
    /// [`crate::tensor`] for the detail of each.
    pub const BAD_TENSOR_TABLE: u32 = 12;
    /// A tensor's length is not its size at the request's batch; the
    /// detail names the tensor, the size expected and the length given.
    pub const BAD_TENSOR_LEN: u32 = 13;
    /// The model was unloaded (`sluice models unload`, or its file removed
    /// and the repository re-scanned) before the request reached the
    /// device; look the model up again.
    pub const MODEL_UNLOADED: u32 = 14;

    /// A short description of a status code, for error messages.
    pub const fn describe(code: u32) -> &'static str {
        match code {
            OK => "ok",
            UNKNOWN_MODEL => "unknown model id (look the model up by name first)",
            BAD_INPUT_SPAN => "input span lies outside the arena",
            BAD_OUTPUT_SPAN => "output span lies outside the arena",
            BAD_INPUT_LEN => "input length differs from the model's input size",
            OUTPUT_TOO_SMALL => "output span is smaller than the model's output size",
            BAD_PRIORITY => "priority is neither real-time (0) nor best-effort (1)",
            BAD_FLAGS => "unknown flag bits",
            DEADLINE_MISSED => "deadline passed before the request started",
            DEVICE_ERROR => "the device failed while running the request",
            SHUTTING_DOWN => "the daemon is shutting down",
            BAD_BATCH => "batch size is 0 or over the model's max_batch",
            BAD_TENSOR_TABLE => {
                "tensor table is malformed (count, place, overlap) or the model needs one"
            }
            BAD_TENSOR_LEN => "a tensor's length differs from its size at the request's batch",
            MODEL_UNLOADED => "the model was unloaded before the request reached the device",
            _ => "unknown status code",
        }
    }
}
