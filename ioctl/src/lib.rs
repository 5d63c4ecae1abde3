//! `sluice-ioctl`: the user-space side of sluice's driver patches.
//!
//! This crate will hold, once the driver layer lands (issue "Step 3"):
//!
//! - `nr.rs` per driver: ioctl request numbers, line for line with the uapi
//!   header under `kmod-patches/`, checked against golden values compiled
//!   from that header;
//! - the uapi argument structs with compile-time layout asserts;
//! - `AmdKfd` and `NvCtl`: handles that own their fd, are built only by
//!   opening the device and checking the patched driver's version ioctl, and
//!   return a small `Copy` errno type.
//!
//! Today it is deliberately empty: nothing in the daemon calls a driver yet,
//! and the embedded simulated GPU needs no ioctl.
#![forbid(unsafe_code)]
