//! One served embodiment's layout, read once from the checkpoint's own files: its keys,
//! widths, frame offsets, statistics and decode rules ([`EmbodimentSpec`]), its frame checks
//! and its modality config ([`Layout`]). The engine builds one per served tag at load; the
//! processors, the doors' request readers, the wire schemas and `/info` all read that one.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use crate::actions::ActionDecoder;
use crate::encoded_views::ViewDecoder;
use crate::error::EmbodimentError;
use crate::image::ImagePipeline;
use crate::observation::RequestError;
use crate::state::StateNormalizer;
use gr00t_model::checkpoint::ModalityConfigs;
use gr00t_model::Checkpoint;

/// One served embodiment: its layout, its frame checks and the checkpoint's modality config.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Keys, widths, offsets, statistics and decode rules.
    pub spec: EmbodimentSpec,
    /// The tag's frame checks (its frame policy bound to this checkpoint's image grid).
    pub frames: ViewDecoder,
    /// The tag's modality config as the checkpoint gives it (`get_modality_config`).
    pub modality: ModalityConfigs,
}

impl Layout {
    /// The layout of `tag` under the checkpoint's image pipeline `images`; errors name the
    /// checkpoint file and key at fault.
    pub fn new(
        ckpt: &Checkpoint,
        tag: &str,
        images: &ImagePipeline,
    ) -> Result<Layout, EmbodimentError> {
        Layout::of_spec(ckpt, EmbodimentSpec::new(ckpt, tag)?, images)
    }

    /// The layout of a spec read from `ckpt`: its frame checks and modality config added.
    pub fn of_spec(
        ckpt: &Checkpoint,
        spec: EmbodimentSpec,
        images: &ImagePipeline,
    ) -> Result<Layout, EmbodimentError> {
        let tag = spec.tag.as_str();
        let frames = ViewDecoder::new(tag, images)?;
        // `EmbodimentSpec::new` found the tag's modality config.
        let modality = ckpt
            .processor
            .modality_configs
            .get(tag)
            .cloned()
            .ok_or_else(|| {
                EmbodimentError::Checkpoint(format!("no modality config for embodiment {tag:?}"))
            })?;
        Ok(Layout {
            spec,
            frames,
            modality,
        })
    }

    /// The tag.
    pub fn tag(&self) -> &str {
        &self.spec.tag
    }
}

/// One embodiment's layout, read from the checkpoint's processor config and statistics.
#[derive(Debug, Clone)]
pub struct EmbodimentSpec {
    /// The tag (`processor_config.json` modality config key).
    pub tag: String,
    /// Video keys in config order.
    pub views: Vec<String>,
    /// Frame offsets of every view (`video.delta_indices`, oldest first).
    pub frame_deltas: Vec<i64>,
    /// The language key the instruction is read under (the config's first).
    pub language_key: String,
    /// Projector index of the category-specific layers.
    pub embodiment_id: usize,
    /// State encoding (keys and widths).
    pub state: StateNormalizer,
    /// Action decoding (keys, widths, representations, horizon).
    pub actions: ActionDecoder,
}

impl EmbodimentSpec {
    /// The layout of `tag`; errors name the checkpoint file and key at fault.
    pub fn new(ckpt: &Checkpoint, tag: &str) -> Result<EmbodimentSpec, EmbodimentError> {
        let cfg_file = ckpt.dir.join("processor_config.json");
        let modality = ckpt.processor.modality_configs.get(tag).ok_or_else(|| {
            EmbodimentError::Checkpoint(format!(
                "{}: no modality config for embodiment {tag:?} (it has {:?})",
                cfg_file.display(),
                ckpt.processor.modality_configs.keys().collect::<Vec<_>>()
            ))
        })?;
        let in_cfg = |e: String| {
            EmbodimentError::Checkpoint(format!("{}: embodiment {tag:?}: {e}", cfg_file.display()))
        };
        if modality.video.modality_keys.is_empty() || modality.video.delta_indices.is_empty() {
            return Err(in_cfg(
                "the video modality has no keys or no delta_indices".into(),
            ));
        }
        let language_key = modality
            .language
            .modality_keys
            .first()
            .cloned()
            .ok_or_else(|| in_cfg("the language modality has no key".into()))?;
        let state = StateNormalizer::new(&ckpt.statistics, &ckpt.processor, tag)
            .map_err(|e| in_cfg(e.to_string()))?;
        let actions = ActionDecoder::new(&ckpt.statistics, &ckpt.processor, tag)
            .map_err(|e| in_cfg(e.to_string()))?;
        if actions.horizon() > ckpt.config.action_horizon {
            return Err(in_cfg(format!(
                "action horizon {} is longer than the model's {} generated steps",
                actions.horizon(),
                ckpt.config.action_horizon
            )));
        }
        let embodiment_id = ckpt
            .embodiment_id(tag)
            .map_err(|e| EmbodimentError::Checkpoint(e.to_string()))?;
        Ok(EmbodimentSpec {
            tag: tag.to_string(),
            views: modality.video.modality_keys.clone(),
            frame_deltas: modality.video.delta_indices.clone(),
            language_key,
            embodiment_id,
            state,
            actions,
        })
    }
}

impl EmbodimentSpec {
    /// Checks `(view, frame count)` pairs: exactly the embodiment's views, each once, each with
    /// one frame per offset, or (`current_only`) the frame at t alone, a session's history
    /// supplying the older offsets. The error names the view at fault and lists what is
    /// expected.
    pub fn check_sent_views<'a>(
        &self,
        given: impl Iterator<Item = (&'a str, usize)> + Clone,
        current_only: bool,
    ) -> Result<(), RequestError> {
        for (i, (view, count)) in given.clone().enumerate() {
            if !self.views.iter().any(|v| v == view) {
                return Err(self.unknown_view(view));
            }
            if given.clone().take(i).any(|(v, _)| v == view) {
                return Err(RequestError::new(format!("images.{view}"), "given twice"));
            }
            self.check_frame_count(view, count, current_only)?;
        }
        if let Some(missing) = self
            .views
            .iter()
            .find(|v| !given.clone().any(|(g, _)| g == v.as_str()))
        {
            return Err(self.missing_view(missing));
        }
        Ok(())
    }

    /// What the layout's `images` must hold, as its refusals say it.
    pub fn views_hint(&self) -> String {
        format!(
            "{} takes views {:?}, {} frame(s) each (offsets {:?}, oldest first)",
            self.tag,
            self.views,
            self.frame_deltas.len(),
            self.frame_deltas
        )
    }

    /// The refusal of a view the layout does not have.
    pub fn unknown_view(&self, view: &str) -> RequestError {
        RequestError::new(
            format!("images.{view}"),
            format!("not a view of {}; {}", self.tag, self.views_hint()),
        )
    }

    /// The refusal of a view of the layout that was not sent.
    pub fn missing_view(&self, view: &str) -> RequestError {
        RequestError::new(
            format!("images.{view}"),
            format!("missing; {}", self.views_hint()),
        )
    }

    /// Checks one view's frame count: one per offset, or (`current_only`) the frame at t alone.
    pub fn check_frame_count(
        &self,
        view: &str,
        count: usize,
        current_only: bool,
    ) -> Result<(), RequestError> {
        let t = self.frame_deltas.len();
        if count != t && !(current_only && count == 1) {
            let or_one = if current_only { " (or 1: t)" } else { "" };
            return Err(RequestError::new(
                format!("images.{view}"),
                format!(
                    "expected {t} frames{or_one}, got {count}; {}",
                    self.views_hint()
                ),
            ));
        }
        Ok(())
    }
}
