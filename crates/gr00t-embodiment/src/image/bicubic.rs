//! torch 2.7–2.9 `F.interpolate(uint8, antialias=True, align_corners=False)` on CPU, bit-exact,
//! for the two modes the pipeline uses: bicubic (the Qwen processor's
//! `F.resize(..., BICUBIC, antialias=True)`) and bilinear (torchvision v2 `Resize`, the default
//! interpolation, on an AVX2/AVX512 CPU where it takes the native uint8 kernel).
//!
//! Separable: per axis, the filter (Keys cubic with a = −0.5, or the triangle) stretched by the
//! downscale factor, normalised, rounded to int16 fixed point with a per-axis precision; the
//! horizontal pass runs first (into a uint8 buffer), then the vertical pass; a pass whose size
//! does not change is skipped, as torch does.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::{Frame, ImageError};

/// The interpolation filter of torch's antialiased kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    /// Keys cubic, support (`interp_size`) 4.
    Bicubic,
    /// Triangle, support 2.
    Bilinear,
}

impl Filter {
    /// `interp_size` before antialias stretching.
    fn interp_size(self) -> f64 {
        match self {
            Filter::Bicubic => 4.0,
            Filter::Bilinear => 2.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Bicubic => cubic(x),
            Filter::Bilinear => triangle(x),
        }
    }
}

/// Resizes to `dst_w`×`dst_h` with torch's uint8 antialiased bicubic kernel.
pub fn resize_bicubic_aa(src: &Frame, dst_w: usize, dst_h: usize) -> Result<Frame, ImageError> {
    resize_aa(src, dst_w, dst_h, Filter::Bicubic)
}

/// Resizes to `dst_w`×`dst_h` with torch's uint8 antialiased bilinear kernel.
pub fn resize_bilinear_aa(src: &Frame, dst_w: usize, dst_h: usize) -> Result<Frame, ImageError> {
    resize_aa(src, dst_w, dst_h, Filter::Bilinear)
}

fn resize_aa(src: &Frame, dst_w: usize, dst_h: usize, filter: Filter) -> Result<Frame, ImageError> {
    src.check()?;
    if dst_w == 0 || dst_h == 0 {
        return Err(ImageError::Geometry(format!(
            "cannot resize {}x{} to {dst_w}x{dst_h}",
            src.width, src.height
        )));
    }
    let mut cur = if dst_w != src.width {
        horizontal(src, &AxisWeights::new(src.width, dst_w, filter))
    } else {
        src.clone()
    };
    if dst_h != src.height {
        cur = vertical(&cur, &AxisWeights::new(src.height, dst_h, filter));
    }
    Ok(cur)
}

/// Fixed-point weights of one axis (`_compute_index_ranges_int16_weights`).
struct AxisWeights {
    /// First source index of each output.
    start: Vec<usize>,
    /// Number of taps of each output.
    len: Vec<usize>,
    /// `ksize` weights per output (zero-padded).
    weights: Vec<i32>,
    ksize: usize,
    precision: u32,
}

/// Keys cubic convolution kernel with a = −0.5, written in torch's operation order.
fn cubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
    } else {
        0.0
    }
}

/// torch's antialias bilinear filter.
fn triangle(x: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 {
        1.0 - x
    } else {
        0.0
    }
}

impl AxisWeights {
    fn new(input: usize, output: usize, filter: Filter) -> AxisWeights {
        let scale = input as f64 / output as f64;
        let support = if scale >= 1.0 {
            filter.interp_size() * 0.5 * scale
        } else {
            filter.interp_size() * 0.5
        };
        // torch: `(int)ceilf(support) * 2 + 1` (the ceil is taken in f32).
        let ksize = (support as f32).ceil() as usize * 2 + 1;
        let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
        let mut start = Vec::with_capacity(output);
        let mut len = Vec::with_capacity(output);
        let mut wf = vec![0f64; output * ksize];
        let mut wt_max = 0f64;
        for i in 0..output {
            let center = scale * (i as f64 + 0.5);
            let xmin = ((center - support + 0.5) as i64).max(0);
            let xsize = ((center + support + 0.5) as i64).min(input as i64) - xmin;
            let xsize = xsize.clamp(0, ksize as i64) as usize;
            let w = &mut wf[i * ksize..(i + 1) * ksize];
            let mut total = 0f64;
            for (j, wj) in w.iter_mut().enumerate().take(xsize) {
                *wj = filter.weight(((j as i64 + xmin) as f64 - center + 0.5) * invscale);
                total += *wj;
            }
            if total != 0.0 {
                for wj in w.iter_mut().take(xsize) {
                    *wj /= total;
                }
            }
            wt_max = w.iter().copied().fold(wt_max, f64::max);
            start.push(xmin as usize);
            len.push(xsize);
        }
        let mut precision = 0u32;
        while precision < 22 {
            let next = (0.5 + wt_max * (1u64 << (precision + 1)) as f64) as i64;
            if next >= 1 << 15 {
                break;
            }
            precision += 1;
        }
        let mult = (1u64 << precision) as f64;
        let weights = wf
            .iter()
            .map(|&w| {
                let v = w * mult;
                let q = if v < 0.0 {
                    (-0.5 + v) as i32
                } else {
                    (0.5 + v) as i32
                };
                q as i16 as i32
            })
            .collect();
        AxisWeights {
            start,
            len,
            weights,
            ksize,
            precision,
        }
    }

    /// `(2^(p−1) + Σ pixel·w) >> p`, clamped to 0..=255 (sums wrap in i32 as torch's do).
    fn finish(&self, acc: i32) -> u8 {
        (acc >> self.precision).clamp(0, 255) as u8
    }

    fn initial(&self) -> i32 {
        if self.precision > 0 {
            1 << (self.precision - 1)
        } else {
            0
        }
    }
}

fn horizontal(src: &Frame, ax: &AxisWeights) -> Frame {
    let out_w = ax.start.len();
    let row = src.width * 3;
    let mut data = vec![0u8; src.height * out_w * 3];
    for y in 0..src.height {
        let s = &src.data[y * row..(y + 1) * row];
        let out = &mut data[y * out_w * 3..(y + 1) * out_w * 3];
        for x in 0..out_w {
            let w = &ax.weights[x * ax.ksize..x * ax.ksize + ax.len[x]];
            let base = ax.start[x] * 3;
            for c in 0..3 {
                let mut acc = ax.initial();
                for (j, &wj) in w.iter().enumerate() {
                    acc = acc.wrapping_add((s[base + j * 3 + c] as i32).wrapping_mul(wj));
                }
                out[x * 3 + c] = ax.finish(acc);
            }
        }
    }
    Frame {
        width: out_w,
        height: src.height,
        data,
    }
}

fn vertical(src: &Frame, ax: &AxisWeights) -> Frame {
    let out_h = ax.start.len();
    let row = src.width * 3;
    let mut data = vec![0u8; out_h * row];
    let mut acc = vec![0i32; row];
    for y in 0..out_h {
        acc.fill(ax.initial());
        let w = &ax.weights[y * ax.ksize..y * ax.ksize + ax.len[y]];
        for (j, &wj) in w.iter().enumerate() {
            let sy = ax.start[y] + j;
            let s = &src.data[sy * row..(sy + 1) * row];
            for (a, &p) in acc.iter_mut().zip(s) {
                *a = a.wrapping_add((p as i32).wrapping_mul(wj));
            }
        }
        for (o, &a) in data[y * row..(y + 1) * row].iter_mut().zip(&acc) {
            *o = ax.finish(a);
        }
    }
    Frame {
        width: src.width,
        height: out_h,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precision_and_support_for_455_to_448() {
        let ax = AxisWeights::new(455, 448, Filter::Bicubic);
        assert_eq!(ax.precision, 15);
        assert_eq!(ax.ksize, 7);
    }

    #[test]
    fn identity_sized_resize_is_a_copy() {
        let f = Frame::new(3, 2, (0..18).collect()).unwrap();
        assert_eq!(resize_bicubic_aa(&f, 3, 2).unwrap(), f);
    }

    #[test]
    fn constant_image_stays_constant() {
        let f = Frame::new(40, 30, vec![77; 40 * 30 * 3]).unwrap();
        for (w, h) in [(17, 30), (40, 11), (64, 50), (23, 47)] {
            let r = resize_bicubic_aa(&f, w, h).unwrap();
            assert!(r.data.iter().all(|&v| v == 77), "{w}x{h}");
            let r = resize_bilinear_aa(&f, w, h).unwrap();
            assert!(r.data.iter().all(|&v| v == 77), "bilinear {w}x{h}");
        }
    }
}
