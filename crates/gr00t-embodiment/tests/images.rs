//! Image pipeline parity with the golden fixtures (every uint8 stage bit-exact, pixel_values,
//! grids), plus unit checks of decoding, the resize paths and smart_resize.

use base64::Engine;
use gr00t_embodiment::embodiment::EmbodimentProcessor;
use gr00t_embodiment::frame_policy::{check_frame_geometry, MAX_FRAME_ASPECT, MIN_FRAME_ASPECT};
use gr00t_embodiment::image::area::resize_area;
use gr00t_embodiment::image::{
    decode_base64_frame, decode_frame_bytes, smart_resize, EncodedFrame, EvalTransform, Frame,
    ImageError, ImagePipeline, ResizeKind, TvSize, DROID_GRID_THW,
};
use gr00t_embodiment::prompt::PromptEncoder;
use gr00t_fixtures::{case_dir, request_json, tiny_checkpoint, tokenizer_path, Taps, CASES};
use gr00t_model::checkpoint::ProcessorConfig;
use gr00t_model::Checkpoint;
use image::{DynamicImage, ImageBuffer, ImageFormat, Luma, LumaA, Rgb, Rgba};
use std::io::Cursor;

/// Frame files in the model's (time-major) order.
const FRAME_FILES: [&str; 4] = [
    "exterior_image_1_left_t-15.png",
    "wrist_image_left_t-15.png",
    "exterior_image_1_left_t0.png",
    "wrist_image_left_t0.png",
];

fn pipeline() -> ImagePipeline {
    let ckpt = Checkpoint::open(tiny_checkpoint()).expect("tiny checkpoint");
    ImagePipeline::from_checkpoint(&ckpt).expect("image pipeline")
}

fn case_frames(case: &str) -> Vec<Frame> {
    FRAME_FILES
        .iter()
        .map(|f| {
            let bytes = std::fs::read(case_dir(case).join(f)).expect("png");
            decode_frame_bytes(&bytes).expect("decode png")
        })
        .collect()
}

/// Asserts two byte images are identical, reporting how many values differ and by how much.
fn assert_u8_exact(name: &str, ours: &[u8], reference: &[u8]) {
    assert_eq!(ours.len(), reference.len(), "{name}: length mismatch");
    let diffs: Vec<usize> = (0..ours.len())
        .filter(|&i| ours[i] != reference[i])
        .collect();
    let max = diffs
        .iter()
        .map(|&i| (ours[i] as i32 - reference[i] as i32).abs())
        .max()
        .unwrap_or(0);
    assert!(
        diffs.is_empty(),
        "{name}: {} of {} values differ (max |Δ| {max}, first at {})",
        diffs.len(),
        ours.len(),
        diffs[0]
    );
}

fn hwc_concat(frames: &[&Frame]) -> Vec<u8> {
    frames.iter().flat_map(|f| f.data.iter().copied()).collect()
}

fn chw_concat(frames: &[&Frame]) -> Vec<u8> {
    frames.iter().flat_map(|f| f.to_chw()).collect()
}

/// Our frames of one stage against `tap`, `[4, H, W, 3]` when `hwc` and `[4, 3, H, W]`
/// otherwise: its shape, then every byte.
fn assert_stage(case: &str, taps: &Taps, tap: &str, ours: &[&Frame], hwc: bool) {
    let (h, w) = (ours[0].height, ours[0].width);
    let (dims, bytes) = if hwc {
        ([4, h, w, 3], hwc_concat(ours))
    } else {
        ([4, 3, h, w], chw_concat(ours))
    };
    assert_eq!(taps.dims(tap), dims, "{case} {tap}");
    assert_u8_exact(&format!("{case} {tap}"), &bytes, &taps.u8s(tap));
}

/// Every image tap of one case against our stages.
fn check_case(case: &str) {
    let taps = Taps::load(case);
    let pipe = pipeline();
    let frames = case_frames(case);
    let stages: Vec<_> = frames
        .iter()
        .map(|f| pipe.frame_stages(f).expect("stages"))
        .collect();

    let stage =
        |tap: &str, ours: Vec<&Frame>, hwc: bool| assert_stage(case, &taps, tap, &ours, hwc);
    if taps.has("proc.aug_step1_resize_u8") {
        let ours = stages.iter().map(|s| &s.aug.resized).collect();
        stage("proc.aug_step1_resize_u8", ours, true);
        let ours = stages.iter().map(|s| &s.aug.cropped).collect();
        stage("proc.aug_step2_centercrop_u8", ours, true);
    }
    stage(
        "proc.images_after_aug_u8",
        stages.iter().map(|s| &s.aug.output).collect(),
        false,
    );
    assert_eq!(taps.dims("proc.qwen_resized_u8"), [4, 3, 256, 448]);
    stage(
        "proc.qwen_resized_u8",
        stages.iter().map(|s| &s.qwen_resized).collect(),
        false,
    );

    let processed = pipe.process(&frames).expect("process");
    let grid: Vec<i64> = processed
        .image_grid_thw
        .iter()
        .flat_map(|g| g.iter().map(|&v| v as i64))
        .collect();
    assert_eq!(
        grid,
        taps.i64s("proc.image_grid_thw"),
        "{case} image_grid_thw"
    );
    assert_eq!(processed.tokens_per_image, vec![112; 4]);
    assert_eq!(processed.patch_dim, 1536);
    assert_eq!(processed.num_patches(), 1792);

    if taps.has("proc.pixel_values") {
        let reference = taps.f32s("proc.pixel_values");
        assert_eq!(taps.dims("proc.pixel_values"), [1792, 1536]);
        assert_eq!(processed.pixel_values.len(), reference.len());
        let not_identical = processed
            .pixel_values
            .iter()
            .zip(&reference)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        let max = gr00t_fixtures::max_abs_diff(&processed.pixel_values, &reference);
        assert!(max <= 1e-6, "{case} pixel_values: max |Δ| {max:e}");
        assert_eq!(
            not_identical, 0,
            "{case} pixel_values: {not_identical} values not bit-identical"
        );
    }
}

#[test]
fn case0_image_taps_bit_exact() {
    check_case("case0");
}

#[test]
fn case1_image_taps_bit_exact() {
    check_case("case1");
}

#[test]
fn case2_image_taps_bit_exact() {
    check_case("case2");
}

#[test]
fn case3_image_taps_bit_exact_downscale_path() {
    check_case("case3");
}

#[test]
fn request_base64_frames_equal_png_files() {
    for case in CASES {
        let req: serde_json::Value = serde_json::from_str(&request_json(case)).expect("json");
        let files = case_frames(case);
        // files are time-major [ext, wrist, ext, wrist]; the request is per camera [t-15, t0].
        for (cam, idx) in [
            ("exterior_image_1_left", [0, 2]),
            ("wrist_image_left", [1, 3]),
        ] {
            let arr = req["images"][cam].as_array().expect("image array");
            assert_eq!(arr.len(), 2);
            for (s, &i) in arr.iter().zip(&idx) {
                let frame = decode_base64_frame(s.as_str().expect("string")).expect("decode");
                assert_eq!(frame, files[i], "{case} {cam} frame {i}");
            }
        }
    }
}

#[test]
fn geometry_of_fixture_sizes() {
    let pipe = pipeline();
    for (w, h) in [(320, 180), (640, 360)] {
        let g = pipe.geometry(w, h).unwrap();
        assert_eq!(g.aug.letterboxed, (w, h));
        assert_eq!(g.aug.resized, (455, 256));
        assert_eq!(
            (
                g.aug.crop.x0,
                g.aug.crop.y0,
                g.aug.crop.width,
                g.aug.crop.height
            ),
            (11, 6, 432, 243)
        );
        assert_eq!(g.aug.output, (455, 256));
        assert_eq!(g.qwen_size, (448, 256));
        assert_eq!(g.grid_thw, DROID_GRID_THW);
    }
}

#[test]
fn eval_transform_parameters_from_config_and_fallbacks() {
    let albumentations = |edge, fraction| ResizeKind::Albumentations {
        shortest_edge: edge,
        crop_fraction: fraction,
    };
    let ckpt = Checkpoint::open(tiny_checkpoint()).unwrap();
    let t = EvalTransform::from_processor_config(&ckpt.processor).unwrap();
    assert_eq!(t.kind, albumentations(256, 0.95));
    assert!(!t.letter_box);

    // shortest_image_edge / crop_fraction null: the target/crop fallbacks.
    let cfg = ProcessorConfig {
        use_albumentations: true,
        shortest_image_edge: None,
        crop_fraction: None,
        image_target_size: Some(vec![256, 256]),
        image_crop_size: Some(vec![230, 230]),
        letter_box_transform: true,
        ..ProcessorConfig::default()
    };
    let t = EvalTransform::from_processor_config(&cfg).unwrap();
    assert_eq!(t.kind, albumentations(256, 230.0 / 256.0));
    assert!(t.letter_box);

    // torchvision: [h, w] sizes, or one side.
    let torchvision = ProcessorConfig {
        use_albumentations: false,
        image_target_size: Some(vec![224, 320]),
        image_crop_size: Some(vec![200, 288]),
        ..cfg.clone()
    };
    let t = EvalTransform::from_processor_config(&torchvision).unwrap();
    let exact = TvSize::Exact {
        width: 320,
        height: 224,
    };
    assert_eq!(
        t.kind,
        ResizeKind::Torchvision {
            target: exact,
            crop_width: 288,
            crop_height: 200
        }
    );
    let short = ProcessorConfig {
        image_target_size: Some(vec![256]),
        image_crop_size: Some(vec![230]),
        ..torchvision.clone()
    };
    let t = EvalTransform::from_processor_config(&short).unwrap();
    assert_eq!(
        t.kind,
        ResizeKind::Torchvision {
            target: TvSize::Shorter(256),
            crop_width: 230,
            crop_height: 230
        }
    );

    // What upstream cannot build or run is refused, naming the file and the key.
    let refused = |cfg: &ProcessorConfig, key: &str| {
        let e = EvalTransform::from_processor_config(cfg).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, ImageError::Config(_)), "{msg}");
        assert!(
            msg.contains(&format!("processor_config.json: processor_kwargs.{key}")),
            "{msg}"
        );
    };
    // The defaults are upstream's constructor's: torchvision, which needs a target size.
    refused(&ProcessorConfig::default(), "image_target_size");
    refused(
        &ProcessorConfig {
            image_crop_size: None,
            ..torchvision.clone()
        },
        "image_crop_size",
    );
    refused(
        &ProcessorConfig {
            image_target_size: Some(vec![256, 256, 3]),
            ..torchvision.clone()
        },
        "image_target_size",
    );
    refused(
        &ProcessorConfig {
            image_crop_size: Some(vec![0]),
            ..torchvision
        },
        "image_crop_size",
    );
    refused(
        &ProcessorConfig {
            image_target_size: None,
            ..cfg.clone()
        },
        "shortest_image_edge",
    );
    refused(
        &ProcessorConfig {
            crop_fraction: Some(1.5),
            ..cfg.clone()
        },
        "crop_fraction",
    );
    refused(
        &ProcessorConfig {
            image_crop_size: None,
            ..cfg
        },
        "crop_fraction",
    );
}

#[test]
fn smart_resize_documented_examples() {
    // qwen3_vl.md §2.2, computed there with the exact Python function; (H, W) → (h, w).
    let cases = [
        ((480, 640), (480, 640)),
        ((224, 224), (256, 256)),
        ((100, 100), (256, 256)),
        ((1080, 1920), (1088, 1920)),
        ((4000, 6000), (3328, 4992)),
        ((48, 1000), (64, 1184)),
        ((180, 320), (192, 352)),
        ((256, 455), (256, 448)),
    ];
    for ((h, w), expected) in cases {
        assert_eq!(
            smart_resize(h, w, 32, 65536, 16777216).unwrap(),
            expected,
            "{h}x{w}"
        );
    }
    assert!(matches!(
        smart_resize(10, 2500, 32, 65536, 16777216),
        Err(ImageError::Geometry(_))
    ));
}

/// A frame from per-pixel RGB values.
fn frame_from(width: usize, height: usize, f: impl Fn(usize, usize, usize) -> u8) -> Frame {
    let mut data = Vec::with_capacity(width * height * 3);
    for y in 0..height {
        for x in 0..width {
            for c in 0..3 {
                data.push(f(x, y, c));
            }
        }
    }
    Frame::new(width, height, data).unwrap()
}

#[test]
fn area_exact_2x_downscale_uses_rounded_shift() {
    // 2x2 blocks with sums 2, 6, 10: (sum + 2) >> 2 gives 1, 2, 3, where round-half-even of the
    // mean (0.5, 1.5, 2.5) would give 0, 2, 2.
    let src = frame_from(2, 2, |x, y, c| match c {
        0 => [0, 1, 1, 0][y * 2 + x],
        1 => [1, 2, 2, 1][y * 2 + x],
        _ => [2, 3, 3, 2][y * 2 + x],
    });
    assert_eq!(resize_area(&src, 1, 1).unwrap().data, vec![1, 2, 3]);
}

#[test]
fn area_exact_3x_downscale_rounds_the_f32_mean() {
    // sum 94 over 9 pixels → 94 · f32(1/9) = 10.44 → 10; sum 103 → 11.44 → 11.
    let src = frame_from(6, 3, |x, y, _| {
        if x < 3 {
            if x == 0 && y == 0 {
                14
            } else {
                10
            }
        } else if x == 5 && y == 2 {
            23
        } else {
            10
        }
    });
    let out = resize_area(&src, 2, 1).unwrap();
    assert_eq!(out.data, vec![10, 10, 10, 11, 11, 11]);
}

#[test]
fn area_true_downscale_hand_example() {
    // 3 → 2 columns (scale 1.5): d0 = 0·(2/3) + 100·(1/3) = 33.33 → 33,
    // d1 = 100·(1/3) + 200·(2/3) = 166.67 → 167; the height stays 1 (β = 1).
    let src = frame_from(3, 1, |x, _, _| [0, 100, 200][x]);
    let out = resize_area(&src, 2, 1).unwrap();
    assert_eq!(out.data, vec![33, 33, 33, 167, 167, 167]);
}

#[test]
fn area_integer_upscale_replicates_pixels() {
    // INTER_AREA enlarging by an integer factor is pixel replication in OpenCV.
    let src = frame_from(2, 2, |x, y, c| (10 * (y * 2 + x) + c) as u8);
    let out = resize_area(&src, 4, 4).unwrap();
    let expected = frame_from(4, 4, |x, y, c| (10 * ((y / 2) * 2 + x / 2) + c) as u8);
    assert_eq!(out, expected);
}

#[test]
fn hd_frame_runs_through_the_whole_chain() {
    let pipe = pipeline();
    let frame = frame_from(1280, 720, |x, y, c| ((x * 7 + y * 3 + c * 50) % 256) as u8);
    check_frame_geometry(1280, 720).unwrap();
    let g = pipe.geometry(1280, 720).unwrap();
    assert_eq!(g.aug.resized, (455, 256));
    let frames = vec![frame.clone(), frame.clone(), frame.clone(), frame];
    let out = pipe.process(&frames).unwrap();
    assert_eq!(out.image_grid_thw, vec![DROID_GRID_THW; 4]);
    assert_eq!(out.pixel_values.len(), 4 * 448 * 1536);
    assert!(out.pixel_values.iter().all(|v| (-1.0..=1.0).contains(v)));
}

#[test]
fn accepted_aspect_band_always_lands_on_the_droid_grid() {
    let pipe = pipeline();
    let mut checked = 0;
    for h in 1..=1200usize {
        let lo = (h as f64 * MIN_FRAME_ASPECT).ceil() as usize;
        let hi = (h as f64 * MAX_FRAME_ASPECT).floor() as usize;
        for w in lo..=hi {
            if check_frame_geometry(w, h).is_ok() {
                assert_eq!(pipe.grid_for(w, h).unwrap(), DROID_GRID_THW, "{w}x{h}");
                checked += 1;
            }
        }
    }
    assert!(checked > 10_000);
}

#[test]
fn frame_geometry_check_rejects_wrong_aspect() {
    for (w, h) in [(320, 180), (1280, 720), (640, 360), (16, 9)] {
        check_frame_geometry(w, h).unwrap();
    }
    for (w, h) in [
        (180, 320),
        (640, 480),
        (256, 256),
        (2000, 1000),
        (0, 0),
        (320, 0),
    ] {
        assert!(
            matches!(check_frame_geometry(w, h), Err(ImageError::Geometry(_))),
            "{w}x{h}"
        );
    }
    // A 4:3 frame ends on another grid, which is why it is refused.
    assert_eq!(pipeline().grid_for(640, 480).unwrap(), [1, 16, 22]);
}

fn png_bytes(img: DynamicImage) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, ImageFormat::Png).unwrap();
    out.into_inner()
}

#[test]
fn decode_converts_like_pil_convert_rgb() {
    let gray = ImageBuffer::from_fn(3, 2, |x, y| Luma([(x * 40 + y * 100) as u8]));
    let f = decode_frame_bytes(&png_bytes(DynamicImage::ImageLuma8(gray.clone()))).unwrap();
    let expected = frame_from(3, 2, |x, y, _| gray.get_pixel(x as u32, y as u32)[0]);
    assert_eq!(f, expected);

    let gray_a = ImageBuffer::from_fn(3, 2, |x, _| LumaA([(x * 90) as u8, 7]));
    let f = decode_frame_bytes(&png_bytes(DynamicImage::ImageLumaA8(gray_a))).unwrap();
    assert_eq!(f, frame_from(3, 2, |x, _, _| (x * 90) as u8));

    // RGBA: alpha is dropped, not composited.
    let rgba = ImageBuffer::from_fn(2, 2, |x, y| Rgba([x as u8 * 200, y as u8 * 100, 50, 0]));
    let f = decode_frame_bytes(&png_bytes(DynamicImage::ImageRgba8(rgba))).unwrap();
    assert_eq!(
        f,
        frame_from(2, 2, |x, y, c| [x as u8 * 200, y as u8 * 100, 50][c])
    );

    // 16-bit RGB: PIL keeps the high byte.
    let rgb16 = ImageBuffer::from_fn(2, 1, |x, _| Rgb([0x12ff, 0xabcd + x as u16, 0x00ff]));
    let f = decode_frame_bytes(&png_bytes(DynamicImage::ImageRgb16(rgb16))).unwrap();
    assert_eq!(f.data, vec![0x12, 0xab, 0x00, 0x12, 0xab, 0x00]);

    // 16-bit gray (PIL mode I;16): values clip at 255.
    let gray16 = ImageBuffer::from_fn(3, 1, |x, _| Luma([[17u16, 255, 4000][x as usize]]));
    let f = decode_frame_bytes(&png_bytes(DynamicImage::ImageLuma16(gray16))).unwrap();
    assert_eq!(f.data, vec![17, 17, 17, 255, 255, 255, 255, 255, 255]);
}

#[test]
fn decode_jpeg() {
    let src = frame_from(64, 36, |x, y, c| (x * 3 + y * 2 + c * 40) as u8);
    let img = ImageBuffer::<Rgb<u8>, _>::from_raw(64, 36, src.data.clone()).unwrap();
    let mut bytes = Cursor::new(Vec::new());
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, 95)
        .encode_image(&img)
        .unwrap();
    let f = decode_frame_bytes(bytes.get_ref()).unwrap();
    assert_eq!((f.width, f.height), (64, 36));
    let mean_err = f
        .data
        .iter()
        .zip(&src.data)
        .map(|(&a, &b)| (a as f64 - b as f64).abs())
        .sum::<f64>()
        / f.data.len() as f64;
    assert!(mean_err < 3.0, "mean |Δ| {mean_err}");
}

/// A PNG whose IHDR declares `w`×`h` RGB8 but carries no pixel data.
fn png_header_only(w: u32, h: u32) -> Vec<u8> {
    let mut ihdr = b"IHDR".to_vec();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend_from_slice(&13u32.to_be_bytes());
    png.extend_from_slice(&ihdr);
    png.extend_from_slice(&gr00t_fixtures::crc32(&ihdr).to_be_bytes());
    png
}

#[test]
fn decode_errors_are_typed() {
    assert!(matches!(
        decode_base64_frame("not base64 !!!"),
        Err(ImageError::Base64(_))
    ));
    assert!(matches!(
        decode_base64_frame(""),
        Err(ImageError::UnsupportedFormat(_))
    ));
    assert!(matches!(
        decode_frame_bytes(b"hello, this is not an image"),
        Err(ImageError::UnsupportedFormat(_))
    ));
    assert!(matches!(
        decode_frame_bytes(b"GIF89a\x01\x00\x01\x00\x00\x00\x00"),
        Err(ImageError::UnsupportedFormat(_))
    ));
    let png = std::fs::read(case_dir("case0").join(FRAME_FILES[0])).unwrap();
    for cut in [8, 30, png.len() / 2, png.len() - 13] {
        let err = decode_frame_bytes(&png[..cut]).unwrap_err();
        assert!(matches!(err, ImageError::Decode(_)), "cut {cut}: {err}");
        assert!(!err.to_string().is_empty());
    }
    assert!(matches!(
        decode_frame_bytes(&[0xFF, 0xD8, 0xFF, 0xE0, 0, 0]),
        Err(ImageError::Decode(_))
    ));
    // Declared size over the limit is refused before decoding (decompression bomb).
    let err = decode_frame_bytes(&png_header_only(100_000, 100_000)).unwrap_err();
    assert!(matches!(err, ImageError::TooLarge(_)), "{err}");
    let err = decode_frame_bytes(&png_header_only(8193, 16)).unwrap_err();
    assert!(matches!(err, ImageError::TooLarge(_)), "{err}");
}

/// A PNG whose IHDR declares `w`×`h` RGB8, followed by an IDAT chunk of bytes that are not a
/// zlib stream: its header reads, its pixels cannot be decoded.
fn png_declaring(w: u32, h: u32) -> Vec<u8> {
    let mut png = png_header_only(w, h);
    for (kind, data) in [(&b"IDAT"[..], &b"not zlib"[..]), (b"IEND", b"")] {
        let chunk = [kind, data].concat();
        png.extend_from_slice(&(data.len() as u32).to_be_bytes());
        png.extend_from_slice(&chunk);
        png.extend_from_slice(&gr00t_fixtures::crc32(&chunk).to_be_bytes());
    }
    png
}

/// case0's request with `images.exterior_image_1_left[0]` replaced by `file`.
fn case0_with_exterior_frame(file: &[u8]) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_str(&request_json("case0")).unwrap();
    v["images"]["exterior_image_1_left"][0] = base64::engine::general_purpose::STANDARD
        .encode(file)
        .into();
    serde_json::to_vec(&v).unwrap()
}

/// A real 64x36 JPEG whose SOF0 header is patched to declare `w`×`h`.
fn jpeg_declaring(w: u16, h: u16) -> Vec<u8> {
    let img = ImageBuffer::from_fn(64, 36, |x, y| Rgb([x as u8, y as u8, 9]));
    let mut bytes = Cursor::new(Vec::new());
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, 90)
        .encode_image(&img)
        .unwrap();
    let mut jpeg = bytes.into_inner();
    let sof = jpeg.windows(2).position(|m| m == [0xFF, 0xC0]).unwrap();
    // FF C0, length (2), precision (1), height (2), width (2).
    jpeg[sof + 5..sof + 7].copy_from_slice(&h.to_be_bytes());
    jpeg[sof + 7..sof + 9].copy_from_slice(&w.to_be_bytes());
    jpeg
}

#[test]
fn frame_sizes_are_refused_from_the_header_before_any_pixel_is_decoded() {
    // The header alone gives the size: this file has no decodable pixel data.
    let bomb = png_declaring(4096, 4096);
    let header = EncodedFrame::read_header(&bomb).unwrap();
    assert_eq!((header.width(), header.height()), (4096, 4096));
    assert!(matches!(header.decode(), Err(ImageError::Decode(_))));
    let jpeg = jpeg_declaring(4000, 2000);
    let header = EncodedFrame::read_header(&jpeg).unwrap();
    assert_eq!((header.width(), header.height()), (4000, 2000));
    // Over the pixel cap (4096 × 4096 by default): refused from the header, naming the flag.
    for file in [png_declaring(8192, 8192), jpeg_declaring(8000, 4000)] {
        match EncodedFrame::read_header(&file) {
            Err(ImageError::TooLarge(m)) => assert!(m.contains("--max-image-pixels"), "{m}"),
            other => panic!("{:?}", other.map(|h| (h.width(), h.height()))),
        }
    }

    let ckpt = Checkpoint::open(tiny_checkpoint()).unwrap();
    let prompt = PromptEncoder::load(tokenizer_path()).unwrap();
    let processor = droid_processor(&ckpt, prompt);
    let field = "images.exterior_image_1_left[0]";
    // Wrong aspect: the geometry 400. Decoding it would have failed with `cannot decode`
    // (its IDAT is not zlib), so this error shows that no decode was attempted.
    // Over the pixel cap or the decoder limit with a 16:9 shape: refused from the header too.
    // A 16:9 frame the contract accepts goes on to the pixel decode (which fails here).
    for (file, refusal) in [
        (png_declaring(4096, 4096), "bad image geometry: frame "),
        (png_declaring(4096, 1024), "bad image geometry: frame "),
        (jpeg_declaring(4000, 2000), "bad image geometry: frame "),
        (png_declaring(8192, 4608), "image too large"),
        (png_declaring(16384, 9216), "image too large"),
        (png_declaring(320, 180), "cannot decode image"),
    ] {
        let err = encode(&processor, &case0_with_exterior_frame(&file)).unwrap_err();
        assert_eq!(err.field, field);
        assert!(err.message.starts_with(refusal), "{}", err.message);
    }
}

#[test]
fn valid_frames_decode_as_the_image_crate_decodes_them() {
    for f in FRAME_FILES {
        let bytes = std::fs::read(case_dir("case0").join(f)).unwrap();
        let ours = EncodedFrame::read_header(&bytes).unwrap().decode().unwrap();
        let theirs = image::load_from_memory(&bytes).unwrap().to_rgb8();
        let (w, h) = theirs.dimensions();
        assert_eq!((ours.width, ours.height), (w as usize, h as usize));
        assert_eq!(ours.data, theirs.into_raw(), "{f}");
        assert_eq!(decode_frame_bytes(&bytes).unwrap(), ours);
    }
}

#[test]
fn malformed_frames_are_errors_not_panics() {
    let pipe = pipeline();
    let bad = Frame {
        width: 320,
        height: 180,
        data: vec![0; 10],
    };
    assert!(pipe.frame_stages(&bad).is_err());
    assert!(pipe.process(&[bad]).is_err());
    assert!(resize_area(&frame_from(2, 2, |_, _, _| 0), 0, 3).is_err());
    // 8192x1 would blow up to 2M×256 after SmallestMaxSize; refused from the geometry.
    assert!(pipe.geometry(8192, 1).is_err());
}

mod support;
use support::encode;

/// The generic processor of the DROID tag.
fn droid_processor(ck: &Checkpoint, prompt: PromptEncoder) -> EmbodimentProcessor {
    EmbodimentProcessor::new(ck, prompt, gr00t_embodiment::EMBODIMENT_TAG).unwrap()
}
