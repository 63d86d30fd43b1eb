//! Prompt: instruction formalisation, chat layout, tokenisation and image-pad expansion.
//!
//! Reproduces `Gr00tN1d7Processor` + `Qwen3VLProcessor` for one user turn: the text is
//! `<|im_start|>user\n`, then `<|vision_start|><|image_pad|><|vision_end|>` per image, then the
//! instruction and `<|im_end|>\n` (Qwen3-VL chat template, no system prompt, no generation
//! prompt). It is tokenised with the Qwen3 tokenizer and each `<|image_pad|>` is expanded to
//! `t·h·w/4` copies.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use sha2::{Digest, Sha256};
use std::fmt;
use std::path::Path;
use tokenizers::Tokenizer;

/// Most tokens the formalised instruction may take.
pub const MAX_INSTRUCTION_TOKENS: usize = 51;

/// Longest token of the bundled Qwen3 tokenizer, in bytes (128 spaces; `tests/prompt.rs`).
pub const MAX_TOKEN_BYTES: usize = 128;

/// Most bytes NFC (the tokenizer's normaliser) can fold into one: 3 for Hangul jamo L+V+T and
/// the Kelvin sign, 3.5 for U+1FBE + two combining marks (checked in `tests/prompt.rs`).
const NFC_FOLD: usize = 4;

/// Bytes no instruction of [`MAX_INSTRUCTION_TOKENS`] tokens can exceed once formalised: each
/// token covers at most [`MAX_TOKEN_BYTES`] bytes of the NFC text, which is at least a quarter
/// of the text it came from. Longer ones are refused without being tokenised.
pub const MAX_INSTRUCTION_BYTES: usize = NFC_FOLD * MAX_INSTRUCTION_TOKENS * MAX_TOKEN_BYTES;

/// sha256 of the bundled Qwen3 `tokenizer.json` (`assets/tokenizer/qwen3/tokenizer.json.sha256`).
pub const QWEN3_TOKENIZER_SHA256: &str =
    "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4";

/// Image tokens one grid cell of merged patches stands for (`spatial_merge_size²`).
const MERGE_LENGTH: usize = 4;

const IMAGE_PAD: &str = "<|image_pad|>";
const VISION_BLOCK: &str = "<|vision_start|><|image_pad|><|vision_end|>";
const TURN_START: &str = "<|im_start|>user\n";
const TURN_END: &str = "<|im_end|>\n";

/// Why a prompt could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// The tokenizer lacks a token the prompt needs, or its ids do not fit the images.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The tokenizer file could not be read.
    #[error("tokenizer: cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// The tokenizer library failed: `what` it was doing (parsing the file, tokenising).
    #[error("tokenizer: {what}: {source}")]
    Library {
        /// What failed.
        what: &'static str,
        /// The library's error.
        #[source]
        source: tokenizers::Error,
    },
    /// The raw instruction is empty or only whitespace.
    #[error("instruction is empty")]
    EmptyInstruction,
    /// The instruction has nothing left after formalisation (only punctuation/symbols).
    #[error("instruction {instruction:?} is empty after lower-casing and removing punctuation")]
    NothingLeft {
        /// The raw instruction.
        instruction: String,
    },
    /// The formalised instruction takes more than [`MAX_INSTRUCTION_TOKENS`] tokens.
    #[error("instruction is {tokens} tokens long after formalisation; at most {max} are allowed")]
    TooLong {
        /// Its token count.
        tokens: usize,
        /// The limit.
        max: usize,
    },
    /// The formalised instruction is over [`MAX_INSTRUCTION_BYTES`], so over `max` tokens.
    #[error(
        "instruction is more than {max} tokens long after formalisation (over \
         {MAX_INSTRUCTION_BYTES} bytes); at most {max} are allowed"
    )]
    TooManyBytes {
        /// The token limit.
        max: usize,
    },
    /// An image grid is empty or not a whole number of merged tokens.
    #[error(
        "image {index}: grid {grid:?} is empty or its t·h·w is not a multiple of {MERGE_LENGTH}"
    )]
    BadGrid {
        /// Index of the image.
        index: usize,
        /// Its `[t, h, w]`.
        grid: [usize; 3],
    },
}

/// A tokenised prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedPrompt {
    /// Token ids with every `<|image_pad|>` expanded (`proc.input_ids`).
    pub input_ids: Vec<u32>,
    /// Tokens taken by the formalised instruction.
    pub instruction_tokens: usize,
    /// The instruction as the model sees it (formalised when enabled).
    pub instruction: String,
    /// The chat text before pad expansion (`case_info.json` `prompt_text`).
    pub text: String,
}

/// Builds and tokenises GR00T prompts with the Qwen3 tokenizer.
#[derive(Clone)]
pub struct PromptEncoder {
    tokenizer: Tokenizer,
    image_pad_id: u32,
    formalize: bool,
}

impl fmt::Debug for PromptEncoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PromptEncoder")
            .field("image_pad_id", &self.image_pad_id)
            .field("formalize", &self.formalize)
            .finish_non_exhaustive()
    }
}

impl PromptEncoder {
    /// Loads `tokenizer.json`; logs a warning when it is not the bundled Qwen3 file.
    pub fn load(path: impl AsRef<Path>) -> Result<PromptEncoder, PromptError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| PromptError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let digest = sha256_hex(&bytes);
        if digest != QWEN3_TOKENIZER_SHA256 {
            tracing::warn!(
                path = %path.display(),
                sha256 = %digest,
                expected = QWEN3_TOKENIZER_SHA256,
                "tokenizer differs from the bundled Qwen3 tokenizer; token ids may not match the model"
            );
        }
        PromptEncoder::from_bytes(&bytes)
    }

    /// Parses a `tokenizer.json` held in memory.
    pub fn from_bytes(bytes: &[u8]) -> Result<PromptEncoder, PromptError> {
        let tokenizer = Tokenizer::from_bytes(bytes).map_err(|source| PromptError::Library {
            what: "cannot parse tokenizer.json",
            source,
        })?;
        let image_pad_id = tokenizer
            .token_to_id(IMAGE_PAD)
            .ok_or_else(|| PromptError::Tokenizer(format!("no {IMAGE_PAD} token")))?;
        for t in [
            "<|im_start|>",
            "<|im_end|>",
            "<|vision_start|>",
            "<|vision_end|>",
        ] {
            if tokenizer.token_to_id(t).is_none() {
                return Err(PromptError::Tokenizer(format!("no {t} token")));
            }
        }
        Ok(PromptEncoder {
            tokenizer,
            image_pad_id,
            formalize: true,
        })
    }

    /// Turns formalisation (`formalize_language`) on or off; it is on by default.
    pub fn with_formalize(mut self, formalize: bool) -> PromptEncoder {
        self.formalize = formalize;
        self
    }

    /// Python `re.sub(r"[^\w\s]", "", text.lower())`; see [`formalize`].
    pub fn formalize(&self, text: &str) -> String {
        formalize(text)
    }

    /// The token ids of a piece of text (special tokens in it are recognised, none are added).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, PromptError> {
        let enc = self
            .tokenizer
            .encode(text, false)
            .map_err(|source| PromptError::Library {
                what: "cannot tokenise",
                source,
            })?;
        Ok(enc.get_ids().to_vec())
    }

    /// Builds the prompt for one instruction and the `[t, h, w]` grids of its images.
    pub fn encode(
        &self,
        instruction: &str,
        grids: &[[usize; 3]],
    ) -> Result<EncodedPrompt, PromptError> {
        if instruction.trim().is_empty() {
            return Err(PromptError::EmptyInstruction);
        }
        // Bounded before tokenising, which costs seconds on megabytes; the bound is on the text
        // as formalised because formalisation can delete any amount of punctuation.
        let instr = if self.formalize {
            formalize_within(instruction, MAX_INSTRUCTION_BYTES)
        } else {
            Some(instruction)
                .filter(|s| s.len() <= MAX_INSTRUCTION_BYTES)
                .map(str::to_string)
        }
        .ok_or(PromptError::TooManyBytes {
            max: MAX_INSTRUCTION_TOKENS,
        })?;
        if instr.trim().is_empty() {
            return Err(PromptError::NothingLeft {
                instruction: instruction.to_string(),
            });
        }
        // The instruction sits between two special tokens, so it is tokenised as a segment of its
        // own: counting it alone gives the same tokens as in the full prompt.
        let instruction_tokens = self.tokenize(&instr)?.len();
        if instruction_tokens > MAX_INSTRUCTION_TOKENS {
            return Err(PromptError::TooLong {
                tokens: instruction_tokens,
                max: MAX_INSTRUCTION_TOKENS,
            });
        }
        let mut pads = Vec::with_capacity(grids.len());
        for (index, &grid) in grids.iter().enumerate() {
            let cells = grid[0]
                .checked_mul(grid[1])
                .and_then(|x| x.checked_mul(grid[2]))
                .unwrap_or(0);
            if cells == 0 || !cells.is_multiple_of(MERGE_LENGTH) {
                return Err(PromptError::BadGrid { index, grid });
            }
            pads.push(cells / MERGE_LENGTH);
        }
        let text = chat_text(&instr, grids.len());
        let ids = self.tokenize(&text)?;
        let total_pads: usize = pads.iter().sum();
        let mut input_ids = Vec::with_capacity(ids.len() + total_pads);
        let mut next_image = pads.iter();
        for id in ids {
            if id == self.image_pad_id {
                // One pad per image was written; a pad in the instruction itself is impossible
                // after formalisation but would be caught here without formalisation.
                let n = next_image.next().ok_or_else(|| {
                    PromptError::Tokenizer(format!("more {IMAGE_PAD} tokens than images"))
                })?;
                input_ids.extend(std::iter::repeat_n(id, *n));
            } else {
                input_ids.push(id);
            }
        }
        if next_image.next().is_some() {
            return Err(PromptError::Tokenizer(format!(
                "fewer {IMAGE_PAD} tokens than images"
            )));
        }
        Ok(EncodedPrompt {
            input_ids,
            instruction_tokens,
            instruction: instr,
            text,
        })
    }
}

/// The chat text of one user turn with `num_images` images before the instruction.
pub fn chat_text(instruction: &str, num_images: usize) -> String {
    let mut s = String::with_capacity(
        TURN_START.len() + num_images * VISION_BLOCK.len() + instruction.len() + TURN_END.len(),
    );
    s.push_str(TURN_START);
    for _ in 0..num_images {
        s.push_str(VISION_BLOCK);
    }
    s.push_str(instruction);
    s.push_str(TURN_END);
    s
}

/// Python `re.sub(r"[^\w\s]", "", text.lower())` (Unicode semantics).
///
/// Lower-casing is Rust's full Unicode mapping, the same rules as Python's `str.lower()` (final
/// sigma, `İ` → `i̇`). Python's `\w` is `_` plus letters (categories L*) and numbers (N*, and
/// CJK ideographs with numeric values, which are letters anyway); combining marks are NOT word
/// characters and are removed, as in Python. `\s` is Python's whitespace set: Unicode White_Space
/// plus U+001C..U+001F. Remaining difference: the Unicode version (Python 3.11: 14.0; here Rust's
/// and Oniguruma's tables), which only matters for characters assigned since.
pub fn formalize(text: &str) -> String {
    formalize_within(text, usize::MAX).unwrap_or_default()
}

/// [`formalize`], or `None` as soon as the result would be over `max` bytes.
pub fn formalize_within(text: &str, max: usize) -> Option<String> {
    let lower = text.to_lowercase();
    let mut out = String::new();
    let mut pos = 0;
    let mut over = false;
    for_each_word_run(&lower, &mut |start, end| {
        push_spaces(&mut out, &lower[pos..start]);
        out.push_str(&lower[start..end]);
        pos = end;
        over = out.len() > max;
        !over
    });
    if over {
        return None;
    }
    push_spaces(&mut out, &lower[pos..]);
    (out.len() <= max).then_some(out)
}

/// The whitespace of `gap` (what formalisation keeps of the text between word runs).
fn push_spaces(out: &mut String, gap: &str) {
    out.extend(gap.chars().filter(|&c| is_python_space(c)));
}

/// Calls `f` on the byte range of each run of Python word characters (`[\p{L}\p{N}_]+`) in
/// order, until it returns false.
fn for_each_word_run(text: &str, f: &mut dyn FnMut(usize, usize) -> bool) {
    use std::sync::OnceLock;
    use tokenizers::utils::SysRegex;
    // Rust's std has no general-category lookup; the tokenizer's Oniguruma engine does.
    static WORD: OnceLock<Option<SysRegex>> = OnceLock::new();
    match WORD.get_or_init(|| SysRegex::new(r"[\p{L}\p{N}_]+").ok()) {
        Some(re) => {
            for (start, end) in re.find_iter(text) {
                if !f(start, end) {
                    return;
                }
            }
        }
        // Unreachable with a valid pattern; fall back to Rust's close approximation.
        None => {
            for (i, c) in text.char_indices() {
                if (c.is_alphanumeric() || c == '_') && !f(i, i + c.len_utf8()) {
                    return;
                }
            }
        }
    }
}

/// Python's `str.isspace()` / `re` `\s` for str patterns.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Lower-case hex sha256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether the tokenizer file at `path` is the bundled Qwen3 tokenizer (sha256 check).
pub fn is_bundled_tokenizer(path: impl AsRef<Path>) -> std::io::Result<bool> {
    Ok(sha256_hex(&std::fs::read(path)?) == QWEN3_TOKENIZER_SHA256)
}
