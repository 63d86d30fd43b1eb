//! A session's frame history: the earlier frames of each view, so that a robot in a session
//! may send only the frame at t and the server supplies the older offsets (DROID's t−15).
//!
//! Offsets count the session's answered observations: for offset −k the frame is the one sent
//! k observations earlier, or the oldest kept until k earlier ones exist (the first observation
//! is paired with itself), as the websocket door's history does. Frames are kept from the
//! first observation that sends a lone frame on: a session that always sends whole views
//! costs nothing.

use crate::image::Frame;
use crate::observation::RequestError;
use std::collections::{HashMap, VecDeque};

/// Each view's last frames, newest last.
#[derive(Debug, Default, Clone)]
pub struct FrameHistory {
    views: HashMap<String, VecDeque<Frame>>,
}

impl FrameHistory {
    /// Completes `images` (`(view, frames oldest first)`) to one frame per offset of `deltas`
    /// where a view carries only its current frame; a view sent with all its frames is used as
    /// sent. Returns every view's current frame, for [`Self::record`] once the observation is
    /// answered, or `None` while the session has only ever sent whole views: then it keeps no
    /// frames (a history costs up to 15 raw frames per view).
    pub fn fill(
        &self,
        images: &mut [(String, Vec<Frame>)],
        deltas: &[i64],
    ) -> Result<Option<Vec<(String, Frame)>>, RequestError> {
        let partial = deltas.len() > 1 && images.iter().any(|(_, f)| f.len() == 1);
        if self.views.is_empty() && !partial {
            return Ok(None);
        }
        let mut currents = Vec::with_capacity(images.len());
        for (view, frames) in images.iter_mut() {
            let current = frames
                .last()
                .cloned()
                .ok_or_else(|| RequestError::new(format!("images.{view}"), "has no frame"))?;
            let empty = VecDeque::new();
            let kept = self.views.get(view.as_str()).unwrap_or(&empty);
            if frames.len() == 1 && deltas.len() > 1 {
                *frames = deltas
                    .iter()
                    .map(|d| {
                        let back = d.unsigned_abs() as usize;
                        if back == 0 {
                            return current.clone();
                        }
                        let i = kept.len().saturating_sub(back);
                        kept.get(i).cloned().unwrap_or_else(|| current.clone())
                    })
                    .collect();
            }
            currents.push((view.clone(), current));
        }
        Ok(Some(currents))
    }

    /// Bytes of the decoded frames kept.
    pub fn bytes(&self) -> usize {
        self.views
            .values()
            .flat_map(|kept| kept.iter().map(|f| f.data.len()))
            .sum()
    }

    /// Records an answered observation's current frames ([`Self::fill`]'s), keeping as many
    /// per view as the largest offset of `deltas` reaches back.
    pub fn record(&mut self, currents: Vec<(String, Frame)>, deltas: &[i64]) {
        let keep = deltas
            .iter()
            .map(|d| d.unsigned_abs() as usize)
            .max()
            .unwrap_or(0);
        for (view, frame) in currents {
            let kept = self.views.entry(view).or_default();
            kept.push_back(frame);
            while kept.len() > keep {
                kept.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(v: u8) -> Frame {
        Frame::new(1, 1, vec![v; 3]).unwrap()
    }

    fn ids(frames: &[Frame]) -> Vec<u8> {
        frames.iter().map(|f| f.data[0]).collect()
    }

    #[test]
    fn the_older_offsets_come_from_earlier_observations() {
        let mut h = FrameHistory::default();
        let deltas = [-3, 0];
        let mut seen = Vec::new();
        for k in 0..6u8 {
            let mut images = vec![("cam".to_string(), vec![frame(k)])];
            let currents = h.fill(&mut images, &deltas).unwrap().unwrap();
            seen.push(ids(&images[0].1));
            if k != 2 {
                h.record(currents, &deltas);
            }
        }
        // t−3 is the oldest kept until three earlier answered observations exist; frame 2's
        // observation was refused, so it is not one of them.
        assert_eq!(
            seen,
            vec![
                vec![0, 0],
                vec![0, 1],
                vec![0, 2],
                vec![0, 3],
                vec![0, 4],
                vec![1, 5]
            ]
        );
    }

    #[test]
    fn whole_views_keep_nothing_until_a_lone_frame_comes() {
        let mut h = FrameHistory::default();
        let deltas = [-1, 0];
        // A session sending whole views keeps no frames.
        let mut images = vec![("cam".to_string(), vec![frame(9), frame(1)])];
        assert!(h.fill(&mut images, &deltas).unwrap().is_none());
        assert_eq!(ids(&images[0].1), [9, 1]);
        assert!(h.views.is_empty());
        // Its first lone frame is paired with itself; from then on whole views are recorded.
        let mut images = vec![("cam".to_string(), vec![frame(2)])];
        let currents = h.fill(&mut images, &deltas).unwrap().unwrap();
        assert_eq!(ids(&images[0].1), [2, 2]);
        h.record(currents, &deltas);
        let mut images = vec![("cam".to_string(), vec![frame(7), frame(3)])];
        let currents = h.fill(&mut images, &deltas).unwrap().unwrap();
        assert_eq!(ids(&images[0].1), [7, 3]);
        h.record(currents, &deltas);
        let mut images = vec![("cam".to_string(), vec![frame(4)])];
        h.fill(&mut images, &deltas).unwrap();
        assert_eq!(ids(&images[0].1), [3, 4]);
        // A layout with one offset keeps nothing and changes nothing.
        let one = FrameHistory::default();
        let mut images = vec![("cam".to_string(), vec![frame(5)])];
        assert!(one.fill(&mut images, &[0]).unwrap().is_none());
        assert_eq!(ids(&images[0].1), [5]);
    }
}
