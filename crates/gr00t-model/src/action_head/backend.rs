//! Which implementation of the flow-matching loop serves: the straightforward upstream-shaped
//! one, or the one that hoists per-request and per-step work out of the Euler loop.

use crate::error::SettingError;

/// Implementation of the Euler loop; both use the same weights and compute the same function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DenoiseBackend {
    /// Upstream structure: every Euler step recomputes the timestep embedding, every block its
    /// AdaLN modulation row and, in cross-attention blocks, the keys/values of `vl_embeds`.
    Reference,
    /// Cross-attention keys/values computed once per request, timestep embeddings and the 33
    /// modulation rows per step once at load.
    #[default]
    Fused,
}

impl DenoiseBackend {
    /// The name used by `--dit-backend` and `/info`.
    pub fn as_str(self) -> &'static str {
        match self {
            DenoiseBackend::Reference => "reference",
            DenoiseBackend::Fused => "fused",
        }
    }
}

impl std::str::FromStr for DenoiseBackend {
    type Err = SettingError;

    /// `reference` or `fused`; empty selects the default (fused).
    fn from_str(value: &str) -> Result<DenoiseBackend, SettingError> {
        match value.trim() {
            "" => Ok(DenoiseBackend::default()),
            "reference" => Ok(DenoiseBackend::Reference),
            "fused" => Ok(DenoiseBackend::Fused),
            other => Err(SettingError::DenoiseBackend(other.to_string())),
        }
    }
}

impl std::fmt::Display for DenoiseBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_rejects_others_naming_the_variable() {
        assert_eq!("".parse::<DenoiseBackend>().unwrap(), DenoiseBackend::Fused);
        assert_eq!("".parse::<DenoiseBackend>().unwrap(), DenoiseBackend::Fused);
        assert_eq!(
            "reference".parse::<DenoiseBackend>().unwrap(),
            DenoiseBackend::Reference
        );
        assert_eq!(
            "fused".parse::<DenoiseBackend>().unwrap(),
            DenoiseBackend::Fused
        );
        let e = "fast".parse::<DenoiseBackend>().unwrap_err().to_string();
        assert!(
            e.contains("fast") && e.contains("reference or fused"),
            "{e}"
        );
    }
}
