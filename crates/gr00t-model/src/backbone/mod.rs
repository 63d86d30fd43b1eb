//! The GR00T backbone: Qwen3-VL vision tower + the LLM truncated to `select_layer` layers.
//! Its features are the last kept layer's output (no final norm), plus the image and
//! attention masks the action head needs.

use crate::config::BackboneConfig;
use crate::error::{Error, Result};
use crate::int8::Stage;
use crate::linear::loading_stage;
use crate::taps::Recorder;
use crate::text::{rope_index, TextModel};
use crate::vision::VisionTower;
use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;

/// What the action head consumes.
#[derive(Debug, Clone)]
pub struct BackboneOutput {
    /// Output of the last kept LLM layer, `[1, S, hidden]`.
    pub features: Tensor,
    /// True exactly at the image-pad tokens.
    pub image_mask: Vec<bool>,
    /// True at every attended token (all of them: a batch of one is never padded).
    pub attention_mask: Vec<bool>,
}

/// Vision tower + truncated LLM.
#[derive(Debug, Clone)]
pub struct Backbone {
    vision: VisionTower,
    text: TextModel,
    cfg: BackboneConfig,
}

impl Backbone {
    /// Loads `backbone.model.model.{visual,language_model}` from the root VarBuilder, keeping
    /// LLM layers `0..select_layer`.
    pub fn load(vb: VarBuilder, cfg: &BackboneConfig, select_layer: usize) -> Result<Backbone> {
        let model = vb.pp("backbone.model.model");
        let vision = loading_stage(Stage::Vision, || {
            VisionTower::load(model.pp("visual"), &cfg.vision_config)
        })?;
        let text = loading_stage(Stage::Llm, || {
            TextModel::load(model.pp("language_model"), &cfg.text_config, select_layer)
        })?;
        Ok(Backbone {
            vision,
            text,
            cfg: cfg.clone(),
        })
    }

    /// The vision tower.
    pub fn vision(&self) -> &VisionTower {
        &self.vision
    }

    /// The truncated LLM.
    pub fn text(&self) -> &TextModel {
        &self.text
    }

    /// The backbone's architecture (token ids, vision config).
    pub fn config(&self) -> &BackboneConfig {
        &self.cfg
    }

    /// Runs the whole backbone on a tokenised prompt and its images' `pixel_values`
    /// `[N, patch_dim]` (`grid_thw` one `[t, h, w]` per image, in prompt order; a prompt
    /// without images takes an empty grid list and a `[0, patch_dim]` tensor).
    pub fn forward(
        &self,
        input_ids: &[u32],
        pixel_values: &Tensor,
        grid_thw: &[[usize; 3]],
        rec: &Recorder,
    ) -> Result<BackboneOutput> {
        let m = self.cfg.vision_config.spatial_merge_size;
        let patches = self.vision.check_grid(grid_thw)?;
        self.check_image_tokens(input_ids, patches / (m * m))?;
        if patches == 0 {
            // Text only: no vision tower, no DeepStack.
            if pixel_values.elem_count() != 0 {
                return Err(Error::Input(
                    "pixel_values given without image grids".into(),
                ));
            }
            let hidden = self.cfg.text_config.hidden_size;
            let none = Tensor::zeros((0, hidden), pixel_values.dtype(), pixel_values.device())?;
            return self.forward_with_image_embeds(input_ids, grid_thw, &none, &[], rec);
        }
        let vis = self.vision.forward(pixel_values, grid_thw, rec)?;
        self.forward_with_image_embeds(input_ids, grid_thw, &vis.image_embeds, &vis.deepstack, rec)
    }

    /// Runs the LLM part on a prompt whose image rows are `image_embeds` `[M, hidden]` (the
    /// vision tower's merged output) with the tower's `deepstack` features.
    pub fn forward_with_image_embeds(
        &self,
        input_ids: &[u32],
        grid_thw: &[[usize; 3]],
        image_embeds: &Tensor,
        deepstack: &[Tensor],
        rec: &Recorder,
    ) -> Result<BackboneOutput> {
        let image_mask = self.check_image_tokens(input_ids, image_embeds.dim(0)?)?;
        let (positions, rope_delta) = rope_index(
            input_ids,
            grid_thw,
            self.cfg.vision_config.spatial_merge_size,
            self.cfg.image_token_id,
            self.cfg.vision_start_token_id,
        )?;
        let embeds = self.text.embed(input_ids)?;
        let inputs_embeds = self
            .text
            .scatter_image_embeds(&embeds, &image_mask, image_embeds)?;
        let s = input_ids.len();
        let attention_mask = vec![true; s];
        if rec.is_enabled() {
            let dev = Device::Cpu;
            rec.record("llm.inputs_embeds", &inputs_embeds);
            rec.record(
                "llm.position_ids",
                &Tensor::from_vec(positions.concat(), (3, 1, s), &dev)?,
            );
            rec.record("llm.visual_pos_mask", &mask_tensor(&image_mask)?);
            rec.record(
                "backbone.rope_deltas",
                &Tensor::from_vec(vec![rope_delta], (1, 1), &dev)?,
            );
            rec.record("backbone.image_mask", &mask_tensor(&image_mask)?);
            rec.record("backbone.attention_mask", &mask_tensor(&attention_mask)?);
        }
        let features =
            self.text
                .forward(&inputs_embeds, &positions, &image_mask, deepstack, rec)?;
        rec.record("backbone.features", &features);
        Ok(BackboneOutput {
            features,
            image_mask,
            attention_mask,
        })
    }

    /// The image-token mask, after checking that it has exactly `rows` entries set.
    fn check_image_tokens(&self, input_ids: &[u32], rows: usize) -> Result<Vec<bool>> {
        let mask: Vec<bool> = input_ids
            .iter()
            .map(|&id| id == self.cfg.image_token_id)
            .collect();
        let count = mask.iter().filter(|&&b| b).count();
        if count != rows {
            return Err(Error::Input(format!(
                "the prompt has {count} image tokens but the images give {rows} merged rows"
            )));
        }
        Ok(mask)
    }
}

/// A boolean mask as a `[1, S]` u8 tap.
fn mask_tensor(mask: &[bool]) -> Result<Tensor> {
    let v: Vec<u8> = mask.iter().map(|&b| u8::from(b)).collect();
    Ok(Tensor::from_vec(v, (1, mask.len()), &Device::Cpu)?)
}
