//! Device profiles: the numbers that describe one GPU to the execution model.
//!
//! A profile is a TOML file (`daemon/gpu/profiles/*.toml`) with four sections,
//! `[cu]`, `[queues]`, `[preempt]` and `[memory]`, plus `name`, `vendor` and
//! `compute_units` at the top. Every key is required and unknown keys are
//! rejected. Each key in the shipped files carries a `# source:` comment
//! naming where the number comes from; `docs/gpu-model.md` lists them all.
//!
//! The shipped profiles are embedded with `include_str!`
//! ([`DeviceProfile::builtin`]); [`DeviceProfile::load`] reads a file instead.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Most register banks (SIMDs / SM sub-partitions) a CU may have.
pub const MAX_REGISTER_BANKS: u32 = 8;

/// Longest per-kernel queue or preemption cost a profile may give, ns (1 s).
pub const MAX_QUEUE_COST_NS: u64 = 1_000_000_000;

/// The shipped profiles: (name, file, contents).
const BUILTIN: &[(&str, &str, &str)] = &[
    ("mi50", "mi50.toml", include_str!("../profiles/mi50.toml")),
    (
        "gv100",
        "gv100.toml",
        include_str!("../profiles/gv100.toml"),
    ),
    ("h100", "h100.toml", include_str!("../profiles/h100.toml")),
    ("a100", "a100.toml", include_str!("../profiles/a100.toml")),
    (
        "jetson-nano",
        "jetson-nano.toml",
        include_str!("../profiles/jetson-nano.toml"),
    ),
];

/// GPU vendor; decides nothing in the model, but names the kill mechanism
/// (CU reset on AMD, trap on NVIDIA) in reports and docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// AMD (GCN/CDNA): CUs, 64-wide wavefronts, kill by CU reset.
    Amd,
    /// NVIDIA: SMs, 32-wide warps, kill by trap handler.
    Nvidia,
}

/// Per-CU (per-SM) resource limits. A resident block holds its share of each
/// until it finishes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CuLimits {
    /// Most resident threads, counted in whole wavefronts/warps.
    pub max_threads: u32,
    /// Registers (32-bit, per lane summed over lanes) in the CU's register
    /// file: 4 SIMDs x 256 VGPRs x 64 lanes = 65536 on gfx906.
    pub max_registers: u32,
    /// The register file is split evenly into this many banks (SIMDs on AMD,
    /// SM sub-partitions on NVIDIA); one wavefront's registers come from one
    /// bank, a block's wavefronts may spread over all banks.
    pub register_banks: u32,
    /// Shared memory (LDS) in bytes.
    pub shared_mem_bytes: u32,
    /// Most resident blocks (workgroups / CTAs).
    pub max_blocks: u32,
    /// Wavefront / warp size in threads; thread and register use is rounded
    /// up to whole wavefronts.
    pub wave_size: u32,
}

/// Queues between the host and the CUs (REEF §4.1, Paella §2.1).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueParams {
    /// Hardware queues the command processor serves; streams map onto them
    /// round-robin. Each is strictly FIFO at its head.
    pub hw_queues: u32,
    /// Default device-queue (ring buffer) capacity of a new stream, in kernels.
    pub dq_capacity: u32,
    /// Time the host runtime's background thread takes to move one kernel
    /// from a host queue into its device queue, ns.
    pub host_launch_ns: u64,
    /// Time the command processor takes to fetch one kernel packet from a
    /// device queue, ns. Fetches are pipelined: a packet's fetch starts when
    /// it enters the device queue, concurrently with any others, so the
    /// fetch is on the critical path only for a kernel that arrives at an
    /// idle stream. A packet keeps its device-queue slot until it is
    /// launched.
    pub cp_fetch_ns: u64,
    /// Device-side cost of launching one kernel, ns: from "fetched and its
    /// stream's previous kernel finished" until its blocks may be
    /// dispatched. Launches of different streams overlap, also within one
    /// hardware queue. A lazily evicted kernel pays this and then exits.
    pub launch_ns: u64,
}

/// Costs of the preemption mechanisms (REEF §4.3, §4.5, §4.6).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreemptParams {
    /// Time from a kill request until the stream's running blocks are gone
    /// and their CUs free, ns (CU reset on AMD, trap handler on NVIDIA).
    pub kill_ns: u64,
    /// Time from a host-queue reset until the host side of the stream is
    /// clear, ns (REEF's asynchronous memory reclamation). The host queue is
    /// emptied at once; the stream is reported idle no earlier than this.
    /// Runs concurrently with eviction and kill.
    pub host_reset_ns: u64,
}

/// The co-run slowdown model; see `docs/gpu-model.md`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryParams {
    /// Memory intensity of a kernel that does not give its own: the share of
    /// the device's memory bandwidth it uses when alone at full occupancy,
    /// and the share of its time that stretches when bandwidth runs short.
    pub default_intensity: f64,
    /// How hard over-subscription bites: a block's time is multiplied by
    /// `1 + contention * intensity * max(0, demand - 1)`.
    pub contention: f64,
}

/// How a wave of blocks stretches with the threads sharing its CU, for
/// kernels without measured wave times (`KernelLaunch::wave_ns`); see
/// `docs/gpu-model.md`. Derived from REEF's MI50 kernels by
/// `scripts/derive-occupancy-curve.py`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OccupancyCurve {
    /// Share of the CU's `max_threads` resident, strictly increasing, 0 to 1.
    pub thread_fraction: Vec<f64>,
    /// A wave's time at that share against one block alone; positive and
    /// non-decreasing, one per `thread_fraction`.
    pub wave_ratio: Vec<f64>,
}

impl OccupancyCurve {
    /// The ratio at thread fraction `x`: linear between the points, the end
    /// values beyond them.
    pub fn ratio(&self, x: f64) -> f64 {
        let (xs, rs) = (&self.thread_fraction, &self.wave_ratio);
        let i = xs.partition_point(|&p| p <= x);
        if i == 0 {
            return rs[0];
        }
        if i == xs.len() {
            return rs[xs.len() - 1];
        }
        let (x0, x1, r0, r1) = (xs[i - 1], xs[i], rs[i - 1], rs[i]);
        r0 + (r1 - r0) * (x - x0) / (x1 - x0)
    }
}

/// One device profile, as parsed and validated.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    /// Short name, e.g. `mi50`.
    pub name: String,
    /// GPU vendor.
    pub vendor: Vendor,
    /// Number of CUs (AMD) or SMs (NVIDIA).
    pub compute_units: u32,
    /// Per-CU limits.
    pub cu: CuLimits,
    /// Queue parameters.
    pub queues: QueueParams,
    /// Preemption costs.
    pub preempt: PreemptParams,
    /// Co-run slowdown parameters.
    pub memory: MemoryParams,
    /// Wave time against CU occupancy, for unmeasured kernels.
    pub occupancy: OccupancyCurve,
}

/// Why a profile could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("cannot read device profile {}; check the path", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Not valid TOML, an unknown or missing key, or a value of the wrong type.
    #[error(
        "{file}: not a valid device profile; fix the TOML (every key of \
         daemon/gpu/profiles/mi50.toml is required, no others are allowed)"
    )]
    Parse {
        /// The file (or the name the caller gave the text).
        file: String,
        /// toml's report, with line and column.
        #[source]
        source: toml::de::Error,
    },
    /// Well-formed but a value is out of range.
    #[error("{file}: {key} = {value} {problem}; {fix}")]
    Invalid {
        /// The file (or the name the caller gave the text).
        file: String,
        /// Full key, e.g. `cu.wave_size`.
        key: &'static str,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        problem: &'static str,
        /// What to write instead.
        fix: &'static str,
    },
    /// No shipped profile has this name.
    #[error("no built-in device profile `{name}`; use one of mi50, gv100, h100, a100, jetson-nano")]
    Unknown {
        /// The name asked for.
        name: String,
    },
}

impl DeviceProfile {
    /// Parses and validates a profile. `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Self, ProfileError> {
        let profile: Self = toml::from_str(text).map_err(|source| ProfileError::Parse {
            file: file.to_owned(),
            source,
        })?;
        profile.validate(file)?;
        Ok(profile)
    }

    /// Reads, parses and validates the profile at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// A shipped profile by name: `mi50`, `gv100`, `h100`, `a100` or `jetson-nano`.
    pub fn builtin(name: &str) -> Result<Self, ProfileError> {
        let (_, file, text) =
            BUILTIN
                .iter()
                .find(|(n, _, _)| *n == name)
                .ok_or_else(|| ProfileError::Unknown {
                    name: name.to_owned(),
                })?;
        Self::parse(&format!("builtin:{file}"), text)
    }

    /// Names of the shipped profiles.
    pub fn builtin_names() -> impl Iterator<Item = &'static str> {
        BUILTIN.iter().map(|(n, _, _)| *n)
    }

    /// The MI50-like profile (60 CUs, gfx906).
    ///
    /// # Panics
    ///
    /// If the embedded file is broken, which the unit tests rule out.
    pub fn mi50() -> Self {
        Self::builtin_or_panic("mi50")
    }

    /// The GV100-like profile (80 SMs, Volta).
    ///
    /// # Panics
    ///
    /// If the embedded file is broken, which the unit tests rule out.
    pub fn gv100() -> Self {
        Self::builtin_or_panic("gv100")
    }

    /// The H100 SXM profile (132 SMs, Hopper).
    ///
    /// # Panics
    ///
    /// If the embedded file is broken, which the unit tests rule out.
    pub fn h100() -> Self {
        Self::builtin_or_panic("h100")
    }

    fn builtin_or_panic(name: &str) -> Self {
        Self::builtin(name).unwrap_or_else(|e| panic!("embedded device profile is broken: {e}"))
    }

    /// Registers in one bank.
    pub fn bank_registers(&self) -> u32 {
        self.cu.max_registers / self.cu.register_banks
    }

    /// Checks every range rule; the error names `file`, the key and the value.
    pub fn validate(&self, file: &str) -> Result<(), ProfileError> {
        let bad = |key, value: String, problem, fix| ProfileError::Invalid {
            file: file.to_owned(),
            key,
            value,
            problem,
            fix,
        };
        if self.name.is_empty() {
            return Err(bad(
                "name",
                "\"\"".into(),
                "is empty",
                "give the profile a short name such as \"mi50\"",
            ));
        }
        let positive: [(&'static str, u64); 8] = [
            ("compute_units", self.compute_units.into()),
            ("cu.max_threads", self.cu.max_threads.into()),
            ("cu.max_registers", self.cu.max_registers.into()),
            ("cu.register_banks", self.cu.register_banks.into()),
            ("cu.max_blocks", self.cu.max_blocks.into()),
            ("cu.wave_size", self.cu.wave_size.into()),
            ("queues.hw_queues", self.queues.hw_queues.into()),
            ("queues.dq_capacity", self.queues.dq_capacity.into()),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err(bad(key, "0".into(), "is zero", "use at least 1"));
            }
        }
        if self.compute_units > 4096 {
            return Err(bad(
                "compute_units",
                self.compute_units.to_string(),
                "is implausibly large",
                "use at most 4096",
            ));
        }
        if self.cu.register_banks > MAX_REGISTER_BANKS {
            return Err(bad(
                "cu.register_banks",
                self.cu.register_banks.to_string(),
                "is more than the model supports",
                "use at most 8",
            ));
        }
        if self.cu.max_registers % self.cu.register_banks != 0 {
            return Err(bad(
                "cu.max_registers",
                self.cu.max_registers.to_string(),
                "does not split evenly over cu.register_banks",
                "make it a multiple of cu.register_banks",
            ));
        }
        if self.cu.max_threads % self.cu.wave_size != 0 {
            return Err(bad(
                "cu.max_threads",
                self.cu.max_threads.to_string(),
                "is not a whole number of wavefronts",
                "make it a multiple of cu.wave_size",
            ));
        }
        if self.queues.hw_queues > 1024 {
            return Err(bad(
                "queues.hw_queues",
                self.queues.hw_queues.to_string(),
                "is implausibly large",
                "use at most 1024",
            ));
        }
        let times: [(&'static str, u64); 5] = [
            ("queues.host_launch_ns", self.queues.host_launch_ns),
            ("queues.cp_fetch_ns", self.queues.cp_fetch_ns),
            ("queues.launch_ns", self.queues.launch_ns),
            ("preempt.kill_ns", self.preempt.kill_ns),
            ("preempt.host_reset_ns", self.preempt.host_reset_ns),
        ];
        for (key, value) in times {
            if value > MAX_QUEUE_COST_NS {
                return Err(bad(
                    key,
                    value.to_string(),
                    "is longer than a second, implausible for a per-kernel queue cost",
                    "give the cost in nanoseconds (e.g. 7750 for 7.75 us)",
                ));
            }
        }
        let m = &self.memory;
        if !(m.default_intensity.is_finite() && (0.0..=1.0).contains(&m.default_intensity)) {
            return Err(bad(
                "memory.default_intensity",
                m.default_intensity.to_string(),
                "is outside 0..=1",
                "use a share between 0.0 and 1.0",
            ));
        }
        if !(m.contention.is_finite() && (0.0..=100.0).contains(&m.contention)) {
            return Err(bad(
                "memory.contention",
                m.contention.to_string(),
                "is outside 0..=100",
                "use 0.0 (no slowdown) to a few units",
            ));
        }
        let o = &self.occupancy;
        let xs_ok = !o.thread_fraction.is_empty()
            && o.thread_fraction
                .iter()
                .all(|x| x.is_finite() && (0.0..=1.0).contains(x))
            && o.thread_fraction.windows(2).all(|w| w[0] < w[1]);
        if !xs_ok {
            return Err(bad(
                "occupancy.thread_fraction",
                format!("{:?}", o.thread_fraction),
                "is empty, outside 0..=1 or not strictly increasing",
                "regenerate it with scripts/derive-occupancy-curve.py --write",
            ));
        }
        let rs_ok = o.wave_ratio.len() == o.thread_fraction.len()
            && o.wave_ratio.iter().all(|r| r.is_finite() && *r > 0.0)
            && o.wave_ratio.windows(2).all(|w| w[0] <= w[1]);
        if !rs_ok {
            return Err(bad(
                "occupancy.wave_ratio",
                format!("{:?}", o.wave_ratio),
                "is not one positive, non-decreasing ratio per thread_fraction",
                "regenerate it with scripts/derive-occupancy-curve.py --write",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mi50_text() -> &'static str {
        BUILTIN[0].2
    }

    #[test]
    fn shipped_profiles_parse_and_match_their_names() {
        for name in DeviceProfile::builtin_names() {
            let p = DeviceProfile::builtin(name).unwrap();
            assert_eq!(p.name, name);
        }
        assert_eq!(DeviceProfile::mi50().compute_units, 60);
        assert_eq!(DeviceProfile::mi50().vendor, Vendor::Amd);
        assert_eq!(DeviceProfile::gv100().compute_units, 80);
        assert_eq!(DeviceProfile::h100().compute_units, 132);
        assert_eq!(DeviceProfile::h100().vendor, Vendor::Nvidia);
        let nano = DeviceProfile::builtin("jetson-nano").expect("jetson-nano parses");
        assert_eq!(nano.compute_units, 1);
        assert_eq!(nano.vendor, Vendor::Nvidia);
    }

    #[test]
    fn every_shipped_key_names_its_source() {
        for (name, _, text) in BUILTIN {
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let l = line.trim();
                if l.is_empty() || l.starts_with('#') || l.starts_with('[') {
                    continue;
                }
                // The key's own line or the comment block right above it.
                let mut j = i;
                let mut found = l.contains("# source:");
                while !found && j > 0 && lines[j - 1].trim_start().starts_with('#') {
                    j -= 1;
                    found = lines[j].contains("source:");
                }
                assert!(found, "{name}: `{l}` has no `# source:` comment");
            }
        }
    }

    #[test]
    fn unknown_key_is_rejected() {
        let text = mi50_text().replace("[preempt]", "[preempt]\nbogus = 1");
        let e = DeviceProfile::parse("x.toml", &text).unwrap_err();
        let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
        assert!(
            chain.contains("x.toml") && chain.contains("bogus"),
            "{chain}"
        );
    }

    #[test]
    fn invalid_values_name_file_key_and_value() {
        let text = mi50_text().replace("wave_size = 64", "wave_size = 0");
        let e = DeviceProfile::parse("p.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("p.toml") && e.contains("cu.wave_size = 0"),
            "{e}"
        );

        let text = mi50_text().replace("max_threads = 2560", "max_threads = 2500");
        let e = DeviceProfile::parse("p.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cu.max_threads = 2500") && e.contains("multiple"),
            "{e}"
        );

        let text = mi50_text().replace("default_intensity = 0.3", "default_intensity = 1.5");
        let e = DeviceProfile::parse("p.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("memory.default_intensity = 1.5"), "{e}");

        let text = mi50_text().replace("launch_ns = 7750", "launch_ns = 7750000000");
        let e = DeviceProfile::parse("p.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("queues.launch_ns = 7750000000") && e.contains("nanoseconds"),
            "{e}"
        );
    }

    #[test]
    fn occupancy_curve_interpolates_and_is_validated() {
        let c = DeviceProfile::mi50().occupancy;
        assert_eq!(c.ratio(0.0), 1.0);
        assert_eq!(c.ratio(-1.0), 1.0);
        assert_eq!(c.ratio(1.0), *c.wave_ratio.last().unwrap());
        let (x0, x1) = (c.thread_fraction[2], c.thread_fraction[3]);
        let mid = c.ratio((x0 + x1) / 2.0);
        assert!((mid - (c.wave_ratio[2] + c.wave_ratio[3]) / 2.0).abs() < 1e-9);
        let text = mi50_text().replace("wave_ratio = [1.000, 1.000", "wave_ratio = [1.000, 0.500");
        let e = DeviceProfile::parse("p.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("occupancy.wave_ratio") && e.contains("derive-occupancy"),
            "{e}"
        );
    }

    #[test]
    fn command_processor_costs_are_reef_components() {
        // REEF Fig. 20(b): a capacity-4 device queue resets in 31 us; §4.2:
        // ~20 us per queued kernel to fetch and launch; 3 us host reset.
        let p = DeviceProfile::mi50();
        assert_eq!(4 * p.queues.launch_ns, 31_000);
        assert_eq!(p.queues.cp_fetch_ns + p.queues.launch_ns, 20_000);
        assert_eq!(p.preempt.host_reset_ns, 3_000);
        assert_eq!(p.preempt.kill_ns, 3_000);
        // No NVIDIA component measurement: borrowed from the MI50.
        for nv in [DeviceProfile::gv100(), DeviceProfile::h100()] {
            assert_eq!(nv.queues.launch_ns, p.queues.launch_ns);
            assert_eq!(nv.queues.cp_fetch_ns, p.queues.cp_fetch_ns);
            assert_eq!(nv.preempt.host_reset_ns, p.preempt.host_reset_ns);
        }
    }

    #[test]
    fn load_reads_a_file_and_reports_a_missing_one() {
        let dir = std::env::temp_dir().join(format!("sluice-gpu-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mi50.toml");
        std::fs::write(&path, mi50_text()).unwrap();
        assert_eq!(DeviceProfile::load(&path).unwrap(), DeviceProfile::mi50());
        let missing = dir.join("nope.toml");
        let e = DeviceProfile::load(&missing).unwrap_err().to_string();
        assert!(e.contains("nope.toml"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        let e = DeviceProfile::builtin("a800").unwrap_err().to_string();
        assert!(e.contains("a800") && e.contains("mi50"), "{e}");
    }
}
