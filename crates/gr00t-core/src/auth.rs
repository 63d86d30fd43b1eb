//! The one token check of every door (HTTP bearer, ZMQ `api_token`, websocket `Api-Key`).

/// Whether `given` equals `expected`, compared without stopping at the first difference (the
/// time does not tell how much of a guess was right; only the length may leak).
pub fn token_matches(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_tokens_match_and_others_do_not() {
        assert!(token_matches(b"s3cret", b"s3cret"));
        assert!(token_matches(b"", b""));
        assert!(!token_matches(b"s3cre", b"s3cret"));
        assert!(!token_matches(b"s3cret!", b"s3cret"));
        assert!(!token_matches(b"S3cret", b"s3cret"));
        assert!(!token_matches(b"", b"s3cret"));
    }
}
