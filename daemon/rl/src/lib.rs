//! # sluice-rl
//!
//! Reinforcement-learning agents for sluice's learned planners (InSS: Han et
//! al., "InSS: An Intelligent Scheduling Orchestrator for Multi-GPU Inference
//! with Spatio-Temporal Sharing", §5, two-stage scheduler TS): [`Sacd`], SAC-Discrete (Christodoulou 2019,
//! arXiv:1910.07207) for the global stage's model placement, and [`Td3`]
//! (Fujimoto, van Hoof and Meger, ICML 2018) for the local stage's resource
//! shares and batch sizes, with a [`ReplayBuffer`] and [`checkpoint`]s. Both
//! agents are generic over state and action widths; their defaults are InSS
//! Table 2's.
//!
//! Networks run on candle's CPU backend in `f32`. Training is a loop the
//! caller drives:
//!
//! ```no_run
//! use sluice_rl::{Action, Rng, Sacd, SacdConfig, SeedableRng, Transition};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut agent = Sacd::new(SacdConfig::new(4, 3), 7)?;
//! let mut buffer = agent.replay_buffer()?;
//! let mut rng = Rng::seed_from_u64(7);
//! let state = vec![0.0; 4];
//! let mask = vec![true, false, true]; // action 1 is unsafe here
//! let action = agent.act(&state, Some(&mask), true, &mut rng)?;
//! buffer.push(Transition {
//!     state: state.clone(),
//!     action: Action::Discrete(action),
//!     reward: 1.0,
//!     next_state: state,
//!     done: true,
//!     mask: Some(mask.clone()),
//!     next_mask: Some(mask),
//! })?;
//! let batch = buffer.sample(agent.config().hyper.batch_size, &mut rng)?;
//! let losses = agent.update(&batch)?;
//! # let _ = losses;
//! # Ok(())
//! # }
//! ```
//!
//! ## Reproducibility
//!
//! Every random draw (initial weights, exploration, replay sampling, TD3's
//! target noise) comes from this crate's seeded [`Rng`], never from candle,
//! whose CPU generator cannot be seeded. Two agents built with the same seed
//! and trained on the same batches have bitwise-identical weights, which
//! `weights_digest()` lets a caller check.
//!
//! That holds for any thread count: candle's CPU matmul (the `gemm` crate,
//! threads chosen by `RAYON_NUM_THREADS`, else the core count) splits only
//! the output among threads and sums each output's inner dimension in the
//! same blocks and order whatever the thread count; reductions and
//! element-wise ops are sequential per row. The crate's tests check this by
//! training in child processes with `RAYON_NUM_THREADS=1` and `=3`. Runs
//! are reproducible on one platform and build; across CPUs with different
//! SIMD support (gemm picks its kernel at run time) or different libm
//! (Box-Muller uses `ln`/`cos`), the last bits may differ. Debug and release
//! builds of the tests give the same digests.
//!
//! ## Set `RAYON_NUM_THREADS`
//!
//! candle 0.11.1 looks up its thread count on every matmul. Unless
//! `RAYON_NUM_THREADS` is set, on a machine whose cores are all alike that
//! means `num_cpus::get_physical()`, which parses `/proc/cpuinfo` each time.
//! Measured 2026-11-25 on a 2-core x86-64 VM: acting once with each agent (3
//! matmuls each) took a median 240–370 µs unset against 28 µs with
//! `RAYON_NUM_THREADS=1` (about 55 µs per matmul; `cargo test --release -p
//! sluice-rl -- --ignored --nocapture timing`, last line), and the debug
//! tests ran about 2.5 times slower. Processes that use this crate should
//! set it (any value keeps results bitwise identical, see above). The
//! library does not set it itself: changing the environment of a running,
//! multi-threaded process is unsound.

pub mod checkpoint;
mod common;
pub mod error;
mod head;
pub mod net;
pub mod replay;
pub mod rng;
pub mod sacd;
pub mod td3;

pub use error::{ActError, BuildError, LoadError, PushError, SampleError, SaveError, UpdateError};
pub use net::{DEFAULT_HIDDEN, Mlp};
pub use replay::{Action, ActionSpec, Batch, ReplayBuffer, ReplaySpec, Transition};
pub use rng::{Draws, Rng, SeedableRng};
pub use sacd::{Sacd, SacdConfig, SacdHyper, SacdLosses};
pub use td3::{Head, Td3, Td3Config, Td3Hyper, Td3Losses};

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn one_hot(i: usize, n: usize) -> Vec<f32> {
        let mut v = vec![0.0; n];
        v[i % n] = 1.0;
        v
    }

    /// A deterministic pseudo-random state of width `n`.
    fn state(rng: &mut Rng, n: usize) -> Vec<f32> {
        (0..n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect()
    }

    fn sacd_buffer(agent: &Sacd, n_transitions: usize) -> ReplayBuffer {
        let c = agent.config();
        let mut buf = agent.replay_buffer().expect("valid");
        let mut rng = Rng::seed_from_u64(1234);
        for i in 0..n_transitions {
            let s = state(&mut rng, c.state_dim);
            let mut mask = vec![true; c.n_actions];
            mask[i % c.n_actions] = i % 3 != 0;
            let a = agent.act(&s, Some(&mask), true, &mut rng).expect("acts");
            buf.push(Transition {
                state: s,
                action: Action::Discrete(a),
                reward: rng.uniform(-1.0, 1.0) as f32,
                next_state: state(&mut rng, c.state_dim),
                done: i % 7 == 0,
                mask: Some(mask.clone()),
                next_mask: Some(mask),
            })
            .expect("valid");
        }
        buf
    }

    fn td3_buffer(agent: &Td3, n_transitions: usize) -> ReplayBuffer {
        let c = agent.config();
        let k = c.head.softmax_len();
        let mut buf = agent.replay_buffer().expect("valid");
        let mut rng = Rng::seed_from_u64(4321);
        for i in 0..n_transitions {
            let s = state(&mut rng, c.state_dim);
            let mask =
                (k > 0).then(|| (0..k).map(|j| j != i % k || i % 2 == 0).collect::<Vec<_>>());
            let a = agent
                .act(&s, mask.as_deref(), true, &mut rng)
                .expect("acts");
            buf.push(Transition {
                state: s,
                action: Action::Continuous(a),
                reward: rng.uniform(-1.0, 1.0) as f32,
                next_state: state(&mut rng, c.state_dim),
                done: i % 5 == 0,
                mask: mask.clone(),
                next_mask: mask,
            })
            .expect("valid");
        }
        buf
    }

    /// Builds both agents from `seed`, trains each `updates` times on fixed
    /// data, and returns their digests.
    fn train_digests(seed: u64, hidden: &[usize], batch: usize, updates: usize) -> (u64, u64) {
        let mut sc = SacdConfig::new(6, 4);
        sc.hidden = hidden.to_vec();
        sc.hyper.buffer_capacity = 512;
        let mut sacd = Sacd::new(sc, seed).expect("valid");
        let buf = sacd_buffer(&sacd, 256);
        let mut rng = Rng::seed_from_u64(seed ^ 0x5eed);
        for _ in 0..updates {
            sacd.update(&buf.sample(batch, &mut rng).expect("sample"))
                .expect("update");
        }
        let mut tc = Td3Config::new(6, 5, Head::SoftmaxThenSigmoid { softmax: 3 });
        tc.hidden = hidden.to_vec();
        tc.hyper.buffer_capacity = 512;
        let mut td3 = Td3::new(tc, seed).expect("valid");
        let buf = td3_buffer(&td3, 256);
        for _ in 0..updates {
            td3.update(&buf.sample(batch, &mut rng).expect("sample"))
                .expect("update");
        }
        (sacd.weights_digest(), td3.weights_digest())
    }

    #[test]
    fn same_seed_same_weights_different_seed_different_weights() {
        let a = train_digests(7, &[16, 16], 16, 8);
        let b = train_digests(7, &[16, 16], 16, 8);
        let c = train_digests(8, &[16, 16], 16, 8);
        assert_eq!(a, b, "same seed, same data: digests differ");
        assert_ne!(a.0, c.0, "SACD: different seeds gave equal weights");
        assert_ne!(a.1, c.1, "TD3: different seeds gave equal weights");
        // Training changed the weights (the digest is not just the seed's).
        let untrained = train_digests(7, &[16, 16], 16, 0);
        assert_ne!(a.0, untrained.0);
        assert_ne!(a.1, untrained.1);
    }

    /// Sizes big enough that gemm splits the hidden layers' matmuls among
    /// threads (its threshold is m·n·k ≥ 48·48·256; here 48·128·128).
    const PROBE_HIDDEN: [usize; 2] = [128, 128];
    const PROBE_BATCH: usize = 48;
    const PROBE_UPDATES: usize = 3;

    /// Run by `digests_do_not_depend_on_the_thread_count` in a child process.
    #[test]
    #[ignore = "helper: run by digests_do_not_depend_on_the_thread_count"]
    fn digest_probe() {
        let (s, t) = train_digests(11, &PROBE_HIDDEN, PROBE_BATCH, PROBE_UPDATES);
        println!("PROBE-DIGESTS {s:#018x} {t:#018x}");
    }

    #[test]
    fn digests_do_not_depend_on_the_thread_count() {
        let here = train_digests(11, &PROBE_HIDDEN, PROBE_BATCH, PROBE_UPDATES);
        let want = format!("PROBE-DIGESTS {:#018x} {:#018x}", here.0, here.1);
        let exe = std::env::current_exe().expect("test binary path");
        for threads in ["1", "3"] {
            let out = std::process::Command::new(&exe)
                .args(["tests::digest_probe", "--exact", "--ignored", "--nocapture"])
                .env("RAYON_NUM_THREADS", threads)
                .output()
                .expect("run the probe");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let line = stdout
                .lines()
                .find(|l| l.starts_with("PROBE-DIGESTS"))
                .unwrap_or_else(|| panic!("probe printed no digests: {stdout}"));
            assert_eq!(
                line, want,
                "RAYON_NUM_THREADS={threads} changed the weights"
            );
        }
    }

    fn median(mut v: Vec<Duration>) -> Duration {
        v.sort();
        v[v.len() / 2]
    }

    /// Times 100 updates of each agent at Table 2's sizes (hidden 256,
    /// batch 256), state 40, 4 discrete actions (SACD) and 8 continuous
    /// outputs (TD3: 4 shares then 4 batch sizes). Run with
    /// `cargo test --release -p sluice-rl -- --ignored --nocapture timing`.
    #[test]
    #[ignore = "timing; run in release with --ignored --nocapture"]
    fn timing_updates_at_table_2_sizes() {
        let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "unset".into());
        let mut sacd = Sacd::new(SacdConfig::new(40, 4), 1).expect("valid");
        let buf = sacd_buffer(&sacd, 2048);
        let mut rng = Rng::seed_from_u64(1);
        let (mut sample_t, mut update_t) = (Vec::new(), Vec::new());
        for i in 0..105 {
            let t0 = Instant::now();
            let batch = buf.sample(256, &mut rng).expect("sample");
            let t1 = Instant::now();
            sacd.update(&batch).expect("update");
            if i >= 5 {
                sample_t.push(t1 - t0);
                update_t.push(t1.elapsed());
            }
        }
        println!(
            "SACD state 40, 4 actions, hidden 256x2, batch 256 (RAYON_NUM_THREADS={threads}): \
             update median {:?} (min {:?}, max {:?}), sample median {:?}",
            median(update_t.clone()),
            update_t.iter().min().expect("100"),
            update_t.iter().max().expect("100"),
            median(sample_t)
        );

        let mut td3 = Td3::new(
            Td3Config::new(40, 8, Head::SoftmaxThenSigmoid { softmax: 4 }),
            1,
        )
        .expect("valid");
        let buf = td3_buffer(&td3, 2048);
        let (mut sample_t, mut update_t, mut actor_t) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..105 {
            let t0 = Instant::now();
            let batch = buf.sample(256, &mut rng).expect("sample");
            let t1 = Instant::now();
            let l = td3.update(&batch).expect("update");
            if i >= 5 {
                sample_t.push(t1 - t0);
                if l.actor.is_some() {
                    actor_t.push(t1.elapsed());
                } else {
                    update_t.push(t1.elapsed());
                }
            }
        }
        let all: Vec<Duration> = update_t.iter().chain(&actor_t).copied().collect();
        println!(
            "TD3 state 40, 8 outputs (softmax 4), hidden 256x2, batch 256 (RAYON_NUM_THREADS={threads}): \
             update median {:?} (critic-only {:?}, with actor step {:?}), sample median {:?}",
            median(all),
            median(update_t),
            median(actor_t),
            median(sample_t)
        );

        let s = one_hot(3, 40);
        let mut act_t = Vec::new();
        for _ in 0..200 {
            let t0 = Instant::now();
            let _ = sacd.act(&s, None, true, &mut rng).expect("acts");
            let _ = td3.act(&s, None, true, &mut rng).expect("acts");
            act_t.push(t0.elapsed());
        }
        println!(
            "act (SACD + TD3, one state each): median {:?}",
            median(act_t)
        );
    }
}
