//! Checkpoints: an agent's weights and what is needed to rebuild it.
//!
//! # Format `sluice-rl/1`
//!
//! A checkpoint is a directory holding two files:
//!
//! * `weights.safetensors`: every parameter of the agent as an `f32` tensor,
//!   written by candle-nn's `VarMap::save` (the safetensors format). Each
//!   network's layers are named `<net>.l<i>.weight` (shape `[out, in]`) and
//!   `<net>.l<i>.bias` (shape `[out]`), layer 0 taking the input. The nets:
//!   * SAC-Discrete: `actor` (state → one logit per action), `critic1` and
//!     `critic2` (state → one Q per action), `critic1_target`,
//!     `critic2_target`, and `log_alpha` (shape `[1]`, the log temperature).
//!   * TD3: `actor` (state → pre-activation action), `actor_target`,
//!     `critic1` and `critic2` (state ‖ action → Q), `critic1_target`,
//!     `critic2_target`.
//! * `agent.json`, the sidecar, a JSON object:
//!
//! | field | meaning |
//! |---|---|
//! | `format` | `"sluice-rl/1"`; any other value is refused |
//! | `kind` | `"sacd"` or `"td3"` |
//! | `state_dim` | the state's width |
//! | `action_dim` | SAC-Discrete: the number of actions; TD3: the action's width |
//! | `hidden` | hidden layer widths, e.g. `[256, 256]` |
//! | `head` | TD3's output head, `{"kind": "sigmoid"}` or `{"kind": "softmax_then_sigmoid", "softmax": k}`; `null` for SAC-Discrete |
//! | `hyperparameters` | the agent's hyperparameter struct (`SacdHyper` or `Td3Hyper`) field by field |
//! | `seed` | the seed the agent was built with |
//! | `updates_done` | update steps taken (TD3: critic updates, which drive the policy delay) |
//! | `update_rng` | TD3: the state of the generator drawing target-policy noise, four `"0x…"` hex words; `null` for SAC-Discrete, whose updates draw nothing |
//! | `weights` | the weights file's name, `"weights.safetensors"` |
//! | `weights_digest` | `"0x…"`, the FNV-1a digest of the weights (as `weights_digest()` computes it) |
//!
//! Saving writes each file under a temporary name and renames it, weights
//! first, so a sidecar never describes half-written weights; an interrupted
//! save over an older checkpoint shows as a digest mismatch on load.
//!
//! Loading reads the sidecar, checks `format`, `kind` and the dimensions the
//! caller expects (and TD3's head), rebuilds the agent from the sidecar,
//! requires the weights file to hold exactly the agent's tensors with their
//! shapes, and checks the digest. Every mismatch is an error naming both
//! values.
//!
//! Adam's moments and step count are not saved: an agent resumed from a
//! checkpoint restarts them at zero, so its next updates differ from those
//! the saved agent would have made. Acting from a loaded agent is bitwise
//! identical to acting from the saved one.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use serde::{Deserialize, Serialize};

use crate::error::{LoadError, SaveError};
use crate::head::Head;
use crate::net::digest_varmap;
use crate::rng::Rng;

/// The format string this build writes and reads.
pub const FORMAT: &str = "sluice-rl/1";
/// The sidecar's file name inside a checkpoint directory.
pub const SIDECAR_FILE: &str = "agent.json";
/// The weights' file name inside a checkpoint directory.
pub const WEIGHTS_FILE: &str = "weights.safetensors";

/// The sidecar, as described in the module docs.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Sidecar {
    pub format: String,
    pub kind: String,
    pub state_dim: usize,
    pub action_dim: usize,
    pub hidden: Vec<usize>,
    pub head: Option<Head>,
    pub hyperparameters: serde_json::Value,
    pub seed: u64,
    pub updates_done: u64,
    pub update_rng: Option<[String; 4]>,
    pub weights: String,
    pub weights_digest: String,
}

/// Writes `map` and `sidecar` into `dir` (created if missing).
pub(crate) fn save(dir: &Path, sidecar: &Sidecar, map: &VarMap) -> Result<(), SaveError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SaveError::Io { path, source }
    };
    fs::create_dir_all(dir).map_err(io(dir))?;
    let weights = dir.join(WEIGHTS_FILE);
    let weights_tmp = dir.join(format!("{WEIGHTS_FILE}.tmp"));
    map.save(&weights_tmp)
        .map_err(|source| SaveError::Weights {
            path: weights_tmp.clone(),
            source,
        })?;
    fs::rename(&weights_tmp, &weights).map_err(io(&weights))?;
    let json = serde_json::to_vec_pretty(sidecar).map_err(SaveError::Json)?;
    let side = dir.join(SIDECAR_FILE);
    let side_tmp = dir.join(format!("{SIDECAR_FILE}.tmp"));
    fs::write(&side_tmp, json).map_err(io(&side_tmp))?;
    fs::rename(&side_tmp, &side).map_err(io(&side))?;
    Ok(())
}

/// Reads `dir`'s sidecar and checks its format, kind and dimensions.
pub(crate) fn read_sidecar(
    dir: &Path,
    kind: &'static str,
    state_dim: usize,
    action_dim: usize,
) -> Result<Sidecar, LoadError> {
    let path = dir.join(SIDECAR_FILE);
    let bytes = fs::read(&path).map_err(|source| LoadError::Io {
        path: path.clone(),
        source,
    })?;
    // Check the format first, so a future format is named as such rather
    // than reported as malformed.
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|source| LoadError::Json {
            path: path.clone(),
            source,
        })?;
    let found = value.get("format").and_then(|f| f.as_str()).unwrap_or("");
    if found != FORMAT {
        return Err(LoadError::Format {
            path,
            found: found.to_string(),
            expected: FORMAT,
        });
    }
    let sidecar: Sidecar = serde_json::from_value(value).map_err(|source| LoadError::Json {
        path: path.clone(),
        source,
    })?;
    if sidecar.kind != kind {
        return Err(LoadError::Kind {
            path,
            found: sidecar.kind,
            expected: kind,
        });
    }
    for (what, found, expected) in [
        ("state_dim", sidecar.state_dim, state_dim),
        ("action_dim", sidecar.action_dim, action_dim),
    ] {
        if found != expected {
            return Err(LoadError::Dim {
                path,
                what,
                found,
                expected,
            });
        }
    }
    Ok(sidecar)
}

/// Parses a field of the sidecar into `T`.
pub(crate) fn parse_field<T: for<'de> Deserialize<'de>>(
    dir: &Path,
    value: &serde_json::Value,
) -> Result<T, LoadError> {
    serde_json::from_value(value.clone()).map_err(|source| LoadError::Json {
        path: dir.join(SIDECAR_FILE),
        source,
    })
}

/// Sets every parameter in `map` from the checkpoint's weights file, after
/// checking that the file holds exactly those tensors with those shapes, and
/// checks the digest against the sidecar's.
pub(crate) fn restore_weights(
    dir: &Path,
    sidecar: &Sidecar,
    map: &VarMap,
) -> Result<(), LoadError> {
    let side_path = dir.join(SIDECAR_FILE);
    let name = &sidecar.weights;
    if name.is_empty() || name.contains(['/', '\\']) || name == "." || name == ".." {
        return Err(LoadError::Field {
            path: side_path,
            field: "weights",
            value: name.clone(),
            why: "must be a file name inside the checkpoint directory",
        });
    }
    let expected_digest = parse_hex(&sidecar.weights_digest).ok_or_else(|| LoadError::Field {
        path: side_path.clone(),
        field: "weights_digest",
        value: sidecar.weights_digest.clone(),
        why: "must be a 0x-prefixed hexadecimal u64",
    })?;
    let path = dir.join(name);
    if let Err(source) = fs::metadata(&path) {
        return Err(LoadError::Io { path, source });
    }
    let loaded: HashMap<String, Tensor> = candle_core::safetensors::load(&path, &Device::Cpu)
        .map_err(|source| LoadError::Weights {
            path: path.clone(),
            source,
        })?;
    {
        let data = map.data().lock().map_err(|_| {
            LoadError::Candle(candle_core::Error::Msg("VarMap lock poisoned".into()))
        })?;
        let mut names: Vec<&String> = data.keys().collect();
        names.sort();
        for n in &names {
            let var = &data[*n];
            let Some(t) = loaded.get(*n) else {
                return Err(LoadError::MissingTensor {
                    path,
                    name: (*n).clone(),
                });
            };
            if t.dims() != var.dims() || t.dtype() != DType::F32 {
                return Err(LoadError::TensorShape {
                    path,
                    name: (*n).clone(),
                    found: format!("{:?} {:?}", t.dims(), t.dtype()),
                    expected: format!("{:?} F32", var.dims()),
                });
            }
        }
        let mut extra: Vec<&String> = loaded.keys().filter(|k| !data.contains_key(*k)).collect();
        extra.sort();
        if let Some(n) = extra.first() {
            return Err(LoadError::ExtraTensor {
                path,
                name: (*n).clone(),
            });
        }
        for n in names {
            data[n].set(&loaded[n]).map_err(LoadError::Candle)?;
        }
    }
    let found = digest_varmap(map).map_err(LoadError::Candle)?;
    if found != expected_digest {
        return Err(LoadError::Digest {
            expected: expected_digest,
            found,
        });
    }
    Ok(())
}

/// A `u64` as the sidecar writes it: `0x` and 16 hex digits.
pub(crate) fn hex(v: u64) -> String {
    format!("{v:#018x}")
}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// The generator's state as four hex words.
pub(crate) fn rng_to_hex(rng: &Rng) -> [String; 4] {
    crate::rng::xoshiro_state(rng).map(hex)
}

/// Restores a generator saved by [`rng_to_hex`].
pub(crate) fn rng_from_hex(dir: &Path, words: &[String; 4]) -> Result<Rng, LoadError> {
    let bad = || LoadError::Field {
        path: dir.join(SIDECAR_FILE),
        field: "update_rng",
        value: format!("{words:?}"),
        why: "must be four 0x-prefixed hexadecimal u64 words, not all zero",
    };
    let mut s = [0u64; 4];
    for (w, word) in s.iter_mut().zip(words) {
        *w = parse_hex(word).ok_or_else(bad)?;
    }
    crate::rng::xoshiro_from_state(s).ok_or_else(bad)
}

/// The path a loader reports for a checkpoint's sidecar.
pub(crate) fn sidecar_path(dir: &Path) -> PathBuf {
    dir.join(SIDECAR_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SeedableRng;

    #[test]
    fn hex_round_trips() {
        for v in [0u64, 1, 0xdead_beef, u64::MAX] {
            assert_eq!(parse_hex(&hex(v)), Some(v));
        }
        assert_eq!(hex(255), "0x00000000000000ff");
        assert_eq!(parse_hex("ff"), None);
        assert_eq!(parse_hex("0xzz"), None);
        let rng = Rng::seed_from_u64(3);
        let back = rng_from_hex(Path::new("/x"), &rng_to_hex(&rng)).expect("round trip");
        assert_eq!(back, rng);
        let zero = [hex(0), hex(0), hex(0), hex(0)];
        assert!(rng_from_hex(Path::new("/x"), &zero).is_err());
    }
}

#[cfg(test)]
mod round_trip_tests {
    use super::*;
    use crate::replay::{Action, Transition};
    use crate::rng::SeedableRng;
    use crate::sacd::{Sacd, SacdConfig};
    use crate::td3::{Head, Td3, Td3Config};

    /// A scratch directory, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("sluice-rl-{}-{name}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn states() -> Vec<Vec<f32>> {
        (0..6)
            .map(|i| {
                (0..3)
                    .map(|j| ((i * 5 + j * 3) % 7) as f32 / 7.0 - 0.4)
                    .collect()
            })
            .collect()
    }

    fn trained_sacd() -> Sacd {
        let mut c = SacdConfig::new(3, 4);
        c.hidden = vec![16, 16];
        c.hyper.buffer_capacity = 100;
        let mut agent = Sacd::new(c, 21).expect("valid");
        let mut buf = agent.replay_buffer().expect("valid");
        let mut rng = Rng::seed_from_u64(1);
        for s in states() {
            let a = agent.act(&s, None, true, &mut rng).expect("acts");
            buf.push(Transition {
                state: s.clone(),
                action: Action::Discrete(a),
                reward: a as f32,
                next_state: s,
                done: false,
                mask: None,
                next_mask: Some(vec![true, true, false, true]),
            })
            .expect("valid");
        }
        for _ in 0..5 {
            agent
                .update(&buf.sample(8, &mut rng).expect("sample"))
                .expect("update");
        }
        agent
    }

    fn trained_td3(head: Head) -> Td3 {
        let mut c = Td3Config::new(3, 4, head);
        c.hidden = vec![16, 16];
        c.hyper.buffer_capacity = 100;
        let mut agent = Td3::new(c, 22).expect("valid");
        let mut buf = agent.replay_buffer().expect("valid");
        let mut rng = Rng::seed_from_u64(2);
        for s in states() {
            let a = agent.act(&s, None, true, &mut rng).expect("acts");
            buf.push(Transition {
                state: s.clone(),
                action: Action::Continuous(a),
                reward: 0.3,
                next_state: s,
                done: false,
                mask: None,
                next_mask: None,
            })
            .expect("valid");
        }
        for _ in 0..5 {
            agent
                .update(&buf.sample(8, &mut rng).expect("sample"))
                .expect("update");
        }
        agent
    }

    #[test]
    fn sacd_round_trip_is_bitwise() {
        let dir = Scratch::new("sacd-rt");
        let agent = trained_sacd();
        agent.save(&dir.0).expect("saves");
        let loaded = Sacd::load(&dir.0, 3, 4).expect("loads");
        assert_eq!(loaded.weights_digest(), agent.weights_digest());
        assert_eq!(loaded.updates_done(), 5);
        assert_eq!(loaded.config(), agent.config());
        assert_eq!(loaded.alpha().to_bits(), agent.alpha().to_bits());
        let mask = [true, false, true, true];
        for s in states() {
            for m in [None, Some(&mask[..])] {
                let (p, q) = (agent.probs(&s, m).unwrap(), loaded.probs(&s, m).unwrap());
                assert_eq!(bits(&p), bits(&q));
                let (mut r1, mut r2) = (Rng::seed_from_u64(4), Rng::seed_from_u64(4));
                for explore in [false, true] {
                    assert_eq!(
                        agent.act(&s, m, explore, &mut r1).unwrap(),
                        loaded.act(&s, m, explore, &mut r2).unwrap()
                    );
                }
            }
        }
        let side: serde_json::Value =
            serde_json::from_slice(&fs::read(dir.0.join(SIDECAR_FILE)).unwrap()).unwrap();
        assert_eq!(side["format"], "sluice-rl/1");
        assert_eq!(side["kind"], "sacd");
        assert_eq!(side["hyperparameters"]["kappa"], 0.01);
        assert!(side["head"].is_null() && side["update_rng"].is_null());
    }

    #[test]
    fn td3_round_trip_is_bitwise() {
        let dir = Scratch::new("td3-rt");
        let head = Head::SoftmaxThenSigmoid { softmax: 2 };
        let agent = trained_td3(head);
        agent.save(&dir.0).expect("saves");
        // Saving again over the same directory works too.
        agent.save(&dir.0).expect("saves again");
        let loaded = Td3::load(&dir.0, 3, 4, head).expect("loads");
        assert_eq!(loaded.weights_digest(), agent.weights_digest());
        assert_eq!(loaded.updates_done(), agent.updates_done());
        assert_eq!(loaded.rng, agent.rng);
        for s in states() {
            for m in [None, Some(&[false, true][..])] {
                let (mut r1, mut r2) = (Rng::seed_from_u64(4), Rng::seed_from_u64(4));
                for explore in [false, true] {
                    let a = agent.act(&s, m, explore, &mut r1).unwrap();
                    let b = loaded.act(&s, m, explore, &mut r2).unwrap();
                    assert_eq!(bits(&a), bits(&b));
                }
            }
        }
        let side: serde_json::Value =
            serde_json::from_slice(&fs::read(dir.0.join(SIDECAR_FILE)).unwrap()).unwrap();
        assert_eq!(side["head"]["kind"], "softmax_then_sigmoid");
        assert_eq!(side["head"]["softmax"], 2);
        assert_eq!(side["update_rng"].as_array().map(Vec::len), Some(4));
    }

    #[test]
    fn mismatched_expectations_name_both_values() {
        let dir = Scratch::new("dims");
        trained_sacd().save(&dir.0).expect("saves");
        let e = Sacd::load(&dir.0, 5, 4).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(
                e,
                LoadError::Dim {
                    what: "state_dim",
                    found: 3,
                    expected: 5,
                    ..
                }
            ),
            "{msg}"
        );
        assert!(
            msg.contains("state_dim = 3") && msg.contains("state_dim = 5"),
            "{msg}"
        );
        let e = Sacd::load(&dir.0, 3, 6).unwrap_err();
        assert!(
            e.to_string().contains("action_dim = 4") && e.to_string().contains("action_dim = 6"),
            "{e}"
        );
        let e = Td3::load(&dir.0, 3, 4, Head::Sigmoid).unwrap_err();
        assert!(matches!(e, LoadError::Kind { .. }), "{e}");
        assert!(
            e.to_string().contains("\"sacd\"") && e.to_string().contains("\"td3\""),
            "{e}"
        );

        let dir2 = Scratch::new("head");
        trained_td3(Head::Sigmoid).save(&dir2.0).expect("saves");
        let e = Td3::load(&dir2.0, 3, 4, Head::SoftmaxThenSigmoid { softmax: 2 }).unwrap_err();
        assert!(matches!(e, LoadError::Head { .. }), "{e}");
        assert!(
            e.to_string().contains("sigmoid") && e.to_string().contains("softmax(2)"),
            "{e}"
        );
        Td3::load(&dir2.0, 3, 4, Head::Sigmoid).expect("the right head loads");
    }

    #[test]
    fn missing_or_corrupt_files_fail_cleanly() {
        let dir = Scratch::new("corrupt");
        let agent = trained_sacd();
        agent.save(&dir.0).expect("saves");
        let side = dir.0.join(SIDECAR_FILE);
        let good = fs::read(&side).unwrap();

        fs::remove_file(&side).unwrap();
        let e = Sacd::load(&dir.0, 3, 4).unwrap_err();
        assert!(
            matches!(&e, LoadError::Io { path, .. } if path == &side),
            "{e}"
        );

        fs::write(&side, b"{\"format\": \"sluice-rl/1\", \"kind\": ").unwrap();
        let e = Sacd::load(&dir.0, 3, 4).unwrap_err();
        assert!(matches!(e, LoadError::Json { .. }), "{e}");

        let text = String::from_utf8(good.clone()).unwrap();
        fs::write(&side, text.replace("sluice-rl/1", "sluice-rl/9")).unwrap();
        let e = Sacd::load(&dir.0, 3, 4).unwrap_err();
        assert!(e.to_string().contains("sluice-rl/9"), "{e}");

        fs::write(&side, text.replace("\"hidden\"", "\"hidden_layers\"")).unwrap();
        assert!(matches!(
            Sacd::load(&dir.0, 3, 4),
            Err(LoadError::Json { .. })
        ));

        fs::write(&side, text.replace("weights.safetensors", "../elsewhere")).unwrap();
        assert!(matches!(
            Sacd::load(&dir.0, 3, 4),
            Err(LoadError::Field {
                field: "weights",
                ..
            })
        ));

        // Weights: truncated, from another agent, missing.
        fs::write(&side, &good).unwrap();
        let weights = dir.0.join(WEIGHTS_FILE);
        let w = fs::read(&weights).unwrap();
        fs::write(&weights, &w[..w.len() / 2]).unwrap();
        assert!(matches!(
            Sacd::load(&dir.0, 3, 4),
            Err(LoadError::Weights { .. })
        ));

        let other = Scratch::new("corrupt-other");
        let mut c = agent.config().clone();
        c.hyper.kappa = 0.5;
        Sacd::new(c, 99)
            .expect("valid")
            .save(&other.0)
            .expect("saves");
        fs::copy(other.0.join(WEIGHTS_FILE), &weights).unwrap();
        let e = Sacd::load(&dir.0, 3, 4).unwrap_err();
        assert!(matches!(e, LoadError::Digest { .. }), "{e}");

        let td3 = Scratch::new("corrupt-td3");
        trained_td3(Head::Sigmoid).save(&td3.0).expect("saves");
        fs::copy(td3.0.join(WEIGHTS_FILE), &weights).unwrap();
        let e = Sacd::load(&dir.0, 3, 4).unwrap_err();
        assert!(
            matches!(
                e,
                LoadError::MissingTensor { .. }
                    | LoadError::ExtraTensor { .. }
                    | LoadError::TensorShape { .. }
            ),
            "{e}"
        );

        fs::remove_file(&weights).unwrap();
        assert!(matches!(
            Sacd::load(&dir.0, 3, 4),
            Err(LoadError::Io { .. })
        ));
    }
}
