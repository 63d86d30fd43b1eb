//! LeRobot payload bytes → the restricted pickle reader and the objects read from it (and, for
//! bytes starting 0, LeRobot PR #3048's safetensors + JSON form): any input gives a value or a
//! refusal, never a panic, a hang or an allocation past the caps.
#![no_main]
use gr00t_fuzz::protocols::lerobot;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = lerobot::pickle::Limits::default();
    let _ = lerobot::read_observation(data, &limits);
    let _ = lerobot::read_config(data, &limits);
    let _ = lerobot::pickle::read(data, lerobot::objects::GLOBALS, &limits);
});
