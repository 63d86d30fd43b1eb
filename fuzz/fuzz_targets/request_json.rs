//! HTTP body → validated `PredictRequest`, then the base64 frames of a valid one → frames.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = gr00t_embodiment::request::PredictRequest::from_json(data, 40, 132) {
        for cam in &req.images {
            for b64 in cam {
                let _ = gr00t_embodiment::image::decode_base64_frame(b64);
            }
        }
    }
});
