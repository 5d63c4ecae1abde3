//! `sluice-ioctl`: the user-space side of sluice's driver patches.
//!
//! - [`amd`]: the patched amdkfd's capability query and wave-kill ioctls
//!   (`kmod-patches/amdgpu/`), through [`amd::AmdKfd`];
//! - [`nv`]: the patched NVIDIA open kernel modules' trap escape
//!   (`kmod-patches/nvidia-open/`), through [`nv::NvCtl`].
//!
//! Each driver has a `nr.rs` with the request numbers, line for line with the
//! patch's uapi header, and argument structs with compile-time layout
//! asserts. Handles own their fd and are only built by opening the device
//! and checking the patched driver's version ioctl. Errors are [`Errno`].

pub mod amd;
mod errno;
pub mod nv;

pub use errno::Errno;
