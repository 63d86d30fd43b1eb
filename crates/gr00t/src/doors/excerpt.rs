//! Client values quoted in refusals and logs, bounded: an error text never carries more than a
//! short prefix of what a client sent (a 3 MiB `endpoint` must not become a 3 MiB reply and two
//! 3 MiB log lines).

use std::borrow::Cow;

/// Bytes of a client value an error text quotes whole.
pub const MAX_QUOTED_BYTES: usize = 64;

/// `value` itself when at most [`MAX_QUOTED_BYTES`] long, else its first bytes (cut at a
/// character boundary), `…` and its length: `abcd… (3145728 bytes)`.
pub fn excerpt(value: &str) -> Cow<'_, str> {
    if value.len() <= MAX_QUOTED_BYTES {
        return Cow::Borrowed(value);
    }
    let mut end = MAX_QUOTED_BYTES;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}… ({} bytes)", &value[..end], value.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_whole_long_ones_a_prefix_with_their_length() {
        assert_eq!(excerpt("infer"), "infer");
        let edge = "x".repeat(MAX_QUOTED_BYTES);
        assert_eq!(excerpt(&edge), edge.as_str());
        let long = "y".repeat(3 << 20);
        let got = excerpt(&long);
        assert_eq!(got, format!("{}… (3145728 bytes)", "y".repeat(64)));
        // A multi-byte character across the cut is left out whole.
        let mixed = format!("{}é{}", "a".repeat(63), "b".repeat(100));
        assert_eq!(excerpt(&mixed), format!("{}… (165 bytes)", "a".repeat(63)));
    }
}
