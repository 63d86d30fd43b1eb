//! Per-tag frame policies: the serving contract's extra checks on one layout's frames, kept as
//! table entries ([`FRAME_POLICIES`]) instead of branches on the tag. DROID's is today's
//! 16:9-like aspect bounds plus "every frame lands on a 320x180 frame's patch grid"; layouts
//! without an entry only need frames of one size after the eval transform.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use crate::image::{ImageError, ImagePipeline};
use crate::EMBODIMENT_TAG;

/// What one layout asks of each frame's size, checked before its pixels are decoded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FramePolicy {
    /// Accepted width/height ratios, inclusive.
    pub aspect: (f64, f64),
    /// The (width, height) whose patch grid, under the checkpoint's eval transform, every
    /// frame must land on.
    pub grid_of: (usize, usize),
}

/// DROID's policy: 16:9-like frames on a 320x180 frame's grid (`[1, 16, 28]` for the released
/// checkpoint).
pub const DROID_FRAMES: FramePolicy = FramePolicy {
    aspect: (1.686, 1.814),
    grid_of: (320, 180),
};

/// Every tag with a frame policy.
pub const FRAME_POLICIES: &[(&str, FramePolicy)] = &[(EMBODIMENT_TAG, DROID_FRAMES)];

/// The frame policy of `tag`, if it has one.
pub fn frame_policy(tag: &str) -> Option<&'static FramePolicy> {
    FRAME_POLICIES
        .iter()
        .find(|(t, _)| *t == tag)
        .map(|(_, p)| p)
}

impl FramePolicy {
    /// The cheap check: a non-empty frame whose width/height lies in [`aspect`](Self::aspect).
    pub fn check_aspect(&self, width: usize, height: usize) -> Result<(), ImageError> {
        if width == 0 || height == 0 {
            return Err(ImageError::Geometry(format!(
                "empty frame ({width}x{height})"
            )));
        }
        let (lo, hi) = self.aspect;
        let ratio = width as f64 / height as f64;
        if !(lo..=hi).contains(&ratio) {
            let (w, h) = self.grid_of;
            return Err(ImageError::Geometry(format!(
                "frame {width}x{height} has width/height {ratio:.4}; expected a landscape frame \
                 with width/height in [{lo}, {hi}] (16:9, e.g. {w}x{h})"
            )));
        }
        Ok(())
    }

    /// The policy bound to one checkpoint's image pipeline (the grid is computed once).
    pub fn bind(&self, images: &ImagePipeline) -> Result<BoundFramePolicy, ImageError> {
        let (w, h) = self.grid_of;
        Ok(BoundFramePolicy {
            policy: *self,
            grid: images.grid_for(w, h)?,
        })
    }
}

/// Why a frame's size is refused by its layout's policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameSizeError {
    /// Outside the aspect bounds, or no grid under the eval transform.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// On another patch grid than the policy's frame.
    #[error("a {width}x{height} frame lands on patch grid {grid:?}, not {expected:?}")]
    Grid {
        /// The frame's width.
        width: usize,
        /// The frame's height.
        height: usize,
        /// Its grid under the eval transform.
        grid: [usize; 3],
        /// The policy's grid.
        expected: [usize; 3],
    },
}

/// A [`FramePolicy`] with its patch grid under one checkpoint's eval transform.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoundFramePolicy {
    policy: FramePolicy,
    grid: [usize; 3],
}

impl BoundFramePolicy {
    /// Checks a frame's size (from its header or its pixels): the aspect bounds, then the grid.
    pub fn check_size(
        &self,
        images: &ImagePipeline,
        width: usize,
        height: usize,
    ) -> Result<(), FrameSizeError> {
        self.policy.check_aspect(width, height)?;
        let grid = images.grid_for(width, height)?;
        if grid != self.grid {
            return Err(FrameSizeError::Grid {
                width,
                height,
                grid,
                expected: self.grid,
            });
        }
        Ok(())
    }
}

/// Smallest accepted width/height ratio of a DROID frame (its [`FramePolicy`]).
pub const MIN_FRAME_ASPECT: f64 = DROID_FRAMES.aspect.0;
/// Largest accepted width/height ratio of a DROID frame (its [`FramePolicy`]).
pub const MAX_FRAME_ASPECT: f64 = DROID_FRAMES.aspect.1;

/// DROID's cheap frame check ([`DROID_FRAMES`]`.check_aspect`): landscape with width/height in
/// [`MIN_FRAME_ASPECT`, `MAX_FRAME_ASPECT`] (16:9-like).
pub fn check_frame_geometry(width: usize, height: usize) -> Result<(), ImageError> {
    DROID_FRAMES.check_aspect(width, height)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn droid_has_the_table_entry_and_others_none() {
        assert_eq!(frame_policy(EMBODIMENT_TAG), Some(&DROID_FRAMES));
        assert_eq!(frame_policy("libero_panda"), None);
    }

    #[test]
    fn aspect_bounds_are_inclusive_and_refuse_empty_frames() {
        assert!(DROID_FRAMES.check_aspect(320, 180).is_ok());
        assert!(DROID_FRAMES.check_aspect(1280, 720).is_ok());
        assert!(DROID_FRAMES.check_aspect(256, 256).is_err());
        assert!(DROID_FRAMES.check_aspect(0, 180).is_err());
    }
}
