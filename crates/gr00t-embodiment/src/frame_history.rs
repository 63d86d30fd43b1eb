//! A session's frame history: the earlier frames of each view, so that a robot in a session
//! may send only the frame at t and the server supplies the older offsets (DROID's t−15).
//!
//! Offsets count the session's answered observations: for offset −k the frame is the one sent
//! k observations earlier, or the oldest kept until k earlier ones exist (the first observation
//! is paired with itself), as the websocket door's history does. Frames are kept from the
//! first observation that sends a lone frame on: a session that always sends whole views
//! costs nothing. Each frame is kept as sent or prepared ([`PreparedFrame`]: through the eval
//! transform and the Qwen resize), whichever is smaller, so a kept frame costs at most the
//! model's size whatever size it was sent at (a prepared one is not processed again).

use crate::image::{Frame, PreparedFrame};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// A frame of the history: as sent, or prepared, whichever holds fewer bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptFrame {
    /// As sent (decoded): processed again when used.
    Sent(Arc<Frame>),
    /// Through the eval transform and the Qwen resize.
    Prepared(Arc<PreparedFrame>),
}

impl KeptFrame {
    /// The smaller of a frame as `sent` and as `prepared` (the same pixels for the model).
    pub fn smaller(sent: &Frame, prepared: &Arc<PreparedFrame>) -> KeptFrame {
        if sent.data.len() <= prepared.bytes() {
            KeptFrame::Sent(Arc::new(sent.clone()))
        } else {
            KeptFrame::Prepared(prepared.clone())
        }
    }

    /// Bytes of pixels it holds.
    pub fn bytes(&self) -> usize {
        match self {
            KeptFrame::Sent(f) => f.data.len(),
            KeptFrame::Prepared(p) => p.bytes(),
        }
    }
}

/// Each view's last frames, newest last.
#[derive(Debug, Default, Clone)]
pub struct FrameHistory {
    views: HashMap<String, VecDeque<KeptFrame>>,
}

/// Whether an observation with these `(view, frames sent)` and offsets sends some view's
/// current frame alone, so that only a history can complete it.
pub fn sends_lone_frames<'a>(
    mut sent: impl Iterator<Item = (&'a str, usize)>,
    deltas: &[i64],
) -> bool {
    deltas.len() > 1 && sent.any(|(_, n)| n == 1)
}

impl FrameHistory {
    /// Whether an observation (`(view, frames sent)`) takes part in the history: it sends a
    /// lone frame, or frames are kept already (then its current frames are recorded too).
    pub fn engaged<'a>(
        &self,
        sent: impl Iterator<Item = (&'a str, usize)>,
        deltas: &[i64],
    ) -> bool {
        !self.views.is_empty() || sends_lone_frames(sent, deltas)
    }

    /// One frame per offset of `deltas` for `view`, from its frames as `sent` (as the caller
    /// holds them): a lone frame is completed from the history (`kept` turns a kept frame into
    /// the caller's form), a view sent with all its frames is used as sent.
    pub fn complete<T: Clone>(
        &self,
        view: &str,
        sent: &[T],
        deltas: &[i64],
        mut kept: impl FnMut(&KeptFrame) -> T,
    ) -> Vec<T> {
        let ([current], true) = (sent, deltas.len() > 1) else {
            return sent.to_vec();
        };
        let frames = self.views.get(view);
        deltas
            .iter()
            .map(|d| {
                let back = d.unsigned_abs() as usize;
                if back == 0 {
                    return current.clone();
                }
                frames
                    .and_then(|k| k.get(k.len().saturating_sub(back)))
                    .map_or_else(|| current.clone(), &mut kept)
            })
            .collect()
    }

    /// Bytes of the frames kept.
    pub fn bytes(&self) -> usize {
        self.views
            .values()
            .flat_map(|kept| kept.iter().map(|f| f.bytes()))
            .sum()
    }

    /// Records an answered observation's current frames, keeping as many per view as the
    /// largest offset of `deltas` reaches back.
    pub fn record(&mut self, currents: Vec<(String, KeptFrame)>, deltas: &[i64]) {
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

    /// Frames are their first byte here.
    fn frame(v: u8) -> u8 {
        v
    }

    fn kept(f: &KeptFrame) -> u8 {
        match f {
            KeptFrame::Sent(f) => f.data[0],
            KeptFrame::Prepared(p) => p.resized.data[0],
        }
    }

    /// One observation of `sent` frames of view "cam" through the history; records it unless
    /// `refused` (odd frames prepared, even ones as sent).
    fn through(h: &mut FrameHistory, sent: &[u8], deltas: &[i64], refused: bool) -> Vec<u8> {
        let engaged = h.engaged([("cam", sent.len())].into_iter(), deltas);
        let used = h.complete("cam", sent, deltas, kept);
        if engaged && !refused {
            let v = *sent.last().unwrap();
            let pixels = Frame::new(1, 1, vec![v; 3]).unwrap();
            let current = if v % 2 == 1 {
                KeptFrame::Prepared(Arc::new(PreparedFrame {
                    sent: (1, 1),
                    eval_size: (1, 1),
                    resized: pixels,
                }))
            } else {
                KeptFrame::Sent(Arc::new(pixels))
            };
            h.record(vec![("cam".to_string(), current)], deltas);
        }
        used
    }

    #[test]
    fn the_smaller_form_is_kept() {
        let prepared = Arc::new(PreparedFrame {
            sent: (4, 2),
            eval_size: (2, 2),
            resized: Frame::new(2, 2, vec![1; 12]).unwrap(),
        });
        let small = Frame::new(1, 2, vec![2; 6]).unwrap();
        let large = Frame::new(4, 2, vec![3; 24]).unwrap();
        assert_eq!(
            KeptFrame::smaller(&small, &prepared),
            KeptFrame::Sent(Arc::new(small))
        );
        let k = KeptFrame::smaller(&large, &prepared);
        assert_eq!(k, KeptFrame::Prepared(prepared));
        assert_eq!(k.bytes(), 12);
    }

    #[test]
    fn the_older_offsets_come_from_earlier_observations() {
        let mut h = FrameHistory::default();
        let deltas = [-3, 0];
        let seen: Vec<Vec<u8>> = (0..6u8)
            .map(|k| through(&mut h, &[frame(k)], &deltas, k == 2))
            .collect();
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
        assert_eq!(h.bytes(), 3 * 3);
    }

    #[test]
    fn whole_views_keep_nothing_until_a_lone_frame_comes() {
        let mut h = FrameHistory::default();
        let deltas = [-1, 0];
        // A session sending whole views keeps no frames.
        assert_eq!(
            through(&mut h, &[frame(9), frame(1)], &deltas, false),
            [9, 1]
        );
        assert!(h.views.is_empty());
        // Its first lone frame is paired with itself; from then on whole views are recorded.
        assert_eq!(through(&mut h, &[frame(2)], &deltas, false), [2, 2]);
        assert_eq!(
            through(&mut h, &[frame(7), frame(3)], &deltas, false),
            [7, 3]
        );
        assert_eq!(through(&mut h, &[frame(4)], &deltas, false), [3, 4]);
        // A layout with one offset keeps nothing and changes nothing.
        let mut one = FrameHistory::default();
        assert_eq!(through(&mut one, &[frame(5)], &[0], false), [5]);
        assert!(one.views.is_empty());
    }
}
