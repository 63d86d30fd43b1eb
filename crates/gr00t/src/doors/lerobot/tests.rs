//! The pickle reader on bytes Python 3.11's `pickle` (numpy 1.26) wrote, and on forged ones.

use super::pickle::{read, Global, Limits, PickleError, PyValue};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The names numpy's array pickles use.
const NUMPY: &[(&str, &str)] = &[
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
];

fn g(module: &str, name: &str) -> Global {
    Global {
        module: module.into(),
        name: name.into(),
    }
}

fn s(v: &str) -> PyValue {
    PyValue::Str(v.into())
}

#[test]
fn plain_values_read_as_python_wrote_them() {
    // pickle.dumps({"a": [1, 2.5, "x", b"y", None, True, -3, 2**40, (1, 2)], "b": {}}, protocol=4)
    let b = hex(
        "8004953b000000000000007d94288c0161945d94284b014740040000000000008c017894430179944e884a\
         fdffffff8a060000000000014b014b028694658c0162947d94752e",
    );
    let v = read(&b, &[], &Limits::default()).unwrap();
    let list = PyValue::List(vec![
        PyValue::Int(1),
        PyValue::Float(2.5),
        s("x"),
        PyValue::Bytes(b"y".to_vec()),
        PyValue::None,
        PyValue::Bool(true),
        PyValue::Int(-3),
        PyValue::Int(1 << 40),
        PyValue::Tuple(vec![PyValue::Int(1), PyValue::Int(2)]),
    ]);
    assert_eq!(
        v,
        PyValue::Dict(vec![(s("a"), list), (s("b"), PyValue::Dict(vec![]))])
    );
}

#[test]
fn a_memoised_list_is_the_same_list_wherever_it_is_referred_to() {
    // l = [1, 2]; pickle.dumps([l, l], protocol=4): the second is a BINGET of the first.
    let b = hex("8004950f000000000000005d94285d94284b014b02656801652e");
    let l = PyValue::List(vec![PyValue::Int(1), PyValue::Int(2)]);
    assert_eq!(
        read(&b, &[], &Limits::default()).unwrap(),
        PyValue::List(vec![l.clone(), l])
    );
}

#[test]
fn a_numpy_array_is_recorded_as_its_reconstruct_call_never_made() {
    // pickle.dumps(np.arange(6, dtype=np.float32).reshape(2, 3), protocol=4)
    let b = hex(
        "800495a2000000000000008c156e756d70792e636f72652e6d756c74696172726179948c0c5f7265636f\
         6e7374727563749493948c056e756d7079948c076e6461727261799493944b0085944301629487945294\
         284b014b024b03869468038c0564747970659493948c02663494898887945294284b038c013c944e4e4e\
         4affffffff4affffffff4b00749462894318000000000000803f0000004000004040000080400000a040\
         947494622e",
    );
    let v = read(&b, NUMPY, &Limits::default()).unwrap();
    let dtype = PyValue::Call {
        callable: g("numpy", "dtype"),
        args: vec![s("f4"), PyValue::Bool(false), PyValue::Bool(true)],
        kwargs: vec![],
        state: Some(Box::new(PyValue::Tuple(vec![
            PyValue::Int(3),
            s("<"),
            PyValue::None,
            PyValue::None,
            PyValue::None,
            PyValue::Int(-1),
            PyValue::Int(-1),
            PyValue::Int(0),
        ]))),
    };
    let data: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let want = PyValue::Call {
        callable: g("numpy.core.multiarray", "_reconstruct"),
        args: vec![
            PyValue::Global(g("numpy", "ndarray")),
            PyValue::Tuple(vec![PyValue::Int(0)]),
            PyValue::Bytes(b"b".to_vec()),
        ],
        kwargs: vec![],
        state: Some(Box::new(PyValue::Tuple(vec![
            PyValue::Int(1),
            PyValue::Tuple(vec![PyValue::Int(2), PyValue::Int(3)]),
            dtype,
            PyValue::Bool(false),
            PyValue::Bytes(data),
        ]))),
    };
    assert_eq!(v, want);
    // Without numpy on the whitelist the same bytes are refused at the first global.
    assert_eq!(
        read(&b, &[], &Limits::default()),
        Err(PickleError::Global(g(
            "numpy.core.multiarray",
            "_reconstruct"
        )))
    );
}

#[test]
fn forged_pickles_are_refused_before_anything_could_run() {
    let limits = Limits::default();
    let refused = |b: &[u8]| read(b, NUMPY, &limits).unwrap_err();
    // The classic: GLOBAL os.system, then REDUCE with a shell command (protocol 0).
    assert_eq!(
        refused(b"cos\nsystem\n(S'echo pwned'\ntR."),
        PickleError::Global(g("os", "system"))
    );
    // STACK_GLOBAL subprocess.Popen and builtins.eval (protocol 4).
    assert_eq!(
        refused(b"\x80\x04\x8c\x0asubprocess\x8c\x05Popen\x93)R."),
        PickleError::Global(g("subprocess", "Popen"))
    );
    assert_eq!(
        refused(b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93\x8c\x031+1\x85R."),
        PickleError::Global(g("builtins", "eval"))
    );
    // A REDUCE whose callable is not a global at all.
    assert!(matches!(
        refused(b"\x80\x04N)R."),
        PickleError::Malformed { .. }
    ));
    // Persistent ids, old-style instances and the extension registry load outside objects.
    for (b, name) in [
        (&b"\x80\x04\x8c\x01x\x94Q."[..], "BINPERSID"),
        (&b"Px\n."[..], "PERSID"),
        (&b"(iflask\nFlask\n."[..], "INST"),
        (&b"\x80\x04\x82\x01."[..], "EXT1"),
    ] {
        match refused(b) {
            PickleError::Opcode { name: got, .. } => assert_eq!(got, name),
            e => panic!("{name}: {e:?}"),
        }
    }
}

#[test]
fn truncated_oversized_deep_and_memo_bombing_pickles_are_refused() {
    let plain = hex("8004950f000000000000005d94285d94284b014b02656801652e");
    // Cut anywhere: truncated or malformed, never a value.
    for n in 0..plain.len() {
        assert!(read(&plain[..n], &[], &Limits::default()).is_err(), "{n}");
    }
    // A BINBYTES8 that claims 2^60 bytes: refused without allocating them.
    let mut huge = b"\x80\x04\x8e".to_vec();
    huge.extend((1u64 << 60).to_le_bytes());
    assert!(matches!(
        read(&huge, &[], &Limits::default()),
        Err(PickleError::Truncated { .. })
    ));
    // Over the byte cap.
    let small = Limits {
        max_bytes: 8,
        ..Limits::default()
    };
    assert!(matches!(
        read(&plain, &[], &small),
        Err(PickleError::Limit { .. })
    ));
    // 40 nested lists: deeper than 32.
    let mut deep = b"\x80\x04".to_vec();
    deep.extend([b']'; 40]);
    deep.extend([b'a'; 39]);
    deep.push(b'.');
    assert_eq!(
        read(&deep, &[], &Limits::default()),
        Err(PickleError::Limit {
            what: "the nesting depth",
            limit: 32
        })
    );
    // A memo bomb: each level a list of the previous one twice (2^40 values once expanded),
    // in a few hundred bytes.
    let mut bomb = b"\x80\x04]\x94".to_vec();
    for level in 0..40u8 {
        bomb.extend([b'(', b'h', level, b'h', level, b'l', 0x94]);
    }
    bomb.push(b'.');
    assert!(bomb.len() < 400);
    let wide = Limits {
        max_depth: 64,
        ..Limits::default()
    };
    assert_eq!(
        read(&bomb, &[], &wide),
        Err(PickleError::Limit {
            what: "the values built",
            limit: wide.max_values
        })
    );
    // One 1 000-byte bytes object referred to 2 000 times: 2 MB from a 5 kB pickle, over the
    // byte cap (the result may not hold more bytes than the cap allows the input).
    let mut copies = b"\x80\x04](B\xe8\x03\x00\x00".to_vec();
    copies.extend([7u8; 1000]);
    copies.push(0x94);
    copies.extend(std::iter::repeat_n(&b"h\x00"[..], 1999).flatten());
    copies.extend(b"e.");
    let cap = Limits {
        max_bytes: 64 << 10,
        ..Limits::default()
    };
    assert!(copies.len() < cap.max_bytes);
    assert_eq!(
        read(&copies, &[], &cap),
        Err(PickleError::Limit {
            what: "the bytes built",
            limit: cap.max_bytes
        })
    );
    // A list that holds itself: refused by the depth cap, not followed forever.
    let cycle = b"\x80\x04]\x94h\x00a.";
    assert!(matches!(
        read(cycle, &[], &Limits::default()),
        Err(PickleError::Limit { .. })
    ));
}
