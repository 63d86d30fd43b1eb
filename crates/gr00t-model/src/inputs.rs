//! What the network consumes for one request, as produced by an embodiment's processor.

use crate::rtc::Rtc;

/// The processed inputs of one request (batch of one).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInputs {
    /// Qwen patch rows, `[num_patches, patch_dim]` row-major (`pixel_values`).
    pub pixel_values: Vec<f32>,
    /// Width of one patch row (3·2·16·16 = 1536).
    pub patch_dim: usize,
    /// `image_grid_thw`: one `[t, h, w]` per image, in the order of the image tokens.
    pub image_grid_thw: Vec<[usize; 3]>,
    /// Prompt token ids with the image pads expanded.
    pub input_ids: Vec<u32>,
    /// Normalised state padded to `max_state_dim` (state_history_length rows).
    pub state: Vec<f32>,
    /// Projector index of the embodiment (DROID: 24).
    pub embodiment_id: usize,
    /// Initial flow-matching noise, `[action_horizon, max_action_dim]` row-major.
    pub noise: Vec<f32>,
    /// Real-time chunking from the previous chunk; `None` runs the plain sampler.
    pub rtc: Option<Rtc>,
}
