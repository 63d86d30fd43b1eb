//! Small deterministic value generators for the unit tests.

/// Xorshift32 values in [−1, 1].
pub(crate) fn xorshift(mut s: u32) -> impl FnMut() -> f32 {
    move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        (s as f32 / u32::MAX as f32) * 2.0 - 1.0
    }
}

/// Linear congruential values in [−0.5, 0.5), 24 random bits each.
pub(crate) fn lcg(mut s: u32) -> impl FnMut() -> f32 {
    move || {
        s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    }
}
