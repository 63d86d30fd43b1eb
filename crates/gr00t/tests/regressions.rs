//! Hostile inputs of the kinds the fuzzers (fuzz/, docs/HARDENING.md) generate, pinned as
//! tests: each must be refused with an error, never a panic, a stack overflow or a huge
//! allocation. The fuzz runs so far found no crash; an input that ever crashes a fuzz target is
//! added here with the fix.

// The protocol decoders, from the `gr00t` library as the fuzz crate links them.
use gr00t::doors::wire::{msgpack_numpy, npy, observation, schema};
use gr00t::doors::ws::droid_obs;
use gr00t_embodiment::image::{decode_base64_frame, decode_frame_bytes, ImageError};
use gr00t_fixtures::crc32;
use rmpv::Value;

fn npy_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn npy_with_overflowing_or_lying_shapes_is_refused() {
    let cases = [
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 8), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551615,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }",
        "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 0, 99999999999), }",
        "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (((((", // unbalanced
        "{'descr': '<f4', 'shape': (2,), }",                       // missing key
    ];
    for h in cases {
        let r = npy::decode(&npy_bytes(h, &[0u8; 8]));
        assert!(r.is_err(), "{h}: {r:?}");
    }
    // Truncated header length field and a header length past the end.
    assert!(npy::decode(b"\x93NUMPY\x01\x00\x10").is_err());
    assert!(npy::decode(b"\x93NUMPY\x02\x00\xff\xff\xff\xff{").is_err());
}

#[test]
fn deeply_nested_msgpack_is_refused_without_overflowing_the_stack() {
    // 200,000 nested one-element arrays (0x91), then nil.
    let mut deep = vec![0x91u8; 200_000];
    deep.push(0xc0);
    assert!(msgpack_numpy::unpack(&deep).is_err());
    // Same with maps {nil: {nil: …}}.
    let mut deep = Vec::new();
    for _ in 0..100_000 {
        deep.extend_from_slice(&[0x81, 0xc0]);
    }
    deep.push(0xc0);
    assert!(msgpack_numpy::unpack(&deep).is_err());
}

#[test]
fn msgpack_declaring_huge_lengths_is_refused_without_allocating_them() {
    // array32 / map32 / bin32 / str32 claiming 4 G elements with nothing behind them.
    for head in [
        &[0xddu8, 0xff, 0xff, 0xff, 0xff][..],
        &[0xdf, 0xff, 0xff, 0xff, 0xff],
        &[0xc6, 0xff, 0xff, 0xff, 0xff],
        &[0xdb, 0xff, 0xff, 0xff, 0xff],
    ] {
        assert!(msgpack_numpy::unpack(head).is_err(), "{head:x?}");
    }
}

fn str_map(pairs: Vec<(&str, Value)>) -> Value {
    Value::Map(
        pairs
            .into_iter()
            .map(|(k, v)| (Value::from(k), v))
            .collect(),
    )
}

#[test]
fn openpi_arrays_whose_bytes_do_not_match_their_shape_are_refused() {
    let arr = |shape: Vec<u64>, bytes: usize| {
        Value::Map(vec![
            (Value::Binary(b"__ndarray__".to_vec()), Value::Boolean(true)),
            (
                Value::Binary(b"data".to_vec()),
                Value::Binary(vec![7; bytes]),
            ),
            (Value::Binary(b"dtype".to_vec()), Value::from("|u1")),
            (
                Value::Binary(b"shape".to_vec()),
                Value::Array(shape.into_iter().map(Value::from).collect()),
            ),
        ])
    };
    for (shape, bytes) in [
        (vec![18, 32, 3], 10),             // too few bytes
        (vec![2, 18, 32, 3], 18 * 32 * 3), // one frame's bytes for two
        (vec![u64::MAX, u64::MAX, 3], 0),  // overflowing shape
        (vec![0, 0, 3], 0),                // empty frame
        (vec![1 << 40, 1 << 40, 3], 0),    // absurd frame
        (vec![2, 2, 2, 2, 2], 32),         // wrong rank
    ] {
        let Value::Map(m) = str_map(vec![
            (
                "observation/exterior_image_1_left",
                arr(shape.clone(), bytes),
            ),
            (
                "observation/wrist_image_left",
                arr(vec![18, 32, 3], 18 * 32 * 3),
            ),
            (
                "observation/joint_position",
                Value::Array(vec![Value::F64(0.0); 7]),
            ),
            (
                "observation/gripper_position",
                Value::Array(vec![Value::F64(0.0)]),
            ),
            ("observation/eef_9d", Value::Array(vec![Value::F64(0.0); 9])),
            ("prompt", Value::from("x")),
        ]) else {
            unreachable!()
        };
        assert!(
            droid_obs::parse(&m).is_err(),
            "{shape:?} with {bytes} bytes"
        );
    }
}

#[test]
fn gr00t_observations_with_hostile_shapes_are_refused() {
    let ckpt = gr00t_model::Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    let layouts =
        gr00t_core::layouts::Layouts::of_checkpoint(&ckpt, &[gr00t_embodiment::EMBODIMENT_TAG])
            .unwrap();
    let schema = schema::Schema::new(layouts.all()[0].clone(), 40, 132, false);
    let npy_arr = |h: &str, data: &[u8]| {
        str_map(vec![
            ("__ndarray_class__", Value::Boolean(true)),
            ("as_npy", Value::Binary(npy_bytes(h, data))),
        ])
    };
    // A batch of 0, and a video whose shape claims more bytes than it carries.
    for video in [
        npy_arr(
            "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 2, 18, 32, 3), }",
            &[],
        ),
        npy_arr(
            "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 2, 18, 32, 3), }",
            &[1; 9],
        ),
        npy_arr(
            "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 18, 32, 3), }",
            &[],
        ),
    ] {
        let obs = str_map(vec![
            (
                "video",
                str_map(vec![
                    ("exterior_image_1_left", video.clone()),
                    ("wrist_image_left", video),
                ]),
            ),
            ("state", str_map(vec![])),
            ("language", str_map(vec![])),
        ]);
        assert!(observation::parse(Some(&obs), None, &schema).is_err());
    }
    assert!(observation::parse(Some(&Value::Nil), None, &schema).is_err());
    assert!(observation::parse(None, Some(&Value::from(3)), &schema).is_err());
}

#[test]
fn images_declaring_huge_sizes_are_refused_before_decoding() {
    // A PNG signature + IHDR declaring 100000 x 100000 RGBA, with no pixel data.
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = b"IHDR".to_vec();
    ihdr.extend_from_slice(&100_000u32.to_be_bytes());
    ihdr.extend_from_slice(&100_000u32.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    png.extend_from_slice(&13u32.to_be_bytes());
    png.extend_from_slice(&ihdr);
    png.extend_from_slice(&crc32(&ihdr).to_be_bytes());
    assert!(matches!(
        decode_frame_bytes(&png),
        Err(ImageError::TooLarge(_))
    ));
    // Truncated files, a GIF, and text.
    assert!(decode_frame_bytes(&png[..20]).is_err());
    assert!(decode_frame_bytes(b"\xff\xd8\xff\xe0").is_err());
    assert!(decode_frame_bytes(b"GIF89a\x01\x00\x01\x00").is_err());
    assert!(decode_base64_frame("not base64 at all!").is_err());
    assert!(decode_base64_frame("").is_err());
}

#[test]
fn hostile_json_bodies_are_refused() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let huge_number = format!("{{\"seed\": 1{}}}", "0".repeat(10_000));
    let bodies: Vec<Vec<u8>> = vec![
        deep.into_bytes(),
        huge_number.into_bytes(),
        b"{\"seed\": -1}".to_vec(),
        b"{\"seed\": 1e400}".to_vec(),
        b"\xff\xfe{}".to_vec(),
        b"{\"images\": {\"exterior_image_1_left\": [\"\", \"\"]}}".to_vec(),
        b"{\"noise\": [[1e39]]}".to_vec(),
        b"{\"instruction\": \"\\ud800\"}".to_vec(),
    ];
    let ckpt = gr00t_model::Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    let layouts =
        gr00t_core::layouts::Layouts::of_checkpoint(&ckpt, &[gr00t_embodiment::EMBODIMENT_TAG])
            .unwrap();
    for b in bodies {
        let r = gr00t::request_from_body(&b, &layouts, None);
        assert!(
            r.is_err(),
            "{:?}",
            String::from_utf8_lossy(&b[..b.len().min(60)])
        );
    }
}
