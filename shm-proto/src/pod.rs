//! [`Pod`]: the types that may be read out of memory a peer can write.
//!
//! A ring slot lives in shared memory that the other process writes
//! whenever it likes, hostile or buggy. [`crate::ring::Consumer::pop`]
//! copies a slot out with `read_volatile::<T>`, and that copy is only sound
//! if *whatever bytes the peer left there* make a valid `T`. For `bool`
//! (only 0 and 1 are valid), a Rust enum (only its discriminants), a
//! reference, `NonZero*` or `char` it is not: a hostile peer could make the
//! consumer hold an invalid value, which is undefined behaviour before any
//! validation runs. So the rings take only `T: Pod`, and `Pod` is sealed:
//! it is implemented here, for the fixed-width integers, arrays of them and
//! the records that cross the boundary, and nowhere else.
//!
//! ```
//! use shm_proto::ring::Producer;
//! use shm_proto::{Completion, Request};
//! fn client_side(_sq: Producer<Request>, _cq: shm_proto::ring::Consumer<Completion>) {}
//! ```
//!
//! A type whose bit patterns are not all valid is refused at compile time:
//!
//! ```compile_fail,E0277
//! // `bool` has 254 invalid bit patterns: no ring of bools.
//! fn f(_c: shm_proto::ring::Consumer<bool>) {}
//! ```
//!
//! ```compile_fail,E0277
//! #[derive(Clone, Copy)]
//! #[repr(u32)]
//! enum Priority { RealTime = 0, BestEffort = 1 }
//! fn f(_c: shm_proto::ring::Consumer<Priority>) {}
//! ```
//!
//! and no crate outside shm-proto can add an implementation:
//!
//! ```compile_fail,E0277
//! #[derive(Clone, Copy)]
//! #[repr(C)]
//! struct Mine(u32);
//! // The supertrait `Sealed` is private to shm-proto.
//! unsafe impl shm_proto::Pod for Mine {}
//! ```

use crate::layout::{Completion, Request};

mod sealed {
    /// Private supertrait: only this crate can implement [`super::Pod`].
    pub trait Sealed {}
}

/// Plain old data: every bit pattern of `size_of::<Self>()` bytes is a
/// valid `Self`, and a `Self` has no padding.
///
/// # Safety
///
/// An implementation promises, for `Self`:
/// - **every bit pattern is valid**: reading `size_of::<Self>()` arbitrary
///   initialised bytes as a `Self` (`ptr::read_volatile`, `transmute`) is
///   sound. Only fixed-width integers, arrays of `Pod`, and `#[repr(C)]`
///   structs of `Pod` fields qualify; `bool`, `char`, enums, references,
///   pointers, `NonZero*` and `usize`/`isize` (not fixed width across the
///   boundary) do not;
/// - **no padding**: `size_of::<Self>()` is the sum of its fields' sizes,
///   so writing a `Self` into shared memory leaks no uninitialised bytes to
///   the peer, and every byte the peer writes is part of some field;
/// - **no drop glue and no interior references** (`Copy + 'static`), so a
///   bitwise copy is a complete, independent value.
///
/// The trait is sealed: only shm-proto implements it, next to the
/// compile-time layout asserts that back these promises for each record.
pub unsafe trait Pod: Copy + Send + Sync + 'static + sealed::Sealed {}

macro_rules! pod {
    ($($t:ty),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        // SAFETY: a fixed-width integer: every bit pattern is a value, no
        // padding, no drop glue.
        unsafe impl Pod for $t {}
    )*};
}

pod!(u8, u16, u32, u64, i8, i16, i32, i64);

impl<T: Pod, const N: usize> sealed::Sealed for [T; N] {}
// SAFETY: an array has no padding between elements (its size is
// `N * size_of::<T>()`), and each element is a valid `T` whatever its bits.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

impl sealed::Sealed for Request {}
// SAFETY: `#[repr(C)]`, fields `u64`/`u32`/`u16` only; the asserts below
// (and the offset asserts in `layout`) show there is no padding.
unsafe impl Pod for Request {}

impl sealed::Sealed for Completion {}
// SAFETY: `#[repr(C)]`, fields `u64`/`u32`/`[u64; 2]` only; no padding
// (asserts below).
unsafe impl Pod for Completion {}

const _: () = {
    use core::mem::size_of;
    // No padding: the size is the sum of the fields' sizes.
    assert!(
        size_of::<Request>() == 6 * size_of::<u64>() + 3 * size_of::<u32>() + 2 * size_of::<u16>()
    );
    assert!(size_of::<Completion>() == 5 * size_of::<u64>() + 2 * size_of::<u32>() + 16);
};

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn is_pod<T: Pod>() {}

    #[test]
    fn boundary_types_are_pod() {
        is_pod::<u8>();
        is_pod::<i64>();
        is_pod::<[u64; 2]>();
        is_pod::<Request>();
        is_pod::<Completion>();
    }

    #[test]
    fn any_bytes_read_as_a_request() {
        // What a hostile peer could leave in a slot: every byte 0xff.
        let bytes = [0xffu8; size_of::<Request>()];
        // SAFETY: `Request: Pod`, so any 64 initialised bytes are a valid
        // `Request`; `read_unaligned` because the array is 1-aligned.
        let r: Request = unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast()) };
        assert_eq!(r.request_id, u64::MAX);
        assert_eq!(r.priority, u32::MAX);
        assert_eq!(crate::Priority::from_raw(r.priority), None);
    }
}
