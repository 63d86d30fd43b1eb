//! LeRobot payload bytes → the restricted pickle reader, with numpy's names allowed: any input
//! gives a value or a refusal, never a panic, a hang or an allocation past the caps.
#![no_main]
use gr00t_fuzz::protocols::pickle;
use libfuzzer_sys::fuzz_target;

const ALLOWED: &[(&str, &str)] = &[
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
];

fuzz_target!(|data: &[u8]| {
    let _ = pickle::read(data, ALLOWED, &pickle::Limits::default());
});
