//! Which implementation of the flow-matching loop serves: the straightforward upstream-shaped
//! one, or the one that hoists per-request and per-step work out of the Euler loop.

/// Environment variable that selects the denoise backend.
pub const DIT_BACKEND_ENV: &str = "GR00T_DIT_BACKEND";

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
    /// The name used by [`DIT_BACKEND_ENV`] and `/info`.
    pub fn as_str(self) -> &'static str {
        match self {
            DenoiseBackend::Reference => "reference",
            DenoiseBackend::Fused => "fused",
        }
    }

    /// Parses a value of [`DIT_BACKEND_ENV`]; `None` or empty selects the default (fused). The
    /// error is a message for the operator naming the variable.
    pub fn from_env_value(value: Option<&str>) -> Result<DenoiseBackend, String> {
        match value.map(str::trim) {
            None | Some("") => Ok(DenoiseBackend::default()),
            Some("reference") => Ok(DenoiseBackend::Reference),
            Some("fused") => Ok(DenoiseBackend::Fused),
            Some(other) => Err(format!(
                "{DIT_BACKEND_ENV}={other:?} is not a denoise backend; use reference or fused"
            )),
        }
    }

    /// The backend named by [`DIT_BACKEND_ENV`] in the process environment.
    pub fn from_env() -> Result<DenoiseBackend, String> {
        match std::env::var(DIT_BACKEND_ENV) {
            Ok(v) => DenoiseBackend::from_env_value(Some(&v)),
            Err(std::env::VarError::NotPresent) => DenoiseBackend::from_env_value(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(format!(
                "{DIT_BACKEND_ENV} is not valid UTF-8; use reference or fused"
            )),
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
        assert_eq!(
            DenoiseBackend::from_env_value(None).unwrap(),
            DenoiseBackend::Fused
        );
        assert_eq!(
            DenoiseBackend::from_env_value(Some("")).unwrap(),
            DenoiseBackend::Fused
        );
        assert_eq!(
            DenoiseBackend::from_env_value(Some("reference")).unwrap(),
            DenoiseBackend::Reference
        );
        assert_eq!(
            DenoiseBackend::from_env_value(Some("fused")).unwrap(),
            DenoiseBackend::Fused
        );
        let e = DenoiseBackend::from_env_value(Some("fast")).unwrap_err();
        assert!(e.contains(DIT_BACKEND_ENV) && e.contains("fast"), "{e}");
    }
}
