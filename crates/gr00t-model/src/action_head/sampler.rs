//! The flow-matching sampler of `get_action_with_features`: N Euler steps from the request noise
//! (t = 0) towards the data (t = 1), x_{k+1} = x_k + dt·v(x_k, τ_k), dt = 1/N. Everything stays
//! on the model's device; nothing is read back to the host between steps.
//!
//! With RTC ([`crate::rtc`]) both denoise backends start from [`rtc_start`]'s x₀ and update with
//! [`rtc_euler_step`]; without it they run the plain update, bit for bit as before.

use super::{ActionHead, RequestContext};
use crate::rtc::Rtc;
use crate::taps::Recorder;
use crate::Result;
use candle_core::Tensor;

/// The RTC start of the flow: x₀ = `noise` with rows `0..overlap` replaced by rows
/// `ah−overlap..ah` of the previous chunk (once, before the first step, as upstream), and the
/// per-row velocity scale `[1, H, 1]` in x's dtype (upstream's `vel_strength` has the actions'
/// dtype). Without RTC: `noise` itself and no scale. `rtc` must have passed [`Rtc::validate`].
pub(crate) fn rtc_start(noise: &Tensor, rtc: Option<&Rtc>) -> Result<(Tensor, Option<Tensor>)> {
    let Some(rtc) = rtc else {
        return Ok((noise.clone(), None));
    };
    let (_, h, a) = noise.dims3()?;
    let (device, dtype) = (noise.device(), noise.dtype());
    let (first, overlap) = rtc.overlap_rows();
    let x0 = if overlap == 0 {
        noise.clone()
    } else {
        let prev = Tensor::from_slice(&rtc.previous_chunk, (1, h, a), device)?
            .to_dtype(dtype)?
            .narrow(1, first, overlap)?;
        if overlap >= h {
            prev.contiguous()?
        } else {
            Tensor::cat(&[&prev, &noise.narrow(1, overlap, h - overlap)?], 1)?
        }
    };
    let vs = Tensor::from_vec(rtc.velocity_strength(h), (1, h, 1), device)?.to_dtype(dtype)?;
    Ok((x0, Some(vs)))
}

/// One Euler update: the plain `x + dt·v` without a scale, `x + (dt·v)·vel_strength` (upstream's
/// order) with one.
pub(crate) fn rtc_euler_step(
    head: &ActionHead,
    x: &Tensor,
    velocity: &Tensor,
    vel_strength: Option<&Tensor>,
) -> Result<Tensor> {
    match vel_strength {
        None => head.euler_step(x, velocity),
        Some(vs) => Ok((x + (velocity * head.dt)?.broadcast_mul(vs)?)?),
    }
}

/// The integer timestep bucket of step `k` of `n`: `int(k/n · buckets)` (Python float math).
pub(crate) fn timestep_bucket(k: usize, n: usize, buckets: usize) -> i64 {
    (k as f64 / n as f64 * buckets as f64) as i64
}

/// Runs the first `steps` Euler steps (every one for a request) from `noise` `[1, H, A]` (with
/// RTC when given) and returns the actions `[1, H, A]` they reach.
pub(crate) fn sample(
    head: &ActionHead,
    ctx: &RequestContext,
    state_features: &Tensor,
    (noise, steps): (&Tensor, usize),
    rtc: Option<&Rtc>,
    rec: &Recorder,
) -> Result<Tensor> {
    let (mut x, vel_strength) = rtc_start(noise, rtc)?;
    for k in 0..steps.min(head.num_steps()) {
        let p = format!("head.step{k}");
        rec.record(format!("{p}.actions_in"), &x);
        if rec.is_enabled() {
            let tau = Tensor::new(&[head.timestep(k)?], x.device())?;
            rec.record(format!("{p}.timestep"), &tau);
            rec.record(format!("{p}.temb"), &head.temb(k)?);
        }
        let action_features = head.encode_actions(ctx, &x, k)?;
        rec.record(format!("{p}.action_features"), &action_features);
        let mut h = head.dit_input(state_features, &action_features)?;
        rec.record(format!("{p}.sa_embs"), &h);
        for b in 0..head.num_dit_blocks() {
            h = head.dit_block(ctx, b, &h, k)?;
            rec.record(format!("{p}.dit_block_out.{b}"), &h);
        }
        let dit_out = head.dit_output(&h, k)?;
        rec.record(format!("{p}.dit_out"), &dit_out);
        let decoder_out = head.decode(ctx, &dit_out)?;
        rec.record(format!("{p}.decoder_out"), &decoder_out);
        let velocity = head.velocity(&decoder_out)?;
        rec.record(format!("{p}.velocity"), &velocity);
        x = rtc_euler_step(head, &x, &velocity, vel_strength.as_ref())?;
    }
    Ok(x)
}
