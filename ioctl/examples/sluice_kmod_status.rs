//! Asks the patched drivers' capability ioctls whether they answer; used by
//! `scripts/kmod/status.sh`.
//!
//! ```text
//! cargo run -p sluice-ioctl --example sluice_kmod_status [all|nvidia|amd]
//! ```
//!
//! Prints one `key=value` line per device, then one per NVIDIA GPU:
//!
//! ```text
//! nvidia device=/dev/nvidiactl state=patched abi=1.0 caps=0x1 trap=yes driver=535.261.03 gpus=1
//! nvidia-gpu gpu_id=0x6500 pci=0000:65:00.0 id=10de:2330
//! amd device=/dev/kfd state=absent detail="cannot open /dev/kfd: ..."
//! ```
//!
//! `state` is `patched`, `unpatched` (the device answers, the ioctl is
//! unknown), `absent` (no device node) or `error`. Exits 0 when at least one
//! device is patched, 2 when none is, 64 on bad arguments. Opening the
//! devices needs the permissions the daemon has (root, or the video/render
//! groups); it changes nothing.

use std::path::Path;
use std::process::ExitCode;

use sluice_ioctl::amd::{self, AmdKfd};
use sluice_ioctl::nv::{self, NvCtl};

fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn nvidia() -> bool {
    let path = Path::new(nv::NVIDIACTL_PATH);
    let dev = path.display();
    match NvCtl::open_path(path) {
        Ok(ctl) => {
            let info = ctl.info();
            println!(
                "nvidia device={dev} state=patched abi={}.{} caps={:#x} trap={} driver={} gpus={}",
                info.abi.0,
                info.abi.1,
                info.caps,
                if info.has_trap() { "yes" } else { "no" },
                info.driver_version,
                info.num_gpus
            );
            for g in &info.gpus {
                println!(
                    "nvidia-gpu gpu_id={:#x} pci={} id={:04x}:{:04x}",
                    g.gpu_id,
                    g.pci_bus_id(),
                    g.vendor_id,
                    g.device_id
                );
            }
            true
        }
        Err(e) => {
            let state = match &e {
                nv::OpenError::Open { source, .. }
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    "absent"
                }
                nv::OpenError::Unpatched { .. } | nv::OpenError::BadMagic { .. } => "unpatched",
                _ => "error",
            };
            println!(
                "nvidia device={dev} state={state} detail={}",
                quoted(&error_chain(&e))
            );
            false
        }
    }
}

fn amd() -> bool {
    let path = Path::new(amd::KFD_PATH);
    let dev = path.display();
    match AmdKfd::open_path(path) {
        Ok(kfd) => {
            let v = kfd.opened_version();
            println!(
                "amd device={dev} state=patched version={} caps={:#x} wave_kill={}",
                v.version,
                v.caps,
                if v.has_wave_kill() { "yes" } else { "no" }
            );
            true
        }
        Err(e) => {
            let state = match &e {
                amd::OpenError::Open { source, .. }
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    "absent"
                }
                amd::OpenError::Unpatched { .. } | amd::OpenError::BadMagic { .. } => "unpatched",
                _ => "error",
            };
            println!(
                "amd device={dev} state={state} detail={}",
                quoted(&error_chain(&e))
            );
            false
        }
    }
}

/// The error and its sources, joined with ": ".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn main() -> ExitCode {
    let which = std::env::args().nth(1).unwrap_or_else(|| "all".to_owned());
    let patched = match which.as_str() {
        "all" => {
            let n = nvidia();
            let a = amd();
            n || a
        }
        "nvidia" => nvidia(),
        "amd" => amd(),
        other => {
            eprintln!("usage: sluice_kmod_status [all|nvidia|amd] (got {other:?})");
            return ExitCode::from(64);
        }
    };
    if patched {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}
