//! JSON refusals: every non-200 answer of the server is `{"error": "..."}` with a fitting status.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// What the HTTP door itself can fail at (its requests' refusals are [`ApiError`]s).
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// `--replica-id` is not header-safe.
    #[error("--replica-id {0:?}: expected 1 to 253 characters of A-Z a-z 0-9 . _ -")]
    ReplicaId(String),
    /// `--replica-id` passed the check but is no header value.
    #[error("--replica-id {id:?}: {cause}")]
    ReplicaHeader {
        /// The id given.
        id: String,
        /// Why http refused it.
        #[source]
        cause: axum::http::header::InvalidHeaderValue,
    },
    /// A frame of a logged request does not decode or transform.
    #[error("{field}: {cause}")]
    Frame {
        /// The frame's field, e.g. `images.wrist_image_left[1]`.
        field: String,
        /// Why.
        #[source]
        cause: gr00t_embodiment::image::ImageError,
    },
    /// A frame as the model saw it could not be encoded as JPEG for the page.
    #[error("{field}: cannot encode JPEG: {cause}")]
    Jpeg {
        /// The frame's field.
        field: String,
        /// The encoder's reason.
        #[source]
        cause: image::ImageError,
    },
}

/// A refused or failed request, answered as a JSON body `{"error": message}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What is wrong, naming the field where there is one.
    pub message: String,
    /// The offending field, repeated on its own for clients that want it.
    pub field: Option<String>,
    /// Seconds for a `Retry-After` header (503 only).
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    /// An error with a status and a message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            field: None,
            retry_after_s: None,
        }
    }

    /// 400 about one field of the request (every refusal of a request names one).
    pub fn bad_field(field: &str, message: impl Into<String>) -> ApiError {
        debug_assert!(!field.is_empty(), "a refusal without its field");
        ApiError {
            field: Some(field.to_string()),
            ..ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("{field}: {}", message.into()),
            )
        }
    }

    /// 413 for a body over `limit` bytes.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError {
            field: Some("body".into()),
            ..ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body: request body is larger than the limit of {limit} bytes"),
            )
        }
    }

    /// 503 when the queue is full, with a `Retry-After` hint.
    pub fn busy(queue: usize, retry_after_s: u64) -> ApiError {
        ApiError {
            retry_after_s: Some(retry_after_s),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("server busy: the request queue ({queue} waiting) is full; retry later"),
            )
        }
    }

    /// 500 for a failure inside the server.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

impl From<crate::doors::browser::Refusal> for ApiError {
    fn from(r: crate::doors::browser::Refusal) -> ApiError {
        ApiError {
            field: Some(r.field.into()),
            ..ApiError::new(r.status, r.message)
        }
    }
}

/// The message of a refusal, kept on the response for the request log.
#[derive(Debug, Clone)]
pub struct ErrorNote(pub String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let note = ErrorNote(self.message.clone());
        let mut body = json!({ "error": self.message });
        if let Some(field) = self.field {
            body["field"] = field.into();
        }
        let mut response = json_response(self.status, &body);
        response.extensions_mut().insert(note);
        if let Some(s) = self.retry_after_s {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        response
    }
}

/// A JSON response from anything serialisable (falls back to a 500 if serialisation fails).
pub fn json_response<T: serde::Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            bytes,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            json!({ "error": format!("cannot serialise the response: {e}") }).to_string(),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_field_names_the_field() {
        let e = ApiError::bad_field("state.eef_9d", "expected 9 numbers, got 8");
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.message, "state.eef_9d: expected 9 numbers, got 8");
        assert_eq!(e.field.as_deref(), Some("state.eef_9d"));
    }

    #[test]
    fn busy_carries_retry_after() {
        let r = ApiError::busy(8, 2).into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
    }
}
