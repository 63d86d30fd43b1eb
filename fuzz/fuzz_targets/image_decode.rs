//! PNG/JPEG bytes → RGB8 frame → (when the serving contract accepts its size) the whole
//! eval-transform + Qwen pipeline.
#![no_main]
use libfuzzer_sys::fuzz_target;

/// Frames above this many pixels are decoded but not run through the resize pipeline (keeps
/// each input fast; the pipeline's cost grows with the pixel count, not with the bytes).
const MAX_PIPELINE_PIXELS: usize = 1280 * 720;

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = gr00t_embodiment::image::decode_frame_bytes(data) else {
        return;
    };
    assert_eq!(frame.data.len(), frame.width * frame.height * 3);
    if frame.width * frame.height > MAX_PIPELINE_PIXELS {
        return;
    }
    if gr00t_embodiment::frame_policy::check_frame_geometry(frame.width, frame.height).is_ok() {
        let _ = gr00t_fuzz::pipeline().process(std::slice::from_ref(&frame));
    }
});
