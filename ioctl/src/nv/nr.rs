//! Constants and request numbers of
//! `kmod-patches/nvidia-open/uapi/nv-sluice-ioctl.h`, line for line and in
//! the header's order. The test at the bottom compiles the header with the C
//! compiler and compares every value.

use super::uapi::{SluiceNvQuery, SluiceNvTrap};

/// `SLUICE_NV_IOCTL_MAGIC`: the driver's ioctl type byte (`NV_IOCTL_MAGIC`).
pub const SLUICE_NV_IOCTL_MAGIC: u32 = b'F' as u32;
/// `SLUICE_NV_ESC_BASE`: the driver's first escape number (`NV_IOCTL_BASE`).
pub const SLUICE_NV_ESC_BASE: u32 = 200;
/// `SLUICE_NV_ESC_QUERY`: the version and capability query.
pub const SLUICE_NV_ESC_QUERY: u32 = SLUICE_NV_ESC_BASE + 48;
/// `SLUICE_NV_ESC_TRAP`: track, arm, trigger, untrack.
pub const SLUICE_NV_ESC_TRAP: u32 = SLUICE_NV_ESC_BASE + 49;

/// `SLUICE_NV_MAGIC`: `"SLNV"` in little-endian bytes, answered by the query.
pub const SLUICE_NV_MAGIC: u32 = 0x564e_4c53;
/// `SLUICE_NV_ABI_MAJOR`: the escape ABI this crate speaks; a driver with
/// another major is refused.
pub const SLUICE_NV_ABI_MAJOR: u16 = 1;
/// `SLUICE_NV_ABI_MINOR`: additions within a major come with caps bits.
pub const SLUICE_NV_ABI_MINOR: u16 = 0;
// The header's array sizes live with the structs they size (`uapi`), so
// that `uapi` needs nothing from here; the request numbers below need the
// structs' sizes from there.
pub use super::uapi::{SLUICE_NV_MAX_GPUS, SLUICE_NV_VERSION_LEN};

/// `SLUICE_NV_CAP_TRAP`: the trap escape's operations are implemented.
pub const SLUICE_NV_CAP_TRAP: u32 = 1 << 0;

/// `SLUICE_NV_TRAP_OP_TRACK`: start recording the caller's RM allocations.
pub const SLUICE_NV_TRAP_OP_TRACK: u32 = 1;
/// `SLUICE_NV_TRAP_OP_UNTRACK`: free the debugger sessions, stop recording.
pub const SLUICE_NV_TRAP_OP_UNTRACK: u32 = 2;
/// `SLUICE_NV_TRAP_OP_ARM`: set up a debugger session per context on a GPU.
pub const SLUICE_NV_TRAP_OP_ARM: u32 = 3;
/// `SLUICE_NV_TRAP_OP_TRIGGER`: suspend (stop trigger) and resume each
/// armed context on a GPU.
pub const SLUICE_NV_TRAP_OP_TRIGGER: u32 = 4;

/// `SLUICE_NV_IOCTL_QUERY`: `_IOWR('F', SLUICE_NV_ESC_QUERY, struct sluice_nv_query)`.
pub const SLUICE_NV_IOCTL_QUERY: u32 = iowr(
    SLUICE_NV_IOCTL_MAGIC,
    SLUICE_NV_ESC_QUERY,
    size_of::<SluiceNvQuery>(),
);
/// `SLUICE_NV_IOCTL_TRAP`: `_IOWR('F', SLUICE_NV_ESC_TRAP, struct sluice_nv_trap)`.
pub const SLUICE_NV_IOCTL_TRAP: u32 = iowr(
    SLUICE_NV_IOCTL_MAGIC,
    SLUICE_NV_ESC_TRAP,
    size_of::<SluiceNvTrap>(),
);

// The asm-generic `_IOC` encoding used on x86_64 and arm64:
// nr in bits 0..8, type in 8..16, size in 16..30, direction in 30..32.
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// `_IOWR(ty, nr, size)`: the driver reads and writes `size` bytes.
const fn iowr(ty: u32, nr: u32, size: usize) -> u32 {
    assert!(ty < 1 << 8 && nr < 1 << 8 && size < 1 << 14);
    ((IOC_READ | IOC_WRITE) << 30) | ((size as u32) << 16) | (ty << 8) | nr
}

/// The 8-bit escape number of a request (`_IOC_NR`), which is all the
/// NVIDIA driver dispatches on (with `_IOC_SIZE`).
pub const fn ioc_nr(request: u32) -> u32 {
    request & 0xff
}

/// The argument size a request encodes (`_IOC_SIZE`).
pub const fn ioc_size(request: u32) -> usize {
    ((request >> 16) & 0x3fff) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    fn header() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../kmod-patches/nvidia-open/uapi/nv-sluice-ioctl.h")
    }

    /// Every value the Rust side mirrors, by its C expression.
    fn rust_values() -> BTreeMap<&'static str, u64> {
        use crate::nv::uapi::*;
        use std::mem::offset_of;
        let u = |v: u32| u64::from(v);
        let z = |v: usize| v as u64;
        BTreeMap::from([
            ("SLUICE_NV_IOCTL_MAGIC", u(SLUICE_NV_IOCTL_MAGIC)),
            ("SLUICE_NV_ESC_BASE", u(SLUICE_NV_ESC_BASE)),
            ("SLUICE_NV_ESC_QUERY", u(SLUICE_NV_ESC_QUERY)),
            ("SLUICE_NV_ESC_TRAP", u(SLUICE_NV_ESC_TRAP)),
            ("SLUICE_NV_MAGIC", u(SLUICE_NV_MAGIC)),
            ("SLUICE_NV_ABI_MAJOR", u64::from(SLUICE_NV_ABI_MAJOR)),
            ("SLUICE_NV_ABI_MINOR", u64::from(SLUICE_NV_ABI_MINOR)),
            ("SLUICE_NV_MAX_GPUS", z(SLUICE_NV_MAX_GPUS)),
            ("SLUICE_NV_VERSION_LEN", z(SLUICE_NV_VERSION_LEN)),
            ("SLUICE_NV_CAP_TRAP", u(SLUICE_NV_CAP_TRAP)),
            ("SLUICE_NV_TRAP_OP_TRACK", u(SLUICE_NV_TRAP_OP_TRACK)),
            ("SLUICE_NV_TRAP_OP_UNTRACK", u(SLUICE_NV_TRAP_OP_UNTRACK)),
            ("SLUICE_NV_TRAP_OP_ARM", u(SLUICE_NV_TRAP_OP_ARM)),
            ("SLUICE_NV_TRAP_OP_TRIGGER", u(SLUICE_NV_TRAP_OP_TRIGGER)),
            ("SLUICE_NV_IOCTL_QUERY", u(SLUICE_NV_IOCTL_QUERY)),
            ("SLUICE_NV_IOCTL_TRAP", u(SLUICE_NV_IOCTL_TRAP)),
            ("sizeof(struct sluice_nv_gpu)", z(size_of::<SluiceNvGpu>())),
            (
                "alignof(struct sluice_nv_gpu)",
                z(align_of::<SluiceNvGpu>()),
            ),
            (
                "offsetof(struct sluice_nv_gpu, gpu_id)",
                z(offset_of!(SluiceNvGpu, gpu_id)),
            ),
            (
                "offsetof(struct sluice_nv_gpu, pci_domain)",
                z(offset_of!(SluiceNvGpu, pci_domain)),
            ),
            (
                "offsetof(struct sluice_nv_gpu, pci_bus)",
                z(offset_of!(SluiceNvGpu, pci_bus)),
            ),
            (
                "offsetof(struct sluice_nv_gpu, pci_slot)",
                z(offset_of!(SluiceNvGpu, pci_slot)),
            ),
            (
                "offsetof(struct sluice_nv_gpu, pci_function)",
                z(offset_of!(SluiceNvGpu, pci_function)),
            ),
            (
                "offsetof(struct sluice_nv_gpu, pad)",
                z(offset_of!(SluiceNvGpu, pad)),
            ),
            (
                "offsetof(struct sluice_nv_gpu, vendor_id)",
                z(offset_of!(SluiceNvGpu, vendor_id)),
            ),
            (
                "offsetof(struct sluice_nv_gpu, device_id)",
                z(offset_of!(SluiceNvGpu, device_id)),
            ),
            (
                "sizeof(struct sluice_nv_query)",
                z(size_of::<SluiceNvQuery>()),
            ),
            (
                "alignof(struct sluice_nv_query)",
                z(align_of::<SluiceNvQuery>()),
            ),
            (
                "offsetof(struct sluice_nv_query, magic)",
                z(offset_of!(SluiceNvQuery, magic)),
            ),
            (
                "offsetof(struct sluice_nv_query, abi_major)",
                z(offset_of!(SluiceNvQuery, abi_major)),
            ),
            (
                "offsetof(struct sluice_nv_query, abi_minor)",
                z(offset_of!(SluiceNvQuery, abi_minor)),
            ),
            (
                "offsetof(struct sluice_nv_query, caps)",
                z(offset_of!(SluiceNvQuery, caps)),
            ),
            (
                "offsetof(struct sluice_nv_query, num_gpus)",
                z(offset_of!(SluiceNvQuery, num_gpus)),
            ),
            (
                "offsetof(struct sluice_nv_query, driver_version)",
                z(offset_of!(SluiceNvQuery, driver_version)),
            ),
            (
                "offsetof(struct sluice_nv_query, reserved)",
                z(offset_of!(SluiceNvQuery, reserved)),
            ),
            (
                "offsetof(struct sluice_nv_query, gpus)",
                z(offset_of!(SluiceNvQuery, gpus)),
            ),
            (
                "sizeof(struct sluice_nv_trap)",
                z(size_of::<SluiceNvTrap>()),
            ),
            (
                "alignof(struct sluice_nv_trap)",
                z(align_of::<SluiceNvTrap>()),
            ),
            (
                "offsetof(struct sluice_nv_trap, op)",
                z(offset_of!(SluiceNvTrap, op)),
            ),
            (
                "offsetof(struct sluice_nv_trap, gpu_id)",
                z(offset_of!(SluiceNvTrap, gpu_id)),
            ),
            (
                "offsetof(struct sluice_nv_trap, flags)",
                z(offset_of!(SluiceNvTrap, flags)),
            ),
            (
                "offsetof(struct sluice_nv_trap, contexts)",
                z(offset_of!(SluiceNvTrap, contexts)),
            ),
            (
                "offsetof(struct sluice_nv_trap, rm_status)",
                z(offset_of!(SluiceNvTrap, rm_status)),
            ),
            (
                "offsetof(struct sluice_nv_trap, reserved)",
                z(offset_of!(SluiceNvTrap, reserved)),
            ),
        ])
    }

    /// Compiles a C program that includes the uapi header and prints each
    /// expression of `rust_values()`; returns what it printed.
    fn c_values(exprs: &[&str]) -> BTreeMap<String, u64> {
        crate::testutil::c_values(&header(), "nv", exprs)
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

    /// Every `#define` of the header has its twin here, in the header's
    /// order, so a constant added to or moved in the header fails until
    /// nr.rs follows.
    #[test]
    fn every_define_is_mirrored_in_order() {
        let text = std::fs::read_to_string(header()).unwrap();
        let defines: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("#define "))
            .map(|l| l.split_whitespace().next().unwrap())
            .filter(|name| *name != "_NV_SLUICE_IOCTL_H_")
            .collect();
        let ours = include_str!("nr.rs");
        // A define is declared here (`pub const NAME: ...`) or, for the
        // array sizes that live with their structs in `uapi`, re-exported at
        // its place in the header (`pub use super::uapi::{NAME, NAME};`).
        let declared: Vec<&str> = ours
            .lines()
            .flat_map(|l| {
                if let Some(c) = l.strip_prefix("pub const ") {
                    vec![c.split(':').next().unwrap()]
                } else if let Some(u) = l.strip_prefix("pub use super::uapi::{") {
                    u.trim_end_matches("};").split(", ").collect()
                } else {
                    vec![]
                }
            })
            .filter(|name| name.starts_with("SLUICE_NV_"))
            .collect();
        assert_eq!(
            defines, declared,
            "nr.rs must follow the header line for line"
        );
        let rust = rust_values();
        for d in defines {
            assert!(rust.contains_key(d), "{d} is not compared with the header");
        }
    }

    #[test]
    fn escapes_stay_clear_of_the_driver_numbers() {
        for req in [SLUICE_NV_IOCTL_QUERY, SLUICE_NV_IOCTL_TRAP] {
            let nr = ioc_nr(req);
            // 535.261.03 uses NV_IOCTL_BASE + 0..=17; the RM's own escapes
            // (NV_ESC_RM_*) are 0x27..=0x5f; the 8-bit number ends at 255.
            assert!(nr > SLUICE_NV_ESC_BASE + 17 && nr <= 255, "{nr}");
            assert_eq!((req >> 8) & 0xff, u32::from(b'F'));
        }
        assert_eq!(ioc_size(SLUICE_NV_IOCTL_QUERY), 320);
        assert_eq!(ioc_size(SLUICE_NV_IOCTL_TRAP), 32);
        assert_ne!(SLUICE_NV_IOCTL_QUERY, SLUICE_NV_IOCTL_TRAP);
    }
}
