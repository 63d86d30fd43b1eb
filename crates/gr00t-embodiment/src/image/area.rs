//! `cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)` for RGB8, bit-exact with OpenCV 4.11
//! on x86 (the build the reference ran).
//!
//! OpenCV picks one of three algorithms:
//! - both axes shrink by exact integer factors: block averaging ("area fast"); 2×2 blocks use
//!   `(a+b+c+d+2)>>2`, other factors `round(sum · f32(1/area))`;
//! - both axes shrink (or keep) otherwise: true area averaging with f32 weights, accumulated in
//!   OpenCV's order (the fixtures README "Downscale path");
//! - any axis enlarges: bilinear-style interpolation with "area" coefficients in 11-bit fixed
//!   point, vertical pass in OpenCV's SIMD formula (reference_notes §1.3 step 2). OpenCV also
//!   takes this path when one axis shrinks and the other enlarges, for both axes, so mixed
//!   resizes here do the same.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::{Frame, ImageError};

/// OpenCV's `INTER_RESIZE_COEF_SCALE` (11-bit fixed-point weights).
const COEF_SCALE: f32 = 2048.0;

/// Largest side accepted (keeps every index and fixed-point product far from overflow).
const MAX_SIDE: usize = 1 << 20;

/// Resizes with OpenCV `INTER_AREA` semantics to `dst_w`×`dst_h`.
pub fn resize_area(src: &Frame, dst_w: usize, dst_h: usize) -> Result<Frame, ImageError> {
    src.check()?;
    let too_big = [dst_w, dst_h, src.width, src.height]
        .iter()
        .any(|&n| n > MAX_SIDE);
    if dst_w == 0 || dst_h == 0 || too_big {
        return Err(ImageError::Geometry(format!(
            "cannot resize {}x{} to {dst_w}x{dst_h}",
            src.width, src.height
        )));
    }
    if dst_w == src.width && dst_h == src.height {
        return Ok(src.clone());
    }
    let inv_x = dst_w as f64 / src.width as f64;
    let inv_y = dst_h as f64 / src.height as f64;
    let (scale_x, scale_y) = (1.0 / inv_x, 1.0 / inv_y);
    // cv::saturate_cast<int>(double) rounds half to even.
    let (ix, iy) = (scale_x.round_ties_even(), scale_y.round_ties_even());
    let is_area_fast = (scale_x - ix).abs() < f64::EPSILON && (scale_y - iy).abs() < f64::EPSILON;
    if scale_x >= 1.0 && scale_y >= 1.0 {
        let (kx, ky) = (ix as usize, iy as usize);
        if is_area_fast && dst_w * kx == src.width && dst_h * ky == src.height {
            Ok(area_fast(src, dst_w, dst_h, kx, ky))
        } else {
            Ok(area_true(src, dst_w, dst_h, scale_x, scale_y))
        }
    } else {
        Ok(area_linear(
            src, dst_w, dst_h, inv_x, inv_y, scale_x, scale_y,
        ))
    }
}

/// Exact integer shrink factors `kx`×`ky` (`resizeAreaFast_`).
fn area_fast(src: &Frame, dst_w: usize, dst_h: usize, kx: usize, ky: usize) -> Frame {
    let mut data = vec![0u8; dst_w * dst_h * 3];
    let row = src.width * 3;
    let s = &src.data;
    if kx == 2 && ky == 2 {
        for dy in 0..dst_h {
            let r0 = 2 * dy * row;
            let r1 = r0 + row;
            let out = &mut data[dy * dst_w * 3..(dy + 1) * dst_w * 3];
            for dx in 0..dst_w {
                for c in 0..3 {
                    let i = dx * 6 + c;
                    let sum = s[r0 + i] as u32
                        + s[r0 + i + 3] as u32
                        + s[r1 + i] as u32
                        + s[r1 + i + 3] as u32;
                    out[dx * 3 + c] = ((sum + 2) >> 2) as u8;
                }
            }
        }
    } else {
        let scale = 1.0f32 / (kx * ky) as f32;
        for dy in 0..dst_h {
            for dx in 0..dst_w {
                for c in 0..3 {
                    let mut sum = 0u32;
                    for sy in dy * ky..(dy + 1) * ky {
                        for sx in dx * kx..(dx + 1) * kx {
                            sum += s[sy * row + sx * 3 + c] as u32;
                        }
                    }
                    data[(dy * dst_w + dx) * 3 + c] = round_f32_to_u8(sum as f32 * scale);
                }
            }
        }
    }
    Frame {
        width: dst_w,
        height: dst_h,
        data,
    }
}

/// One entry of OpenCV's `DecimateAlpha` table: source index, destination index, weight.
struct AreaTap {
    src: usize,
    dst: usize,
    alpha: f32,
}

/// `computeResizeAreaTab`: the box-overlap weights of one axis, in OpenCV's order.
fn area_table(ssize: usize, dsize: usize, scale: f64) -> Vec<AreaTap> {
    let mut tab = Vec::with_capacity(ssize + 2 * dsize);
    let ssize_f = ssize as f64;
    let last = ssize as i64 - 1;
    for d in 0..dsize {
        let fs1 = d as f64 * scale;
        let fs2 = fs1 + scale;
        let cell = scale.min(ssize_f - fs1);
        let s2 = (fs2.floor() as i64).min(last);
        let s1 = (fs1.ceil() as i64).min(s2);
        if s1 as f64 - fs1 > 1e-3 {
            tab.push(AreaTap {
                src: (s1 - 1) as usize,
                dst: d,
                alpha: ((s1 as f64 - fs1) / cell) as f32,
            });
        }
        for s in s1..s2 {
            tab.push(AreaTap {
                src: s as usize,
                dst: d,
                alpha: (1.0 / cell) as f32,
            });
        }
        if fs2 - s2 as f64 > 1e-3 {
            tab.push(AreaTap {
                src: s2 as usize,
                dst: d,
                alpha: ((fs2 - s2 as f64).min(1.0).min(cell) / cell) as f32,
            });
        }
    }
    tab
}

/// True area averaging (`ResizeArea_Invoker`), f32 with every product and sum rounded in
/// OpenCV's order.
fn area_true(src: &Frame, dst_w: usize, dst_h: usize, scale_x: f64, scale_y: f64) -> Frame {
    let xtab = area_table(src.width, dst_w, scale_x);
    let ytab = area_table(src.height, dst_h, scale_y);
    let row = src.width * 3;
    let width = dst_w * 3;
    let mut buf = vec![0f32; width];
    let mut buf_row = usize::MAX;
    let mut sum = vec![0f32; width];
    let mut data = vec![0u8; dst_h * width];
    let mut j = 0;
    for dy in 0..dst_h {
        let mut first = true;
        while j < ytab.len() && ytab[j].dst == dy {
            let (sy, beta) = (ytab[j].src, ytab[j].alpha);
            if buf_row != sy {
                let s = &src.data[sy * row..(sy + 1) * row];
                buf.fill(0.0);
                for t in &xtab {
                    let (si, di) = (t.src * 3, t.dst * 3);
                    for c in 0..3 {
                        buf[di + c] += s[si + c] as f32 * t.alpha;
                    }
                }
                buf_row = sy;
            }
            if first {
                for (acc, &b) in sum.iter_mut().zip(&buf) {
                    *acc = beta * b;
                }
                first = false;
            } else {
                for (acc, &b) in sum.iter_mut().zip(&buf) {
                    *acc += beta * b;
                }
            }
            j += 1;
        }
        for (o, &v) in data[dy * width..(dy + 1) * width].iter_mut().zip(&sum) {
            *o = round_f32_to_u8(v);
        }
    }
    Frame {
        width: dst_w,
        height: dst_h,
        data,
    }
}

/// Two-tap fixed-point interpolation entry of one axis.
#[derive(Clone, Copy)]
struct LinearTap {
    i0: usize,
    i1: usize,
    w0: i32,
    w1: i32,
}

/// The `INTER_AREA` coefficients of `resizeGeneric_` for one axis. `clamp_edge`: the horizontal
/// axis forces the weight to (1, 0) at the last source pixel; the vertical axis only clips rows.
fn linear_axis(
    ssize: usize,
    dsize: usize,
    inv: f64,
    scale: f64,
    clamp_edge: bool,
) -> Vec<LinearTap> {
    let last = ssize as i64 - 1;
    (0..dsize)
        .map(|d| {
            let mut s = (d as f64 * scale).floor() as i64;
            let mut f = ((d + 1) as f64 - (s + 1) as f64 * inv) as f32;
            f = if f <= 0.0 { 0.0 } else { f - f.floor() };
            if clamp_edge && s >= last {
                f = 0.0;
                s = last;
            }
            let w0 = ((1.0 - f) * COEF_SCALE).round_ties_even() as i32;
            let w1 = (f * COEF_SCALE).round_ties_even() as i32;
            LinearTap {
                i0: s.clamp(0, last) as usize,
                i1: (s + 1).clamp(0, last) as usize,
                w0,
                w1,
            }
        })
        .collect()
}

/// Bilinear-style path of `INTER_AREA` (any axis enlarging): horizontal `S·a0 + S'·a1` in i32,
/// vertical with OpenCV's `VResizeLinearVec_32s8u` formula (also used for its scalar tail).
fn area_linear(
    src: &Frame,
    dst_w: usize,
    dst_h: usize,
    inv_x: f64,
    inv_y: f64,
    scale_x: f64,
    scale_y: f64,
) -> Frame {
    let xt = linear_axis(src.width, dst_w, inv_x, scale_x, true);
    let yt = linear_axis(src.height, dst_h, inv_y, scale_y, false);
    let row = src.width * 3;
    let width = dst_w * 3;
    let hresize = |sy: usize, out: &mut [i32]| {
        let s = &src.data[sy * row..(sy + 1) * row];
        for (dx, t) in xt.iter().enumerate() {
            let (a, b) = (t.i0 * 3, t.i1 * 3);
            for c in 0..3 {
                out[dx * 3 + c] = s[a + c] as i32 * t.w0 + s[b + c] as i32 * t.w1;
            }
        }
    };
    // Two cached horizontal rows, like OpenCV's ring buffer.
    let mut rows = [vec![0i32; width], vec![0i32; width]];
    let mut row_of = [usize::MAX; 2];
    let mut data = vec![0u8; dst_h * width];
    for (dy, t) in yt.iter().enumerate() {
        for (need, keep) in [(t.i0, t.i1), (t.i1, t.i0)] {
            if row_of[0] != need && row_of[1] != need {
                let slot = if row_of[0] == keep { 1 } else { 0 };
                hresize(need, &mut rows[slot]);
                row_of[slot] = need;
            }
        }
        let d0 = &rows[if row_of[0] == t.i0 { 0 } else { 1 }];
        let d1 = &rows[if row_of[0] == t.i1 { 0 } else { 1 }];
        let out = &mut data[dy * width..(dy + 1) * width];
        for x in 0..width {
            let v = ((t.w0 * (d0[x] >> 4)) >> 16) + ((t.w1 * (d1[x] >> 4)) >> 16) + 2;
            out[x] = (v >> 2).clamp(0, 255) as u8;
        }
    }
    Frame {
        width: dst_w,
        height: dst_h,
        data,
    }
}

/// `saturate_cast<uchar>(float)`: round half to even, clamp to 0..=255.
fn round_f32_to_u8(v: f32) -> u8 {
    v.round_ties_even().clamp(0.0, 255.0) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn area_table_weights_sum_to_one_per_destination() {
        let tab = area_table(640, 455, 1.0 / (455.0 / 640.0));
        let mut sums = vec![0f64; 455];
        for t in &tab {
            sums[t.dst] += t.alpha as f64;
        }
        assert!(sums.iter().all(|s| (s - 1.0).abs() < 1e-5), "{sums:?}");
    }

    #[test]
    fn linear_axis_weights_sum_to_2048() {
        for t in linear_axis(320, 455, 455.0 / 320.0, 320.0 / 455.0, true) {
            assert!((2047..=2049).contains(&(t.w0 + t.w1)));
        }
    }
}
