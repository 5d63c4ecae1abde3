//! The argument structs of `kmod-patches/nvidia-open/uapi/nv-sluice-ioctl.h`,
//! written by hand with compile-time layout asserts; `nr.rs`'s test compares
//! them with the C compiler's view of the header.

use std::mem::offset_of;

/// `SLUICE_NV_MAX_GPUS`: GPUs listed in a query answer.
pub const SLUICE_NV_MAX_GPUS: usize = 16;
/// `SLUICE_NV_VERSION_LEN`: bytes of the driver version string.
pub const SLUICE_NV_VERSION_LEN: usize = 32;

/// `struct sluice_nv_gpu`: one GPU the driver handles, filled in by the
/// driver.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SluiceNvGpu {
    /// The driver's `gpu_id` (as in `NV_ESC_CARD_INFO`); what
    /// [`super::NvCtl::arm`] and [`super::NvCtl::trigger`] take.
    pub gpu_id: u32,
    /// PCI domain.
    pub pci_domain: u32,
    /// PCI bus.
    pub pci_bus: u8,
    /// PCI slot (device).
    pub pci_slot: u8,
    /// PCI function.
    pub pci_function: u8,
    /// Zero.
    pub pad: u8,
    /// PCI vendor id (0x10de).
    pub vendor_id: u16,
    /// PCI device id.
    pub device_id: u16,
}

/// `struct sluice_nv_query`: the answer to `SLUICE_NV_IOCTL_QUERY`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SluiceNvQuery {
    /// `SLUICE_NV_MAGIC` on a patched driver.
    pub magic: u32,
    /// `SLUICE_NV_ABI_MAJOR` of the driver's patch.
    pub abi_major: u16,
    /// `SLUICE_NV_ABI_MINOR` of the driver's patch.
    pub abi_minor: u16,
    /// `SLUICE_NV_CAP_*` bits.
    pub caps: u32,
    /// GPUs the driver handles; only the first `SLUICE_NV_MAX_GPUS` are in
    /// `gpus`.
    pub num_gpus: u32,
    /// The driver version (`"535.261.03"`), NUL-terminated.
    pub driver_version: [u8; SLUICE_NV_VERSION_LEN],
    /// Zero.
    pub reserved: [u32; 4],
    /// The GPUs.
    pub gpus: [SluiceNvGpu; SLUICE_NV_MAX_GPUS],
}

/// `struct sluice_nv_trap`: the argument of `SLUICE_NV_IOCTL_TRAP`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SluiceNvTrap {
    /// To the driver: `SLUICE_NV_TRAP_OP_*`.
    pub op: u32,
    /// To the driver: the target GPU for ARM and TRIGGER, 0 for TRACK and
    /// UNTRACK.
    pub gpu_id: u32,
    /// To the driver: must be zero (no flags in ABI 1.0).
    pub flags: u32,
    /// From the driver: contexts armed or trapped.
    pub contexts: u32,
    /// From the driver: the `NV_STATUS` of the first RM call that failed.
    pub rm_status: u32,
    /// To the driver: must be zero.
    pub reserved: [u32; 3],
}

const _: () = {
    assert!(size_of::<SluiceNvGpu>() == 16);
    assert!(align_of::<SluiceNvGpu>() == 4);
    assert!(offset_of!(SluiceNvGpu, gpu_id) == 0);
    assert!(offset_of!(SluiceNvGpu, pci_domain) == 4);
    assert!(offset_of!(SluiceNvGpu, pci_bus) == 8);
    assert!(offset_of!(SluiceNvGpu, pci_slot) == 9);
    assert!(offset_of!(SluiceNvGpu, pci_function) == 10);
    assert!(offset_of!(SluiceNvGpu, pad) == 11);
    assert!(offset_of!(SluiceNvGpu, vendor_id) == 12);
    assert!(offset_of!(SluiceNvGpu, device_id) == 14);

    assert!(size_of::<SluiceNvQuery>() == 320);
    assert!(align_of::<SluiceNvQuery>() == 4);
    assert!(offset_of!(SluiceNvQuery, magic) == 0);
    assert!(offset_of!(SluiceNvQuery, abi_major) == 4);
    assert!(offset_of!(SluiceNvQuery, abi_minor) == 6);
    assert!(offset_of!(SluiceNvQuery, caps) == 8);
    assert!(offset_of!(SluiceNvQuery, num_gpus) == 12);
    assert!(offset_of!(SluiceNvQuery, driver_version) == 16);
    assert!(offset_of!(SluiceNvQuery, reserved) == 48);
    assert!(offset_of!(SluiceNvQuery, gpus) == 64);

    assert!(size_of::<SluiceNvTrap>() == 32);
    assert!(align_of::<SluiceNvTrap>() == 4);
    assert!(offset_of!(SluiceNvTrap, op) == 0);
    assert!(offset_of!(SluiceNvTrap, gpu_id) == 4);
    assert!(offset_of!(SluiceNvTrap, flags) == 8);
    assert!(offset_of!(SluiceNvTrap, contexts) == 12);
    assert!(offset_of!(SluiceNvTrap, rm_status) == 16);
    assert!(offset_of!(SluiceNvTrap, reserved) == 20);
};
