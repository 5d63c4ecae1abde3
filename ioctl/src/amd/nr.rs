//! Constants and request numbers of `kmod-patches/amdgpu/uapi/kfd_sluice.h`,
//! line for line and in the header's order. The test at the bottom compiles
//! the header with the C compiler and compares every value.

use super::uapi::{KfdIoctlSluiceVersionArgs, KfdIoctlSluiceWaveKillArgs};

/// `KFD_SLUICE_IOCTL_BASE`: amdkfd's ioctl type byte (`AMDKFD_IOCTL_BASE`).
pub const KFD_SLUICE_IOCTL_BASE: u32 = b'K' as u32;

/// `KFD_SLUICE_MAGIC`: `"SLUI"`, answered by the version query.
pub const KFD_SLUICE_MAGIC: u32 = 0x534c_5549;
/// `KFD_SLUICE_VERSION`: the interface version this crate speaks.
pub const KFD_SLUICE_VERSION: u32 = 1;

/// `KFD_SLUICE_CAP_WAVE_KILL`: [`AMDKFD_IOC_SLUICE_WAVE_KILL`] is implemented.
pub const KFD_SLUICE_CAP_WAVE_KILL: u64 = 1 << 0;

/// `KFD_SLUICE_WAVE_KILL_DRY_RUN`: validate and look the target up, but do
/// not send the KILL.
pub const KFD_SLUICE_WAVE_KILL_DRY_RUN: u32 = 1 << 0;
/// `KFD_SLUICE_WAVE_KILL_FLAGS`: every flag the driver accepts.
pub const KFD_SLUICE_WAVE_KILL_FLAGS: u32 = KFD_SLUICE_WAVE_KILL_DRY_RUN;

/// `AMDKFD_IOC_SLUICE_GET_VERSION`: `_IOR('K', 0xA0, struct kfd_ioctl_sluice_version_args)`.
pub const AMDKFD_IOC_SLUICE_GET_VERSION: u32 = ior(
    KFD_SLUICE_IOCTL_BASE,
    0xA0,
    size_of::<KfdIoctlSluiceVersionArgs>(),
);

/// `AMDKFD_IOC_SLUICE_WAVE_KILL`: `_IOWR('K', 0xA1, struct kfd_ioctl_sluice_wave_kill_args)`.
pub const AMDKFD_IOC_SLUICE_WAVE_KILL: u32 = iowr(
    KFD_SLUICE_IOCTL_BASE,
    0xA1,
    size_of::<KfdIoctlSluiceWaveKillArgs>(),
);

/// `AMDKFD_SLUICE_COMMAND_START`: first number of the private block.
pub const AMDKFD_SLUICE_COMMAND_START: u32 = 0xA0;
/// `AMDKFD_SLUICE_COMMAND_END`: one past the last number in use.
pub const AMDKFD_SLUICE_COMMAND_END: u32 = 0xA2;

// The asm-generic `_IOC` encoding used on x86_64 and arm64:
// nr in bits 0..8, type in 8..16, size in 16..30, direction in 30..32.
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

const fn ioc(dir: u32, ty: u32, nr: u32, size: usize) -> u32 {
    assert!(ty < 1 << 8 && nr < 1 << 8 && size < 1 << 14);
    (dir << 30) | ((size as u32) << 16) | (ty << 8) | nr
}

/// `_IOR(ty, nr, size)`: the kernel writes `size` bytes to user space.
pub(crate) const fn ior(ty: u32, nr: u32, size: usize) -> u32 {
    ioc(IOC_READ, ty, nr, size)
}

/// `_IOWR(ty, nr, size)`: the kernel reads and writes `size` bytes.
pub(crate) const fn iowr(ty: u32, nr: u32, size: usize) -> u32 {
    ioc(IOC_READ | IOC_WRITE, ty, nr, size)
}

/// The 8-bit command number of a request (`_IOC_NR`).
pub const fn ioc_nr(request: u32) -> u32 {
    request & 0xff
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    fn header() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../kmod-patches/amdgpu/uapi/kfd_sluice.h")
    }

    /// Every value the Rust side mirrors, by its C name.
    fn rust_values() -> BTreeMap<&'static str, u64> {
        use crate::amd::uapi::*;
        use std::mem::offset_of;
        BTreeMap::from([
            ("KFD_SLUICE_IOCTL_BASE", u64::from(KFD_SLUICE_IOCTL_BASE)),
            ("KFD_SLUICE_MAGIC", u64::from(KFD_SLUICE_MAGIC)),
            ("KFD_SLUICE_VERSION", u64::from(KFD_SLUICE_VERSION)),
            ("KFD_SLUICE_CAP_WAVE_KILL", KFD_SLUICE_CAP_WAVE_KILL),
            (
                "KFD_SLUICE_WAVE_KILL_DRY_RUN",
                u64::from(KFD_SLUICE_WAVE_KILL_DRY_RUN),
            ),
            (
                "KFD_SLUICE_WAVE_KILL_FLAGS",
                u64::from(KFD_SLUICE_WAVE_KILL_FLAGS),
            ),
            (
                "AMDKFD_IOC_SLUICE_GET_VERSION",
                u64::from(AMDKFD_IOC_SLUICE_GET_VERSION),
            ),
            (
                "AMDKFD_IOC_SLUICE_WAVE_KILL",
                u64::from(AMDKFD_IOC_SLUICE_WAVE_KILL),
            ),
            (
                "AMDKFD_SLUICE_COMMAND_START",
                u64::from(AMDKFD_SLUICE_COMMAND_START),
            ),
            (
                "AMDKFD_SLUICE_COMMAND_END",
                u64::from(AMDKFD_SLUICE_COMMAND_END),
            ),
            (
                "sizeof(struct kfd_ioctl_sluice_version_args)",
                size_of::<KfdIoctlSluiceVersionArgs>() as u64,
            ),
            (
                "alignof(struct kfd_ioctl_sluice_version_args)",
                align_of::<KfdIoctlSluiceVersionArgs>() as u64,
            ),
            (
                "offsetof(struct kfd_ioctl_sluice_version_args, magic)",
                offset_of!(KfdIoctlSluiceVersionArgs, magic) as u64,
            ),
            (
                "offsetof(struct kfd_ioctl_sluice_version_args, version)",
                offset_of!(KfdIoctlSluiceVersionArgs, version) as u64,
            ),
            (
                "offsetof(struct kfd_ioctl_sluice_version_args, caps)",
                offset_of!(KfdIoctlSluiceVersionArgs, caps) as u64,
            ),
            (
                "offsetof(struct kfd_ioctl_sluice_version_args, reserved)",
                offset_of!(KfdIoctlSluiceVersionArgs, reserved) as u64,
            ),
            (
                "sizeof(struct kfd_ioctl_sluice_wave_kill_args)",
                size_of::<KfdIoctlSluiceWaveKillArgs>() as u64,
            ),
            (
                "alignof(struct kfd_ioctl_sluice_wave_kill_args)",
                align_of::<KfdIoctlSluiceWaveKillArgs>() as u64,
            ),
            (
                "offsetof(struct kfd_ioctl_sluice_wave_kill_args, gpu_id)",
                offset_of!(KfdIoctlSluiceWaveKillArgs, gpu_id) as u64,
            ),
            (
                "offsetof(struct kfd_ioctl_sluice_wave_kill_args, pid)",
                offset_of!(KfdIoctlSluiceWaveKillArgs, pid) as u64,
            ),
            (
                "offsetof(struct kfd_ioctl_sluice_wave_kill_args, flags)",
                offset_of!(KfdIoctlSluiceWaveKillArgs, flags) as u64,
            ),
            (
                "offsetof(struct kfd_ioctl_sluice_wave_kill_args, vmid)",
                offset_of!(KfdIoctlSluiceWaveKillArgs, vmid) as u64,
            ),
            (
                "offsetof(struct kfd_ioctl_sluice_wave_kill_args, reserved)",
                offset_of!(KfdIoctlSluiceWaveKillArgs, reserved) as u64,
            ),
        ])
    }

    /// Compiles a C program that includes the uapi header and prints each
    /// expression of `rust_values()`; returns what it printed.
    fn c_values(exprs: &[&str]) -> BTreeMap<String, u64> {
        crate::testutil::c_values(&header(), "kfd", exprs)
    }

    #[test]
    fn numbers_and_layouts_match_the_c_header() {
        let rust = rust_values();
        let exprs: Vec<&str> = rust.keys().copied().collect();
        let c = c_values(&exprs);
        assert_eq!(c.len(), rust.len());
        for (name, value) in &rust {
            assert_eq!(
                c[*name], *value,
                "{name}: the C header says {:#x}, nr.rs/uapi.rs say {value:#x}",
                c[*name]
            );
        }
    }

    /// Every `#define` of the header has its Rust twin in `rust_values()`,
    /// so a constant added to the header without one here fails.
    #[test]
    fn every_define_is_mirrored() {
        let text = std::fs::read_to_string(header()).unwrap();
        let rust = rust_values();
        let defines: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("#define "))
            .map(|l| l.split_whitespace().next().unwrap())
            .filter(|name| *name != "KFD_SLUICE_H_INCLUDED")
            .collect();
        assert!(defines.len() >= 10, "found only {defines:?}");
        for d in defines {
            assert!(
                rust.contains_key(d),
                "{d} is in kfd_sluice.h but not in nr.rs"
            );
        }
    }

    #[test]
    fn private_block_does_not_collide() {
        for req in [AMDKFD_IOC_SLUICE_GET_VERSION, AMDKFD_IOC_SLUICE_WAVE_KILL] {
            let nr = ioc_nr(req);
            assert!((AMDKFD_SLUICE_COMMAND_START..AMDKFD_SLUICE_COMMAND_END).contains(&nr));
            // upstream 0x01..=0x27, ROCm DKMS 0x80..=0x84, other research 0x85..=0x88
            assert!(nr > 0x88, "{nr:#x}");
            assert_eq!((req >> 8) & 0xff, u32::from(b'K'));
        }
    }
}
