//! HTTP body → the door's parser and validation → a typed request, the base64 frames of a
//! valid one decoded (each size checked from its header first), exactly as the door runs it.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = gr00t::request_from_body(data, gr00t_fuzz::layouts(), None);
});
