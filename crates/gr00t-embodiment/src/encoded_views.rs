//! Base64 frames per view → decoded frames for one layout, each frame's size read from its
//! header and checked against the tag's frame policy before its pixels are decoded (image
//! bombs never reach the decoder). The doors run it off the async runtime.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use crate::frame_policy::{frame_policy, BoundFramePolicy};
use crate::image::{decode_base64, EncodedFrame, Frame, ImageError, ImagePipeline};
use crate::observation::RequestError;

/// One layout's frame checks: the checkpoint's image pipeline and the tag's frame policy.
#[derive(Debug, Clone)]
pub struct ViewDecoder {
    images: ImagePipeline,
    /// The tag's frame policy ([`frame_policy`]), bound to this checkpoint's grid.
    policy: Option<BoundFramePolicy>,
}

impl ViewDecoder {
    /// The checks of `tag` under `images` (the checkpoint's eval transform).
    pub fn new(tag: &str, images: &ImagePipeline) -> Result<ViewDecoder, ImageError> {
        Ok(ViewDecoder {
            images: images.clone(),
            policy: frame_policy(tag).map(|p| p.bind(images)).transpose()?,
        })
    }

    /// The checkpoint's image pipeline these checks are bound to.
    pub fn images(&self) -> &ImagePipeline {
        &self.images
    }

    /// Checks one frame's size (from its header or its pixels) as the door must before the
    /// engine takes it: the tag's frame policy where it has one, else that the eval transform
    /// and the Qwen resize can run on it. `field` names the frame.
    pub fn check_size(&self, field: &str, width: usize, height: usize) -> Result<(), RequestError> {
        self.frame_size(width, height)
            .map_err(|e| RequestError::new(field, e))
    }

    /// [`Self::check_size`]'s refusal text, for doors that word the field their own way.
    pub fn frame_size(&self, width: usize, height: usize) -> Result<(), String> {
        match &self.policy {
            // The policy's grid check runs the whole geometry.
            Some(policy) => policy
                .check_size(&self.images, width, height)
                .map_err(|e| e.to_string()),
            None => self
                .images
                .geometry(width, height)
                .map(drop)
                .map_err(|e| e.to_string()),
        }
    }

    /// Decodes base64 frames per view (`(view, [frame per offset])`), time-major, each
    /// frame's size checked from its header before its pixels are decoded. The caller checks
    /// the views and counts first (`EmbodimentSpec::check_sent_views`); the processor
    /// takes them checked.
    pub fn decode(
        &self,
        views: &[(String, Vec<String>)],
    ) -> Result<Vec<(String, Vec<Frame>)>, RequestError> {
        let mut out: Vec<(String, Vec<Frame>)> = views
            .iter()
            .map(|(v, f)| (v.clone(), Vec::with_capacity(f.len())))
            .collect();
        let steps = views.iter().map(|(_, f)| f.len()).max().unwrap_or(0);
        for t in 0..steps {
            for ((view, encoded), (_, frames)) in views.iter().zip(out.iter_mut()) {
                let field = format!("images.{view}[{t}]");
                let image_err = |e: ImageError| RequestError::new(&field, e.to_string());
                // A view sent with its current frame only has no more.
                let Some(s) = encoded.get(t) else { continue };
                let bytes = decode_base64(s).map_err(image_err)?;
                let header = EncodedFrame::read_header(&bytes).map_err(image_err)?;
                self.check_size(&field, header.width(), header.height())?;
                frames.push(header.decode().map_err(image_err)?);
            }
        }
        Ok(out)
    }
}
