//! The whole image path of one request: eval transform and Qwen processing of each frame, then
//! the frames' patch rows concatenated in input order (DROID: time-major
//! `[exterior t−15, wrist t−15, exterior t0, wrist t0]`).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::augment::{AugGeometry, AugStages, EvalTransform};
use super::qwen::QwenImageProcessor;
use super::{Frame, ImageError};
use gr00t_model::checkpoint::ProcessorConfig;
use gr00t_model::config::ImageProcessorConfig;
use gr00t_model::Checkpoint;

/// The patch grid every DROID frame lands on under the released checkpoint (112 LLM tokens per
/// frame); the check itself uses the grid of the checkpoint at hand.
pub const DROID_GRID_THW: [usize; 3] = [1, 16, 28];

/// Sizes of every stage for one input size, computed without touching pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameGeometry {
    /// Input (width, height).
    pub input: (usize, usize),
    /// The eval transform's stages; `aug.output` is what the Qwen processor receives.
    pub aug: AugGeometry,
    /// smart_resize target.
    pub qwen_size: (usize, usize),
    /// `image_grid_thw` row.
    pub grid_thw: [usize; 3],
}

/// Every intermediate image of one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameStages {
    /// Eval-transform stages.
    pub aug: AugStages,
    /// After the Qwen bicubic resize (`proc.qwen_resized_u8`), the source of the patch rows.
    pub qwen_resized: Frame,
    /// Its `[t, h, w]` patch grid.
    pub grid_thw: [usize; 3],
}

/// One frame through the eval transform and the Qwen resize: what the model sees of it. A
/// session's frame history keeps frames so, bounded by the model's size whatever size they
/// were sent at, and not processed again when a later request uses them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedFrame {
    /// (width, height) as sent.
    pub sent: (usize, usize),
    /// (width, height) after the eval transform (every frame of a request must agree).
    pub eval_size: (usize, usize),
    /// After the Qwen resize (`proc.qwen_resized_u8`): the source of its patch rows.
    pub resized: Frame,
}

impl PreparedFrame {
    /// Bytes of pixels it holds.
    pub fn bytes(&self) -> usize {
        self.resized.data.len()
    }
}

/// The model's image inputs for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessedImages {
    /// `[num_patches, patch_dim]` row-major f32 (`pixel_values`).
    pub pixel_values: Vec<f32>,
    /// Width of one patch row (1536).
    pub patch_dim: usize,
    /// One `[t, h, w]` per frame, in input order.
    pub image_grid_thw: Vec<[usize; 3]>,
    /// LLM image tokens per frame (`h·w/merge²`, 112 for DROID).
    pub tokens_per_image: Vec<usize>,
}

impl ProcessedImages {
    /// Number of patch rows.
    pub fn num_patches(&self) -> usize {
        self.pixel_values.len() / self.patch_dim.max(1)
    }
}

/// Eval transform + Qwen image processor, configured from a checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct ImagePipeline {
    /// Eval transform (albumentations or torchvision).
    pub eval: EvalTransform,
    /// Qwen image processor.
    pub qwen: QwenImageProcessor,
}

impl ImagePipeline {
    /// From the GR00T processor kwargs and the backbone's preprocessor config.
    pub fn from_configs(
        processor: &ProcessorConfig,
        image_processor: &ImageProcessorConfig,
    ) -> Result<ImagePipeline, ImageError> {
        Ok(ImagePipeline {
            eval: EvalTransform::from_processor_config(processor)?,
            qwen: QwenImageProcessor::from_config(image_processor)?,
        })
    }

    /// From a loaded checkpoint.
    pub fn from_checkpoint(ckpt: &Checkpoint) -> Result<ImagePipeline, ImageError> {
        ImagePipeline::from_configs(&ckpt.processor, &ckpt.image_processor)
    }

    /// Stage sizes for a `width`×`height` input; errors where the chain cannot run (empty
    /// frame, aspect ratio beyond smart_resize's 200).
    pub fn geometry(&self, width: usize, height: usize) -> Result<FrameGeometry, ImageError> {
        let aug = self.eval.geometry(width, height)?;
        let qwen_size = self.qwen.target_size(aug.output.0, aug.output.1)?;
        Ok(FrameGeometry {
            input: (width, height),
            aug,
            qwen_size,
            grid_thw: self.qwen.grid_thw(qwen_size.0, qwen_size.1),
        })
    }

    /// The `[t, h, w]` grid a `width`×`height` frame ends on (DROID requires [`DROID_GRID_THW`]).
    pub fn grid_for(&self, width: usize, height: usize) -> Result<[usize; 3], ImageError> {
        Ok(self.geometry(width, height)?.grid_thw)
    }

    /// Runs one frame through every stage, keeping the intermediates.
    pub fn frame_stages(&self, frame: &Frame) -> Result<FrameStages, ImageError> {
        frame.check()?;
        let geometry = self.geometry(frame.width, frame.height)?;
        let aug = self.eval.apply(frame)?;
        let qwen_resized = self.qwen.resize(&aug.output)?;
        Ok(FrameStages {
            aug,
            qwen_resized,
            grid_thw: geometry.grid_thw,
        })
    }

    /// One frame through the eval transform and the Qwen resize.
    pub fn prepare(&self, frame: &Frame) -> Result<PreparedFrame, ImageError> {
        let stages = self.frame_stages(frame)?;
        Ok(PreparedFrame {
            sent: (frame.width, frame.height),
            eval_size: (stages.aug.output.width, stages.aug.output.height),
            resized: stages.qwen_resized,
        })
    }

    /// [`Self::prepare`] of each frame, on one thread each.
    pub fn prepare_all(&self, frames: &[&Frame]) -> Vec<Result<PreparedFrame, ImageError>> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = frames
                .iter()
                .map(|f| scope.spawn(move || self.prepare(f)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(ImageError::Geometry("image worker panicked".into()))
                    })
                })
                .collect()
        })
    }

    /// The model's image inputs from prepared frames, in the order their image tokens appear.
    pub fn patchify(&self, frames: &[&PreparedFrame]) -> Result<ProcessedImages, ImageError> {
        let mut out = ProcessedImages {
            pixel_values: Vec::new(),
            patch_dim: self.qwen.patch_dim(),
            image_grid_thw: Vec::with_capacity(frames.len()),
            tokens_per_image: Vec::with_capacity(frames.len()),
        };
        for f in frames {
            let grid = self.qwen.patchify_into(&f.resized, &mut out.pixel_values)?;
            out.image_grid_thw.push(grid);
            out.tokens_per_image.push(self.qwen.tokens(grid));
        }
        Ok(out)
    }

    /// Processes the frames (in the order their image tokens appear; DROID: time-major
    /// `[exterior t−15, wrist t−15, exterior t0, wrist t0]`) into the model's image inputs.
    /// Frames are processed on one thread each.
    pub fn process(&self, frames: &[Frame]) -> Result<ProcessedImages, ImageError> {
        for f in frames {
            f.check()?;
            self.geometry(f.width, f.height)?;
        }
        let prepared = self
            .prepare_all(&frames.iter().collect::<Vec<_>>())
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        self.patchify(&prepared.iter().collect::<Vec<_>>())
    }
}
