//! Spatial partitions on CUDA: which green context a partition asked for by
//! CUs (SMs) becomes.
//!
//! The policies ask [`sluice_gpu::Gpu::set_partition`] for a set of CUs, as
//! the GPU model takes it. CUDA cannot confine a stream to chosen SMs; a
//! green context (CUDA ≥ 12.4) gets a number of SMs from a split of the
//! device's SM resource, and only groups of one split are guaranteed
//! disjoint. So [`CudaGpu`](crate::CudaGpu) splits the device once into
//! granules ([`SmGranules`]: 8 SMs each on compute capability 9.x, so 16
//! granules and 4 SMs left over on an H100 SXM's 132) and maps a CU set
//! onto granules:
//!
//! - CU `c` lies in granule `min(c / granule_sms, granules - 1)` (the SMs
//!   left over by the split count as part of the last granule);
//! - the partition is every granule holding a requested CU: it has at least
//!   the SMs asked for, rounded up to whole granules, and partitions of
//!   disjoint CU ranges at granule boundaries get disjoint SMs;
//! - a set touching every granule is the whole device (the primary
//!   context's stream, leftover SMs included), as is `None`.
//!
//! A count `n` ([`for_count`], `CudaGpu::prepare_partition`) means the lowest
//! `n` CUs, like `sluice profile`'s partitions on the GPU model.
//!
//! Green contexts are cached by granule set and never destroyed, and each
//! stream keeps its stream in every partition it has been in, so switching
//! back and forth creates nothing.

use crate::driver::{GranuleSet, SmGranules};

/// What a partition becomes on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionInfo {
    /// The granules of its green context (every granule when
    /// `whole_device`).
    pub granules: GranuleSet,
    /// SMs its kernels may use.
    pub sms: u32,
    /// It is the whole device: no green context, the primary context's
    /// stream.
    pub whole_device: bool,
}

fn whole(layout: &SmGranules) -> PartitionInfo {
    PartitionInfo {
        granules: layout.all(),
        sms: layout.sm_count,
        whole_device: true,
    }
}

fn of_set(layout: &SmGranules, set: GranuleSet) -> PartitionInfo {
    if set == layout.all() {
        whole(layout)
    } else {
        PartitionInfo {
            granules: set,
            sms: layout.sms(set),
            whole_device: false,
        }
    }
}

/// The rounding rule, for error messages.
fn rule(layout: &SmGranules) -> String {
    format!(
        "partitions are whole granules of {} SMs (compute capability {}.{}), {} of them, and \
         every granule is the whole device of {} SMs",
        layout.granule_sms,
        layout.compute_capability.0,
        layout.compute_capability.1,
        layout.granules,
        layout.sm_count
    )
}

/// The partition holding the CUs `cus`; `Err` says what is wrong with them
/// and what to give instead.
pub fn for_cus(layout: &SmGranules, cus: &[u32]) -> Result<PartitionInfo, String> {
    if cus.is_empty() {
        return Err("no CUs given; give at least one, or none for the whole device".to_owned());
    }
    if layout.granules == 0 {
        return Err(format!(
            "the device's {} SMs are fewer than one granule of {}; use the whole device (None)",
            layout.sm_count, layout.granule_sms
        ));
    }
    let mut set = GranuleSet::default();
    for &c in cus {
        if c >= layout.sm_count {
            return Err(format!(
                "CU {c} does not exist: the device has SMs 0..{}",
                layout.sm_count
            ));
        }
        set.0 |= 1 << (c / layout.granule_sms).min(layout.granules - 1);
    }
    Ok(of_set(layout, set))
}

/// The partition of the lowest `sm_count` SMs, rounded up to whole
/// granules; `Err` for 0 or more SMs than the device has.
pub fn for_count(layout: &SmGranules, sm_count: u32) -> Result<PartitionInfo, String> {
    if sm_count == 0 || sm_count > layout.sm_count {
        return Err(format!(
            "a partition of {sm_count} SMs: give 1..={} SMs ({}; a count is rounded up), or \
             use the whole device",
            layout.sm_count,
            rule(layout)
        ));
    }
    let all: Vec<u32> = (0..sm_count).collect();
    for_cus(layout, &all)
}

/// SMs of a partition of `pct` % of the device (⌈pct × SMs / 100⌉ CUs,
/// the GPU model's rule), rounded as [`for_count`] rounds.
pub fn for_percent(layout: &SmGranules, pct: u32) -> Result<PartitionInfo, String> {
    if pct == 0 || pct > 100 {
        return Err(format!(
            "partition size {pct}% is outside 1..=100; give percentages like 25,50,75,100"
        ));
    }
    let n = (u64::from(layout.sm_count) * u64::from(pct)).div_ceil(100) as u32;
    for_count(layout, n.max(1))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;
    use crate::driver::{CuDriver, StreamId as DrvStream};
    use crate::fake::{Call, Executed, FakeDriver, KernelOutcome};
    use crate::gpu::tests::{finished, launch, run};
    use crate::gpu::{CudaGpu, Kill};
    use shm_proto::Priority;
    use sluice_gpu::{
        Clocked, DeviceProfile, Event, Gpu, GpuError, HostReset, KernelLaunch, KernelRef, Ns,
        OpError, Outcome, StreamId,
    };
    use sluice_model::ModelRegistry;

    fn h100() -> SmGranules {
        SmGranules::for_device(132, (9, 0))
    }

    fn gpu() -> (CudaGpu, FakeDriver) {
        crate::gpu::tests::gpu(Kill::Cooperative)
    }

    /// Completed synthetic kernels on the fake device: (block ns argument
    /// as the kernel's identity, stream, start, end).
    fn completed_kernels(d: &FakeDriver) -> Vec<(DrvStream, u64, u64)> {
        d.log()
            .into_iter()
            .filter_map(|e| match e.what {
                Executed::Kernel {
                    outcome: KernelOutcome::Completed,
                    ..
                } => Some((e.stream, e.start_ns, e.end_ns)),
                _ => None,
            })
            .collect()
    }

    fn cus(r: std::ops::Range<u32>) -> Vec<u32> {
        r.collect()
    }

    #[test]
    fn counts_and_cu_sets_round_up_to_whole_granules() {
        let l = h100();
        assert_eq!((l.granule_sms, l.granules), (8, 16), "{l:?}");
        let p = for_count(&l, 20).unwrap();
        assert_eq!(p.sms, 24);
        assert_eq!(p.granules, GranuleSet::range(0, 3));
        assert!(!p.whole_device);
        assert_eq!(for_count(&l, 1).unwrap().sms, 8);
        assert_eq!(for_count(&l, 64).unwrap().sms, 64);
        // Scattered CUs: every granule holding one.
        let p = for_cus(&l, &[0, 9, 17]).unwrap();
        assert_eq!((p.sms, p.granules.to_string()), (24, "0-2".to_owned()));
        let p = for_cus(&l, &[3, 100]).unwrap();
        assert_eq!(p.granules.to_string(), "0,12");
        // The 4 SMs the split leaves over count as the last granule.
        assert_eq!(for_cus(&l, &[131]).unwrap().granules.to_string(), "15");
        // Every granule is the whole device, leftover SMs included.
        for n in [121, 128, 132] {
            let p = for_count(&l, n).unwrap();
            assert!(p.whole_device, "{n}: {p:?}");
            assert_eq!(p.sms, 132);
        }
        // The GPU model's percentages: 25 % of 132 is 33 CUs, 40 SMs here.
        assert_eq!(for_percent(&l, 25).unwrap().sms, 40);
        assert_eq!(for_percent(&l, 50).unwrap().sms, 72);
        assert!(for_percent(&l, 100).unwrap().whole_device);
        // Other architectures: A100 (8.0) granules of 4, V100 (7.0) of 2.
        let a100 = SmGranules::for_device(108, (8, 0));
        assert_eq!((a100.granule_sms, a100.granules), (4, 27));
        assert_eq!(for_count(&a100, 6).unwrap().sms, 8);
        let v100 = SmGranules::for_device(80, (7, 0));
        assert_eq!(for_count(&v100, 3).unwrap().sms, 4);
    }

    #[test]
    fn bad_sizes_are_refused_naming_the_value_and_the_fix() {
        let l = h100();
        let e = for_count(&l, 0).unwrap_err();
        assert!(
            e.starts_with("a partition of 0 SMs: give 1..=132 SMs"),
            "{e}"
        );
        assert!(
            e.contains("whole granules of 8 SMs (compute capability 9.0)"),
            "{e}"
        );
        let e = for_count(&l, 200).unwrap_err();
        assert!(e.starts_with("a partition of 200 SMs: give 1..=132"), "{e}");
        let e = for_cus(&l, &[]).unwrap_err();
        assert!(e.contains("no CUs given"), "{e}");
        let e = for_percent(&l, 0).unwrap_err();
        assert!(e.contains("0% is outside 1..=100"), "{e}");

        let (mut g, d) = gpu();
        let s = g.create_stream(0).unwrap();
        let e = g.set_partition(s, Some(&[3, 140])).unwrap_err();
        assert!(
            matches!(
                &e,
                GpuError::Refused(OpError::BadPartition { stream: 0, .. })
            ),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("CU 140 does not exist: the device has SMs 0..132"),
            "{e}"
        );
        let e = g.set_partition(s, Some(&[])).unwrap_err().to_string();
        assert!(e.contains("no CUs given"), "{e}");
        let e = g.prepare_partition(0).unwrap_err().to_string();
        assert!(e.contains("a partition of 0 SMs: give 1..=132 SMs"), "{e}");
        let e = g.set_partition(StreamId(7), None).unwrap_err().to_string();
        assert!(e.contains("stream 7 was not created"), "{e}");
        assert_eq!(d.green_ctx_count(), 0, "nothing made for a refused size");
        // The fake driver itself refuses granules the split did not make.
        let mut d2 = d.clone();
        let e = d2.create_green_ctx(GranuleSet::range(15, 2)).unwrap_err();
        assert!(e.to_string().contains("granule 16 does not exist"), "{e}");
        let e = d2.create_green_ctx(GranuleSet::default()).unwrap_err();
        assert!(e.to_string().contains("no granule given"), "{e}");
    }

    #[test]
    fn partitions_are_made_once_and_prepared_switches_create_nothing() {
        let (mut g, d) = gpu();
        let a = g.create_stream(1).unwrap();
        let b = g.create_stream(0).unwrap();
        let p = g.prepare_partition(64).unwrap();
        assert_eq!((p.sms, p.whole_device), (64, false));
        assert_eq!(d.green_ctx_count(), 1);
        let made = |d: &FakeDriver, from: usize| {
            d.calls()[from..]
                .iter()
                .filter(|c| matches!(c, Call::CreateGreenCtx(_) | Call::CreateGreenStream(..)))
                .count()
        };
        // The green context and a stream in it for both streams, with their
        // priorities.
        let streams: Vec<_> = d
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::CreateGreenStream(_, p) => Some(p),
                _ => None,
            })
            .collect();
        assert_eq!(
            streams,
            [
                crate::driver::StreamPriority::RealTime,
                crate::driver::StreamPriority::BestEffort
            ]
        );
        let before = d.call_count();
        g.set_partition(a, Some(&cus(0..64))).unwrap();
        g.set_partition(a, None).unwrap();
        g.set_partition(a, Some(&cus(0..60))).unwrap();
        assert_eq!(made(&d, before), 0, "prepared: nothing created on a switch");
        assert_eq!(g.partition_of(a).unwrap().sms, 64);
        assert_eq!(g.partition_of(b), None);
        // An unprepared partition is made at its first use, disjoint from
        // the first.
        let before = d.call_count();
        g.set_partition(b, Some(&cus(64..128))).unwrap();
        assert_eq!(made(&d, before), 2, "green context and b's stream in it");
        assert_eq!(d.green_ctx_count(), 2);
        let first = d.green_ctx_granules(crate::driver::GreenCtxId(0)).unwrap();
        let second = d.green_ctx_granules(crate::driver::GreenCtxId(1)).unwrap();
        assert_eq!(first.0 & second.0, 0, "disjoint SMs: {first} and {second}");
        assert_eq!(g.partition_of(b).unwrap().sms, 64);
        // A set covering every granule is the whole device.
        g.set_partition(b, Some(&cus(0..132))).unwrap();
        assert_eq!(g.partition_of(b), None);
        assert_eq!(g.prepared_partitions(), 2);
    }

    /// Kernels already on the device when a stream moves finish on its old
    /// stream; the rest run on the new one, after them, each exactly once,
    /// in order; and back again.
    #[test]
    fn a_moved_stream_keeps_its_queued_work_and_runs_later_work_in_the_new_partition() {
        let (mut g, d) = gpu();
        let s = g.create_stream(0).unwrap();
        g.set_dq_capacity(s, 4).unwrap();
        g.prepare_partition(32).unwrap();
        for t in 0..10 {
            g.launch(s, launch(50_000, t)).unwrap();
        }
        g.poll().unwrap(); // 4 issued on the whole device
        g.set_partition(s, Some(&cus(0..32))).unwrap();
        let evs = run(
            &mut g,
            |e| matches!(e, Event::KernelFinished { kernel, .. } if kernel.tag == 4),
        );
        g.set_partition(s, None).unwrap();
        let mut evs2 = run(&mut g, |_| false);
        let mut all = evs;
        all.append(&mut evs2);
        assert_eq!(
            finished(&all),
            (0..10).map(|t| (t, Outcome::Completed)).collect::<Vec<_>>()
        );
        let ran = completed_kernels(&d);
        assert_eq!(ran.len(), 10, "each kernel ran once: {ran:?}");
        let sms: Vec<u32> = ran.iter().map(|&(st, ..)| d.stream_sms(st)).collect();
        // 0..4 were on the device at the first move and finished there;
        // what was issued after it ran in the partition, and what was
        // issued after the move back on the whole device again.
        assert_eq!(&sms[..4], &[132; 4], "{sms:?}");
        let in_part = sms.iter().filter(|&&n| n == 32).count();
        assert!(in_part >= 3, "{sms:?}");
        assert!(sms[4..4 + in_part].iter().all(|&n| n == 32), "{sms:?}");
        assert!(sms[4 + in_part..].iter().all(|&n| n == 132), "{sms:?}");
        assert!(4 + in_part < 10, "{sms:?}");
        // One after another across both moves.
        for w in ran.windows(2) {
            assert!(w[1].1 >= w[0].2, "overlap: {w:?}");
        }
        assert!(
            d.calls()
                .iter()
                .any(|c| matches!(c, Call::StreamWaitEvent(..))),
            "the new stream waited for the old one's work"
        );
    }

    /// A reset preemption right after a move evicts work on both streams
    /// and the policy's relaunch completes everything once.
    #[test]
    fn preemption_and_restore_work_across_a_move() {
        let (mut g, d) = gpu();
        let s = g.create_stream(0).unwrap();
        g.set_dq_capacity(s, 4).unwrap();
        for t in 0..8 {
            g.launch(s, launch(100_000, t)).unwrap();
        }
        g.poll().unwrap();
        g.set_partition(s, Some(&cus(0..16))).unwrap();
        let evs = run(
            &mut g,
            |e| matches!(e, Event::KernelFinished { kernel, .. } if kernel.tag == 0),
        );
        assert_eq!(finished(&evs), [(0, Outcome::Completed)]);
        g.poll().unwrap(); // the fifth issued, on the green stream
        let HostReset { first, .. } = g.preempt_reset(s).unwrap();
        assert!(first.is_some());
        let evs = run(&mut g, |e| matches!(e, Event::Preempted(_)));
        let Some(Event::Preempted(r)) = evs.iter().find(|e| matches!(e, Event::Preempted(_)))
        else {
            panic!("{evs:?}")
        };
        let from = r.first_incomplete.unwrap().tag;
        assert_eq!(from, 1, "{r:?}");
        g.resume(s).unwrap();
        for t in from..8 {
            g.launch(s, launch(100_000, t)).unwrap();
        }
        let evs = run(&mut g, |_| false);
        let done: Vec<u64> = finished(&evs)
            .into_iter()
            .filter(|&(_, o)| o == Outcome::Completed)
            .map(|(t, _)| t)
            .collect();
        assert_eq!(done, (1..8).collect::<Vec<_>>());
        let on_green = completed_kernels(&d)
            .iter()
            .filter(|&&(st, ..)| d.stream_sms(st) == 16)
            .count();
        assert_eq!(on_green, 7, "the relaunch ran in the partition");
    }

    #[test]
    fn a_driver_without_green_contexts_gets_a_clear_error() {
        let (mut g, d) = gpu();
        d.without_green_contexts(12020);
        let s = g.create_stream(0).unwrap();
        let e = g.set_partition(s, Some(&cus(0..16))).unwrap_err();
        assert!(matches!(e, GpuError::Driver { .. }), "{e:?}");
        let text = e.to_string();
        for want in [
            "green contexts (spatial SM partitions) need CUDA 12.4 or later",
            "cuGreenCtxCreate",
            "this driver reports CUDA 12.2 (cuDriverGetVersion = 12020)",
            "update the NVIDIA driver",
        ] {
            assert!(text.contains(want), "missing {want:?} in: {text}");
        }
        assert_eq!(g.prepare_partition(16).unwrap_err().to_string(), text);
        // The whole device needs no green context.
        g.set_partition(s, None).unwrap();
        g.launch(s, launch(1_000, 0)).unwrap();
        assert_eq!(finished(&run(&mut g, |_| false)).len(), 1);
    }

    /// The `Gpu` a policy sees: the CUDA adapter with every stream the
    /// policy creates moved into a partition (real-time streams to the
    /// lowest 32 SMs, the others to the next 96), and nothing else changed.
    struct Partitioned(CudaGpu);

    impl Gpu for Partitioned {
        fn profile(&self) -> &DeviceProfile {
            self.0.profile()
        }
        fn now(&self) -> Ns {
            self.0.now()
        }
        fn create_stream(&mut self, priority: i32) -> Result<StreamId, GpuError> {
            let s = self.0.create_stream(priority)?;
            let part = if priority > 0 {
                cus(0..32)
            } else {
                cus(32..128)
            };
            self.0.set_partition(s, Some(&part))?;
            Ok(s)
        }
        fn set_dq_capacity(&mut self, s: StreamId, c: u32) -> Result<(), GpuError> {
            self.0.set_dq_capacity(s, c)
        }
        fn set_packed_placement(&mut self, s: StreamId, p: bool) -> Result<(), GpuError> {
            self.0.set_packed_placement(s, p)
        }
        fn launch(&mut self, s: StreamId, k: KernelLaunch) -> Result<KernelRef, GpuError> {
            self.0.launch(s, k)
        }
        fn launch_padded(
            &mut self,
            s: StreamId,
            k: KernelLaunch,
            host: StreamId,
            with: KernelRef,
        ) -> Result<KernelRef, GpuError> {
            self.0.launch_padded(s, k, host, with)
        }
        fn preempt_reset(&mut self, s: StreamId) -> Result<HostReset, GpuError> {
            self.0.preempt_reset(s)
        }
        fn wait_based_preempt(&mut self, s: StreamId) -> Result<(), GpuError> {
            self.0.wait_based_preempt(s)
        }
        fn resume(&mut self, s: StreamId) -> Result<(), GpuError> {
            self.0.resume(s)
        }
        fn set_partition(&mut self, s: StreamId, c: Option<&[u32]>) -> Result<(), GpuError> {
            self.0.set_partition(s, c)
        }
        fn supports_fused_launch(&self) -> bool {
            self.0.supports_fused_launch()
        }
    }

    impl Clocked for Partitioned {
        fn advance(&mut self, until: Option<Ns>, out: &mut Vec<Event>) -> Option<Ns> {
            self.0.advance(until, out)
        }
        fn utilisation(&self) -> Option<f64> {
            None
        }
    }

    /// `reef`, `wait-preempt` and `rt-only`, unchanged, through the
    /// workload driver on partitioned streams: every RT request finishes,
    /// BE work runs, preemptions happen, and every kernel ran in its
    /// stream's partition.
    #[test]
    fn the_policies_run_unchanged_on_partitioned_streams() {
        use sluice_sched::workload;
        use sluice_sched::{PolicyKind, make_policy};
        let models = Arc::new(ModelRegistry::builtin());
        let w = crate::gpu::tests::disb_a_brief(&models);
        for kind in [
            PolicyKind::Reef,
            PolicyKind::WaitPreempt,
            PolicyKind::RtOnly,
        ] {
            let (g, d) = gpu();
            let mut g = Partitioned(g);
            let mut p = make_policy(kind, &models);
            let r = workload::run_on(&mut g, &models, p.as_mut(), &w);
            let rt = r
                .done
                .iter()
                .filter(|x| x.task.priority == Priority::RealTime)
                .count();
            assert_eq!(rt, 5, "{kind:?}");
            if kind != PolicyKind::RtOnly {
                assert!(
                    r.done
                        .iter()
                        .any(|x| x.task.priority == Priority::BestEffort),
                    "{kind:?}"
                );
                assert!(!r.stats.preempt_latency_ns.is_empty(), "{kind:?}");
            }
            let ran = completed_kernels(&d);
            assert!(!ran.is_empty());
            for (st, ..) in ran {
                let sms = d.stream_sms(st);
                assert!(sms == 32 || sms == 96, "{kind:?}: a kernel on {sms} SMs");
            }
        }
    }

    fn spread(mut ns: Vec<u64>) -> (f64, f64, f64) {
        ns.sort_unstable();
        let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
        (at(0.5), at(0.9), at(1.0))
    }

    /// Dispatcher-side cost of a switch on the fake driver (wall clock of
    /// `set_partition`, no driver latency: the fake's calls are in-memory),
    /// printed, not asserted: a prepared switch with kernels outstanding
    /// (one `stream_wait_event`), and a switch to a partition never used
    /// (green context and stream created). Run with `--no-capture`.
    #[test]
    fn partition_switch_cost_on_the_fake_driver() {
        const REPS: usize = 2_000;
        let (mut g, _) = gpu();
        let s = g.create_stream(0).unwrap();
        let a = cus(0..32);
        let b = cus(32..96);
        g.prepare_partition_cus(&a).unwrap();
        g.prepare_partition_cus(&b).unwrap();
        let mut prepared = Vec::with_capacity(REPS);
        for i in 0..REPS {
            if i % 64 == 0 {
                // Keep kernels outstanding so every switch waits for them.
                run(&mut g, |_| false);
                for t in 0..4 {
                    g.launch(s, launch(10_000, t)).unwrap();
                }
                g.poll().unwrap();
            }
            let to = if i % 2 == 0 { &a } else { &b };
            let t0 = Instant::now();
            g.set_partition(s, Some(to)).unwrap();
            prepared.push(t0.elapsed().as_nanos() as u64);
        }
        // Cold: a granule range never used before, each time.
        let mut cold = Vec::new();
        for first in 0..15 {
            for len in 1..(16 - first) {
                let set: Vec<u32> = (first * 8..(first + len) * 8).collect();
                let t0 = Instant::now();
                g.set_partition(s, Some(&set)).unwrap();
                cold.push(t0.elapsed().as_nanos() as u64);
            }
        }
        let (p50, p90, pmax) = spread(prepared);
        let (c50, c90, cmax) = spread(cold.clone());
        println!(
            "fake driver, dispatcher side: prepared switch p50 {p50:.2} us, p90 {p90:.2} us, \
             max {pmax:.2} us over {REPS}; first use (green context + stream) p50 {c50:.2} us, \
             p90 {c90:.2} us, max {cmax:.2} us over {}",
            cold.len()
        );
        run(&mut g, |_| false);
    }
}
