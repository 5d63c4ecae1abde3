//! Checks shared by the two agents.

use candle_core::{Device, Tensor};

use crate::error::{ActError, BuildError, UpdateError};

/// Checks that `value` is finite and satisfies `ok`.
pub(crate) fn check(
    value: f64,
    name: &'static str,
    expected: &'static str,
    ok: impl Fn(f64) -> bool,
) -> Result<(), BuildError> {
    if value.is_finite() && ok(value) {
        Ok(())
    } else {
        Err(BuildError::Hyper {
            name,
            value,
            expected,
        })
    }
}

/// Returns `t`'s value if finite, else the error naming the loss.
pub(crate) fn finite(which: &'static str, t: &Tensor) -> Result<f32, UpdateError> {
    let value = t.to_scalar::<f32>().map_err(UpdateError::Candle)?;
    if value.is_finite() {
        Ok(value)
    } else {
        Err(UpdateError::NonFiniteLoss { which, value })
    }
}

/// The allowed actions: `mask`, or all of them; errors if none.
pub(crate) fn allowed(mask: Option<&[bool]>, n: usize) -> Result<Vec<bool>, ActError> {
    let allowed = match mask {
        None => vec![true; n],
        Some(m) if m.len() != n => {
            return Err(ActError::MaskLen {
                expected: n,
                got: m.len(),
            });
        }
        Some(m) => m.to_vec(),
    };
    if !allowed.iter().any(|&a| a) {
        return Err(ActError::AllMasked { len: n });
    }
    Ok(allowed)
}

/// A `[1, state_dim]` tensor from one state, checked.
pub(crate) fn state_tensor(state: &[f32], state_dim: usize) -> Result<Tensor, ActError> {
    if state.len() != state_dim {
        return Err(ActError::StateLen {
            expected: state_dim,
            got: state.len(),
        });
    }
    if let Some((index, &value)) = state.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(ActError::NonFiniteState { index, value });
    }
    Tensor::from_slice(state, (1, state_dim), &Device::Cpu).map_err(ActError::Candle)
}
