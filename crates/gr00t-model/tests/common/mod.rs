//! Shared helpers of the gr00t-model integration tests.

use gr00t_fixtures::Taps;
use gr00t_model::ModelInputs;

/// Model inputs straight from a case's processor taps (only case0 has `proc.pixel_values`).
pub fn model_inputs(taps: &Taps) -> ModelInputs {
    ModelInputs {
        pixel_values: taps.f32s("proc.pixel_values"),
        patch_dim: taps.dims("proc.pixel_values")[1],
        image_grid_thw: taps
            .i64s("proc.image_grid_thw")
            .chunks(3)
            .map(|g| [g[0] as usize, g[1] as usize, g[2] as usize])
            .collect(),
        input_ids: taps
            .i64s("proc.input_ids")
            .iter()
            .map(|&i| i as u32)
            .collect(),
        state: taps.f32s("proc.state"),
        embodiment_id: taps.i64s("proc.embodiment_id")[0] as usize,
        noise: taps.f32s("input.noise"),
        rtc: None,
    }
}
