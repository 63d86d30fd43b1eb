//! SmoothQuant for the int8 products: the largest |activation| each input channel of each
//! linear layer reaches over a few calibration observations ([`ActivationMax`], recorded in f32
//! runs by [`calibrate`]), and the factors `s_j = max|x_j|^α / max|w_j|^(1−α)` ([`factors`])
//! that move a channel's range from the activations (divided by `s_j` as they are quantised)
//! into the weight (its column multiplied by `s_j` before it is quantised). The product is the
//! same in exact arithmetic; a row's activation scale is no longer set by a few outlier
//! channels, which real Qwen3 activations have and random fixture weights do not.

use candle_core::{DType, Device, Tensor, D};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// SmoothQuant's migration strength α: half of a channel's range moves into the weight.
pub const ALPHA: f32 = 0.5;

/// Bounds on a factor, so that a dead channel or a tiny weight column cannot blow one up.
const FACTOR_RANGE: (f32, f32) = (1e-4, 1e4);

/// Per linear layer (by checkpoint name, e.g. `backbone…layers.3.self_attn.q_proj`), the
/// largest |activation| seen on each input channel.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActivationMax {
    layers: BTreeMap<String, Vec<f32>>,
}

impl ActivationMax {
    /// Layers recorded.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether no layer was recorded.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The maxima of layer `name`'s input channels.
    pub fn get(&self, name: &str) -> Option<&[f32]> {
        self.layers.get(name).map(Vec::as_slice)
    }

    /// Folds rows `[m, k]` of layer `name`'s input into its maxima (a NaN is kept as the
    /// maximum: the factors then leave the channel alone).
    pub fn add_rows(&mut self, name: &str, rows: &[f32], k: usize) {
        if k == 0 {
            return;
        }
        let max = self
            .layers
            .entry(name.to_string())
            .or_insert_with(|| vec![0.0; k]);
        if max.len() != k {
            // One name, two widths: not a layer this module knows how to smooth.
            max.fill(f32::NAN);
            return;
        }
        for row in rows.chunks_exact(k) {
            for (m, &v) in max.iter_mut().zip(row) {
                // NaN sticks: `a > m` is false for either being NaN.
                let a = v.abs();
                if a > *m || a.is_nan() {
                    *m = a;
                }
            }
        }
    }

    /// Writes the maxima as one safetensors file (one f32 vector per layer).
    pub fn save(&self, path: &Path) -> candle_core::Result<()> {
        let tensors = self
            .layers
            .iter()
            .map(|(name, v)| Ok((name.clone(), Tensor::from_slice(v, v.len(), &Device::Cpu)?)))
            .collect::<candle_core::Result<HashMap<String, Tensor>>>()?;
        candle_core::safetensors::save(&tensors, path)
    }

    /// Reads maxima [`ActivationMax::save`] wrote.
    pub fn load(path: &Path) -> candle_core::Result<ActivationMax> {
        let mut layers = BTreeMap::new();
        for (name, t) in candle_core::safetensors::load(path, &Device::Cpu)? {
            layers.insert(name, t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?);
        }
        Ok(ActivationMax { layers })
    }
}

/// Whether f32 layers record their inputs now (checked on every forward: one relaxed load).
static RECORDING: AtomicBool = AtomicBool::new(false);
/// What they recorded.
static RECORDED: Mutex<Option<ActivationMax>> = Mutex::new(None);
/// One calibration at a time in the process.
static CALIBRATION: Mutex<()> = Mutex::new(());

/// Runs `f` (f32 forwards over calibration observations, on any threads) recording the input
/// of every linear layer loaded by name; returns `f`'s value and the maxima. Calibrations in
/// one process run one after the other.
pub fn calibrate<R>(f: impl FnOnce() -> R) -> (R, ActivationMax) {
    let _one = CALIBRATION.lock().unwrap_or_else(|e| e.into_inner());
    struct Stop;
    impl Drop for Stop {
        fn drop(&mut self) {
            RECORDING.store(false, Ordering::SeqCst);
        }
    }
    *RECORDED.lock().unwrap_or_else(|e| e.into_inner()) = Some(ActivationMax::default());
    RECORDING.store(true, Ordering::SeqCst);
    let stop = Stop;
    let out = f();
    drop(stop);
    let recorded = RECORDED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_default();
    (out, recorded)
}

/// Whether a calibration is recording.
pub(crate) fn recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

/// Folds `x` `[…, k]` (f32 or any float) into layer `name`'s maxima, if a calibration runs.
pub(crate) fn record(name: &str, x: &Tensor) -> candle_core::Result<()> {
    let k = x.dim(D::Minus1)?;
    let rows: Vec<f32> = x.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?;
    if let Some(max) = RECORDED.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        max.add_rows(name, &rows, k);
    }
    Ok(())
}

/// The factor of each input channel: `max|x_j|^α / max|w_j|^(1−α)`, within [`FACTOR_RANGE`];
/// 1 where either maximum is 0 or not finite (nothing to migrate, or nothing known).
pub fn factors(act_max: &[f32], weight_col_max: &[f32], alpha: f32) -> Vec<f32> {
    act_max
        .iter()
        .zip(weight_col_max)
        .map(|(&a, &w)| {
            let usable = |v: f32| v.is_finite() && v > 0.0;
            if !usable(a) || !usable(w) {
                return 1.0;
            }
            let s = a.powf(alpha) / w.powf(1.0 - alpha);
            if s.is_finite() {
                s.clamp(FACTOR_RANGE.0, FACTOR_RANGE.1)
            } else {
                1.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maxima_fold_rows_per_channel_and_survive_a_file() {
        let mut m = ActivationMax::default();
        m.add_rows("a.q_proj", &[1.0, -5.0, 0.5, 2.0, 3.0, -0.25], 3);
        m.add_rows("a.q_proj", &[-4.0, 0.0, 0.0], 3);
        assert_eq!(m.get("a.q_proj").unwrap(), &[4.0, 5.0, 0.5]);
        m.add_rows("b.fc", &[7.0, -8.0], 2);
        let path = std::env::temp_dir().join(format!("gr00t-act-max-{}.st", std::process::id()));
        m.save(&path).unwrap();
        let back = ActivationMax::load(&path);
        let _ = std::fs::remove_file(&path);
        assert_eq!(back.unwrap(), m);
        // A name seen at two widths is poisoned, not silently mixed.
        m.add_rows("b.fc", &[1.0, 2.0, 3.0], 3);
        assert!(m.get("b.fc").unwrap().iter().all(|v| v.is_nan()));
    }

    #[test]
    fn factors_balance_the_two_ranges_and_leave_unknown_channels_alone() {
        // α = 0.5: s = sqrt(a / w), after which both ranges are sqrt(a·w).
        let s = factors(
            &[100.0, 1.0, 0.0, f32::NAN, 4.0],
            &[1.0, 1.0, 3.0, 1.0, 0.0],
            0.5,
        );
        assert_eq!(s, vec![10.0, 1.0, 1.0, 1.0, 1.0]);
        let (a, w) = (100.0f32, 1.0f32);
        assert!((a / s[0] - w * s[0]).abs() < 1e-5);
        // Clamped.
        assert_eq!(factors(&[1e12], &[1e-12], 0.5), vec![1e4]);
    }

    #[test]
    fn calibrate_records_only_while_it_runs() {
        let x = Tensor::new(&[[1f32, -3.0], [2.0, 0.5]], &Device::Cpu).unwrap();
        record("outside", &x).unwrap();
        let ((), max) = calibrate(|| {
            assert!(recording());
            record("layer", &x).unwrap();
        });
        assert!(!recording());
        assert_eq!(max.get("layer").unwrap(), &[2.0, 3.0]);
        assert!(max.get("outside").is_none());
    }
}
