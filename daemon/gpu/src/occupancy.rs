//! What one block of a kernel takes from a CU, and how many fit.
//!
//! A block takes, for as long as it runs:
//!
//! - `ceil(threads / wave_size)` wavefronts, i.e. that many times
//!   `wave_size` threads of the CU's `max_threads`;
//! - per wavefront, `regs_per_thread * wave_size` registers, all from one
//!   register bank (a SIMD on AMD, an SM sub-partition on NVIDIA); a block's
//!   wavefronts may spread over all banks;
//! - its shared memory;
//! - one of the CU's `max_blocks` block slots.
//!
//! On the MI50 profile this gives exactly the `blocks_per_cu` formula of
//! `docs/models.md` that generated the manifests' block times.

use crate::profile::{DeviceProfile, MAX_REGISTER_BANKS};

/// The resource that stops one more block from fitting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Resident threads (counted in whole wavefronts).
    Threads,
    /// Registers in the CU's banks.
    Registers,
    /// Shared memory.
    SharedMem,
    /// Resident block slots.
    BlockSlots,
}

impl Limit {
    /// The resource's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Threads => "threads",
            Limit::Registers => "registers",
            Limit::SharedMem => "shared-memory bytes",
            Limit::BlockSlots => "block slots",
        }
    }
}

/// What one block of a kernel takes from a CU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// Wavefronts per block.
    pub waves: u32,
    /// Threads per block rounded up to whole wavefronts.
    pub threads: u32,
    /// Registers one wavefront takes from its bank.
    pub wave_regs: u32,
    /// Shared memory per block in bytes.
    pub shared_mem: u32,
}

impl Footprint {
    /// The footprint of a block of `threads` threads using `regs_per_thread`
    /// registers and `shared_mem` bytes on a device described by `profile`.
    pub fn new(
        profile: &DeviceProfile,
        threads: u32,
        regs_per_thread: u32,
        shared_mem: u32,
    ) -> Self {
        let wave = profile.cu.wave_size;
        let waves = threads.div_ceil(wave);
        Self {
            waves,
            threads: waves.saturating_mul(wave),
            wave_regs: regs_per_thread.saturating_mul(wave),
            shared_mem,
        }
    }

    /// Registers the whole block takes.
    pub fn registers(&self) -> u64 {
        u64::from(self.waves) * u64::from(self.wave_regs)
    }
}

/// Free resources of one CU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CuState {
    /// Free thread slots.
    pub threads: u32,
    /// Free shared memory in bytes.
    pub shared_mem: u32,
    /// Free block slots.
    pub blocks: u32,
    /// Free registers per bank; only the first `nbanks` entries are used.
    pub banks: [u32; MAX_REGISTER_BANKS as usize],
    /// Number of banks in use.
    pub nbanks: u32,
}

/// Registers a group of blocks took from each bank, to give back later.
pub type BankUse = [u32; MAX_REGISTER_BANKS as usize];

impl CuState {
    /// An empty CU of `profile`.
    pub fn empty(profile: &DeviceProfile) -> Self {
        let mut banks = [0; MAX_REGISTER_BANKS as usize];
        let nbanks = profile.cu.register_banks;
        for b in banks.iter_mut().take(nbanks as usize) {
            *b = profile.bank_registers();
        }
        Self {
            threads: profile.cu.max_threads,
            shared_mem: profile.cu.shared_mem_bytes,
            blocks: profile.cu.max_blocks,
            banks,
            nbanks,
        }
    }

    /// How many more blocks of `fp` fit, and the resource that stops the
    /// next one.
    pub fn fit(&self, fp: &Footprint) -> (u32, Limit) {
        let mut best = (self.blocks, Limit::BlockSlots);
        for (n, limit) in [
            (self.threads.checked_div(fp.threads), Limit::Threads),
            (self.shared_mem.checked_div(fp.shared_mem), Limit::SharedMem),
        ] {
            if let Some(n) = n.filter(|&n| n < best.0) {
                best = (n, limit);
            }
        }
        if fp.wave_regs > 0 && fp.waves > 0 {
            let waves: u32 = self.banks[..self.nbanks as usize]
                .iter()
                .map(|&free| free / fp.wave_regs)
                .sum();
            let n = waves / fp.waves;
            if n < best.0 {
                best = (n, Limit::Registers);
            }
        }
        best
    }

    /// Whether one more block of `fp` fits: the same answer as
    /// `self.fit(fp).0 > 0`, without divisions.
    pub fn fits_one(&self, fp: &Footprint) -> bool {
        if self.blocks == 0 || self.threads < fp.threads || self.shared_mem < fp.shared_mem {
            return false;
        }
        if fp.wave_regs == 0 || fp.waves == 0 {
            return true;
        }
        let mut waves = 0;
        for &free in &self.banks[..self.nbanks as usize] {
            waves += free / fp.wave_regs;
            if waves >= fp.waves {
                return true;
            }
        }
        false
    }

    /// Takes `n` blocks of `fp`, which must fit (see [`Self::fit`]); returns
    /// the registers taken from each bank. Each wavefront goes to the bank
    /// with the most free registers (lowest index on a tie), which spreads
    /// wavefronts over the banks as the hardware does.
    pub fn take(&mut self, fp: &Footprint, n: u32) -> BankUse {
        debug_assert!(self.fit(fp).0 >= n);
        self.threads -= fp.threads * n;
        self.shared_mem -= fp.shared_mem * n;
        self.blocks -= n;
        let mut used = [0; MAX_REGISTER_BANKS as usize];
        if fp.wave_regs > 0 {
            let nb = self.nbanks as usize;
            let r = fp.wave_regs;
            let mut k = fp.waves * n;
            // One wavefront at a time, bank b takes its wavefronts at free
            // counts f_b, f_b - r, ...; writing f_b = q_b·r + s_b, the j-th
            // is in "layer" q_b - j, and the choice (most free, lowest index
            // on a tie) takes whole layers from the top, then part of one
            // in the order (s_b descending, b ascending). So: count the
            // whole layers, then hand out the part.
            let mut q = [0u32; MAX_REGISTER_BANKS as usize];
            let mut by_q = [0usize; MAX_REGISTER_BANKS as usize];
            for b in 0..nb {
                q[b] = self.banks[b] / r;
                by_q[b] = b;
            }
            sort_small(&mut by_q[..nb], |b| std::cmp::Reverse(q[b]));
            let mut layer = q[by_q[0]];
            let (mut i, mut m) = (0, 0);
            while k > 0 {
                while i < nb && q[by_q[i]] >= layer {
                    m += 1;
                    i += 1;
                }
                // Layers `layer` down to the next bank's top (or to 1) each
                // hold these `m` banks.
                let span = if i < nb { layer - q[by_q[i]] } else { layer };
                let full = (k / m).min(span);
                k -= full * m;
                layer -= full;
                if full < span {
                    break; // `layer` is taken in part
                }
            }
            for b in 0..nb {
                used[b] = q[b].saturating_sub(layer) * r;
            }
            if k > 0 {
                let mut part = [0usize; MAX_REGISTER_BANKS as usize];
                let mut np = 0;
                for (b, &qb) in q[..nb].iter().enumerate() {
                    if qb >= layer {
                        part[np] = b;
                        np += 1;
                    }
                }
                let banks = &self.banks;
                sort_small(&mut part[..np], |b| (std::cmp::Reverse(banks[b] % r), b));
                for &b in &part[..k as usize] {
                    used[b] += r;
                }
            }
            for (free, u) in self.banks[..nb].iter_mut().zip(&used) {
                *free -= u;
            }
        }
        used
    }

    /// Gives back `n` blocks of `fp` that took `used` from the banks.
    pub fn give(&mut self, fp: &Footprint, n: u32, used: &BankUse) {
        self.threads += fp.threads * n;
        self.shared_mem += fp.shared_mem * n;
        self.blocks += n;
        for (free, u) in self.banks.iter_mut().zip(used) {
            *free += u;
        }
    }
}

/// Sorts a few (at most [`MAX_REGISTER_BANKS`]) bank indices by `key`,
/// stably: an insertion sort, cheaper than the library's sorts at this size
/// (a placement sorts twice, on every CU it takes from).
fn sort_small<K: Ord>(v: &mut [usize], key: impl Fn(usize) -> K) {
    for i in 1..v.len() {
        let x = v[i];
        let kx = key(x);
        let mut j = i;
        while j > 0 && key(v[j - 1]) > kx {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = x;
    }
}

/// Blocks of `fp` that fit on an empty CU of `profile`, and the limiting
/// resource. 0 means the block can never run on this device.
pub fn blocks_per_cu(profile: &DeviceProfile, fp: &Footprint) -> (u32, Limit) {
    CuState::empty(profile).fit(fp)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use sluice_model::ModelRegistry;

    /// `take`'s bank choice one wavefront at a time, as the hardware does.
    fn take_one_by_one(cu: &mut CuState, fp: &Footprint, n: u32) -> BankUse {
        let mut used = [0; MAX_REGISTER_BANKS as usize];
        for _ in 0..fp.waves * n {
            let mut pick = 0;
            for b in 1..cu.nbanks as usize {
                if cu.banks[b] > cu.banks[pick] {
                    pick = b;
                }
            }
            cu.banks[pick] -= fp.wave_regs;
            used[pick] += fp.wave_regs;
        }
        used
    }

    proptest! {
        #[test]
        fn take_picks_banks_as_one_wavefront_at_a_time_would(
            banks in proptest::collection::vec(0u32..4096, 1..=MAX_REGISTER_BANKS as usize),
            wave_regs in 1u32..600,
            waves in 1u32..9,
            n in 1u32..20,
        ) {
            let mut cu = CuState {
                threads: u32::MAX / 2,
                shared_mem: u32::MAX / 2,
                blocks: 1000,
                banks: [0; MAX_REGISTER_BANKS as usize],
                nbanks: banks.len() as u32,
            };
            cu.banks[..banks.len()].copy_from_slice(&banks);
            let fp = Footprint { threads: 64, waves, wave_regs, shared_mem: 0 };
            let n = n.min(cu.fit(&fp).0);
            let mut reference = cu;
            let want = take_one_by_one(&mut reference, &fp, n);
            let got = cu.take(&fp, n);
            prop_assert_eq!(got, want);
            prop_assert_eq!(cu.banks, reference.banks);
        }
    }

    /// The generator's formula from docs/models.md.
    fn models_md_blocks_per_cu(threads: u32, regs: u32, lds: u32) -> u32 {
        let waves = threads.div_ceil(64);
        let by_slots = 40 / waves;
        let by_regs = 256u32
            .checked_div(regs)
            .map_or(u32::MAX, |per_simd| 4 * 10.min(per_simd) / waves);
        let by_lds = 65536u32.checked_div(lds).unwrap_or(u32::MAX);
        by_slots.min(by_regs).min(by_lds)
    }

    #[test]
    fn mi50_occupancy_equals_the_manifest_generator_formula() {
        let p = DeviceProfile::mi50();
        for (_, model) in ModelRegistry::builtin().iter() {
            for k in &model.manifest.kernels {
                let threads = k.threads_per_block() as u32;
                let fp = Footprint::new(&p, threads, k.regs_per_thread, k.shared_mem_bytes);
                assert_eq!(
                    blocks_per_cu(&p, &fp).0,
                    models_md_blocks_per_cu(threads, k.regs_per_thread, k.shared_mem_bytes),
                    "{}: {k:?}",
                    model.name()
                );
            }
        }
    }

    #[test]
    fn the_limit_named_is_the_one_that_binds() {
        let p = DeviceProfile::gv100();
        // 1024 threads: 2 per SM by threads.
        assert_eq!(
            blocks_per_cu(&p, &Footprint::new(&p, 1024, 16, 0)),
            (2, Limit::Threads)
        );
        // 64 KB shared: 1 per SM.
        assert_eq!(
            blocks_per_cu(&p, &Footprint::new(&p, 64, 16, 65536)),
            (1, Limit::SharedMem)
        );
        // 255 regs x 256 threads = 8 warps x 8160 regs: 2 warps per 16K bank.
        assert_eq!(
            blocks_per_cu(&p, &Footprint::new(&p, 256, 255, 0)),
            (1, Limit::Registers)
        );
        // Tiny blocks: 32 block slots.
        assert_eq!(
            blocks_per_cu(&p, &Footprint::new(&p, 32, 8, 0)),
            (32, Limit::BlockSlots)
        );
    }

    #[test]
    fn take_and_give_round_trip() {
        let p = DeviceProfile::mi50();
        let mut cu = CuState::empty(&p);
        let a = Footprint::new(&p, 256, 80, 12288);
        let b = Footprint::new(&p, 64, 20, 0);
        let ua = cu.take(&a, 2);
        let ub = cu.take(&b, 5);
        cu.give(&a, 2, &ua);
        cu.give(&b, 5, &ub);
        assert_eq!(cu, CuState::empty(&p));
    }

    fn arb_profile() -> impl Strategy<Value = DeviceProfile> {
        (
            1u32..=64,
            prop::sample::select(vec![32u32, 64]),
            1u32..=8,
            prop::sample::select(vec![1u32, 2, 4]),
            1u32..=256,
            1u32..=64,
        )
            .prop_map(|(waves, wave, reg_k, banks, smem_kb, max_blocks)| {
                let mut p = DeviceProfile::mi50();
                p.cu.wave_size = wave;
                p.cu.max_threads = waves * wave;
                p.cu.register_banks = banks;
                p.cu.max_registers = reg_k * 8192 * banks;
                p.cu.shared_mem_bytes = smem_kb * 1024;
                p.cu.max_blocks = max_blocks;
                p
            })
    }

    proptest! {
        #[test]
        fn blocks_per_cu_respects_every_limit_and_is_maximal(
            p in arb_profile(),
            threads in 1u32..=1024,
            regs in 0u32..=256,
            smem in prop::sample::select(vec![0u32, 1024, 4096, 12288, 16384, 49152]),
        ) {
            let fp = Footprint::new(&p, threads, regs, smem);
            let (n, limit) = blocks_per_cu(&p, &fp);
            let n64 = u64::from(n);
            prop_assert!(n64 * u64::from(fp.threads) <= u64::from(p.cu.max_threads));
            prop_assert!(n64 * fp.registers() <= u64::from(p.cu.max_registers));
            prop_assert!(n64 * u64::from(smem) <= u64::from(p.cu.shared_mem_bytes));
            prop_assert!(n <= p.cu.max_blocks);
            prop_assert!(fp.threads >= threads && fp.threads % p.cu.wave_size == 0);
            // One more block breaks the named limit.
            let m = n64 + 1;
            let broken = match limit {
                Limit::Threads => m * u64::from(fp.threads) > u64::from(p.cu.max_threads),
                Limit::SharedMem => m * u64::from(smem) > u64::from(p.cu.shared_mem_bytes),
                Limit::BlockSlots => m > u64::from(p.cu.max_blocks),
                Limit::Registers => {
                    let per_bank = u64::from(p.bank_registers() / fp.wave_regs);
                    m * u64::from(fp.waves) > per_bank * u64::from(p.cu.register_banks)
                }
            };
            prop_assert!(broken, "{limit:?} named but {m} blocks of {fp:?} would fit");
            // Taking them really fits, and leaves no room for another.
            let mut cu = CuState::empty(&p);
            prop_assert_eq!(cu.fits_one(&fp), n > 0);
            let used = cu.take(&fp, n);
            prop_assert_eq!(cu.fit(&fp).0, 0);
            prop_assert!(!cu.fits_one(&fp));
            cu.give(&fp, n, &used);
            prop_assert_eq!(cu, CuState::empty(&p));
        }
    }
}
