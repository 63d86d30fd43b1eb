//! Any embodiment a checkpoint carries, from its own files: the layout of one tag
//! ([`EmbodimentSpec`]: views and frame offsets, state and action keys with widths, horizon,
//! language key, projector index) and its pre/post-processing ([`EmbodimentProcessor`]: a
//! generic [`Observation`] → [`ModelInputs`], `action_pred` → physical actions), as NVIDIA's
//! `Gr00tPolicy` → `Gr00tN1d7Processor` runs them. Every refusal names the request field.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use crate::actions::{ActionError, DecodedActions};
use crate::error::EmbodimentError;
use crate::frame_history::{FrameHistory, KeptFrame};
use crate::image::{Frame, ImagePipeline, PreparedFrame, ProcessedImages};
use crate::layout::{EmbodimentSpec, Layout};
pub use crate::observation::Observation;
use crate::observation::{NoiseSource, RequestError};
use crate::prompt::{EncodedPrompt, PromptEncoder, PromptError};
use crate::state::StateError;
use gr00t_model::{Checkpoint, ModelInputs};
use std::sync::Arc;
use std::time::Instant;

/// Each view's current frame of an observation, in the form its session's history keeps.
pub type Currents = Vec<(String, KeptFrame)>;

/// Where a frame of a request comes from: one to prepare now (its index among the frames
/// prepared: those sent, then those kept as sent), or one kept prepared.
#[derive(Clone)]
enum Source {
    ToPrepare(usize),
    Prepared(Arc<PreparedFrame>),
}

/// A request turned into model inputs, with the time that took.
#[derive(Debug, Clone)]
pub struct EncodedRequest {
    /// What the network consumes.
    pub inputs: ModelInputs,
    /// Resize, patchify, tokenise, state normalisation and noise, ms.
    pub encode_ms: f64,
}

/// Pre- and post-processing of one embodiment for one checkpoint.
#[derive(Debug)]
pub struct EmbodimentProcessor {
    /// The served layout (shared with the doors, which read requests against it).
    layout: Arc<Layout>,
    prompt: PromptEncoder,
    /// Rows the model generates (`config.action_horizon`, 40).
    model_horizon: usize,
    action_dim: usize,
}

impl EmbodimentProcessor {
    /// The processor of `tag` (its layout built here; a server builds each layout once and
    /// passes it to [`Self::with_layout`]).
    pub fn new(
        ckpt: &Checkpoint,
        prompt: PromptEncoder,
        tag: &str,
    ) -> Result<EmbodimentProcessor, EmbodimentError> {
        let images = ImagePipeline::from_checkpoint(ckpt)?;
        let layout = Layout::new(ckpt, tag, &images)?;
        Ok(EmbodimentProcessor::with_layout(
            ckpt,
            prompt,
            Arc::new(layout),
        ))
    }

    /// The processor of a layout built from `ckpt`.
    pub fn with_layout(
        ckpt: &Checkpoint,
        prompt: PromptEncoder,
        layout: Arc<Layout>,
    ) -> EmbodimentProcessor {
        EmbodimentProcessor {
            layout,
            prompt: prompt.with_formalize(ckpt.processor.formalize_language),
            model_horizon: ckpt.config.action_horizon,
            action_dim: ckpt.config.max_action_dim,
        }
    }

    /// The layout served: keys, widths, offsets and statistics.
    pub fn spec(&self) -> &EmbodimentSpec {
        &self.layout.spec
    }

    /// The checkpoint's image pipeline (the one the layout's frame checks are bound to).
    fn images(&self) -> &ImagePipeline {
        self.layout.frames.images()
    }

    /// The whole served layout, as the doors share it.
    pub fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }

    /// Turns an observation into model inputs, checking it first ([`Self::check`]); the
    /// client's faults name the field.
    pub fn encode(&self, obs: &Observation) -> Result<EncodedRequest, EmbodimentError> {
        self.check(obs)?;
        Ok(self.encode_in(obs, None)?.0)
    }

    /// What a door checks before it hands over an observation of this layout: exactly its
    /// views, one frame per offset each, every frame's size accepted by the layout's frame
    /// checks (the checks the doors run on headers and array shapes, on decoded frames), and
    /// client noise of the model's shape.
    pub fn check(&self, obs: &Observation) -> Result<(), RequestError> {
        let sent = || obs.images.iter().map(|(v, f)| (v.as_str(), f.len()));
        self.spec().check_sent_views(sent(), false)?;
        for (view, frames) in &obs.images {
            for (i, frame) in frames.iter().enumerate() {
                let field = format!("images.{view}[{i}]");
                frame
                    .check()
                    .map_err(|e| RequestError::new(&field, e.to_string()))?;
                self.layout
                    .frames
                    .check_size(&field, frame.width, frame.height)?;
            }
        }
        self.check_noise(&obs.noise)
    }

    /// Client noise must be the model's `[horizon, action_dim]` values.
    fn check_noise(&self, noise: &NoiseSource) -> Result<(), RequestError> {
        match noise {
            NoiseSource::Client(n) if n.len() != self.model_horizon * self.action_dim => {
                Err(RequestError::new(
                    "noise",
                    format!(
                        "expected {} rows of {} values, got {} values",
                        self.model_horizon,
                        self.action_dim,
                        n.len()
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// [`Self::encode`] of an observation its door checked against this layout (views and
    /// counts, a lone current frame only in a session, frame sizes, noise shape: debug
    /// assertions here), in
    /// a session whose `history` supplies the older frames of views sent with their current
    /// frame only; also returns each view's current frame, prepared, for
    /// [`FrameHistory::record`] once the observation is answered (`None` while the session
    /// has only ever sent whole views: it keeps no frames then).
    pub fn encode_in(
        &self,
        obs: &Observation,
        history: Option<&FrameHistory>,
    ) -> Result<(EncodedRequest, Option<Currents>), EmbodimentError> {
        let t0 = Instant::now();
        let (frames, currents) = self.time_major_frames(obs, history)?;
        let frames: Vec<&PreparedFrame> = frames.iter().map(|f| &**f).collect();
        let (processed, prompt) =
            images_and_prompt(self.images(), &self.prompt, &frames, &obs.instruction)?;
        let state = self
            .spec()
            .state
            .normalize(&obs.raw_state())
            .map_err(state_error)?;
        self.spec()
            .actions
            .check_references(&obs.raw_state())
            .map_err(|(key, e)| RequestError::new(format!("state.{key}"), e.to_string()))?;
        debug_assert_eq!(
            self.check_noise(&obs.noise),
            Ok(()),
            "the door checks the noise shape"
        );
        let noise = initial_noise(&obs.noise, self.model_horizon, self.action_dim)?;
        let t1 = Instant::now();
        let encoded = EncodedRequest {
            inputs: model_inputs(processed, prompt, state, self.spec().embodiment_id, noise),
            encode_ms: (t1 - t0).as_secs_f64() * 1e3,
        };
        Ok((encoded, currents))
    }

    /// Turns the model's `action_pred` (`[40, action_dim]`) into physical actions, the
    /// observation's raw state being the reference of the relative keys.
    pub fn decode(
        &self,
        action_pred: &[f32],
        obs: &Observation,
    ) -> Result<DecodedActions, ActionError> {
        self.spec().actions.decode(action_pred, &obs.raw_state())
    }

    /// Prepares the frames sent (eval transform and Qwen resize, one thread each), completes
    /// lone frames from `history` and orders the frames as the prompt wants them: time-major,
    /// for each offset every view in config order. Every frame, kept ones included, must reach
    /// the same size after the eval transform (upstream stacks the views): the one check only
    /// the session's history can make. Also returns each view's current frame when the
    /// history takes part.
    fn time_major_frames(
        &self,
        obs: &Observation,
        history: Option<&FrameHistory>,
    ) -> Result<(Vec<Arc<PreparedFrame>>, Option<Currents>), RequestError> {
        let spec = self.spec();
        let deltas = &spec.frame_deltas;
        let sent = || obs.images.iter().map(|(v, f)| (v.as_str(), f.len()));
        let history = history.filter(|h| h.engaged(sent(), deltas));
        debug_assert_eq!(
            spec.check_sent_views(sent(), history.is_some()),
            Ok(()),
            "the door checks the views and counts"
        );
        let per_view: Vec<(&String, &Vec<Frame>)> = spec
            .views
            .iter()
            .filter_map(|view| {
                obs.images
                    .iter()
                    .find(|(v, _)| v == view)
                    .map(|(_, f)| (view, f))
            })
            .collect();
        // Every frame sent, named for a refusal of its preparation.
        let mut flat = Vec::new();
        for (view, frames) in &per_view {
            for (i, frame) in frames.iter().enumerate() {
                let field = format!("images.{view}[{i}]");
                debug_assert!(
                    frame.check().is_ok(),
                    "{field}: the door builds whole frames"
                );
                debug_assert_eq!(
                    self.layout.frames.frame_size(frame.width, frame.height),
                    Ok(()),
                    "{field}: the door checks frame sizes"
                );
                flat.push((field, frame));
            }
        }
        // Each view's frame per offset: one sent (its index in `flat`), or one kept, which
        // is prepared already or joins the frames to prepare.
        let mut kept_sent: Vec<Arc<Frame>> = Vec::new();
        let mut sources = Vec::with_capacity(per_view.len());
        let mut at = 0;
        for (view, frames) in &per_view {
            let sent: Vec<Source> = (at..at + frames.len()).map(Source::ToPrepare).collect();
            at += frames.len();
            sources.push(match history {
                Some(h) => h.complete(view, &sent, deltas, |k| match k {
                    KeptFrame::Prepared(p) => Source::Prepared(p.clone()),
                    KeptFrame::Sent(f) => {
                        kept_sent.push(f.clone());
                        Source::ToPrepare(flat.len() + kept_sent.len() - 1)
                    }
                }),
                None => sent,
            });
        }
        // Every frame sent, and those kept as sent, through the eval transform and the Qwen
        // resize, one thread each.
        let inputs: Vec<&Frame> = (flat.iter().map(|(_, f)| *f))
            .chain(kept_sent.iter().map(|f| &**f))
            .collect();
        let mut prepared = Vec::with_capacity(inputs.len());
        for (i, p) in self.images().prepare_all(&inputs).into_iter().enumerate() {
            // A kept frame passed these checks when it was sent.
            let field = flat.get(i).map_or("images", |(field, _)| field.as_str());
            prepared.push(Arc::new(
                p.map_err(|e| RequestError::new(field, e.to_string()))?,
            ));
        }
        let views: Vec<Vec<Arc<PreparedFrame>>> = sources
            .into_iter()
            .map(|view| {
                view.into_iter()
                    .map(|s| match s {
                        Source::ToPrepare(i) => prepared[i].clone(),
                        Source::Prepared(p) => p,
                    })
                    .collect()
            })
            .collect();
        // Each view's current frame (its last sent), in the form its history keeps.
        let currents = history.map(|_| {
            let mut last = 0;
            per_view
                .iter()
                .map(|(view, frames)| {
                    last += frames.len();
                    let (sent, p) = (flat[last - 1].1, &prepared[last - 1]);
                    ((*view).clone(), KeptFrame::smaller(sent, p))
                })
                .collect()
        });
        let t = deltas.len();
        let mut first: Option<(String, (usize, usize))> = None;
        let mut out = Vec::with_capacity(t * spec.views.len());
        for step in 0..t {
            for ((view, _), frames) in per_view.iter().zip(&views) {
                let frame = &frames[step];
                let field = format!("images.{view}[{step}]");
                let size = frame.eval_size;
                match &first {
                    None => first = Some((field.clone(), size)),
                    Some((f0, s0)) if *s0 != size => {
                        return Err(RequestError::new(
                            &field,
                            format!(
                                "a {}x{} frame becomes {}x{} after the eval transform, but {f0} \
                                 becomes {}x{}; every frame of {} must reach the same size, as \
                                 upstream stacks them (send frames of one aspect ratio{})",
                                frame.sent.0,
                                frame.sent.1,
                                size.0,
                                size.1,
                                s0.0,
                                s0.1,
                                spec.tag,
                                if self.images().eval.letter_box {
                                    ""
                                } else {
                                    ", or serve a checkpoint with letter_box_transform: true"
                                }
                            ),
                        ))
                    }
                    Some(_) => {}
                }
                out.push(frame.clone());
            }
        }
        Ok((out, currents))
    }
}

/// The image inputs and the prompt of one request's frames (in prompt order) and instruction.
pub(crate) fn images_and_prompt(
    images: &ImagePipeline,
    prompt: &PromptEncoder,
    frames: &[&PreparedFrame],
    instruction: &str,
) -> Result<(ProcessedImages, EncodedPrompt), EmbodimentError> {
    let processed = images
        .patchify(frames)
        .map_err(|e| RequestError::new("images", e.to_string()))?;
    let prompt = prompt
        .encode(instruction, &processed.image_grid_thw)
        .map_err(|e| match e {
            PromptError::Tokenizer(m) => EmbodimentError::Tokenizer(m),
            // The tokenizer's own failures are the server's, never the instruction's.
            PromptError::Library { what, source } => {
                EmbodimentError::Tokenizer(format!("{what}: {source}"))
            }
            e @ PromptError::Read { .. } => EmbodimentError::Tokenizer(e.to_string()),
            other => RequestError::new("instruction", other.to_string()).into(),
        })?;
    Ok((processed, prompt))
}

/// The network's inputs from the processed images, the prompt, the encoded state and noise.
pub(crate) fn model_inputs(
    processed: ProcessedImages,
    prompt: EncodedPrompt,
    state: Vec<f32>,
    embodiment_id: usize,
    noise: Vec<f32>,
) -> ModelInputs {
    ModelInputs {
        pixel_values: processed.pixel_values,
        patch_dim: processed.patch_dim,
        image_grid_thw: processed.image_grid_thw,
        input_ids: prompt.input_ids,
        state,
        embodiment_id,
        noise,
        rtc: None,
    }
}

/// The `[horizon, action_dim]` initial noise: the client's, or `torch.randn` of the seed.
pub(crate) fn initial_noise(
    noise: &NoiseSource,
    horizon: usize,
    action_dim: usize,
) -> Result<Vec<f32>, RequestError> {
    match noise {
        NoiseSource::Client(n) => Ok(n.clone()),
        NoiseSource::Seed(s) => gr00t_model::noise::initial_noise(*s, horizon, action_dim)
            .map_err(|e| RequestError::new("seed", e.to_string())),
    }
}

/// A state refusal, with the field of the key at fault (a config error is the checkpoint's).
fn state_error(e: StateError) -> EmbodimentError {
    let field = match &e {
        StateError::MissingKey(k) | StateError::UnknownKey(k) | StateError::DuplicateKey(k) => {
            format!("state.{k}")
        }
        StateError::WrongLength { key, .. } => format!("state.{key}"),
        StateError::NonFinite { key, index } => format!("state.{key}[{index}]"),
        StateError::Config(_) => return e.into(),
    };
    RequestError::new(field, e.to_string()).into()
}
