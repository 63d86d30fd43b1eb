//! Unit tests of the wire encodings against bytes numpy 2.4 / msgpack-python 1.2 / openpi-client
//! produce (pasted from those libraries), and of the GR00T observation parser.

use super::msgpack_numpy::{self as mp, pack, str_map, unpack};
use super::ndarray::{DType, Kind, NdArray};
use super::npy;
use super::observation;
use super::schema::Schema;
use gr00t_embodiment::observation::NoiseSource;
use rmpv::Value;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// What `np.save` writes before the data of an array with this header dict text: the dict,
/// then spaces up to the 64-byte boundary (118 header bytes here) and `\n`.
fn npy_header(dict: &str) -> Vec<u8> {
    let mut h = b"\x93NUMPY\x01\x00\x76\x00".to_vec();
    h.extend_from_slice(dict.as_bytes());
    h.resize(127, b' ');
    h.push(b'\n');
    h
}

#[test]
fn npy_bytes_match_numpy_save() {
    // np.save(f, np.zeros((2, 3), np.float32)): 152 bytes.
    let a = NdArray::from_f32(vec![2, 3], &[0.0; 6]);
    let mut want = npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
    want.extend([0u8; 24]);
    let got = npy::encode(&a);
    assert_eq!(got.len(), 152);
    assert_eq!(got, want);
    assert_eq!(npy::decode(&got).unwrap(), a);

    // The shape numpy's DROID client sends back and forth: (1, 40, 9).
    let a = NdArray::from_f32(vec![1, 40, 9], &[0.0; 360]);
    let got = npy::encode(&a);
    assert_eq!(
        &got[..128],
        &npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 40, 9), }")[..]
    );
    // A 0-d array has no growth padding, only alignment.
    let s = NdArray::new(DType::parse("<f8").unwrap(), vec![], vec![0; 8]).unwrap();
    assert_eq!(
        &npy::encode(&s)[..128],
        &npy_header("{'descr': '<f8', 'fortran_order': False, 'shape': (), }")[..]
    );
}

#[test]
fn arrays_are_read_in_place_in_every_form() {
    // A video array's bytes stay in the message until each frame copies its own: every form's
    // view borrows them (the .npy one past its header), from an owned value or from the message
    // itself as the doors unpack it; only a Fortran-order .npy is reordered.
    let a = NdArray::new(DType::U8, vec![1, 2, 2, 3, 3], (0..36).collect()).unwrap();
    for form in [mp::ArrayForm::Npy, mp::ArrayForm::Nd, mp::ArrayForm::Openpi] {
        let v = mp::encode_array(&a, form);
        let (got, view) = mp::array_view(&v).unwrap();
        let view = view.unwrap();
        assert_eq!(got, form);
        let std::borrow::Cow::Borrowed(data) = view.data else {
            panic!("{form:?}: the view copied the bytes");
        };
        let Value::Map(m) = &v else { unreachable!() };
        let key = if form == mp::ArrayForm::Npy {
            "as_npy"
        } else {
            "data"
        };
        let Some(Value::Binary(held)) = mp::get(m, key) else {
            panic!("{form:?}: no bytes under {key}")
        };
        let end = held.as_ptr_range().end;
        assert_eq!(
            data.as_ptr_range().end,
            end,
            "{form:?}: not the message's bytes"
        );
        assert_eq!(view.into_owned(), a);
        // As the doors read a message: the bytes are the message's own, never copied.
        let message = pack(&v);
        let read = mp::unpack_ref(&message).unwrap();
        let (_, view) = mp::array_view(&read).unwrap();
        let view = view.unwrap();
        let std::borrow::Cow::Borrowed(data) = view.data else {
            panic!("{form:?}: the view copied the bytes");
        };
        let inside = message.as_ptr_range();
        assert!(
            inside.start <= data.as_ptr() && data.as_ptr_range().end <= inside.end,
            "{form:?}: the frame bytes are not the message's"
        );
        assert_eq!(view.into_owned(), a);
    }
    let mut file = npy_header("{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3), }");
    file.extend(hex("000003000100040002000500"));
    assert!(matches!(
        npy::view(&file).unwrap().data,
        std::borrow::Cow::Owned(_)
    ));
}

#[test]
fn npy_reads_fortran_order_and_refuses_bad_files() {
    // np.save(f, np.asfortranarray(np.arange(6, dtype='<i2').reshape(2, 3))).
    let mut file = npy_header("{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3), }");
    file.extend(hex("000003000100040002000500"));
    let a = npy::decode(&file).unwrap();
    assert_eq!(a.shape, vec![2, 3]);
    assert_eq!(a.to_f64s(), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);

    let good = npy::encode(&NdArray::from_f32(vec![2], &[1.0, 2.0]));
    assert!(npy::decode(&good[..good.len() - 1]).is_err(), "short data");
    assert!(npy::decode(b"not npy at all").is_err());
    let mut obj = npy_header("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }");
    obj.extend([0u8; 8]);
    assert!(npy::decode(&obj).unwrap_err().to_string().contains("dtype"));
    let mut structured =
        npy_header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }");
    structured.extend([0u8; 4]);
    assert!(npy::decode(&structured).is_err());
}

#[test]
fn dtypes_parse_and_convert() {
    assert_eq!(DType::parse("|u1").unwrap(), DType::U8);
    assert_eq!(DType::parse("<f4").unwrap(), DType::F32);
    assert_eq!(DType::F32.descr(), "<f4");
    assert_eq!(DType::U8.descr(), "|u1");
    for bad in ["<c8", "|O", "<U5", "f4", "<f2", ""] {
        assert!(DType::parse(bad).is_err(), "{bad}");
    }
    let be = NdArray::new(
        DType::parse(">f8").unwrap(),
        vec![1],
        1.5f64.to_be_bytes().to_vec(),
    );
    assert_eq!(be.unwrap().to_f64s(), vec![1.5]);
    let i = NdArray::new(
        DType::parse("<i2").unwrap(),
        vec![2],
        vec![0xfe, 0xff, 7, 0],
    )
    .unwrap();
    assert_eq!(i.to_f64s(), vec![-2.0, 7.0]);
    assert_eq!(i.dtype.kind, Kind::Int);
    assert!(NdArray::new(DType::F32, vec![3], vec![0; 8]).is_err());
}

#[test]
fn openpi_encoding_matches_openpi_client() {
    // openpi_client.msgpack_numpy.packb(np.array([1.5, -2.0], np.float32)).
    let a = NdArray::from_f32(vec![2], &[1.5, -2.0]);
    let want = hex(
        "84c40b5f5f6e6461727261795f5fc3c40464617461c4080000c03f000000c0c4056474797065a33c6634c4057368617065\
         9102",
    );
    assert_eq!(pack(&mp::openpi_array(&a)), want);
    let back = mp::from_openpi_array(&unpack(&want).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(back, a);
    // A plain dict is not an array; a numpy scalar reads as a number.
    assert!(mp::from_openpi_array(&str_map([("x", Value::from(1))])).is_none());
    let scalar = Value::Map(vec![
        (
            Value::Binary(b"__npgeneric__".to_vec()),
            Value::Boolean(true),
        ),
        (Value::Binary(b"data".to_vec()), Value::F64(0.25)),
        (Value::Binary(b"dtype".to_vec()), Value::from("<f8")),
    ]);
    assert_eq!(mp::scalar(&scalar), Some(0.25));
}

#[test]
fn gr00t_encoding_matches_msg_serializer() {
    // msgpack.packb({"a": np.array([[7]], np.uint8)}, default=MsgSerializer.encode_custom_classes)
    let a = NdArray::new(DType::U8, vec![1, 1], vec![7]).unwrap();
    let mut want = hex(
        "81a16182b15f5f6e6461727261795f636c6173735f5fc3a661735f6e7079c481934e554d5059010076007b2764\
         65736372273a20277c7531272c2027666f727472616e5f6f72646572273a2046616c73652c2027736861706527\
         3a2028312c2031292c207d",
    );
    // 58 spaces of padding, the header's '\n', then the one data byte.
    want.extend([b' '; 58]);
    want.extend([b'\n', 7]);
    assert_eq!(pack(&str_map([("a", mp::gr00t_array(&a))])), want);
    // msgpack.packb({"status": "ok", "message": "Server is running"}): the ping reply.
    let ping = str_map([
        ("status", Value::from("ok")),
        ("message", Value::from("Server is running")),
    ]);
    assert_eq!(
        pack(&ping),
        hex("82a6737461747573a26f6ba76d657373616765b15365727665722069732072756e6e696e67")
    );
    assert!(unpack(&hex("81a161")).is_err(), "truncated msgpack");
    assert!(unpack(&[0x01, 0x02]).is_err(), "trailing bytes");
}

/// An array header for `n` items (array 32).
fn array32(n: u32) -> Vec<u8> {
    [&[0xdd][..], &n.to_be_bytes()].concat()
}

#[test]
fn unpack_refuses_element_bombs_deep_nesting_and_lying_headers_before_decoding() {
    let refused = |bytes: &[u8], want: &str| {
        let e = unpack(bytes).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
        assert_eq!(mp::check_size(bytes).unwrap_err().to_string(), e);
    };
    let too_many = "declares more than 65536 elements";
    // 16 MiB of nils in one array.
    let mut nils = array32(16 << 20);
    nils.resize(5 + (16 << 20), 0xc0);
    refused(&nils, too_many);
    // The bound is on the whole message: 20 000 arrays of 4 nils.
    let mut many = array32(20_000);
    for _ in 0..20_000 {
        many.extend([0x94, 0xc0, 0xc0, 0xc0, 0xc0]);
    }
    refused(&many, too_many);
    // Headers claiming 2^32 - 1 items / pairs with nothing after them, and a cut header.
    refused(&array32(u32::MAX), too_many);
    refused(&[0xdf, 0xff, 0xff, 0xff, 0xff], too_many);
    refused(&[0xdd, 0xff, 0xff], "ends inside a value");
    // 100 000 nested arrays.
    let mut deep = vec![0x91; 100_000];
    deep.push(0xc0);
    refused(&deep, "nested deeper than 32 levels");

    // At the bounds: the top value and 65 535 items pass, one more does not; 32 levels of
    // nesting pass, 33 do not.
    let items = |n: u32| [array32(n), vec![0xc0; n as usize]].concat();
    let v = unpack(&items(65_535)).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(65_535));
    refused(&items(65_536), too_many);
    let nested = |d: usize| [vec![0x91; d], vec![0xc0]].concat();
    assert!(unpack(&nested(32)).is_ok());
    refused(&nested(33), "nested deeper than 32 levels");
    // A map's keys and values both count: 32 768 pairs are 65 536 values, plus the map.
    let mut map = vec![0xdf];
    map.extend_from_slice(&32_768u32.to_be_bytes());
    for i in 0..32_768u32 {
        map.push(0xce);
        map.extend_from_slice(&i.to_be_bytes());
        map.push(0xc0);
    }
    refused(&map, too_many);
}

#[test]
fn the_size_check_walks_every_msgpack_type_as_rmpv_decodes_it() {
    let v = Value::Array(vec![
        Value::Nil,
        Value::Boolean(true),
        Value::from(7),
        Value::from(-3),
        Value::from(200u8),
        Value::from(-100i8),
        Value::from(60_000u16),
        Value::from(-30_000i16),
        Value::from(4_000_000_000u32),
        Value::from(-2_000_000_000i32),
        Value::from(u64::MAX),
        Value::from(i64::MIN),
        Value::F32(1.5),
        Value::F64(-2.25),
        Value::from("short"),
        Value::from("s".repeat(200)),
        Value::from("m".repeat(70_000)),
        Value::Binary(vec![1; 10]),
        Value::Binary(vec![2; 300]),
        Value::Binary(vec![3; 70_000]),
        Value::Ext(1, vec![9]),
        Value::Ext(2, vec![9; 2]),
        Value::Ext(3, vec![9; 4]),
        Value::Ext(4, vec![9; 8]),
        Value::Ext(5, vec![9; 16]),
        Value::Ext(6, vec![9; 3]),
        Value::Ext(7, vec![9; 300]),
        Value::Ext(8, vec![9; 70_000]),
        Value::Array(vec![Value::Nil; 20]),
        Value::Map(vec![(Value::from("k"), Value::Array(vec![]))]),
        Value::Map((0..20).map(|i| (Value::from(i), Value::Nil)).collect()),
        Value::Map(vec![]),
    ]);
    let bytes = pack(&v);
    assert_eq!(unpack(&bytes).unwrap(), v);
    // Every cut of it is an error, never a panic, whichever side notices.
    for cut in (0..bytes.len()).step_by(97).chain([bytes.len() - 1]) {
        assert!(unpack(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    assert!(mp::check_size(&[0xc1]).is_err());
}

fn schema(flat: bool) -> Schema {
    let ckpt = gr00t_model::Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    let layouts =
        gr00t_core::layouts::Layouts::of_checkpoint(&ckpt, &[gr00t_embodiment::EMBODIMENT_TAG])
            .unwrap();
    Schema::new(layouts.all()[0].clone(), 40, 132, flat)
}

fn gr00t_obs(b: usize, t: usize, flat: bool) -> Value {
    let video = |v: u8| {
        let a = NdArray::new(
            DType::U8,
            vec![b, t, 180, 320, 3],
            vec![v; b * t * 180 * 320 * 3],
        );
        mp::gr00t_array(&a.unwrap())
    };
    let st = |d: usize| mp::gr00t_array(&NdArray::from_f32(vec![b, 1, d], &vec![0.5; b * d]));
    let lang = |flat: bool| {
        let one = Value::from("pick it");
        Value::Array(vec![if flat { one } else { Value::Array(vec![one]) }; b])
    };
    let lang_key = "annotation.language.language_instruction";
    if flat {
        str_map([
            ("video.exterior_image_1_left", video(1)),
            ("video.wrist_image_left", video(2)),
            ("state.eef_9d", st(9)),
            ("state.gripper_position", st(1)),
            ("state.joint_position", st(7)),
            (lang_key, lang(true)),
        ])
    } else {
        str_map([
            (
                "video",
                str_map([
                    ("exterior_image_1_left", video(1)),
                    ("wrist_image_left", video(2)),
                ]),
            ),
            (
                "state",
                str_map([
                    ("eef_9d", st(9)),
                    ("gripper_position", st(1)),
                    ("joint_position", st(7)),
                ]),
            ),
            ("language", str_map([(lang_key, lang(false))])),
        ])
    }
}

#[test]
fn gr00t_observation_nested_and_flat() {
    for flat in [false, true] {
        let s = schema(flat);
        let parsed = observation::parse(Some(&gr00t_obs(2, 2, flat)), None, &s).unwrap();
        assert_eq!(parsed.form, mp::ArrayForm::Npy);
        let items = parsed.items;
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].observation.images[0].1[1].data[0], 1);
        assert_eq!(items[1].observation.images[1].1[0].data[0], 2);
        assert_eq!(
            items[0].observation.state[2],
            ("joint_position".into(), vec![0.5; 7])
        );
        assert_eq!(items[0].observation.instruction, "pick it");
        assert_eq!(items[0].observation.noise, NoiseSource::Seed(42));
    }
    // The nested server names the flag a flat client needs.
    let e = observation::parse(Some(&gr00t_obs(1, 2, true)), None, &schema(false))
        .unwrap_err()
        .to_string();
    assert!(e.contains("--use-sim-policy-wrapper"), "{e}");
    let e = observation::parse(Some(&gr00t_obs(1, 1, false)), None, &schema(false))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "Video key 'exterior_image_1_left's horizon must be 2. Got 1"
    );
}

#[test]
fn gr00t_options_seed_and_noise() {
    let s = schema(false);
    let obs = gr00t_obs(2, 2, false);
    let opts = |pairs: Vec<(&str, Value)>| str_map(pairs);
    let seeds = observation::parse(Some(&obs), Some(&opts(vec![("seed", Value::from(5))])), &s);
    assert_eq!(
        seeds.unwrap().items[1].observation.noise,
        NoiseSource::Seed(5)
    );
    let noise = |shape: Vec<usize>| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
        mp::gr00t_array(&NdArray::from_f32(shape, &v))
    };
    // [B, H, A]: one row block per item; [H, A]: shared.
    let items = observation::parse(
        Some(&obs),
        Some(&opts(vec![("noise", noise(vec![2, 40, 132]))])),
        &s,
    )
    .unwrap()
    .items;
    match (&items[0].observation.noise, &items[1].observation.noise) {
        (NoiseSource::Client(a), NoiseSource::Client(b)) => {
            assert_eq!((a[0], b[0], b.len()), (0.0, 5280.0, 5280));
        }
        other => panic!("{other:?}"),
    }
    let items = observation::parse(
        Some(&obs),
        Some(&opts(vec![("noise", noise(vec![40, 132]))])),
        &s,
    )
    .unwrap()
    .items;
    assert_eq!(items[0].observation.noise, items[1].observation.noise);
    let e = observation::parse(
        Some(&obs),
        Some(&opts(vec![("noise", noise(vec![40, 8]))])),
        &s,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("(40, 132)"), "{e}");
    let both = opts(vec![
        ("seed", Value::from(1)),
        ("noise", noise(vec![40, 132])),
    ]);
    assert!(observation::parse(Some(&obs), Some(&both), &s).is_err());
}

#[test]
fn nd_encoding_matches_msgpack_numpy() {
    // msgpack 1.1.0: packb(np.array([[1.5, -2.0]], np.float32), default=msgpack_numpy.encode)
    // with msgpack-numpy 0.4.8.
    let want = hex(
        "85c4026e64c3c40474797065a33c6634c4046b696e64c400c4057368617065920102c40464617461c408\
         0000c03f000000c0",
    );
    let a = NdArray::from_f32(vec![1, 2], &[1.5, -2.0]);
    assert_eq!(pack(&mp::encode_array(&a, mp::ArrayForm::Nd)), want);
    let (form, back) = mp::decode_array(&unpack(&want).unwrap()).unwrap();
    assert_eq!((form, back.unwrap()), (mp::ArrayForm::Nd, a.clone()));
    // The other two forms are still told apart.
    for form in [mp::ArrayForm::Npy, mp::ArrayForm::Openpi] {
        let (got, back) = mp::decode_array(&mp::encode_array(&a, form)).unwrap();
        assert_eq!((got, back.unwrap()), (form, a.clone()));
    }
    assert!(mp::decode_array(&str_map([("x", Value::from(1))])).is_none());
    // np.int64(5) and np.float32(0.5): numpy scalars are {nd: False, type, data}.
    let int = unpack(&hex(
        "83c4026e64c2c40474797065a33c6938c40464617461c4080500000000000000",
    ))
    .unwrap();
    assert_eq!((mp::uint(&int), mp::scalar(&int)), (Some(5), Some(5.0)));
    let half = unpack(&hex(
        "83c4026e64c2c40474797065a33c6634c40464617461c4040000003f",
    ))
    .unwrap();
    assert_eq!((mp::uint(&half), mp::scalar(&half)), (None, Some(0.5)));
    assert_eq!(mp::type_name(&half), "numpy.ndarray");
}

/// A msgpack-numpy map with these `nd`, `kind`, `type` values and `data` bytes, shape (1,).
fn nd_map(nd: Value, kind: Value, ty: Value, data: Vec<u8>) -> Value {
    let key = |k: &[u8]| Value::Binary(k.to_vec());
    Value::Map(vec![
        (key(b"nd"), nd),
        (key(b"type"), ty),
        (key(b"kind"), kind),
        (key(b"shape"), Value::Array(vec![Value::from(1)])),
        (key(b"data"), Value::Binary(data)),
    ])
}

#[test]
fn nd_object_structured_and_malformed_payloads_are_refused() {
    let pickle = b"\x80\x02cos\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03.".to_vec();
    let object_type = Value::Array(vec![Value::Array(vec![Value::from(""), Value::from("|O")])]);
    let object = nd_map(
        Value::Boolean(true),
        Value::Binary(b"O".to_vec()),
        object_type.clone(),
        pickle.clone(),
    );
    let e = mp::decode_array(&object)
        .unwrap()
        .1
        .unwrap_err()
        .to_string();
    assert!(e.contains("object arrays") && e.contains("pickle"), "{e}");
    // A truthy int instead of True, or a str kind, is refused the same way.
    for (nd, kind) in [
        (Value::from(1), Value::Binary(b"O".to_vec())),
        (Value::Boolean(true), Value::from("O")),
    ] {
        let m = nd_map(nd, kind, object_type.clone(), pickle.clone());
        assert!(mp::decode_array(&m)
            .unwrap()
            .1
            .unwrap_err()
            .to_string()
            .contains("object"));
    }
    let structured_type = Value::Array(vec![Value::Array(vec![
        Value::from("a"),
        Value::from("<f4"),
    ])]);
    let structured = nd_map(
        Value::Boolean(true),
        Value::Binary(b"V".to_vec()),
        structured_type,
        vec![0; 4],
    );
    assert!(mp::decode_array(&structured)
        .unwrap()
        .1
        .unwrap_err()
        .to_string()
        .contains("structured"));
    let cases = [
        (Value::from("<U2"), vec![0u8; 8], "unsupported dtype"),
        (Value::from("<f4"), vec![0u8; 3], "needs 4 bytes"),
    ];
    for (ty, data, want) in cases {
        let m = nd_map(Value::Boolean(true), Value::Binary(vec![]), ty, data);
        let e = mp::decode_array(&m).unwrap().1.unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
    // The refusal names where the payload sits, however deep.
    let request = str_map([(
        "data",
        str_map([(
            "observation",
            str_map([("video", str_map([("wrist_image_left", object)]))]),
        )]),
    )]);
    let (path, why) = mp::find_refused_payload(&request, "").unwrap();
    assert_eq!(path, "data.observation.video.wrist_image_left");
    assert!(why.contains("pickle"), "{why}");
    let fine = str_map([("a", mp::nd_array(&NdArray::from_f32(vec![1], &[1.0])))]);
    assert!(mp::find_refused_payload(&fine, "").is_none());
}

#[test]
fn reply_form_follows_the_request() {
    let mut seen = mp::FormsSeen::default();
    assert_eq!(seen.reply_form(), mp::ArrayForm::Npy, "no arrays");
    seen.note(mp::ArrayForm::Nd);
    seen.note(mp::ArrayForm::Nd);
    assert_eq!(seen.reply_form(), mp::ArrayForm::Nd);
    seen.note(mp::ArrayForm::Npy);
    assert_eq!(
        seen.reply_form(),
        mp::ArrayForm::Npy,
        "mixed: the form all clients read"
    );

    // A new-form observation (and noise) parses to the same requests as the legacy one.
    let s = schema(false);
    let to_nd = |v: &Value| -> Value {
        fn walk(v: &Value) -> Value {
            match mp::decode_array(v) {
                Some((_, a)) => mp::nd_array(&a.unwrap()),
                None => match v {
                    Value::Map(m) => {
                        Value::Map(m.iter().map(|(k, v)| (k.clone(), walk(v))).collect())
                    }
                    other => other.clone(),
                },
            }
        }
        walk(v)
    };
    let legacy = gr00t_obs(2, 2, false);
    let noise = str_map([(
        "noise",
        mp::gr00t_array(&NdArray::from_f32(vec![40, 132], &[0.5; 5280])),
    )]);
    let a = observation::parse(Some(&legacy), Some(&noise), &s).unwrap();
    let b = observation::parse(Some(&to_nd(&legacy)), Some(&to_nd(&noise)), &s).unwrap();
    assert_eq!((a.form, b.form), (mp::ArrayForm::Npy, mp::ArrayForm::Nd));
    assert_eq!(a.items, b.items);
    // A numpy int scalar is a seed.
    let seed = str_map([(
        "seed",
        unpack(&hex(
            "83c4026e64c2c40474797065a33c6938c40464617461c4080500000000000000",
        ))
        .unwrap(),
    )]);
    let c = observation::parse(Some(&legacy), Some(&seed), &s).unwrap();
    assert_eq!(c.items[0].observation.noise, NoiseSource::Seed(5));
}

#[test]
fn modality_config_carries_both_markers() {
    let s = schema(false);
    let Value::Map(m) = &s.modality_config else {
        panic!("not a map")
    };
    for (name, v) in m {
        let inner = v.as_map().unwrap();
        for marker in ["__ModalityConfig_class__", "__ModalityConfig__"] {
            assert_eq!(
                mp::get(inner, marker),
                Some(&Value::Boolean(true)),
                "{name} {marker}"
            );
        }
        assert!(mp::get(inner, "as_json").is_some_and(|j| j.as_map().is_some()));
    }
}

/// Drops the batch dimension of every array of a nested observation.
fn unbatch(v: &Value) -> Value {
    if let Some((form, a)) = mp::decode_array(v) {
        let mut a = a.unwrap();
        assert_eq!(a.shape[0], 1);
        a.shape.remove(0);
        return mp::encode_array(&a, form);
    }
    match v {
        Value::Map(m) => Value::Map(m.iter().map(|(k, v)| (k.clone(), unbatch(v))).collect()),
        other => other.clone(),
    }
}

#[test]
fn gr00t_observation_from_the_openpi_door() {
    let s = schema(false);
    let batched = gr00t_obs(1, 2, false);
    let unbatched = unbatch(&batched);
    // Upstream's door keeps upstream's batched shapes; the openpi door takes both alike.
    let e = observation::parse(Some(&unbatched), None, &s)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("shape (B, T, H, W, C), got (2, 180, 320, 3)"),
        "{e}"
    );
    let a = observation::parse_openpi(&batched, &s).unwrap().items;
    let b = observation::parse_openpi(&unbatched, &s).unwrap().items;
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].observation.noise, NoiseSource::Seed(42));
    // `seed` / `noise` sit in the message itself, and refusals name them so.
    let Value::Map(mut m) = unbatched else {
        unreachable!()
    };
    m.push((Value::from("seed"), Value::from(7)));
    let seeded = observation::parse_openpi(&Value::Map(m.clone()), &s).unwrap();
    assert_eq!(seeded.items[0].observation.noise, NoiseSource::Seed(7));
    m.push((Value::from("noise"), Value::from(1)));
    let e = observation::parse_openpi(&Value::Map(m), &s)
        .unwrap_err()
        .to_string();
    assert_eq!(e, "give either seed or noise, not both");
    // A state of the wrong rank says which shapes this door takes.
    let Value::Map(mut m) = batched else {
        unreachable!()
    };
    let st = m
        .iter_mut()
        .find(|(k, _)| k.as_str() == Some("state"))
        .unwrap();
    let Value::Map(st) = &mut st.1 else {
        unreachable!()
    };
    st[0].1 = mp::gr00t_array(&NdArray::from_f32(vec![1, 1, 1, 9], &[0.0; 9]));
    let e = observation::parse_openpi(&Value::Map(m), &s)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("shape (T, D) or (B, T, D), got (1, 1, 1, 9)"),
        "{e}"
    );
}

#[test]
fn refusals_carry_the_field_at_fault() {
    let s = schema(false);
    let mut obs = gr00t_obs(1, 1, false);
    if let Value::Map(m) = &mut obs {
        m.retain(|(k, _)| k.as_str() != Some("state"));
    }
    let e = observation::parse(Some(&obs), None, &s).unwrap_err();
    assert_eq!(
        e,
        super::error::WireError::field("state", "Observation must contain a 'state' key")
    );
}
