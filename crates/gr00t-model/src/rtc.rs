//! Real-time chunking (RTC): inpainting the start of a new action chunk from the previous one,
//! as N1.7's `Gr00tN1d7ActionHead.get_action_with_features` does (`gr00t_n1d7.py:358-395`, the
//! plain branch without the fork's `rtc_guidance_weight`).
//!
//! What upstream does, exactly (spec §4.9 of `gr00t_n17_model.md`):
//! - `ah` is the caller's `action_horizon` (the previous chunk's horizon before padding), not the
//!   model's `action_horizon`; the previous chunk itself is the padded `[1, H, A]` tensor.
//! - The overwrite of x happens ONCE, before the first Euler step: after `x = randn(...)`,
//!   `x[:, :overlap] = prev[:, ah−overlap : ah]`. The Euler steps never touch it again.
//! - `vel_strength` (one value per horizon row, broadcast over the action dims) is 0 for rows
//!   `0..frozen`, `ramp[1..=n]` for rows `frozen..overlap` with n = overlap − frozen, 1 after,
//!   where `ramp = 1 − exp(−rate·linspace(0, 1, n + 2))` in f32, divided by
//!   `max(ramp[-1], 1e-8)`; the ramp's two endpoints (0 and 1) are dropped. The linspace is
//!   torch's own CPU arithmetic (`torch_linspace_01` below); the ramp matches upstream's bit for
//!   bit on every option set of `tests/fixtures/rtc`.
//! - Every Euler step is `x = x + dt·v·vel_strength` (evaluated `(dt·v)·vel_strength`), so the
//!   frozen rows keep the previous chunk's values exactly and rows of strength 1 get exactly the
//!   plain update `x + dt·v`; with overlap 0 the whole answer is the plain one, bit for bit.

use std::fmt;

/// Default `rtc_ramp_rate` (the [3P-LR] defaults and the issue).
pub const DEFAULT_RAMP_RATE: f64 = 6.0;

/// RTC options of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Rtc {
    /// The previous chunk, `[H, A]` row-major (H = the model's action horizon, A =
    /// `max_action_dim`), normalised and padded exactly as `ModelOutput::action_pred` is.
    pub previous_chunk: Vec<f32>,
    /// `action_horizon`: the previous chunk's horizon before padding (`ah`), 1..=H.
    pub action_horizon: usize,
    /// `rtc_overlap_steps`: rows of the new chunk started from `previous_chunk[ah−overlap..ah]`.
    pub overlap_steps: usize,
    /// `rtc_frozen_steps`: leading overlap rows whose velocity is zeroed (the inference latency).
    pub frozen_steps: usize,
    /// `rtc_ramp_rate`: steepness of the velocity ramp over the unfrozen overlap rows, ≥ 0.
    pub ramp_rate: f64,
}

/// The request field an [`RtcError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtcField {
    /// `action_horizon`.
    ActionHorizon,
    /// `rtc_overlap_steps`.
    OverlapSteps,
    /// `rtc_frozen_steps`.
    FrozenSteps,
    /// `rtc_ramp_rate`.
    RampRate,
    /// `previous_chunk`.
    PreviousChunk,
}

impl RtcField {
    /// The field's name as upstream's `options` (and our request bodies) spell it.
    pub fn name(self) -> &'static str {
        match self {
            RtcField::ActionHorizon => "action_horizon",
            RtcField::OverlapSteps => "rtc_overlap_steps",
            RtcField::FrozenSteps => "rtc_frozen_steps",
            RtcField::RampRate => "rtc_ramp_rate",
            RtcField::PreviousChunk => "previous_chunk",
        }
    }
}

/// Invalid RTC options: which field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtcError {
    /// The offending field.
    pub field: RtcField,
    /// What is wrong, for the client.
    pub message: String,
}

impl RtcError {
    fn new(field: RtcField, message: String) -> RtcError {
        RtcError { field, message }
    }
}

impl fmt::Display for RtcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field.name(), self.message)
    }
}

impl std::error::Error for RtcError {}

impl Rtc {
    /// Options with the default ramp rate ([`DEFAULT_RAMP_RATE`]).
    pub fn new(
        previous_chunk: Vec<f32>,
        action_horizon: usize,
        overlap_steps: usize,
        frozen_steps: usize,
    ) -> Rtc {
        Rtc {
            previous_chunk,
            action_horizon,
            overlap_steps,
            frozen_steps,
            ramp_rate: DEFAULT_RAMP_RATE,
        }
    }

    /// Checks the options against a model of horizon `horizon` and `action_dim` action values
    /// per row; the error names the first offending field.
    pub fn validate(&self, horizon: usize, action_dim: usize) -> Result<(), RtcError> {
        use RtcField::*;
        if self.previous_chunk.len() != horizon * action_dim {
            return Err(RtcError::new(
                PreviousChunk,
                format!(
                    "has {} values, expected [{horizon}, {action_dim}] = {} (normalised and \
                     padded like action_pred)",
                    self.previous_chunk.len(),
                    horizon * action_dim
                ),
            ));
        }
        if let Some(i) = self.previous_chunk.iter().position(|v| !v.is_finite()) {
            return Err(RtcError::new(
                PreviousChunk,
                format!(
                    "value [{}, {}] is not finite",
                    i / action_dim.max(1),
                    i % action_dim.max(1)
                ),
            ));
        }
        if self.action_horizon == 0 || self.action_horizon > horizon {
            return Err(RtcError::new(
                ActionHorizon,
                format!(
                    "{} is not in 1..={horizon} (the model's action horizon)",
                    self.action_horizon
                ),
            ));
        }
        if self.overlap_steps > self.action_horizon {
            return Err(RtcError::new(
                OverlapSteps,
                format!(
                    "{} exceeds action_horizon {}",
                    self.overlap_steps, self.action_horizon
                ),
            ));
        }
        if self.frozen_steps > self.overlap_steps {
            return Err(RtcError::new(
                FrozenSteps,
                format!(
                    "{} exceeds rtc_overlap_steps {}",
                    self.frozen_steps, self.overlap_steps
                ),
            ));
        }
        if !self.ramp_rate.is_finite() || self.ramp_rate < 0.0 {
            return Err(RtcError::new(
                RampRate,
                format!("{} is not a finite number ≥ 0", self.ramp_rate),
            ));
        }
        Ok(())
    }

    /// The rows `ah−overlap..ah` of the previous chunk that replace rows `0..overlap` of the
    /// initial noise, as `(first row, row count)`; assumes [`Rtc::validate`] passed.
    pub(crate) fn overlap_rows(&self) -> (usize, usize) {
        (
            self.action_horizon.saturating_sub(self.overlap_steps),
            self.overlap_steps,
        )
    }

    /// `vel_strength` per horizon row (`horizon` values), meaningful once [`Rtc::validate`]
    /// passed; out-of-range steps are clamped rather than panicking.
    pub fn velocity_strength(&self, horizon: usize) -> Vec<f32> {
        let overlap = self.overlap_steps.min(horizon);
        let frozen = self.frozen_steps.min(overlap);
        let ramp = ramp(overlap - frozen, self.ramp_rate);
        let mut vs = vec![1.0f32; horizon];
        vs[..frozen].fill(0.0);
        vs[frozen..overlap].copy_from_slice(&ramp);
        vs
    }
}

/// The `n` interior values of upstream's normalised ramp, in torch's f32 arithmetic.
fn ramp(n: usize, rate: f64) -> Vec<f32> {
    let t = torch_linspace_01(n + 2);
    // `-rate * t` with a Python float: torch casts the scalar to the tensor's f32.
    let neg_rate = -(rate as f32);
    let full: Vec<f32> = t.iter().map(|&t| 1.0 - (neg_rate * t).exp()).collect();
    let last = full[full.len() - 1].max(1e-8f32);
    full[1..=n].iter().map(|&r| r / last).collect()
}

/// `torch.linspace(0, 1, steps)` in f32 as ATen's CPU kernel computes it: the first half counts
/// up, `step·i`, the second half down from 1, `1 − step·(steps−1−i)` with the multiply-add fused
/// (the x86 build contracts it), `step = 1/(steps−1)` in f32. Checked bit for bit against
/// torch 2.9.0 (AVX-512) for every `steps` in 2..300.
fn torch_linspace_01(steps: usize) -> Vec<f32> {
    let step = 1.0f32 / (steps - 1) as f32;
    let halfway = steps / 2;
    (0..steps)
        .map(|i| {
            if i < halfway {
                step * i as f32
            } else {
                (-step).mul_add((steps - 1 - i) as f32, 1.0)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtc(overlap: usize, frozen: usize, rate: f64) -> Rtc {
        Rtc {
            previous_chunk: vec![0.0; 40 * 4],
            action_horizon: 40,
            overlap_steps: overlap,
            frozen_steps: frozen,
            ramp_rate: rate,
        }
    }

    #[test]
    fn linspace_hits_both_ends_and_is_monotone() {
        for steps in 2..50 {
            let t = torch_linspace_01(steps);
            assert_eq!((t[0], t[steps - 1]), (0.0, 1.0), "{steps}");
            assert!(t.windows(2).all(|w| w[0] < w[1]), "{steps}");
        }
    }

    #[test]
    fn strength_is_zero_then_ramp_then_one() {
        let vs = rtc(10, 3, 6.0).velocity_strength(40);
        assert!(vs[..3].iter().all(|&v| v == 0.0));
        assert!(vs[3..10].windows(2).all(|w| w[0] < w[1]));
        assert!(vs[3] > 0.0 && vs[9] < 1.0);
        assert!(vs[10..].iter().all(|&v| v == 1.0));
        // overlap == frozen: no ramp rows; rate 0: the ramp is 0 everywhere (0 / 1e-8).
        let vs = rtc(8, 8, 6.0).velocity_strength(40);
        assert_eq!(vs.iter().filter(|&&v| v == 0.0).count(), 8);
        let vs = rtc(5, 1, 0.0).velocity_strength(40);
        assert!(vs[..5].iter().all(|&v| v == 0.0) && vs[5] == 1.0);
        assert!(rtc(0, 0, 6.0)
            .velocity_strength(40)
            .iter()
            .all(|&v| v == 1.0));
        // Unvalidated options never panic.
        assert_eq!(rtc(50, 60, 6.0).velocity_strength(40), vec![0.0; 40]);
    }

    #[test]
    fn refusals_name_the_field() {
        let field = |r: Rtc| r.validate(40, 4).unwrap_err().field;
        assert_eq!(field(rtc(41, 0, 6.0)), RtcField::OverlapSteps);
        assert_eq!(field(rtc(10, 11, 6.0)), RtcField::FrozenSteps);
        assert_eq!(field(rtc(10, 3, -1.0)), RtcField::RampRate);
        assert_eq!(field(rtc(10, 3, f64::NAN)), RtcField::RampRate);
        assert_eq!(field(rtc(10, 3, f64::INFINITY)), RtcField::RampRate);
        let mut r = rtc(10, 3, 6.0);
        r.action_horizon = 0;
        assert_eq!(field(r.clone()), RtcField::ActionHorizon);
        r.action_horizon = 41;
        assert_eq!(field(r), RtcField::ActionHorizon);
        let mut r = rtc(10, 3, 6.0);
        r.action_horizon = 8;
        assert_eq!(field(r), RtcField::OverlapSteps);
        let mut r = rtc(10, 3, 6.0);
        r.previous_chunk.pop();
        assert_eq!(field(r), RtcField::PreviousChunk);
        let mut r = rtc(10, 3, 6.0);
        r.previous_chunk[6] = f32::NAN;
        let e = r.validate(40, 4).unwrap_err();
        assert_eq!(e.field, RtcField::PreviousChunk);
        assert_eq!(e.to_string(), "previous_chunk: value [1, 2] is not finite");
        assert!(rtc(10, 3, 6.0).validate(40, 4).is_ok());
        assert!(rtc(0, 0, 0.0).validate(40, 4).is_ok());
        assert!(rtc(40, 40, 6.0).validate(40, 4).is_ok());
    }
}
