//! The read-only face of the server: `GET /` (the status page, its script and style embedded
//! in the binary), `GET /ui/requests` (what the page polls) and `GET /metrics`.

use super::state::AppState;
use axum::extract::State;
use axum::http::{header, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

const INDEX_HTML: &str = include_str!("../../../assets/ui/index.html");
const APP_JS: &str = include_str!("../../../assets/ui/app.js");
const STYLE_CSS: &str = include_str!("../../../assets/ui/style.css");

/// The page loads nothing from elsewhere; the policy makes that a guarantee, not a habit.
const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// `/metrics`, plus the page and its poll endpoint when `ui` is on.
pub fn routes(ui: bool) -> Router<AppState> {
    let router = Router::new().route("/metrics", get(metrics));
    if !ui {
        return router;
    }
    router
        .route("/", get(page))
        .route("/ui/app.js", get(script))
        .route("/ui/style.css", get(style))
        .route("/ui/requests", get(requests))
}

fn text(content_type: &'static str, cache: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CACHE_CONTROL, HeaderValue::from_static(cache)),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        body,
    )
        .into_response()
}

async fn page() -> Response {
    let mut r = text("text/html; charset=utf-8", "no-cache", INDEX_HTML);
    r.headers_mut().insert(
        HeaderName::from_static("content-security-policy"),
        HeaderValue::from_static(PAGE_CSP),
    );
    r
}

async fn script() -> Response {
    text("text/javascript; charset=utf-8", "no-cache", APP_JS)
}

async fn style() -> Response {
    text("text/css; charset=utf-8", "no-cache", STYLE_CSS)
}

/// `after=N` from the query; 0 when absent or malformed (the page then gets everything).
fn after_param(uri: &Uri) -> u64 {
    uri.query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("after="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `{"latest", "capacity", "queue", "entries": [...]}`: entries newer than `after`, oldest
/// first. Entries are stored as JSON text and spliced in, not re-serialised per poll.
async fn requests(State(app): State<AppState>, uri: Uri) -> Response {
    let Some(history) = app.observer().history() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let since = history.since(after_param(&uri));
    let queue = serde_json::to_string(&app.queue_state()).unwrap_or_else(|_| "null".into());
    let mut body =
        String::with_capacity(64 + since.entries.iter().map(|e| e.len() + 1).sum::<usize>());
    body.push_str(&format!(
        "{{\"latest\":{},\"capacity\":{},\"queue\":{queue},\"entries\":[",
        since.latest,
        history.capacity()
    ));
    for (i, e) in since.entries.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(e);
    }
    body.push_str("]}");
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        body,
    )
        .into_response()
}

async fn metrics(State(app): State<AppState>) -> Response {
    let observer = app.observer();
    let body = observer
        .metrics()
        .render(&observer.gauges(&app.queue_state(), app.session_stats()));
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_parameter() {
        let u = |s: &str| after_param(&s.parse::<Uri>().unwrap());
        assert_eq!(u("/ui/requests"), 0);
        assert_eq!(u("/ui/requests?after=17"), 17);
        assert_eq!(u("/ui/requests?x=1&after=3"), 3);
        assert_eq!(u("/ui/requests?after=-1"), 0);
    }

    #[test]
    fn page_loads_only_embedded_assets() {
        // Everything the page references lives under this server; no CDN, no remote fonts.
        for asset in [INDEX_HTML, APP_JS, STYLE_CSS] {
            for remote in ["http://", "https://", "//cdn", "@import"] {
                assert!(!asset.contains(remote), "asset references {remote}");
            }
        }
        assert!(INDEX_HTML.contains("src=\"/ui/app.js\""));
        assert!(INDEX_HTML.contains("href=\"/ui/style.css\""));
        // The only state-changing call the page makes is the demo's POST /predict.
        let posts = APP_JS.matches("method: \"POST\"").count();
        assert_eq!(posts, 1, "the page must POST only the demo request");
    }
}
