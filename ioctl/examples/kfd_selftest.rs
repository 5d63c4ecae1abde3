//! Checks every validation path of the patched amdkfd's ioctls through
//! `sluice_ioctl::amd`, on a machine (or QEMU guest) where amdgpu is loaded,
//! with or without an AMD GPU. Run as root; it drops to uid 65534 for the
//! `EPERM` check, so that check comes last.
//!
//! Built static for the QEMU initramfs by `scripts/kmod/qemu-test.sh`:
//!
//! ```text
//! RUSTFLAGS='-C target-feature=+crt-static' cargo build --release -p sluice-ioctl \
//!     --example kfd_selftest --target x86_64-unknown-linux-gnu
//! ```
//!
//! Prints one line per check and ends with `kfd selftest: N passed, M failed`;
//! exits 1 if any failed.

use std::os::fd::{AsFd, AsRawFd};

use sluice_ioctl::Errno;
use sluice_ioctl::amd::nr::{
    KFD_SLUICE_IOCTL_BASE, KFD_SLUICE_MAGIC, KFD_SLUICE_VERSION, KFD_SLUICE_WAVE_KILL_DRY_RUN,
};
use sluice_ioctl::amd::uapi::KfdIoctlSluiceWaveKillArgs;
use sluice_ioctl::amd::{AmdKfd, WaveKillError};

/// A gpu_id no KFD topology hands out (they are hashes, never this one in a
/// guest without GPUs; with GPUs, checked against sysfs below).
const BOGUS_GPU_ID: u32 = 0xdead_beef;
/// Above the kernel's PID_MAX_LIMIT (4194304): never a process.
const BOGUS_PID: u32 = 4_194_305;
/// A pid below PID_MAX_LIMIT that no process of a small guest has.
const UNUSED_PID: u32 = 4_000_000;

struct Checks {
    passed: u32,
    failed: u32,
}

impl Checks {
    fn check(&mut self, name: &str, ok: bool, detail: impl std::fmt::Display) {
        if ok {
            self.passed += 1;
            println!("ok   {name}: {detail}");
        } else {
            self.failed += 1;
            println!("FAIL {name}: {detail}");
        }
    }

    fn expect_err(
        &mut self,
        name: &str,
        got: Result<impl std::fmt::Debug, WaveKillError>,
        want: i32,
    ) {
        match got {
            Err(e) if e.errno().raw() == want => {
                self.check(name, true, format!("{} ({e})", Errno(want).name()))
            }
            Err(e) => self.check(
                name,
                false,
                format!("want {}, got {:?}: {e}", Errno(want).name(), e.errno()),
            ),
            Ok(v) => self.check(
                name,
                false,
                format!("want {}, got Ok({v:?})", Errno(want).name()),
            ),
        }
    }
}

fn gpu_ids() -> Vec<u32> {
    let Ok(nodes) = std::fs::read_dir("/sys/class/kfd/kfd/topology/nodes") else {
        return Vec::new();
    };
    nodes
        .filter_map(|n| std::fs::read_to_string(n.ok()?.path().join("gpu_id")).ok())
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&id| id != 0)
        .collect()
}

fn main() {
    let mut c = Checks {
        passed: 0,
        failed: 0,
    };
    let me = std::process::id();
    let gpus = gpu_ids();
    println!(
        "kfd selftest: pid {me}, uid {}, gpu ids {gpus:?}",
        current_uid()
    );

    let kfd = match AmdKfd::open() {
        Ok(k) => {
            c.check(
                "open /dev/kfd and check the version ioctl",
                true,
                format!("{:?}", k.opened_version()),
            );
            k
        }
        Err(e) => {
            c.check(
                "open /dev/kfd and check the version ioctl",
                false,
                chain(&e),
            );
            finish(&c);
        }
    };

    match kfd.version() {
        Ok(v) => c.check(
            "version query answers the patch's version and wave-kill capability",
            v.version == KFD_SLUICE_VERSION && v.has_wave_kill(),
            format!("{v:?} (magic {KFD_SLUICE_MAGIC:#x} checked at open)"),
        ),
        Err(e) => c.check("version query", false, e),
    }

    // The dispatcher change must leave upstream's ioctls alone:
    // AMDKFD_IOC_GET_VERSION is _IOR('K', 0x01, struct { u32 major, minor; }).
    let mut upstream = [0u32; 2];
    let req = (2u32 << 30) | (8 << 16) | (KFD_SLUICE_IOCTL_BASE << 8) | 0x01;
    // SAFETY: `upstream` is 8 live bytes, the size the request encodes.
    let r = unsafe { libc::ioctl(kfd.as_fd().as_raw_fd(), req as _, upstream.as_mut_ptr()) };
    c.check(
        "upstream AMDKFD_IOC_GET_VERSION still answers",
        r == 0 && upstream[0] == 1,
        format!("ret {r}, kfd interface {}.{}", upstream[0], upstream[1]),
    );

    // An unused number inside the private block is still unknown.
    let mut scratch = [0u8; 32];
    let req = (2u32 << 30) | (32 << 16) | (KFD_SLUICE_IOCTL_BASE << 8) | 0xA5;
    // SAFETY: `scratch` is 32 live bytes, the size the request encodes.
    let r = unsafe { libc::ioctl(kfd.as_fd().as_raw_fd(), req as _, scratch.as_mut_ptr()) };
    let e = Errno::last();
    c.check(
        "unused private number 0xA5 answers ENOTTY",
        r == -1 && e.raw() == libc::ENOTTY,
        format!("ret {r}, {e:?}"),
    );

    let gpu = gpus.first().copied().unwrap_or(BOGUS_GPU_ID);
    c.expect_err(
        "wave kill, unknown flag bit 31",
        kfd.wave_kill(gpu, me, 1 << 31),
        libc::EINVAL,
    );
    c.expect_err(
        "wave kill, unknown flag bit 1",
        kfd.wave_kill(gpu, me, 1 << 1),
        libc::EINVAL,
    );
    for i in 0..4 {
        let mut args = KfdIoctlSluiceWaveKillArgs {
            gpu_id: gpu,
            pid: me,
            flags: KFD_SLUICE_WAVE_KILL_DRY_RUN,
            ..Default::default()
        };
        args.reserved[i] = 1;
        c.expect_err(
            &format!("wave kill, reserved[{i}] nonzero"),
            kfd.wave_kill_args(&mut args),
            libc::EINVAL,
        );
    }

    let unknown_gpu = if gpus.contains(&BOGUS_GPU_ID) {
        BOGUS_GPU_ID ^ 1
    } else {
        BOGUS_GPU_ID
    };
    c.expect_err(
        "wave kill, unknown gpu_id",
        kfd.wave_kill(unknown_gpu, me, 0),
        libc::ENODEV,
    );
    c.expect_err(
        "wave kill dry run, unknown gpu_id",
        kfd.wave_kill(unknown_gpu, me, KFD_SLUICE_WAVE_KILL_DRY_RUN),
        libc::ENODEV,
    );
    c.expect_err("wave kill, gpu_id 0", kfd.wave_kill(0, me, 0), libc::ENODEV);

    c.expect_err("wave kill, pid 0", kfd.wave_kill(gpu, 0, 0), libc::ESRCH);
    c.expect_err(
        "wave kill, pid above PID_MAX_LIMIT",
        kfd.wave_kill(gpu, BOGUS_PID, 0),
        libc::ESRCH,
    );
    c.expect_err(
        "wave kill, pid u32::MAX",
        kfd.wave_kill(gpu, u32::MAX, 0),
        libc::ESRCH,
    );
    c.expect_err(
        "wave kill, pid of no process",
        kfd.wave_kill(gpu, UNUSED_PID, 0),
        libc::ESRCH,
    );
    if me != 1 {
        c.expect_err(
            "wave kill, pid 1 (a process without a KFD context)",
            kfd.wave_kill(gpu, 1, 0),
            libc::ESRCH,
        );
    }

    for (name, ptr) in [
        ("null", std::ptr::null_mut::<KfdIoctlSluiceWaveKillArgs>()),
        ("0x10", std::ptr::without_provenance_mut(0x10)),
        (
            "kernel half",
            std::ptr::without_provenance_mut(0xffff_8000_0000_0000),
        ),
    ] {
        // SAFETY: none of these addresses is mapped in this process (the
        // first page and the kernel half never are), so the driver's
        // copy_from_user fails and nothing is written.
        let r = unsafe { kfd.wave_kill_raw(ptr) };
        c.check(
            &format!("wave kill raw, {name} pointer answers EFAULT"),
            r == Err(Errno(libc::EFAULT)),
            format!("{r:?}"),
        );
    }

    // A forked child may not use its parent's KFD fd.
    // SAFETY: this program is single-threaded; the child only makes one
    // ioctl and calls _exit.
    let child = unsafe { libc::fork() };
    if child == 0 {
        let code = match kfd.version() {
            Err(e) if e.raw() == libc::EBADF => 0,
            _ => 1,
        };
        // SAFETY: _exit ends the child without running the parent's
        // destructors or flushing its stdio buffers twice.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: `status` is a live local; `child` is our child.
    let waited = unsafe { libc::waitpid(child, &mut status, 0) };
    c.check(
        "version query from a forked child answers EBADF",
        child > 0 && waited == child && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        format!("child {child}, status {status:#x}"),
    );

    // Last: drop root (and with it every capability) and try again.
    // SAFETY: plain syscalls on integers.
    let dropped = unsafe { libc::setgid(65534) == 0 && libc::setuid(65534) == 0 };
    if dropped {
        c.expect_err(
            "wave kill without CAP_SYS_ADMIN",
            kfd.wave_kill(gpu, me, 0),
            libc::EPERM,
        );
        c.expect_err(
            "wave kill dry run without CAP_SYS_ADMIN",
            kfd.wave_kill(unknown_gpu, me, KFD_SLUICE_WAVE_KILL_DRY_RUN),
            libc::EPERM,
        );
        c.check(
            "version query needs no privilege",
            kfd.version().is_ok(),
            format!("uid {}", current_uid()),
        );
    } else {
        c.check(
            "drop to uid 65534 for the EPERM check",
            false,
            Errno::last(),
        );
    }
    finish(&c);
}

/// An error and its sources, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(&format!(": {c}"));
        cur = c.source();
    }
    s
}

fn current_uid() -> u32 {
    // SAFETY: getuid cannot fail and touches no memory.
    unsafe { libc::getuid() }
}

fn finish(c: &Checks) -> ! {
    println!("kfd selftest: {} passed, {} failed", c.passed, c.failed);
    std::process::exit(if c.failed == 0 { 0 } else { 1 })
}
