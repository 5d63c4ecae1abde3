//! Which mechanism the machine offers to kill running GPU work (REEF §4.3,
//! §4.6), probed once when the daemon starts.
//!
//! - **AMD wave kill**: the patched amdkfd (`kmod-patches/amdgpu/`)
//!   answers sluice's version ioctl on `/dev/kfd` with the wave-kill
//!   capability: the daemon can issue SQ_CMD KILL to its own waves.
//! - **NVIDIA trap**: the patched open NVIDIA modules
//!   (`kmod-patches/nvidia-open/`) answer sluice's query escape on
//!   `/dev/nvidiactl`: the daemon can trigger the SM trap.
//! - **None**: neither; preemption falls back to waiting for running
//!   kernels (or, with sluice's kernel library, their cooperative flag
//!   polls).
//!
//! `sluice status` shows the result (`kill_mechanism`), and the daemon logs
//! it at start-up with the reason for each mechanism that is missing.

use std::fmt;

use sluice_ioctl::{amd, nv};

/// The probe's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillCapability {
    /// The patched amdkfd's wave-kill ioctl.
    AmdWaveKill {
        /// The patch's interface version.
        version: u32,
    },
    /// The patched NVIDIA open modules' SM trap.
    NvidiaTrap {
        /// The escape ABI (major, minor).
        abi: (u16, u16),
    },
    /// Neither: wait-based (or cooperative) preemption.
    None {
        /// Why the AMD mechanism is missing.
        amd: String,
        /// Why the NVIDIA mechanism is missing.
        nvidia: String,
    },
}

impl KillCapability {
    /// Short name for status documents: `amd-wave-kill`, `nvidia-trap` or
    /// `none`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::AmdWaveKill { .. } => "amd-wave-kill",
            Self::NvidiaTrap { .. } => "nvidia-trap",
            Self::None { .. } => "none",
        }
    }
}

impl fmt::Display for KillCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AmdWaveKill { version } => {
                write!(f, "amd-wave-kill (patched amdkfd, interface v{version})")
            }
            Self::NvidiaTrap { abi } => write!(
                f,
                "nvidia-trap (patched NVIDIA open modules, ABI {}.{})",
                abi.0, abi.1
            ),
            Self::None { amd, nvidia } => write!(
                f,
                "none: preemption waits for running kernels (AMD: {amd}; NVIDIA: {nvidia})"
            ),
        }
    }
}

/// Probes the patched drivers. Never fails: a missing mechanism is an
/// answer, with its reason.
pub fn probe() -> KillCapability {
    let amd = match amd::AmdKfd::open() {
        Ok(kfd) => match kfd.version() {
            Ok(v) if v.has_wave_kill() => {
                return KillCapability::AmdWaveKill { version: v.version };
            }
            Ok(v) => format!(
                "patched amdkfd v{} without the wave-kill capability (caps {:#x})",
                v.version, v.caps
            ),
            Err(e) => format!("the version ioctl failed: {e}"),
        },
        Err(e) => e.to_string(),
    };
    let nvidia = match nv::NvCtl::open() {
        Ok(ctl) if ctl.info().has_trap() => {
            return KillCapability::NvidiaTrap {
                abi: ctl.info().abi,
            };
        }
        Ok(ctl) => format!(
            "patched NVIDIA driver {} without the trap capability (caps {:#x})",
            ctl.info().driver_version,
            ctl.info().caps
        ),
        Err(e) => e.to_string(),
    };
    KillCapability::None { amd, nvidia }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_messages() {
        let n = KillCapability::None {
            amd: "no /dev/kfd".into(),
            nvidia: "no /dev/nvidiactl".into(),
        };
        assert_eq!(n.name(), "none");
        assert!(n.to_string().contains("no /dev/kfd"));
        assert_eq!(
            KillCapability::AmdWaveKill { version: 1 }.name(),
            "amd-wave-kill"
        );
        assert_eq!(
            KillCapability::NvidiaTrap { abi: (1, 0) }.to_string(),
            "nvidia-trap (patched NVIDIA open modules, ABI 1.0)"
        );
    }

    /// On a machine without either patched driver (this CI machine has no
    /// GPU), the probe says none, with a reason for each.
    #[test]
    fn probe_answers_with_reasons() {
        match probe() {
            KillCapability::None { amd, nvidia } => {
                assert!(!amd.is_empty() && !nvidia.is_empty());
            }
            other => {
                // A testbed with a patched driver: the answer names it.
                assert!(other.to_string().contains("patched"), "{other}");
            }
        }
    }
}
