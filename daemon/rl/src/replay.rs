//! A fixed-capacity ring of transitions with uniform mini-batch sampling
//! (experience replay, as both InSS stages use; Table 2: 100 000 transitions,
//! mini-batches of 256).
//!
//! Each transition is (state, action, reward, next state, done), plus two
//! optional action masks: `mask` for the state and `next_mask` for the next
//! state. For SAC-Discrete a mask marks the allowed actions (InSS's "safe
//! action space"); for TD3 it marks the shares of the softmax part that may be
//! non-zero. The next-state mask restricts the policy in the critic target;
//! the state's own mask restricts it in the actor and temperature losses.
//!
//! Storage is flat (one `Vec<f32>` per field) and filled as transitions
//! arrive; once full, the oldest transition is overwritten. Sampling is
//! uniform with replacement, driven by the caller's seeded [`Rng`], so a
//! batch is a pure function of the buffer's contents and the generator.

use candle_core::{DType, Device, Tensor};

use crate::error::{BuildError, PushError, SampleError, UpdateError};
use crate::rng::{Draws, Rng};

/// The kind and width of the actions a buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionSpec {
    /// One of `n` actions, by index (SAC-Discrete).
    Discrete {
        /// The number of actions.
        n: usize,
    },
    /// A vector of `dim` floats (TD3).
    Continuous {
        /// The action's width.
        dim: usize,
    },
}

/// What a buffer holds: state width, actions, and the mask width if
/// transitions carry masks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplaySpec {
    /// The state's width.
    pub state_dim: usize,
    /// The actions.
    pub action: ActionSpec,
    /// The width of `mask` and `next_mask`, or `None` if the buffer holds no
    /// masks.
    pub mask_len: Option<usize>,
}

/// An action as stored in a transition.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// The index of a discrete action.
    Discrete(usize),
    /// A continuous action vector.
    Continuous(Vec<f32>),
}

/// One step of experience.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    /// The state the action was taken in.
    pub state: Vec<f32>,
    /// The action taken.
    pub action: Action,
    /// The reward received.
    pub reward: f32,
    /// The state that followed.
    pub next_state: Vec<f32>,
    /// Whether the episode ended here (no bootstrapping from `next_state`).
    pub done: bool,
    /// Allowed actions (or shares) in `state`; `None` allows all.
    pub mask: Option<Vec<bool>>,
    /// Allowed actions (or shares) in `next_state`; `None` allows all. If it
    /// allows nothing the transition must be `done`; it is then stored as
    /// allowing all, since its value is not used.
    pub next_mask: Option<Vec<bool>>,
}

/// A mini-batch stacked into `f32` tensors on the CPU, `B` rows each.
#[derive(Clone, Debug)]
pub struct Batch {
    /// `[B, state_dim]`.
    pub states: Tensor,
    /// `[B, n]` one-hot rows for discrete actions, `[B, dim]` for continuous.
    pub actions: Tensor,
    /// `[B, 1]`.
    pub rewards: Tensor,
    /// `[B, state_dim]`.
    pub next_states: Tensor,
    /// `[B, 1]`, 1.0 where the transition ended the episode.
    pub dones: Tensor,
    /// `[B, mask_len]`, 1.0 allowed and 0.0 masked; `None` if the buffer
    /// holds no masks.
    pub masks: Option<Tensor>,
    /// `[B, mask_len]`, as `masks` for the next states.
    pub next_masks: Option<Tensor>,
}

impl Batch {
    /// Checks every tensor's shape against an agent's widths and returns the
    /// batch size. Masks are required to be absent when `mask_len` is `None`;
    /// when it is `Some`, absent masks mean "all allowed".
    pub(crate) fn check(
        &self,
        state_dim: usize,
        action_width: usize,
        mask_len: Option<usize>,
    ) -> Result<usize, UpdateError> {
        let b = self.states.dims().first().copied().unwrap_or(0);
        let shape = |what: &'static str, t: &Tensor, expected: Vec<usize>| {
            if t.dims() == expected.as_slice() {
                Ok(())
            } else {
                Err(UpdateError::Shape {
                    what,
                    expected,
                    got: t.dims().to_vec(),
                })
            }
        };
        if b == 0 {
            return Err(UpdateError::Shape {
                what: "states",
                expected: vec![1, state_dim],
                got: self.states.dims().to_vec(),
            });
        }
        shape("states", &self.states, vec![b, state_dim])?;
        shape("actions", &self.actions, vec![b, action_width])?;
        shape("rewards", &self.rewards, vec![b, 1])?;
        shape("next_states", &self.next_states, vec![b, state_dim])?;
        shape("dones", &self.dones, vec![b, 1])?;
        for (what, m) in [("masks", &self.masks), ("next_masks", &self.next_masks)] {
            match (m, mask_len) {
                (Some(m), Some(len)) => shape(what, m, vec![b, len])?,
                (Some(_), None) => return Err(UpdateError::UnexpectedMasks { what }),
                (None, _) => {}
            }
        }
        let masks = [("masks", &self.masks), ("next_masks", &self.next_masks)];
        let present = masks
            .iter()
            .filter_map(|(w, m)| m.as_ref().map(|m| (*w, m)));
        for (what, t) in [
            ("states", &self.states),
            ("actions", &self.actions),
            ("rewards", &self.rewards),
            ("next_states", &self.next_states),
            ("dones", &self.dones),
        ]
        .into_iter()
        .chain(present)
        {
            if t.dtype() != DType::F32 {
                return Err(UpdateError::DType {
                    what,
                    got: format!("{:?}", t.dtype()),
                });
            }
        }
        Ok(b)
    }
}

/// A ring buffer of transitions.
#[derive(Debug)]
pub struct ReplayBuffer {
    spec: ReplaySpec,
    capacity: usize,
    len: usize,
    next: usize,
    states: Vec<f32>,
    next_states: Vec<f32>,
    /// Continuous actions, `action_width` per transition.
    actions: Vec<f32>,
    /// Discrete action indices.
    indices: Vec<u32>,
    rewards: Vec<f32>,
    dones: Vec<f32>,
    masks: Vec<f32>,
    next_masks: Vec<f32>,
}

impl ReplayBuffer {
    /// An empty buffer for `spec` holding at most `capacity` transitions.
    pub fn new(spec: ReplaySpec, capacity: usize) -> Result<Self, BuildError> {
        let zero = |what| Err(BuildError::ZeroDim { what });
        if capacity == 0 {
            return zero("buffer capacity");
        }
        if spec.state_dim == 0 {
            return zero("state_dim");
        }
        match spec.action {
            ActionSpec::Discrete { n: 0 } => return zero("number of actions"),
            ActionSpec::Discrete { n } if n > u32::MAX as usize => {
                return Err(BuildError::Hyper {
                    name: "number of actions",
                    value: n as f64,
                    expected: "at most 2^32 - 1",
                });
            }
            ActionSpec::Continuous { dim: 0 } => return zero("action dimension"),
            _ => {}
        }
        if spec.mask_len == Some(0) {
            return zero("mask_len");
        }
        Ok(Self {
            spec,
            capacity,
            len: 0,
            next: 0,
            states: Vec::new(),
            next_states: Vec::new(),
            actions: Vec::new(),
            indices: Vec::new(),
            rewards: Vec::new(),
            dones: Vec::new(),
            masks: Vec::new(),
            next_masks: Vec::new(),
        })
    }

    /// What the buffer holds.
    pub fn spec(&self) -> ReplaySpec {
        self.spec
    }

    /// The most transitions it keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many transitions it holds now.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Validates `t` and stores it, overwriting the oldest transition when
    /// the buffer is full. On error the buffer is unchanged.
    pub fn push(&mut self, t: Transition) -> Result<(), PushError> {
        let sd = self.spec.state_dim;
        check_state("state", &t.state, sd)?;
        check_state("next_state", &t.next_state, sd)?;
        if !t.reward.is_finite() {
            return Err(PushError::NonFinite {
                field: "reward",
                index: 0,
                value: t.reward,
            });
        }
        match (&t.action, self.spec.action) {
            (Action::Discrete(i), ActionSpec::Discrete { n }) => {
                if *i >= n {
                    return Err(PushError::ActionIndex { index: *i, n });
                }
            }
            (Action::Continuous(a), ActionSpec::Continuous { dim }) => {
                if a.len() != dim {
                    return Err(PushError::ActionLen {
                        expected: dim,
                        got: a.len(),
                    });
                }
                if let Some((index, &value)) = a.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                    return Err(PushError::NonFinite {
                        field: "action",
                        index,
                        value,
                    });
                }
            }
            (Action::Discrete(_), ActionSpec::Continuous { .. }) => {
                return Err(PushError::ActionKind {
                    expected: "continuous",
                    got: "discrete",
                });
            }
            (Action::Continuous(_), ActionSpec::Discrete { .. }) => {
                return Err(PushError::ActionKind {
                    expected: "discrete",
                    got: "continuous",
                });
            }
        }
        let mask = self.mask_row("mask", t.mask.as_deref())?;
        let mut next_mask = self.mask_row("next_mask", t.next_mask.as_deref())?;
        if mask.iter().all(|&m| m == 0.0) && !mask.is_empty() {
            return Err(PushError::StateAllMasked);
        }
        if next_mask.iter().all(|&m| m == 0.0) && !next_mask.is_empty() {
            if !t.done {
                return Err(PushError::NextAllMaskedNotDone);
            }
            next_mask.iter_mut().for_each(|m| *m = 1.0);
        }

        let action_row: Vec<f32> = match &t.action {
            Action::Continuous(a) => a.clone(),
            Action::Discrete(_) => Vec::new(),
        };
        let index = match t.action {
            Action::Discrete(i) => Some(i as u32),
            Action::Continuous(_) => None,
        };
        let done = if t.done { 1.0 } else { 0.0 };
        if self.len < self.capacity {
            self.states.extend_from_slice(&t.state);
            self.next_states.extend_from_slice(&t.next_state);
            self.actions.extend_from_slice(&action_row);
            self.indices.extend(index);
            self.rewards.push(t.reward);
            self.dones.push(done);
            self.masks.extend_from_slice(&mask);
            self.next_masks.extend_from_slice(&next_mask);
            self.len += 1;
        } else {
            let k = self.next;
            overwrite(&mut self.states, k, &t.state);
            overwrite(&mut self.next_states, k, &t.next_state);
            overwrite(&mut self.actions, k, &action_row);
            if let Some(i) = index {
                self.indices[k] = i;
            }
            self.rewards[k] = t.reward;
            self.dones[k] = done;
            overwrite(&mut self.masks, k, &mask);
            overwrite(&mut self.next_masks, k, &next_mask);
        }
        self.next = (self.next + 1) % self.capacity;
        Ok(())
    }

    /// The mask as a row of 1.0/0.0, all ones if absent; empty if the buffer
    /// holds no masks.
    fn mask_row(&self, field: &'static str, mask: Option<&[bool]>) -> Result<Vec<f32>, PushError> {
        match (mask, self.spec.mask_len) {
            (None, None) => Ok(Vec::new()),
            (Some(_), None) => Err(PushError::MaskUnexpected { field }),
            (None, Some(len)) => Ok(vec![1.0; len]),
            (Some(m), Some(len)) if m.len() != len => Err(PushError::MaskLen {
                field,
                expected: len,
                got: m.len(),
            }),
            (Some(m), Some(_)) => Ok(m.iter().map(|&b| if b { 1.0 } else { 0.0 }).collect()),
        }
    }

    /// Draws `batch_size` transitions uniformly with replacement and stacks
    /// them (see [`Batch`] for the shapes).
    pub fn sample(&self, batch_size: usize, rng: &mut Rng) -> Result<Batch, SampleError> {
        if self.len == 0 {
            return Err(SampleError::Empty);
        }
        if batch_size == 0 {
            return Err(SampleError::ZeroBatch);
        }
        let picks: Vec<usize> = (0..batch_size).map(|_| rng.below(self.len)).collect();
        let sd = self.spec.state_dim;
        let dev = &Device::Cpu;
        let gather = |src: &[f32], width: usize| -> Result<Tensor, SampleError> {
            let mut out = Vec::with_capacity(batch_size * width);
            for &k in &picks {
                out.extend_from_slice(&src[k * width..(k + 1) * width]);
            }
            Tensor::from_vec(out, (batch_size, width), dev).map_err(SampleError::Candle)
        };
        let actions = match self.spec.action {
            ActionSpec::Continuous { dim } => gather(&self.actions, dim)?,
            ActionSpec::Discrete { n } => {
                let mut onehot = vec![0f32; batch_size * n];
                for (row, &k) in picks.iter().enumerate() {
                    onehot[row * n + self.indices[k] as usize] = 1.0;
                }
                Tensor::from_vec(onehot, (batch_size, n), dev).map_err(SampleError::Candle)?
            }
        };
        let (masks, next_masks) = match self.spec.mask_len {
            Some(m) => (
                Some(gather(&self.masks, m)?),
                Some(gather(&self.next_masks, m)?),
            ),
            None => (None, None),
        };
        Ok(Batch {
            states: gather(&self.states, sd)?,
            actions,
            rewards: gather(&self.rewards, 1)?,
            next_states: gather(&self.next_states, sd)?,
            dones: gather(&self.dones, 1)?,
            masks,
            next_masks,
        })
    }
}

fn check_state(field: &'static str, s: &[f32], expected: usize) -> Result<(), PushError> {
    if s.len() != expected {
        return Err(PushError::StateLen {
            field,
            expected,
            got: s.len(),
        });
    }
    if let Some((index, &value)) = s.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(PushError::NonFinite {
            field,
            index,
            value,
        });
    }
    Ok(())
}

/// Replaces row `k` of a flat array of rows as wide as `row`.
fn overwrite(dst: &mut [f32], k: usize, row: &[f32]) {
    let w = row.len();
    dst[k * w..(k + 1) * w].copy_from_slice(row);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SeedableRng;

    fn discrete_spec() -> ReplaySpec {
        ReplaySpec {
            state_dim: 2,
            action: ActionSpec::Discrete { n: 3 },
            mask_len: Some(3),
        }
    }

    fn t(i: usize) -> Transition {
        Transition {
            state: vec![i as f32, 0.0],
            action: Action::Discrete(i % 3),
            reward: i as f32,
            next_state: vec![i as f32 + 0.5, 1.0],
            done: i % 2 == 0,
            mask: None,
            next_mask: Some(vec![true, false, true]),
        }
    }

    #[test]
    fn ring_overwrites_oldest_and_batches_have_shapes() {
        let mut buf = ReplayBuffer::new(discrete_spec(), 3).expect("valid");
        for i in 0..5 {
            buf.push(t(i)).expect("valid transition");
        }
        assert_eq!(buf.len(), 3);
        let mut rng = Rng::seed_from_u64(1);
        let b = buf.sample(64, &mut rng).expect("non-empty");
        assert_eq!(b.states.dims(), &[64, 2]);
        assert_eq!(b.actions.dims(), &[64, 3]);
        assert_eq!(b.rewards.dims(), &[64, 1]);
        assert_eq!(b.dones.dims(), &[64, 1]);
        let masks = b.masks.as_ref().expect("masks").to_vec2::<f32>().unwrap();
        assert!(masks.iter().all(|r| r == &[1.0, 1.0, 1.0]));
        let next = b
            .next_masks
            .as_ref()
            .expect("masks")
            .to_vec2::<f32>()
            .unwrap();
        assert!(next.iter().all(|r| r == &[1.0, 0.0, 1.0]));
        // Only transitions 2, 3, 4 remain; each row is consistent.
        let r = b.rewards.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let s = b.states.to_vec2::<f32>().unwrap();
        let a = b.actions.to_vec2::<f32>().unwrap();
        let d = b.dones.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let mut seen = [false; 5];
        for row in 0..64 {
            let i = r[row] as usize;
            assert!(
                (2..5).contains(&i),
                "reward {i} should have been overwritten"
            );
            seen[i] = true;
            assert_eq!(s[row][0], i as f32);
            assert_eq!(a[row][i % 3], 1.0);
            assert_eq!(a[row].iter().sum::<f32>(), 1.0);
            assert_eq!(d[row], if i % 2 == 0 { 1.0 } else { 0.0 });
        }
        assert!(seen[2] && seen[3] && seen[4]);
    }

    #[test]
    fn same_rng_same_batch() {
        let mut buf = ReplayBuffer::new(discrete_spec(), 10).expect("valid");
        for i in 0..10 {
            buf.push(t(i)).expect("valid");
        }
        let r1 = buf.sample(8, &mut Rng::seed_from_u64(4)).unwrap().rewards;
        let r2 = buf.sample(8, &mut Rng::seed_from_u64(4)).unwrap().rewards;
        assert_eq!(
            r1.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            r2.flatten_all().unwrap().to_vec1::<f32>().unwrap()
        );
    }

    #[test]
    fn bad_transitions_are_refused_with_the_value() {
        let mut buf = ReplayBuffer::new(discrete_spec(), 4).expect("valid");
        let mut bad = t(1);
        bad.state = vec![1.0];
        let e = buf.push(bad).unwrap_err();
        assert!(
            matches!(
                e,
                PushError::StateLen {
                    got: 1,
                    expected: 2,
                    ..
                }
            ),
            "{e}"
        );
        let mut bad = t(1);
        bad.action = Action::Discrete(3);
        let e = buf.push(bad).unwrap_err();
        assert!(e.to_string().contains("action index 3"), "{e}");
        let mut bad = t(1);
        bad.reward = f32::NAN;
        assert!(matches!(
            buf.push(bad),
            Err(PushError::NonFinite {
                field: "reward",
                ..
            })
        ));
        let mut bad = t(1);
        bad.action = Action::Continuous(vec![0.5]);
        assert!(matches!(buf.push(bad), Err(PushError::ActionKind { .. })));
        let mut bad = t(1);
        bad.next_mask = Some(vec![false; 3]);
        assert!(matches!(
            buf.push(bad),
            Err(PushError::NextAllMaskedNotDone)
        ));
        let mut ok = t(0);
        ok.next_mask = Some(vec![false; 3]); // done, so allowed and stored as all-ones
        buf.push(ok).expect("terminal with nothing allowed next");
        let mut bad = t(1);
        bad.mask = Some(vec![false; 3]);
        assert!(matches!(buf.push(bad), Err(PushError::StateAllMasked)));
        let mut bad = t(1);
        bad.mask = Some(vec![true; 2]);
        assert!(matches!(
            buf.push(bad),
            Err(PushError::MaskLen { got: 2, .. })
        ));
        assert_eq!(buf.len(), 1);
        let b = buf.sample(2, &mut Rng::seed_from_u64(0)).unwrap();
        let next = b.next_masks.unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(next[0], vec![1.0, 1.0, 1.0]);

        let empty = ReplayBuffer::new(discrete_spec(), 4).expect("valid");
        assert!(matches!(
            empty.sample(1, &mut Rng::seed_from_u64(0)),
            Err(SampleError::Empty)
        ));
        assert!(matches!(
            buf.sample(0, &mut Rng::seed_from_u64(0)),
            Err(SampleError::ZeroBatch)
        ));
        assert!(ReplayBuffer::new(discrete_spec(), 0).is_err());
    }

    #[test]
    fn continuous_buffer_without_masks() {
        let spec = ReplaySpec {
            state_dim: 1,
            action: ActionSpec::Continuous { dim: 2 },
            mask_len: None,
        };
        let mut buf = ReplayBuffer::new(spec, 2).expect("valid");
        let tr = Transition {
            state: vec![1.0],
            action: Action::Continuous(vec![0.25, 0.75]),
            reward: -1.0,
            next_state: vec![2.0],
            done: false,
            mask: None,
            next_mask: None,
        };
        buf.push(tr.clone()).expect("valid");
        let mut with_mask = tr.clone();
        with_mask.mask = Some(vec![true]);
        assert!(matches!(
            buf.push(with_mask),
            Err(PushError::MaskUnexpected { field: "mask" })
        ));
        let mut nan = tr;
        nan.action = Action::Continuous(vec![0.0, f32::INFINITY]);
        assert!(matches!(
            buf.push(nan),
            Err(PushError::NonFinite {
                field: "action",
                index: 1,
                ..
            })
        ));
        let b = buf.sample(3, &mut Rng::seed_from_u64(2)).unwrap();
        assert_eq!(
            b.actions.to_vec2::<f32>().unwrap(),
            vec![vec![0.25, 0.75]; 3]
        );
        assert!(b.masks.is_none() && b.next_masks.is_none());
    }
}
