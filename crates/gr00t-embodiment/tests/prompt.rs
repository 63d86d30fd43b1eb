//! Prompt parity with the fixtures (`proc.input_ids`, `case_info.json`) and formalisation rules.

mod support;

use gr00t_embodiment::prompt::{
    chat_text, formalize, formalize_within, is_bundled_tokenizer, PromptEncoder, PromptError,
    MAX_INSTRUCTION_BYTES, MAX_INSTRUCTION_TOKENS, MAX_TOKEN_BYTES, QWEN3_TOKENIZER_SHA256,
};
use gr00t_fixtures::{case_info, request_json, tokenizer_path, Taps, CASES};

const IM_START: u32 = 151644;
const IM_END: u32 = 151645;
const VISION_START: u32 = 151652;
const VISION_END: u32 = 151653;
const IMAGE_PAD: u32 = 151655;

fn encoder() -> PromptEncoder {
    PromptEncoder::load(tokenizer_path()).expect("bundled tokenizer")
}

fn grids(taps: &Taps) -> Vec<[usize; 3]> {
    taps.i64s("proc.image_grid_thw")
        .chunks(3)
        .map(|g| [g[0] as usize, g[1] as usize, g[2] as usize])
        .collect()
}

#[test]
fn fixture_input_ids_text_and_formalisation_match() {
    let enc = encoder();
    for case in CASES {
        let info = case_info(case);
        let taps = Taps::load(case);
        let request: serde_json::Value = serde_json::from_str(&request_json(case)).unwrap();
        let instruction = info["instruction"].as_str().unwrap();
        assert_eq!(
            request["instruction"].as_str().unwrap(),
            instruction,
            "{case}"
        );
        let grids = grids(&taps);
        assert_eq!(grids.len(), 4);

        let p = enc.encode(instruction, &grids).expect("encode");
        assert_eq!(
            p.instruction,
            info["instruction_formalized"].as_str().unwrap(),
            "{case}"
        );
        assert_eq!(p.text, info["prompt_text"].as_str().unwrap(), "{case}");
        let want: Vec<u32> = taps
            .i64s("proc.input_ids")
            .iter()
            .map(|&x| x as u32)
            .collect();
        assert_eq!(p.input_ids, want, "{case}: input_ids");
        assert_eq!(
            p.input_ids.len() as u64,
            info["seq_len"].as_u64().unwrap(),
            "{case}"
        );

        // The instruction's tokens in context: between the last <|vision_end|> and <|im_end|>.
        let last_ve = want.iter().rposition(|&t| t == VISION_END).unwrap();
        let im_end = want.iter().rposition(|&t| t == IM_END).unwrap();
        assert_eq!(
            p.instruction_tokens,
            im_end - last_ve - 1,
            "{case}: instruction tokens"
        );
        assert_eq!(want.iter().filter(|&&t| t == IMAGE_PAD).count(), 448);
        eprintln!(
            "{case}: {} instruction tokens, seq_len {}",
            p.instruction_tokens,
            want.len()
        );
    }
}

#[test]
fn special_tokens_are_single_ids() {
    let enc = encoder();
    assert_eq!(
        enc.tokenize("<|im_start|>user\n").unwrap(),
        vec![IM_START, 872, 198]
    );
    assert_eq!(
        enc.tokenize("<|vision_start|><|image_pad|><|vision_end|>")
            .unwrap(),
        vec![VISION_START, IMAGE_PAD, VISION_END]
    );
    assert_eq!(enc.tokenize("<|im_end|>\n").unwrap(), vec![IM_END, 198]);
    // README: " café" is one byte-level BPE token (51950).
    assert!(enc.tokenize("place the café mug").unwrap().contains(&51950));
}

#[test]
fn image_pads_follow_each_grid() {
    let enc = encoder();
    let p = enc.encode("pick it", &[[1, 16, 16], [1, 8, 8]]).unwrap();
    let runs: Vec<usize> = p
        .input_ids
        .split(|&t| t != IMAGE_PAD)
        .filter(|r| !r.is_empty())
        .map(|r| r.len())
        .collect();
    assert_eq!(runs, vec![64, 16]);
    assert_eq!(p.text, chat_text("pick it", 2));
    assert!(matches!(
        enc.encode("pick it", &[[1, 16, 16], [1, 3, 3]]),
        Err(PromptError::BadGrid { index: 1, .. })
    ));
    assert!(matches!(
        enc.encode("pick it", &[[0, 16, 16]]),
        Err(PromptError::BadGrid { .. })
    ));
    // No images: just the text turn.
    let p = enc.encode("pick it", &[]).unwrap();
    assert_eq!(p.input_ids[..3], [IM_START, 872, 198]);
    assert!(!p.input_ids.contains(&IMAGE_PAD));
}

#[test]
fn formalisation_follows_python_rules() {
    // Expected values are what Python 3.11 `re.sub(r"[^\w\s]", "", s.lower())` returns.
    let cases = [
        (
            "Pick up the RED cup, and place it on the plate!",
            "pick up the red cup and place it on the plate",
        ),
        ("a - b", "a  b"),
        ("Café ÜBER Straße", "café über straße"),
        ("Возьми КРАСНЫЙ кубик!", "возьми красный кубик"),
        ("把红色方块放进碗里。", "把红色方块放进碗里"),
        (
            "Move 2 blocks to row 3, x² ½",
            "move 2 blocks to row 3 x² ½",
        ),
        ("pick_up the_cup", "pick_up the_cup"),
        ("grab the 🍎 now", "grab the  now"),
        ("a\tb\nc\r\nd", "a\tb\nc\r\nd"),
        (
            "non\u{a0}breaking\u{3000}space\u{1c}sep",
            "non\u{a0}breaking\u{3000}space\u{1c}sep",
        ),
        // Combining marks are not \w in Python: decomposed "é" loses its accent.
        ("cafe\u{301}", "cafe"),
        // "İ".lower() is "i" + U+0307 (a mark, removed).
        ("İstanbul", "istanbul"),
        // Final sigma.
        ("ΟΔΟΣ", "οδος"),
        // Circled letters are symbols (So), not letters, even though Unicode calls them alphabetic.
        ("Ⓐb", "b"),
        (
            "it's (really) [done] {now} <ok> \"yes\" #1 @home $5 50% a+b=c a/b a\\b ~`^|",
            "its really done now ok yes 1 home 5 50 abc ab ab ",
        ),
    ];
    for (raw, want) in cases {
        assert_eq!(formalize(raw), want, "formalize({raw:?})");
    }
}

#[test]
fn empty_and_too_long_instructions_are_rejected() {
    let enc = encoder();
    let grids = [[1, 16, 28]; 4];
    assert!(matches!(
        enc.encode("", &grids),
        Err(PromptError::EmptyInstruction)
    ));
    assert!(matches!(
        enc.encode(" \t\n", &grids),
        Err(PromptError::EmptyInstruction)
    ));
    assert!(matches!(
        enc.encode("?!...", &grids),
        Err(PromptError::NothingLeft { .. })
    ));
    assert!(matches!(
        enc.encode("🍎 !", &grids),
        Err(PromptError::NothingLeft { .. })
    ));

    // " pick" is one token, so n words are n tokens.
    let words = |n: usize| vec!["pick"; n].join(" ");
    assert_eq!(enc.tokenize(&words(51)).unwrap().len(), 51);
    let ok = enc.encode(&words(MAX_INSTRUCTION_TOKENS), &grids).unwrap();
    assert_eq!(ok.instruction_tokens, 51);
    assert_eq!(ok.input_ids.len(), 461 + 51);
    match enc.encode(&words(52), &grids) {
        Err(PromptError::TooLong { tokens, max }) => {
            assert_eq!((tokens, max), (52, 51));
        }
        other => panic!("expected TooLong, got {other:?}"),
    }
    // Punctuation does not count: it is removed before counting.
    let punct = format!("{}!!!", vec!["Pick"; 51].join(", "));
    assert_eq!(enc.encode(&punct, &grids).unwrap().instruction_tokens, 51);
}

#[test]
fn formalisation_can_be_turned_off() {
    let enc = encoder().with_formalize(false);
    let p = enc.encode("Pick it UP!", &[[1, 16, 28]]).unwrap();
    assert_eq!(p.instruction, "Pick it UP!");
}

#[test]
fn bundled_tokenizer_hash_is_checked() {
    let recorded = std::fs::read_to_string(tokenizer_path().with_extension("json.sha256")).unwrap();
    assert_eq!(
        recorded.split_whitespace().next().unwrap(),
        QWEN3_TOKENIZER_SHA256
    );
    assert!(is_bundled_tokenizer(tokenizer_path()).unwrap());

    // A different (but valid) tokenizer file loads with a warning, not an error.
    let mut bytes = std::fs::read(tokenizer_path()).unwrap();
    bytes.push(b'\n');
    let dir = std::env::temp_dir().join(format!("gr00t-prompt-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, &bytes).unwrap();
    assert!(!is_bundled_tokenizer(&path).unwrap());
    let enc = PromptEncoder::load(&path).expect("modified tokenizer still loads");
    assert_eq!(enc.tokenize("<|im_end|>").unwrap(), vec![IM_END]);
    std::fs::remove_dir_all(&dir).unwrap();

    // Each failure keeps the library's or the file system's error as its source.
    let e = PromptEncoder::from_bytes(b"{}").expect_err("{} is no tokenizer");
    assert!(matches!(e, PromptError::Library { .. }), "{e:?}");
    assert!(std::error::Error::source(&e).is_some());
    let e = PromptEncoder::load(dir.join("missing.json")).expect_err("a missing file");
    let PromptError::Read { source, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    assert!(e.to_string().starts_with("tokenizer: cannot read "), "{e}");
}

#[test]
fn the_byte_bound_follows_from_the_bundled_tokenizer() {
    // Byte-level BPE: each character of a vocabulary entry stands for one byte; added tokens
    // are ASCII. The longest is 128 spaces.
    let tok = tokenizers::Tokenizer::from_file(tokenizer_path()).unwrap();
    let longest = tok.get_vocab(true).keys().map(|t| t.chars().count()).max();
    assert_eq!(longest, Some(MAX_TOKEN_BYTES));
    // NFC (the tokenizer's normaliser) folds at most 3.5 bytes into one: the worst cases known.
    let nfc = |s: &str| {
        let mut n = tokenizers::NormalizedString::from(s);
        n.nfc();
        n.get().len()
    };
    for (s, folded) in [
        ("\u{1100}\u{1161}\u{11a8}", 3), // Hangul jamo L V T → one syllable
        ("\u{212a}", 1),                 // Kelvin sign → K
        ("\u{1fbe}\u{0308}\u{0341}", 2), // → ΐ
    ] {
        assert_eq!(nfc(s), folded, "{s:?}");
        assert!(s.len() <= 4 * folded, "{s:?}");
    }
    // No single character shrinks more than 3×.
    for c in (0..0x11_0000u32).filter_map(char::from_u32) {
        let s = c.to_string();
        assert!(s.len() <= 3 * nfc(&s), "{c:?}");
    }
    assert_eq!(
        MAX_INSTRUCTION_BYTES,
        4 * MAX_INSTRUCTION_TOKENS * MAX_TOKEN_BYTES
    );
    // A long 51-token instruction (128-space tokens) is far inside the bound and accepted.
    let long = format!("pick{}", format!("{} pick", " ".repeat(128)).repeat(25));
    let enc = encoder();
    let p = enc.encode(&long, &[[1, 16, 28]; 4]).unwrap();
    assert_eq!(p.instruction_tokens, 51);
    assert!(long.len() < MAX_INSTRUCTION_BYTES);
}

#[test]
fn an_instruction_over_the_byte_bound_is_refused_without_tokenising() {
    let enc = encoder();
    let grids = [[1, 16, 28]; 4];
    // TooManyBytes carries no token count: the refusal came before tokenising.
    for n in [MAX_INSTRUCTION_BYTES / 5 + 1, 8_000_000 / 5] {
        let e = enc.encode(&"pick ".repeat(n), &grids).unwrap_err();
        assert!(matches!(e, PromptError::TooManyBytes { max: 51 }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("at most 51 are allowed"), "{text}");
    }
    // Just under the bound, the token count decides as before.
    let under = "pick ".repeat(MAX_INSTRUCTION_BYTES / 5);
    assert!(matches!(
        enc.encode(&under, &grids),
        Err(PromptError::TooLong { max: 51, .. })
    ));
    // The bound is on the formalised text: a megabyte of punctuation still passes.
    let noisy = format!("{}Pick it up", "!?".repeat(500_000));
    assert_eq!(
        enc.encode(&noisy, &grids).unwrap().instruction,
        "pick it up"
    );
    // Without formalisation the raw text is bounded.
    let raw = enc.with_formalize(false);
    assert!(matches!(
        raw.encode(&"Pick! ".repeat(MAX_INSTRUCTION_BYTES / 6 + 1), &grids),
        Err(PromptError::TooManyBytes { .. })
    ));
}

#[test]
fn bounded_formalisation_is_formalisation_up_to_the_bound() {
    let max = 100;
    for text in ["Pick it UP!", "a", "", "  spaced  out  ", "ÀÉÎ, ΣΑΣ; İx"] {
        assert_eq!(
            formalize_within(text, max),
            Some(formalize(text)),
            "{text:?}"
        );
    }
    let exactly = "ab".repeat(max / 2);
    assert_eq!(
        formalize_within(&exactly, max).as_deref(),
        Some(exactly.as_str())
    );
    // One byte over, by a word or by trailing whitespace, and punctuation that vanishes.
    assert_eq!(formalize_within(&format!("{exactly}c"), max), None);
    assert_eq!(formalize_within(&format!("{exactly} "), max), None);
    assert!(formalize_within(&format!("{exactly}!!!"), max).is_some());
}

#[test]
fn both_processor_paths_refuse_an_8_mb_instruction_by_its_bytes() {
    use gr00t_embodiment::image::Frame;
    let ck = gr00t_model::Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    let p = gr00t_embodiment::embodiment::EmbodimentProcessor::new(
        &ck,
        encoder(),
        gr00t_embodiment::EMBODIMENT_TAG,
    )
    .unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&request_json("case0")).unwrap();
    v["instruction"] = "pick up the block ".repeat(450_000).into();
    let body = v.to_string();
    let obs = support::observation(&p, body.as_bytes()).unwrap();
    // HTTP: base64 frames; ZMQ and websocket: decoded frames.
    let frame = || Frame::new(320, 180, vec![90; 320 * 180 * 3]).unwrap();
    let errors = [
        support::encode(&p, body.as_bytes()).unwrap_err(),
        p.encode(&gr00t_embodiment::embodiment::Observation {
            images: ["exterior_image_1_left", "wrist_image_left"]
                .map(|v| (v.to_string(), vec![frame(), frame()]))
                .to_vec(),
            ..obs
        })
        .unwrap_err()
        .invalid()
        .expect("the client's fault")
        .clone(),
    ];
    for e in errors {
        assert_eq!(e.field, "instruction");
        assert!(
            e.message.contains("bytes); at most 51 are allowed"),
            "{}",
            e.message
        );
    }
}
