//! The flow-matching sampler of `get_action_with_features`: N Euler steps from the request noise
//! (t = 0) towards the data (t = 1), x_{k+1} = x_k + dt·v(x_k, τ_k), dt = 1/N. Everything stays
//! on the model's device; nothing is read back to the host between steps.

use super::{ActionHead, RequestContext};
use crate::taps::Recorder;
use crate::Result;
use candle_core::Tensor;

/// The integer timestep bucket of step `k` of `n`: `int(k/n · buckets)` (Python float math).
pub(crate) fn timestep_bucket(k: usize, n: usize, buckets: usize) -> i64 {
    (k as f64 / n as f64 * buckets as f64) as i64
}

/// Runs every Euler step from `noise` `[1, H, A]` and returns the final actions `[1, H, A]`.
pub(crate) fn sample(
    head: &ActionHead,
    ctx: &RequestContext,
    state_features: &Tensor,
    noise: &Tensor,
    rec: &Recorder,
) -> Result<Tensor> {
    let mut x = noise.clone();
    for k in 0..head.num_steps() {
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
        x = head.euler_step(&x, &velocity)?;
    }
    Ok(x)
}
