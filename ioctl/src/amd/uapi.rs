//! The argument structs of `kmod-patches/amdgpu/uapi/kfd_sluice.h`, written
//! by hand with compile-time layout asserts; `nr.rs`'s test compares them
//! with the C compiler's view of the header.

use std::mem::offset_of;

/// `struct kfd_ioctl_sluice_version_args`, filled in by the driver.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdIoctlSluiceVersionArgs {
    /// `KFD_SLUICE_MAGIC` on a patched driver.
    pub magic: u32,
    /// `KFD_SLUICE_VERSION` of the driver's patch.
    pub version: u32,
    /// `KFD_SLUICE_CAP_*` bits.
    pub caps: u64,
    /// Zero.
    pub reserved: [u32; 4],
}

/// `struct kfd_ioctl_sluice_wave_kill_args`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdIoctlSluiceWaveKillArgs {
    /// To the driver: the GPU (`gpu_id` in the KFD topology).
    pub gpu_id: u32,
    /// To the driver: the target process (thread group id).
    pub pid: u32,
    /// To the driver: `KFD_SLUICE_WAVE_KILL_*` bits.
    pub flags: u32,
    /// From the driver: the VMID the KILL went to, 0 if the process had none.
    pub vmid: u32,
    /// To the driver: must be zero.
    pub reserved: [u32; 4],
}

const _: () = {
    assert!(size_of::<KfdIoctlSluiceVersionArgs>() == 32);
    assert!(align_of::<KfdIoctlSluiceVersionArgs>() == 8);
    assert!(offset_of!(KfdIoctlSluiceVersionArgs, magic) == 0);
    assert!(offset_of!(KfdIoctlSluiceVersionArgs, version) == 4);
    assert!(offset_of!(KfdIoctlSluiceVersionArgs, caps) == 8);
    assert!(offset_of!(KfdIoctlSluiceVersionArgs, reserved) == 16);

    assert!(size_of::<KfdIoctlSluiceWaveKillArgs>() == 32);
    assert!(align_of::<KfdIoctlSluiceWaveKillArgs>() == 4);
    assert!(offset_of!(KfdIoctlSluiceWaveKillArgs, gpu_id) == 0);
    assert!(offset_of!(KfdIoctlSluiceWaveKillArgs, pid) == 4);
    assert!(offset_of!(KfdIoctlSluiceWaveKillArgs, flags) == 8);
    assert!(offset_of!(KfdIoctlSluiceWaveKillArgs, vmid) == 12);
    assert!(offset_of!(KfdIoctlSluiceWaveKillArgs, reserved) == 16);
};
