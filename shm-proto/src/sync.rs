//! The one place atomics and cells come from, so that `--cfg loom` swaps in
//! loom's model-checked versions for every ring and wake-word operation.

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

#[cfg(not(loom))]
pub use core::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

#[cfg(loom)]
pub use loom::cell::UnsafeCell;

/// `core::cell::UnsafeCell` with loom's closure-based API, so ring code is
/// written once for both builds. `repr(transparent)`: an array of these has
/// the layout of an array of `T`, which is what sits in shared memory.
#[cfg(not(loom))]
#[derive(Debug)]
#[repr(transparent)]
pub struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    /// Wraps a value.
    pub const fn new(value: T) -> Self {
        Self(core::cell::UnsafeCell::new(value))
    }
    /// Runs `f` with a shared raw pointer to the value.
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    /// Runs `f` with a mutable raw pointer to the value.
    #[inline(always)]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
